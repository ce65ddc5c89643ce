#include "tools/braid_perf/perf_measure.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "tools/braid_perf/perf_check.h"
#include "tools/braid_perf/perf_data.h"

namespace braid::perf {

namespace {

using Clock = std::chrono::steady_clock;

// The call a case makes, chosen once from --op's name, so that the timed loop spends nothing on
// comparing names (a string compared against each collective in turn charged sendrecv, the last,
// part of its figure that braid never ran: docs/performance.md has what it cost).
enum class Call : uint8_t { all_reduce, broadcast, reduce, all_gather, reduce_scatter, gather, scatter, all_to_all, barrier, sendrecv };

Call call_of(const std::string& op) {
  static const std::pair<const char*, Call> kCalls[] = {
      {"all_reduce", Call::all_reduce}, {"broadcast", Call::broadcast},   {"reduce", Call::reduce},
      {"all_gather", Call::all_gather}, {"reduce_scatter", Call::reduce_scatter}, {"gather", Call::gather},
      {"scatter", Call::scatter},       {"all_to_all", Call::all_to_all}, {"barrier", Call::barrier}};
  for (const auto& [name, call] : kCalls) {
    if (op == name) return call;
  }
  return Call::sendrecv;  // the options accept only known names
}

// One collective as braid-perf drives it, at one size.
struct Case {
  Communicator& comm;
  const PerfOptions& opt;
  DType dt;
  Op redop;
  int root;
  size_t count = 0;  // per-rank elements (the unit the call takes)
  size_t esize = 0;
  size_t bytes = 0;  // the larger of the send and receive sizes
  std::vector<char> send, recv;  // at least 1 byte, so that an empty message still has an address
  Expected expected;  // inputs and results, computed once per size
  Call call = call_of(opt.op);

  const std::string& op() const { return opt.op; }
  int n() const { return comm.size(); }
  int r() const { return comm.rank(); }
};

// Where one form (out of place or in place) puts its input, passes its buffers and finds its
// result. In place follows NCCL: send == recv, except that all_gather/gather send from this
// rank's block of recv and reduce_scatter/scatter receive into this rank's block of send.
struct Layout {
  bool valid = false;
  char* input = nullptr;
  const void* send = nullptr;
  void* recv = nullptr;
  const char* result = nullptr;
};

Layout layout(Case& c, bool in_place) {
  const std::string& op = c.op();
  char* s = c.send.data();
  char* r = c.recv.data();
  if (!in_place) return {true, s, s, r, r};
  if (op == "barrier" || op == "sendrecv") return {};  // no in-place form
  const size_t block = static_cast<size_t>(c.r()) * c.count * c.esize;
  if (op == "all_gather" || op == "gather") return {true, r + block, r + block, r, r};
  if (op == "reduce_scatter" || op == "scatter") return {true, s, s, s + block, s + block};
  return {true, r, r, r, r};
}

void fill(Case& c, const Layout& l) {
  const std::vector<char>& in = c.expected.input;
  if (!in.empty()) std::memcpy(l.input, in.data(), in.size());
}

// Starts one operation; its Work completes when it is done.
Work start(Case& c, const Layout& l) {
  Communicator& comm = c.comm;
  const size_t cnt = c.count;
  switch (c.call) {
    case Call::all_reduce: return comm.all_reduce_async(l.send, l.recv, cnt, c.dt, c.redop);
    case Call::broadcast: return comm.broadcast_async(l.send, l.recv, cnt, c.dt, c.root);
    case Call::reduce: return comm.reduce_async(l.send, l.recv, cnt, c.dt, c.redop, c.root);
    case Call::all_gather: return comm.all_gather_async(l.send, l.recv, cnt, c.dt);
    case Call::reduce_scatter: return comm.reduce_scatter_async(l.send, l.recv, cnt, c.dt, c.redop);
    case Call::gather: return comm.gather_async(l.send, l.recv, cnt, c.dt, c.root);
    case Call::scatter: return comm.scatter_async(l.send, l.recv, cnt, c.dt, c.root);
    case Call::all_to_all: return comm.all_to_all_async(l.send, l.recv, cnt, c.dt);
    case Call::barrier: return comm.barrier_async();
    case Call::sendrecv: break;
  }
  // sendrecv: each rank sends to the next and receives from the previous, both at once.
  comm.group_start();
  comm.send_async(l.send, cnt, c.dt, (c.r() + 1) % c.n());
  comm.recv_async(l.recv, cnt, c.dt, (c.r() + c.n() - 1) % c.n());
  return comm.group_end();
}

// One operation through the blocking call (--calls blocking). sendrecv has none for a send and
// a receive at once: even ranks send first and odd ranks receive first, which never deadlocks
// (in a ring of odd size the last rank's send waits only for rank 0's receive, which follows
// rank 0's own send) but takes two messages' time where the group takes one.
void call_blocking(Case& c, const Layout& l) {
  Communicator& comm = c.comm;
  const size_t cnt = c.count;
  switch (c.call) {
    case Call::all_reduce: return comm.all_reduce(l.send, l.recv, cnt, c.dt, c.redop);
    case Call::broadcast: return comm.broadcast(l.send, l.recv, cnt, c.dt, c.root);
    case Call::reduce: return comm.reduce(l.send, l.recv, cnt, c.dt, c.redop, c.root);
    case Call::all_gather: return comm.all_gather(l.send, l.recv, cnt, c.dt);
    case Call::reduce_scatter: return comm.reduce_scatter(l.send, l.recv, cnt, c.dt, c.redop);
    case Call::gather: return comm.gather(l.send, l.recv, cnt, c.dt, c.root);
    case Call::scatter: return comm.scatter(l.send, l.recv, cnt, c.dt, c.root);
    case Call::all_to_all: return comm.all_to_all(l.send, l.recv, cnt, c.dt);
    case Call::barrier: return comm.barrier();
    case Call::sendrecv: break;
  }
  const int next = (c.r() + 1) % c.n(), prev = (c.r() + c.n() - 1) % c.n();
  if (c.r() % 2 == 0) comm.send(l.send, cnt, c.dt, next);
  comm.recv(l.recv, cnt, c.dt, prev);
  if (c.r() % 2 == 1) comm.send(l.send, cnt, c.dt, next);
}

// Runs `ops` operations as one group and waits. A single operation is issued as a program
// would: its *_async call and Work::wait() (or, with --calls blocking, the blocking call).
void run_blocking(Case& c, const Layout& l, int ops) {
  if (c.call == Call::sendrecv && c.n() == 1) {  // a rank's message to itself
    std::memcpy(l.recv, l.send, c.count * c.esize);
    return;
  }
  if (ops == 1 && c.opt.blocking_calls) {
    call_blocking(c, l);
    return;
  }
  if (ops == 1) {
    start(c, l).wait();
    return;
  }
  c.comm.group_start();
  for (int k = 0; k < ops; ++k) start(c, l);
  c.comm.group_end().wait();
}

// Combines each rank's values (-a) into what every rank then holds.
void combine(Communicator& comm, std::vector<double>& v, Average how) {
  if (how == Average::rank0) comm.broadcast(v.data(), v.size(), DType::f64, 0);
  const Op op = how == Average::min ? Op::min : how == Average::max ? Op::max : Op::avg;
  if (how != Average::rank0) comm.all_reduce(v.data(), v.size(), DType::f64, op);
}

Timing time_form(Case& c, bool in_place, std::string* algo) {
  Timing t;
  Layout l = layout(c, in_place);
  if (!l.valid) return t;
  t.ran = true;
  const PerfOptions& opt = c.opt;
  for (int w = 0; w < opt.warmup; ++w) {
    fill(c, l);
    run_blocking(c, l, opt.agg);
  }
  std::vector<double> times;
  if (opt.blocking) {
    for (int it = 0; it < opt.iters; ++it) {
      fill(c, l);
      if (opt.barrier_each) c.comm.barrier();
      auto t0 = Clock::now();
      run_blocking(c, l, opt.agg);
      times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / opt.agg);
    }
  } else {
    fill(c, l);
    c.comm.barrier();
    auto t0 = Clock::now();
    std::vector<Work> works;
    for (int it = 0; it < opt.iters; ++it) {
      if (c.call == Call::sendrecv && c.n() == 1) {
        std::memcpy(l.recv, l.send, c.count * c.esize);
        continue;
      }
      c.comm.group_start();
      for (int k = 0; k < opt.agg; ++k) start(c, l);
      works.push_back(c.comm.group_end());
    }
    for (Work& w : works) w.wait();
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / (opt.iters * opt.agg));
  }
  if (algo->empty()) *algo = c.comm.last_algorithm();  // before the collectives below
  combine(c.comm, times, opt.average);
  std::sort(times.begin(), times.end());
  t.time_us = times[times.size() / 2];
  t.algbw = t.time_us > 0 ? static_cast<double>(c.bytes) / (t.time_us * 1e3) : 0;
  return t;
}

// -c iterations of one operation (not -m: in place, a second one would reduce the first's
// result again), each from poisoned buffers, compared with the exact expected result; results
// every rank holds are also compared across ranks (bitwise).
int64_t check_form(Case& c, bool in_place) {
  Layout l = layout(c, in_place);
  const std::string& op = c.op();
  const bool shared = op == "all_reduce" || op == "all_gather" || op == "broadcast";
  int64_t wrong = 0;
  std::vector<int64_t> hashes;
  for (int k = 0; k < c.opt.check_iters; ++k) {
    std::memset(c.send.data(), 0x5a, c.send.size());
    std::memset(c.recv.data(), 0x5a, c.recv.size());
    fill(c, l);
    c.comm.barrier();
    run_blocking(c, l, 1);
    wrong += count_wrong(l.result, c.expected, c.dt, c.redop);
    if (shared) hashes.push_back(hash_bytes(l.result, c.expected.result.size()));
  }
  if (!hashes.empty()) {
    std::vector<int64_t> lo = hashes, hi = hashes;
    c.comm.all_reduce(lo.data(), lo.size(), DType::i64, Op::min);
    c.comm.all_reduce(hi.data(), hi.size(), DType::i64, Op::max);
    for (size_t i = 0; i < lo.size(); ++i) wrong += lo[i] != hi[i] ? static_cast<int64_t>(c.count) : 0;
  }
  c.comm.all_reduce(&wrong, 1, DType::i64, Op::sum);
  return wrong;
}

}  // namespace

size_t per_rank_count(const std::string& op, size_t bytes, size_t esize, int n) {
  if (op == "barrier") return 0;
  return is_split(op) ? bytes / esize / static_cast<size_t>(n) : bytes / esize;
}

double bus_factor(const std::string& op, int n) {
  const double nd = n;
  if (op == "all_reduce") return 2 * (nd - 1) / nd;
  if (is_split(op)) return (nd - 1) / nd;
  return 1;
}

Row measure_row(Communicator& comm, const PerfOptions& opt, size_t bytes, DType dtype, Op redop, int root) {
  Case c{comm, opt, dtype, redop, root, 0, 0, 0, {}, {}, {}};
  c.esize = dtype_size(dtype);
  c.count = per_rank_count(opt.op, bytes, c.esize, comm.size());
  const size_t n = static_cast<size_t>(comm.size());
  const std::string& op = opt.op;
  const bool split_in = op == "reduce_scatter" || op == "all_to_all" || op == "scatter";
  const bool split_out = op == "all_gather" || op == "all_to_all" || op == "gather";
  const size_t send_bytes = (split_in ? c.count * n : c.count) * c.esize;
  const size_t recv_bytes = (split_out ? c.count * n : c.count) * c.esize;
  c.bytes = std::max(send_bytes, recv_bytes);
  c.send.assign(std::max<size_t>(1, send_bytes), 0);
  c.recv.assign(std::max<size_t>(1, recv_bytes), 0);
  c.expected = expected_for(op, comm.size(), comm.rank(), root, c.count, dtype, redop);

  Row row;
  row.dtype = dtype;
  row.redop = redop;
  row.root = is_rooted(op) ? root : -1;
  row.bytes = c.bytes;
  row.count = row.bytes / c.esize;
  const double factor = bus_factor(op, comm.size());
  for (bool in_place : {false, true}) {
    Timing& t = in_place ? row.in_place : row.out_of_place;
    t = time_form(c, in_place, &row.algo);
    t.busbw = t.algbw * factor;
    if (t.ran && opt.check_iters > 0) t.wrong = check_form(c, in_place);
  }
  return row;
}

}  // namespace braid::perf
