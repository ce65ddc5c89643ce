// transport/inproc/inproc_link.h - the shared state behind one inproc connection pair.
//
// Words: a Link joins two sides (0 = the connector, 1 = the acceptor). Each side has a
// completion queue owned by its rank's transport. A message posted on side i waits in
// sides[i].sends until side 1-i posts a receive (or the other way round, in sides[1-i].recvs);
// at most one of the two queues of a direction is non-empty, so matching is always
// "front of one with the new one". The copy happens under the link's mutex, from the
// sender's buffer straight into the receiver's, and only then do both completions post: the
// sender's buffer is therefore never read after its completion.
//
// Locks, always in this order: Fabric::Impl::mu, Link::mu, CompletionQueue::mu.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "transport/inproc/inproc_transport.h"
#include "transport/transport.h"

namespace braid::transport::inproc {

// A rank's completions, filled by its own thread and by peers' threads (a send completes when
// the peer's receive copies it out).
class CompletionQueue {
 public:
  void push(Completion c);
  // Moves every ready completion into `out`, waiting up to `timeout` for the first one.
  void drain(std::vector<Completion>& out, std::chrono::microseconds timeout);
  void wake();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Completion> items_;
  bool woken_ = false;
};

struct PendingOp {
  void* data = nullptr;  // a send's data is const; it is only ever read through this
  size_t bytes = 0;      // a send's length or a receive's capacity
  uint64_t cookie = 0;
};

struct LinkSide {
  std::shared_ptr<CompletionQueue> cq;  // null until the side exists (acceptor before accept)
  Connection* connection = nullptr;
  bool open = true;
  int rank = 0;
  std::string address;  // this side's transport address, for the other side's messages
  std::deque<PendingOp> sends;
  std::deque<PendingOp> recvs;
};

class Link {
 public:
  Link(uint64_t comm_id, LinkSide connector, LinkSide acceptor);

  // The acceptor's side comes to life: completions from now on go to its queue.
  void attach(int side, std::shared_ptr<CompletionQueue> cq, Connection* connection);
  void post_send(int side, const void* data, size_t bytes, uint64_t cookie);
  void post_recv(int side, void* data, size_t capacity, uint64_t cookie);
  // Fails this side's pending operations (aborted) and the peer's (peer_lost).
  void close(int side);
  // Fails every pending and future operation on both sides with `why`.
  void fail(const Status& why);
  bool involves(int rank) const { return sides_[0].rank == rank || sides_[1].rank == rank; }
  int rank(int side) const { return sides_[side].rank; }
  const std::string& address(int side) const { return sides_[side].address; }
  uint64_t comm_id() const { return comm_id_; }

 private:
  void deliver(int send_side, const PendingOp& send, const PendingOp& recv);
  void complete(int side, const PendingOp& op, bool is_send, size_t bytes, Status status);
  void fail_side(int side, const Status& why);
  Status op_error(int side, bool is_send) const;

  std::mutex mu_;
  const uint64_t comm_id_;
  LinkSide sides_[2];
  Status broken_;  // non-OK once killed or closed: every op from then on fails with it
};

// A connection someone made to a listening transport, waiting for its accept() call.
struct Incoming {
  PeerIdentity who;  // as the connector sent it: self_rank = connector, peer_rank = target
  std::shared_ptr<Link> link;
};

struct Fabric::Impl {
  std::mutex mu;
  std::condition_variable cv;  // listeners appeared, connections arrived, ranks died
  uint64_t next_id = 0;
  std::set<uint64_t> listening;                         // transport ids that called listen()
  std::map<uint64_t, std::deque<Incoming>> incoming;    // per listening transport id
  std::set<int> killed;
  std::vector<std::weak_ptr<Link>> links;
};

}  // namespace braid::transport::inproc
