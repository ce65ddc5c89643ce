#include "tests/collectives/schedule_simulator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <sstream>

namespace braid::collectives::testing {

namespace {

constexpr Symbol kUnwritten{0, ~1u, 0};  // a scratch byte before anything wrote it

enum class Phase : uint8_t { idle, receiving, received, ready_send, sending, done };

struct RankSim {
  Schedule sched;
  std::vector<Symbol> send, recv, scratch;
  std::map<size_t, std::vector<Symbol>> slots;  // reducing steps: the landed message
  std::vector<Phase> phase;
  size_t head = 0, started = 0, window = 2;
};

struct Message {
  int from;
  size_t step;
  std::vector<Symbol> payload;
};

bool overlaps(const Range& a, const Range& b) {
  return a.bytes != 0 && b.bytes != 0 && a.buf == b.buf && a.offset < b.offset + b.bytes &&
         b.offset < a.offset + a.bytes;
}
bool direct_recv(const Step& st) { return st.kind == StepKind::recv || st.kind == StepKind::recv_copy_send; }
bool writes_dst(const Step& st) { return st.kind != StepKind::send; }
bool computing(Phase p) { return p == Phase::idle || p == Phase::receiving || p == Phase::received; }

size_t sum(const std::vector<size_t>& v, size_t count, int size) {
  if (v.empty()) return count * static_cast<size_t>(size);
  size_t t = 0;
  for (size_t c : v) t += c;
  return t;
}

class Simulator {
 public:
  Simulator(const std::vector<CollectiveArgs>& per_rank, Algo algo, size_t segment_bytes, size_t window,
            size_t ring_depth, const std::shared_ptr<const std::vector<int>>& order)
      : n_(static_cast<int>(per_rank.size())), full_(n_ >= 32 ? ~0u : (1u << n_) - 1) {
    const int size = n_;
    ranks_.resize(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      const CollectiveArgs& args = per_rank[static_cast<size_t>(r)];
      RankSim& rs = ranks_[static_cast<size_t>(r)];
      const Plan plan = make_plan(args, r, size, segment_bytes, ring_depth, order);
      auto built = build_schedule(args, algo, plan);
      if (!built.is_ok()) {
        fail(r, 0, built.status().message());
        return;
      }
      rs.sched = built.value();
      rs.window = std::max<size_t>(std::max<size_t>(2, rs.sched.min_window), window != 0 ? window : rs.sched.window);
      rs.phase.assign(rs.sched.steps.size(), Phase::idle);
      rs.send.resize(send_bytes(args, r, size));
      for (size_t b = 0; b < rs.send.size(); ++b) rs.send[b] = Symbol{1u << r, static_cast<uint32_t>(b), 0};
      rs.recv.resize(recv_bytes(args, r, size));
      const bool in_place = plan.in_place;
      const bool source_in_recv = in_place || (args.kind == Kind::broadcast && r == args.root);
      if (source_in_recv) {
        for (size_t b = 0; b < rs.recv.size(); ++b) rs.recv[b] = Symbol{1u << r, static_cast<uint32_t>(b), 0};
      }
      if (in_place) rs.send.clear();  // in place, nothing may address the send buffer
      // Scratch nobody wrote must never be sent: it holds stale or uninitialised memory, unless
      // the schedule has the executor zero it.
      rs.scratch.assign(rs.sched.scratch_bytes, rs.sched.zero_scratch ? Symbol{} : kUnwritten);
      check_ranges(r, args.kind == Kind::barrier ? 1 : plan.elem_size);
    }
  }

  SimResult run() {
    while (result_.ok) {
      bool moved = false;
      for (int r = 0; r < n_ && result_.ok; ++r) moved = progress(r) || moved;
      moved = match() || moved;
      if (!moved) break;
    }
    if (result_.ok) {
      for (int r = 0; r < n_; ++r) {
        const RankSim& rs = ranks_[static_cast<size_t>(r)];
        if (rs.head != rs.sched.steps.size()) {
          std::ostringstream o;
          o << "deadlock: rank " << r << " stuck at step " << rs.head << " of " << rs.sched.steps.size()
            << " (window " << rs.window << ")\n"
            << describe(rs.sched);
          fail(r, rs.head, o.str());
          break;
        }
      }
    }
    for (const auto& [key, q] : sends_) {
      if (result_.ok && !q.empty()) fail(key.first, q.front().step, "send never received");
    }
    for (const auto& [key, q] : recvs_) {
      if (result_.ok && !q.empty()) fail(key.second, q.front(), "receive never matched");
    }
    for (auto& rs : ranks_) result_.recv.push_back(rs.recv);
    return result_;
  }

 private:
  void fail(int rank, size_t step, const std::string& what) {
    if (!result_.ok) return;
    result_.ok = false;
    result_.error = "rank " + std::to_string(rank) + " step " + std::to_string(step) + ": " + what;
  }

  std::vector<Symbol>& buf(RankSim& rs, Buf b) {
    return b == Buf::send ? rs.send : b == Buf::recv ? rs.recv : rs.scratch;
  }

  void check_ranges(int r, size_t elem) {
    RankSim& rs = ranks_[static_cast<size_t>(r)];
    for (size_t i = 0; i < rs.sched.steps.size(); ++i) {
      const Step& st = rs.sched.steps[i];
      if (writes_dst(st) && st.dst.buf == Buf::send) fail(r, i, "writes the send buffer");
      for (const Range* x : {&st.dst, &st.src}) {
        if (x->bytes == 0) continue;
        if (x->offset % elem != 0 || x->bytes % elem != 0) fail(r, i, "range not on element boundaries");
        if (x->offset + x->bytes > buf(rs, x->buf).size()) {
          fail(r, i, "range [" + std::to_string(x->offset) + "+" + std::to_string(x->bytes) + ") beyond its buffer of " +
                         std::to_string(buf(rs, x->buf).size()) + " bytes");
        }
      }
      if (st.reduces() && st.src.bytes != 0 && st.src.bytes != st.dst.bytes) fail(r, i, "operand size differs");
      if (st.has_recv() && (st.recv_peer < 0 || st.recv_peer >= n_ || st.recv_peer == r)) fail(r, i, "bad recv peer");
      if (st.has_send() && (st.send_peer < 0 || st.send_peer >= n_ || st.send_peer == r)) fail(r, i, "bad send peer");
    }
  }

  bool write_blocked(const RankSim& rs, size_t i, const Range& x) const {
    for (size_t j = rs.head; j < i; ++j) {
      const Step& e = rs.sched.steps[j];
      if (rs.phase[j] == Phase::done) continue;
      if (computing(rs.phase[j]) && writes_dst(e) && overlaps(x, e.dst)) return true;
      if (computing(rs.phase[j]) && e.src.bytes != 0 && overlaps(x, e.src)) return true;
      if (e.has_send() && overlaps(x, e.sent())) return true;
    }
    return false;
  }
  bool read_blocked(const RankSim& rs, size_t i, const Range& x) const {
    for (size_t j = rs.head; j < i; ++j) {
      if (computing(rs.phase[j]) && writes_dst(rs.sched.steps[j]) && overlaps(x, rs.sched.steps[j].dst)) return true;
    }
    return false;
  }

  void compute(int r, size_t i) {
    RankSim& rs = ranks_[static_cast<size_t>(r)];
    const Step& st = rs.sched.steps[i];
    auto& dst = buf(rs, st.dst.buf);
    if (st.reduces()) {
      const auto& in = rs.slots[i];
      const Range& opr = st.src.bytes != 0 ? st.src : st.dst;
      const std::vector<Symbol> operand(buf(rs, opr.buf).begin() + static_cast<long>(opr.offset),
                                        buf(rs, opr.buf).begin() + static_cast<long>(opr.offset + opr.bytes));
      for (size_t k = 0; k < st.dst.bytes; ++k) {
        const Symbol& a = operand[k];
        const Symbol& b = in[k];
        if (a.mask == 0 || b.mask == 0 || a.pos != b.pos) return fail(r, i, "reduces bytes of different positions");
        if ((a.mask & b.mask) != 0) return fail(r, i, "a contribution is reduced twice");
        if (a.scaled != 0 || b.scaled != 0) return fail(r, i, "reduces an already averaged value");
        dst[st.dst.offset + k] = Symbol{a.mask | b.mask, a.pos, 0};
      }
      rs.slots.erase(i);
    } else if (st.kind == StepKind::copy) {
      const auto& src = buf(rs, st.src.buf);
      for (size_t k = 0; k < st.dst.bytes; ++k) dst[st.dst.offset + k] = src[st.src.offset + k];
    }
    if (st.kind == StepKind::scale || (st.reduces() && st.factor != 1.0)) {
      for (size_t k = 0; k < st.dst.bytes; ++k) {
        Symbol& s = dst[st.dst.offset + k];
        if (s.mask != full_) return fail(r, i, "scales a partial sum");
        ++s.scaled;
      }
    }
  }

  bool progress(int r) {
    RankSim& rs = ranks_[static_cast<size_t>(r)];
    bool any = false;
    for (;;) {
      bool moved = false;
      for (size_t i = rs.head; i < rs.started && result_.ok; ++i) moved = advance(r, i) || moved;
      while (rs.head < rs.started && rs.phase[rs.head] == Phase::done) ++rs.head;
      while (rs.started < rs.sched.steps.size() && rs.started < rs.head + rs.window) {
        const size_t i = rs.started;
        const Step& st = rs.sched.steps[i];
        if (st.has_recv()) {
          if (direct_recv(st) && write_blocked(rs, i, st.dst)) break;
          recvs_[{st.recv_peer, r}].push_back(i);
          rs.phase[i] = Phase::receiving;
        } else {
          rs.phase[i] = Phase::received;
        }
        ++rs.started;
        moved = true;
      }
      if (!moved || !result_.ok) return any;
      any = true;
    }
  }

  bool advance(int r, size_t i) {
    RankSim& rs = ranks_[static_cast<size_t>(r)];
    const Step& st = rs.sched.steps[i];
    if (rs.phase[i] == Phase::received) {
      if (writes_dst(st) && !direct_recv(st) && write_blocked(rs, i, st.dst)) return false;
      if (st.src.bytes != 0 && read_blocked(rs, i, st.src)) return false;
      compute(r, i);
      rs.phase[i] = st.has_send() ? Phase::ready_send : Phase::done;
      return true;
    }
    if (rs.phase[i] == Phase::ready_send) {
      for (size_t j = rs.head; j < i; ++j) {
        const Step& e = rs.sched.steps[j];
        if (e.has_send() && e.send_peer == st.send_peer && rs.phase[j] < Phase::sending) return false;
      }
      const Range& x = st.sent();
      const auto& b = buf(rs, x.buf);
      for (size_t k = x.offset; k < x.offset + x.bytes; ++k) {
        if (x.buf == Buf::scratch && b[k] == kUnwritten) {
          fail(r, i, "sends scratch byte " + std::to_string(k) + ", which nothing wrote (Schedule::zero_scratch)");
          return false;
        }
      }
      sends_[{r, st.send_peer}].push_back(
          Message{r, i, std::vector<Symbol>(b.begin() + static_cast<long>(x.offset),
                                            b.begin() + static_cast<long>(x.offset + x.bytes))});
      rs.phase[i] = Phase::sending;
      return true;
    }
    return false;
  }

  bool match() {
    bool moved = false;
    for (auto& [key, q] : sends_) {
      auto& rq = recvs_[key];
      while (!q.empty() && !rq.empty() && result_.ok) {
        Message m = std::move(q.front());
        q.pop_front();
        const size_t ri = rq.front();
        rq.pop_front();
        RankSim& to = ranks_[static_cast<size_t>(key.second)];
        const Step& st = to.sched.steps[ri];
        if (st.dst.bytes != m.payload.size()) {
          fail(key.second, ri, "expects " + std::to_string(st.dst.bytes) + " bytes from rank " +
                                   std::to_string(key.first) + " whose step " + std::to_string(m.step) + " sends " +
                                   std::to_string(m.payload.size()));
          return false;
        }
        if (direct_recv(st)) {
          std::copy(m.payload.begin(), m.payload.end(), buf(to, st.dst.buf).begin() + static_cast<long>(st.dst.offset));
        } else {
          to.slots[ri] = std::move(m.payload);
        }
        to.phase[ri] = Phase::received;
        ranks_[static_cast<size_t>(key.first)].phase[m.step] = Phase::done;
        ++result_.messages;
        result_.sent.push_back(SimMessage{key.first, key.second, m.step, st.dst.bytes});
        moved = true;
      }
    }
    return moved;
  }

  int n_;
  uint32_t full_;
  std::vector<RankSim> ranks_;
  std::map<std::pair<int, int>, std::deque<Message>> sends_;  // (from, to)
  std::map<std::pair<int, int>, std::deque<size_t>> recvs_;   // (from, to) -> receiver's steps
  SimResult result_;
};

}  // namespace

size_t send_bytes(const CollectiveArgs& a, int rank, int size) {
  const size_t e = dtype_size(a.dtype);
  const size_t mine = a.counts.empty() ? a.count : a.counts[static_cast<size_t>(rank)];
  switch (a.kind) {
    case Kind::all_reduce:
    case Kind::reduce:
    case Kind::send: return a.count * e;
    case Kind::broadcast: return a.send != nullptr && a.send != a.recv && rank == a.root ? a.count * e : 0;
    case Kind::all_gather:
    case Kind::gather: return mine * e;
    case Kind::reduce_scatter: return sum(a.counts, a.count, size) * e;
    case Kind::scatter: return rank == a.root ? sum(a.counts, a.count, size) * e : 0;
    case Kind::all_to_all: return sum(a.send_counts, a.count, size) * e;
    default: return 0;
  }
}

size_t recv_bytes(const CollectiveArgs& a, int rank, int size) {
  const size_t e = dtype_size(a.dtype);
  const size_t mine = a.counts.empty() ? a.count : a.counts[static_cast<size_t>(rank)];
  switch (a.kind) {
    case Kind::all_reduce:
    case Kind::broadcast:
    case Kind::recv: return a.count * e;
    case Kind::reduce: return rank == a.root || a.send == a.recv ? a.count * e : 0;
    case Kind::all_gather: return sum(a.counts, a.count, size) * e;
    case Kind::gather: return rank == a.root ? sum(a.counts, a.count, size) * e : 0;
    case Kind::reduce_scatter:
    case Kind::scatter: return mine * e;
    case Kind::all_to_all: return sum(a.recv_counts, a.count, size) * e;
    default: return 0;
  }
}

SimResult simulate(const std::vector<CollectiveArgs>& per_rank, Algo algo, size_t segment_bytes, size_t window,
                   size_t ring_depth, std::shared_ptr<const std::vector<int>> order) {
  Simulator sim(per_rank, algo, segment_bytes, window, ring_depth, order);
  return sim.run();
}

SimResult simulate(const CollectiveArgs& args, Algo algo, int size, size_t segment_bytes, size_t window,
                   size_t ring_depth, std::shared_ptr<const std::vector<int>> order) {
  return simulate(std::vector<CollectiveArgs>(static_cast<size_t>(size), args), algo, segment_bytes, window, ring_depth,
                  std::move(order));
}

}  // namespace braid::collectives::testing
