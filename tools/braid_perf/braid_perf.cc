// braid-perf: the nccl-tests of braid. One row per size: time, algbw, busbw and #wrong.
//
// Method (the same as ../shared/bench's anchors, so figures compare like for like): each
// iteration restores the inputs (untimed), meets the other ranks at a barrier, and times one
// operation; the per-iteration times are MAX-reduced across ranks and the row shows the median.
#include <braid/braid.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tools/braid_perf/perf_check.h"
#include "tools/braid_perf/perf_data.h"
#include "tools/braid_perf/perf_options.h"

namespace braid::perf {
namespace {

struct Row {
  size_t bytes = 0;
  size_t count = 0;  // elements of the whole message (nccl-tests' "count")
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  int64_t wrong = 0;
  std::string algo;
};

// One collective as braid-perf drives it.
struct Case {
  Communicator& comm;
  const PerfOptions& opt;
  size_t count = 0;  // per-rank elements (the unit the call takes)
  size_t esize = 0;
  std::vector<char> send, recv;
  Expected expected;  // inputs and results, computed once per size

  int n() const { return comm.size(); }
  int r() const { return comm.rank(); }
  int root() const { return opt.root; }
  DType dt() const { return opt.dtype; }
  Op op() const { return opt.redop; }
  void* rbuf() { return recv.data(); }
  const void* sbuf() const { return send.data(); }
};

// How many elements a call takes for `bytes` of message (rounded down as nccl-tests does).
bool is_split(const std::string& op) {
  return op == "all_gather" || op == "reduce_scatter" || op == "gather" || op == "scatter" || op == "all_to_all";
}

size_t per_rank_count(const std::string& op, size_t bytes, size_t esize, int n) {
  return is_split(op) ? bytes / esize / static_cast<size_t>(n) : bytes / esize;
}

double bus_factor(const std::string& op, int n) {
  double nd = n;
  if (op == "all_reduce") return 2 * (nd - 1) / nd;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all" || op == "gather" || op == "scatter") {
    return (nd - 1) / nd;
  }
  return 1;
}

void prepare(Case& c) {
  const std::string& op = c.opt.op;
  size_t n = static_cast<size_t>(c.n()), cnt = c.count, es = c.esize;
  bool split_in = op == "reduce_scatter" || op == "all_to_all" || op == "scatter";
  bool split_out = op == "all_gather" || op == "all_to_all" || op == "gather";
  c.send.assign(std::max<size_t>(1, (split_in ? cnt * n : cnt) * es), 0);
  c.recv.assign(std::max<size_t>(1, (split_out ? cnt * n : cnt) * es), 0);
  c.expected = expected_for(op, c.n(), c.r(), c.root(), cnt, c.dt(), c.op());
}

// Restores the inputs (in-place ops overwrite them).
void fill(Case& c) {
  const std::vector<char>& in = c.expected.input;
  if (!in.empty()) std::memcpy(c.expected.input_in_recv ? c.recv.data() : c.send.data(), in.data(), in.size());
}

void run(Case& c) {
  const std::string& op = c.opt.op;
  Communicator& comm = c.comm;
  size_t cnt = c.count;
  if (op == "all_reduce") comm.all_reduce(c.rbuf(), cnt, c.dt(), c.op());
  else if (op == "broadcast") comm.broadcast(c.rbuf(), cnt, c.dt(), c.root());
  else if (op == "reduce") comm.reduce(c.sbuf(), c.rbuf(), cnt, c.dt(), c.op(), c.root());
  else if (op == "all_gather") comm.all_gather(c.sbuf(), c.rbuf(), cnt, c.dt());
  else if (op == "reduce_scatter") comm.reduce_scatter(c.sbuf(), c.rbuf(), cnt, c.dt(), c.op());
  else if (op == "gather") comm.gather(c.sbuf(), c.rbuf(), cnt, c.dt(), c.root());
  else if (op == "scatter") comm.scatter(c.sbuf(), c.rbuf(), cnt, c.dt(), c.root());
  else if (op == "all_to_all") comm.all_to_all(c.sbuf(), c.rbuf(), cnt, c.dt());
  else if (op == "barrier") comm.barrier();
  else if (op == "sendrecv") {
    // Each rank sends to the next and receives from the previous, both at once (one group).
    int next = (c.r() + 1) % c.n(), prev = (c.r() + c.n() - 1) % c.n();
    if (c.n() == 1) {  // a rank's message to itself
      std::memcpy(c.rbuf(), c.sbuf(), cnt * c.esize);
      return;
    }
    comm.group_start();
    comm.send_async(c.sbuf(), cnt, c.dt(), next);
    comm.recv_async(c.rbuf(), cnt, c.dt(), prev);
    comm.group_end().wait();
  }
}

// Counts the elements of this rank's result that differ from what they must be.
int64_t check(Case& c) { return count_wrong(c.rbuf(), c.expected, c.dt(), c.op()); }

// Whether every rank ends with bitwise the same result (for results every rank holds).
bool result_is_shared(const std::string& op) { return op == "all_reduce" || op == "all_gather" || op == "broadcast"; }

Row measure(Communicator& comm, const PerfOptions& opt, size_t bytes) {
  Case c{comm, opt, 0, 0, {}, {}, {}};
  c.esize = dtype_size(opt.dtype);
  c.count = opt.op == "barrier" ? 0 : per_rank_count(opt.op, bytes, c.esize, comm.size());
  prepare(c);
  Row row;
  size_t per_call = c.count * c.esize;
  row.bytes = is_split(opt.op) ? per_call * static_cast<size_t>(comm.size()) : per_call;
  row.count = row.bytes / c.esize;

  std::vector<double> times;
  std::vector<int64_t> hashes;
  for (int it = 0; it < opt.warmup + opt.iters; ++it) {
    fill(c);
    comm.barrier();
    auto t0 = std::chrono::steady_clock::now();
    run(c);
    auto t1 = std::chrono::steady_clock::now();
    row.algo = comm.last_algorithm();  // before the checks below run collectives of their own
    if (it < opt.warmup) continue;
    times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (opt.check) {
      row.wrong += check(c);
      if (result_is_shared(opt.op)) hashes.push_back(hash_bytes(c.rbuf(), c.count * c.esize * (opt.op == "all_gather" ? static_cast<size_t>(comm.size()) : 1)));
    }
  }
  comm.all_reduce(times.data(), times.size(), DType::f64, Op::max);
  if (!hashes.empty()) {
    std::vector<int64_t> lo = hashes, hi = hashes;
    comm.all_reduce(lo.data(), lo.size(), DType::i64, Op::min);
    comm.all_reduce(hi.data(), hi.size(), DType::i64, Op::max);
    for (size_t i = 0; i < lo.size(); ++i) row.wrong += lo[i] != hi[i] ? static_cast<int64_t>(c.count) : 0;
  }
  comm.all_reduce(&row.wrong, 1, DType::i64, Op::sum);
  std::sort(times.begin(), times.end());
  row.time_us = times[times.size() / 2];
  row.algbw = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) : 0;
  row.busbw = row.algbw * bus_factor(opt.op, comm.size());
  return row;
}

void print_header(const PerfOptions& opt, const Communicator& comm) {
  std::printf("# braid-perf: %s, %d ranks, dtype %s, redop %s, root %d, %d iterations (+%d warm-up), check %s\n",
              opt.op.c_str(), comm.size(), to_string(opt.dtype), to_string(opt.redop), opt.root, opt.iters,
              opt.warmup, opt.check ? "on" : "off");
  std::printf("# time = median over iterations of the slowest rank's time; GB/s = 1e9 bytes/s\n#\n");
  std::printf("#%12s %12s %6s %6s %5s %9s %11s %8s %8s %7s\n", "size", "count", "type", "redop", "root", "algo",
              "time", "algbw", "busbw", "#wrong");
  std::printf("#%12s %12s %6s %6s %5s %9s %11s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "", "(us)", "(GB/s)",
              "(GB/s)", "");
}

bool rooted(const std::string& op) { return op == "broadcast" || op == "reduce" || op == "gather" || op == "scatter"; }
bool reducing(const std::string& op) { return op == "all_reduce" || op == "reduce" || op == "reduce_scatter"; }

void write_json(const std::string& path, const PerfOptions& opt, const std::vector<Row>& rows) {
  std::ofstream out(path);
  out << "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    char line[512];
    std::snprintf(line, sizeof(line),
                  "  {\"op\": \"%s\", \"bytes\": %zu, \"count\": %zu, \"dtype\": \"%s\", \"redop\": \"%s\", "
                  "\"algo\": \"%s\", \"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"wrong\": %lld}%s\n",
                  opt.op.c_str(), r.bytes, r.count, to_string(opt.dtype), reducing(opt.op) ? to_string(opt.redop) : "none",
                  r.algo.c_str(), r.time_us, r.algbw, r.busbw, static_cast<long long>(r.wrong),
                  i + 1 < rows.size() ? "," : "");
    out << line;
  }
  out << "]\n";
}

int run_main(int argc, char** argv) {
  PerfOptions opt;
  std::string error;
  bool help = false;
  if (!parse_perf_options(std::vector<std::string>(argv + 1, argv + argc), &opt, &error, &help)) {
    std::fprintf(stderr, "braid-perf: %s\n%s", error.c_str(), perf_usage());
    return 2;
  }
  if (help) {
    std::fputs(perf_usage(), stdout);
    return 0;
  }
  if (!opt.algo.empty()) setenv("BRAID_ALGO", opt.algo.c_str(), 1);  // read once, by the library

  Communicator comm = Communicator::from_env();
  if (opt.root >= comm.size()) {
    std::fprintf(stderr, "braid-perf: --root %d is not a rank of this %d-rank job\n", opt.root, comm.size());
    return 2;
  }
  if (comm.rank() == 0) print_header(opt, comm);
  std::vector<Row> rows;
  for (size_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= opt.step_factor) {
    Row row = measure(comm, opt, bytes);
    rows.push_back(row);
    if (comm.rank() == 0) {
      std::printf(" %12zu %12zu %6s %6s %5d %9s %11.2f %8.3f %8.3f %7lld\n", row.bytes, row.count,
                  to_string(opt.dtype), reducing(opt.op) ? to_string(opt.redop) : "none",
                  rooted(opt.op) ? opt.root : -1, row.algo.c_str(), row.time_us, row.algbw, row.busbw,
                  static_cast<long long>(row.wrong));
      if (opt.result_rows) {
        std::printf("RESULT\tbraid\t%s\t%d\t%zu\t%d\t%.3f\t%.3f\t%.3f\t%.4f\t%.4f\t%s\n", row.algo.c_str(), comm.size(),
                    row.bytes, opt.iters, row.time_us, row.time_us, row.time_us, row.algbw, row.busbw,
                    row.wrong == 0 ? "ok" : "FAIL");
      }
      std::fflush(stdout);
    }
    if (bytes == 0) break;
  }
  int64_t wrong = 0;
  double busbw_sum = 0;
  for (const Row& r : rows) {
    wrong += r.wrong;
    busbw_sum += r.busbw;
  }
  if (comm.rank() == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %.4f GB/s\n#\n", rows.empty() ? 0.0 : busbw_sum / static_cast<double>(rows.size()));
    if (!opt.json_path.empty()) write_json(opt.json_path, opt, rows);
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) {
  try {
    return braid::perf::run_main(argc, argv);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid-perf: %s\n", e.what());
    return 1;
  }
}
