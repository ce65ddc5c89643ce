// collectives/schedule.h - the vocabulary every algorithm speaks, and the one offset helper.
//
// An algorithm is a pure function of a Plan (rank, world size, element counts, segment size)
// returning a Schedule: this rank's steps in program order. A step names byte ranges of three
// buffers (the caller's send and recv buffers, and a scratch buffer the executor allocates) and
// at most one receive and one send, in the words of NCCL's ring primitives:
//
//   send              send `src` to send_peer
//   recv              receive from recv_peer straight into `dst`
//   recv_reduce       receive from recv_peer into a landing slot; dst = (src or dst) op slot
//   recv_reduce_send  recv_reduce, then send the reduced `dst` on to send_peer
//   recv_copy_send    receive straight into `dst`, then send `dst` on to send_peer
//   copy              dst = src, locally (skipped when both name the same memory)
//   scale             dst *= factor, locally
//
// Ordering is data flow: the executor starts steps in program order and lets a step touch a
// range only after every earlier step that writes it (or reads what it is about to write) is
// finished. So an algorithm orders rounds simply by making round k+1 read what round k wrote.
// Messages to one peer are posted in program order; so are receives from one peer; the peer's
// schedule has the matching steps in the same order and sizes (the simulator tests check it).
//
// Zero-byte steps are never emitted: both ends of a message compute its size with the same
// helper from the same counts, so they skip it together.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/types.h"

namespace braid::collectives {

enum class Buf : uint8_t { send, recv, scratch };

struct Range {
  Buf buf = Buf::recv;
  size_t offset = 0;  // bytes
  size_t bytes = 0;
};

enum class StepKind : uint8_t { send, recv, recv_reduce, recv_reduce_send, recv_copy_send, copy, scale };
const char* to_string(StepKind k) noexcept;

struct Step {
  StepKind kind = StepKind::send;
  int recv_peer = -1;
  int send_peer = -1;
  Range dst;            // recv*: where the message lands or is reduced into; copy/scale: target
  Range src;            // send: what is sent; copy: source; recv_reduce*: operand (bytes 0: dst)
  double factor = 1.0;  // recv_reduce*: the result is scaled by it (avg); scale: the factor

  bool has_recv() const {
    return kind == StepKind::recv || kind == StepKind::recv_reduce || kind == StepKind::recv_reduce_send ||
           kind == StepKind::recv_copy_send;
  }
  bool has_send() const {
    return kind == StepKind::send || kind == StepKind::recv_reduce_send || kind == StepKind::recv_copy_send;
  }
  bool reduces() const { return kind == StepKind::recv_reduce || kind == StepKind::recv_reduce_send; }
  // The range the message is sent from.
  const Range& sent() const { return kind == StepKind::send ? src : dst; }
  // Bytes on the wire for the receive (and send, for the forwarding kinds).
  size_t message_bytes() const { return kind == StepKind::send ? src.bytes : dst.bytes; }
};

struct Schedule {
  std::vector<Step> steps;
  size_t scratch_bytes = 0;  // size of Buf::scratch
  // The executor zeroes the scratch before the first step: set by a schedule that sends scratch
  // bytes it never wrote (the barrier's first token). Scratch comes from a pool, so unzeroed it
  // would carry whatever an earlier operation left there, or never-written heap, to a peer.
  bool zero_scratch = false;
  size_t window = 2;         // steps in flight the algorithm pipelines with (at least 2)
  // The smallest window the schedule cannot deadlock with when a send completes only once the
  // peer has posted its receive (a transport without buffering): a caller's smaller window is
  // raised to it. Ring columns in groups of d need d + 1: a send meets a receive d steps later.
  size_t min_window = 2;
};

// What every algorithm is a pure function of. Counts are elements; offsets are computed from
// them only through the helpers below.
struct Plan {
  int rank = 0;
  int size = 1;
  int root = 0;
  int peer = -1;                    // send/recv
  size_t elem_size = 4;
  size_t count = 0;                 // whole buffer (all_reduce, broadcast, reduce) or one block
  std::vector<size_t> counts;       // per-rank blocks (v-forms); empty: `count` each
  std::vector<size_t> send_counts;  // all_to_all split sizes; empty: `count` each
  std::vector<size_t> recv_counts;
  size_t segment_bytes = 256 << 10; // the pipelining unit
  // Segments a ring keeps moving per hop (ring.cc, add_columns): 1 where the links are host-local
  // copies, more where a link's queueing and wake-ups would otherwise leave it idle between
  // segments. Every rank must use the same value (it fixes the order of messages). At least 1
  // (make_plan clamps it).
  size_t ring_depth = 1;
  bool in_place = false;            // send == recv: reads of the input go to Buf::recv
  bool average = false;             // op was avg: reduce with sum, scale once by 1/size
  // The ring order (collectives/ring_order.h): order[v] is the rank at position v. Null: the
  // identity. build_schedule builds the symmetric collectives in positions (rank and root are
  // positions then) and maps the peers back to ranks; schedules that index the caller's
  // blocks by rank go through rank_at(). The same on every rank.
  std::shared_ptr<const std::vector<int>> order;
};

// The rank at position `v` of the ring (v itself without an order).
inline size_t rank_at(const Plan& p, size_t v) { return p.order ? static_cast<size_t>((*p.order)[v]) : v; }

// ---- The offset helper: every byte range in every schedule comes from these. ----

struct Span {
  size_t offset = 0;  // bytes
  size_t bytes = 0;
};

// Piece `i` of `parts` nearly equal pieces of `whole`, cut on element boundaries: the first
// (elements % parts) pieces hold one element more. Pieces are contiguous and in order.
Span split(Span whole, size_t parts, size_t i, size_t elem_size);
// Block `i` of a buffer made of per-rank blocks: `counts[i]` elements each, or `count` each
// when counts is empty.
Span block(const std::vector<size_t>& counts, size_t count, size_t i, size_t elem_size);
// Bytes of the whole buffer made of those blocks.
size_t total_bytes(const std::vector<size_t>& counts, size_t count, size_t n, size_t elem_size);
// How many segments a piece of `bytes` is cut into (0 for an empty piece).
size_t segments_for(size_t bytes, size_t segment_bytes);

inline Range range(Buf b, Span s) { return Range{b, s.offset, s.bytes}; }
// Where this rank's input lives: the send buffer, or recv when the operation is in place.
inline Range input_range(const Plan& p, Span s) { return range(p.in_place ? Buf::recv : Buf::send, s); }
// The operand of a recv_reduce whose dst is recv: none in place (dst already holds the input).
inline Range operand_range(const Plan& p, Span s) { return p.in_place ? Range{} : range(Buf::send, s); }
inline size_t mod(long long a, int n) { return static_cast<size_t>(((a % n) + n) % n); }

inline Step make_step(StepKind kind, int from, int to, Range dst, Range src = {}, double factor = 1.0) {
  Step s;
  s.kind = kind;
  s.recv_peer = from;
  s.send_peer = to;
  s.dst = dst;
  s.src = src;
  s.factor = factor;
  return s;
}

// Appends `st` unless it moves no bytes (see "Zero-byte steps" above).
inline void add(Schedule& s, const Step& st) {
  if ((st.kind == StepKind::send ? st.src.bytes : st.dst.bytes) != 0) s.steps.push_back(st);
}

// A readable dump, one step a line, for test failures and BRAID_DEBUG=TRACE.
std::string describe(const Schedule& s);

}  // namespace braid::collectives
