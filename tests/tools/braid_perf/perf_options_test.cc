#include "tools/braid_perf/perf_options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "braid_config.h"

#include "tools/braid_perf/perf_check.h"
#include "tools/braid_perf/perf_data.h"
#include "tools/braid_perf/perf_measure.h"
#include "tools/braid_perf/perf_report.h"

namespace braid::perf {
namespace {

bool parse(std::vector<std::string> args, PerfOptions* o, std::string* err) {
  return parse_perf_options(args, o, err) == Parsed::run;
}

// Every nccl-tests flag, in its short and long spelling, with the meaning nccl-tests gives it.
TEST(PerfOptions, EveryNcclTestsFlagParses) {
  using Check = std::function<bool(const PerfOptions&)>;
  struct Case {
    std::vector<std::string> args;
    Check check;
  };
  const std::vector<DType> every_dtype{DType::i8, DType::u8, DType::i32, DType::i64,
                                       DType::f16, DType::f32, DType::f64, DType::bf16};
  const std::vector<Case> cases = {
      {{"-b", "4K"}, [](auto& o) { return o.min_bytes == 4096; }},
      {{"--minbytes", "0"}, [](auto& o) { return o.min_bytes == 0; }},
      {{"-b8"}, [](auto& o) { return o.min_bytes == 8; }},  // getopt's joined form
      {{"-b", "1K", "-e", "256M"}, [](auto& o) { return o.max_bytes == size_t{256} << 20; }},
      {{"-b", "1", "--maxbytes=1G"}, [](auto& o) { return o.max_bytes == size_t{1} << 30; }},
      {{"-i", "64K"}, [](auto& o) { return o.step_bytes == 65536 && o.step_factor == 1; }},
      {{"--stepbytes", "100"}, [](auto& o) { return o.step_bytes == 100; }},
      {{"-f", "4"}, [](auto& o) { return o.step_factor == 4; }},
      {{"--stepfactor", "2"}, [](auto& o) { return o.step_factor == 2; }},
      {{"-n", "7"}, [](auto& o) { return o.iters == 7; }},
      {{"--iters", "3"}, [](auto& o) { return o.iters == 3; }},
      {{"-w", "0"}, [](auto& o) { return o.warmup == 0; }},
      {{"--warmup_iters", "9"}, [](auto& o) { return o.warmup == 9; }},
      {{"-m", "4"}, [](auto& o) { return o.agg == 4; }},
      {{"--agg_iters", "2"}, [](auto& o) { return o.agg == 2; }},
      {{"-c", "0"}, [](auto& o) { return o.check_iters == 0; }},
      {{"--check", "5"}, [](auto& o) { return o.check_iters == 5; }},
      {{"-z", "0"}, [](auto& o) { return !o.blocking; }},
      {{"--blocking", "1"}, [](auto& o) { return o.blocking; }},
      {{"-a", "0"}, [](auto& o) { return o.average == Average::rank0; }},
      {{"-a", "1"}, [](auto& o) { return o.average == Average::mean; }},
      {{"--average", "2"}, [](auto& o) { return o.average == Average::min; }},
      {{"-N", "0"}, [](auto& o) { return o.cycles == 0; }},
      {{"--run_cycles", "3"}, [](auto& o) { return o.cycles == 3; }},
      {{"-d", "bf16"}, [](auto& o) { return o.dtypes == std::vector<DType>{DType::bf16}; }},
      {{"--datatype", "half"}, [](auto& o) { return o.dtypes == std::vector<DType>{DType::f16}; }},
      {{"-d", "all"}, [&](auto& o) { return o.dtypes == every_dtype; }},
      {{"-d", "f32,bf16,int32,f32"},
       [](auto& o) { return o.dtypes == std::vector<DType>{DType::f32, DType::bf16, DType::i32}; }},
      {{"-o", "max"}, [](auto& o) { return o.redops == std::vector<Op>{Op::max}; }},
      {{"--op", "prod"}, [](auto& o) { return o.redops == std::vector<Op>{Op::prod} && o.op == "all_reduce"; }},
      {{"--op", "all_gather"}, [](auto& o) { return o.op == "all_gather"; }},
      {{"--redop=min"}, [](auto& o) { return o.redops == std::vector<Op>{Op::min}; }},
      {{"-o", "all"}, [](auto& o) { return o.redops == std::vector<Op>{Op::sum, Op::prod, Op::min, Op::max, Op::avg}; }},
      {{"-r", "3"}, [](auto& o) { return o.root == 3; }},
      {{"--root", "all"}, [](auto& o) { return o.root == -1; }},
      {{"-T", "30"}, [](auto& o) { return o.timeout_s == 30; }},
      {{"--algo", "ring"}, [](auto& o) { return o.algo == "ring"; }},
      {{"--json", "out.json", "--label", "x y"}, [](auto& o) { return o.json_path == "out.json" && o.label == "x y"; }},
      {{"--result-rows"}, [](auto& o) { return o.result_rows; }},
      // Accepted and said not to apply; their neutral values say nothing.
      {{"-g", "8"}, [](auto& o) { return o.notes.size() == 1 && o.notes[0].find("-g 8: not applicable") == 0; }},
      {{"--ngpus", "1", "-t", "1"}, [](auto& o) { return o.notes.empty(); }},
      {{"--nthreads", "4"}, [](auto& o) { return o.notes.size() == 1 && o.notes[0].find("-t 4") == 0; }},
      {{"-p", "1"}, [](auto& o) { return o.notes.size() == 1 && o.notes[0].find("-p 1") == 0; }},
      {{"-R", "1"}, [](auto& o) { return o.notes.size() == 1 && o.notes[0].find("-R 1") == 0; }},
      {{"--local_register", "0"}, [](auto& o) { return o.notes.empty(); }},
      {{"-G", "10"}, [](auto& o) { return o.notes.size() == 1 && o.notes[0].find("-G 10") == 0; }},
      {{"-y", "1", "-C", "1", "-M", "1"}, [](auto& o) { return o.notes.size() == 3; }},
  };
  for (const Case& c : cases) {
    PerfOptions o;
    std::string err, args;
    for (const std::string& a : c.args) args += a + " ";
    ASSERT_TRUE(parse(c.args, &o, &err)) << args << ": " << err;
    EXPECT_TRUE(c.check(o)) << args;
  }
}

TEST(PerfOptions, HelpAndVersion) {
  PerfOptions o;
  std::string err;
  EXPECT_EQ(parse_perf_options({"-n", "3", "--help"}, &o, &err), Parsed::help);
  EXPECT_EQ(parse_perf_options({"-h"}, &o, &err), Parsed::help);
  EXPECT_EQ(parse_perf_options({"--version"}, &o, &err), Parsed::version);
  EXPECT_EQ(perf_version().find(std::string("braid-perf ") + BRAID_VERSION + " (features: "), 0u) << perf_version();
  // --help names every flag it accepts.
  const std::string usage = perf_usage();
  for (const char* flag : {"-b,", "-e,", "-i,", "-f,", "-n,", "-w,", "-m,", "-c,", "-z,", "-a,", "-d,", "-o,", "-r,",
                           "-N,", "-T,", "-t,", "-g,", "-p,", "-R,", "-G,", "-y,", "-C,", "-M", "--op NAME", "--algo",
                           "--json", "--label", "--result-rows", "--help", "--version", "--redop"}) {
    EXPECT_NE(usage.find(flag), std::string::npos) << flag;
  }
}

TEST(PerfOptions, SizesUsePowersOfTwo) {
  size_t v = 0;
  EXPECT_TRUE(parse_size("1G", &v));
  EXPECT_EQ(v, size_t{1} << 30);
  EXPECT_TRUE(parse_size("123", &v));
  EXPECT_EQ(v, 123u);
  EXPECT_FALSE(parse_size("12Q", &v));
  EXPECT_FALSE(parse_size("-4K", &v));
}

TEST(PerfOptions, BadInputIsAClearError) {
  struct Case { std::vector<std::string> args; const char* expect; };
  for (const Case& c : {Case{{"--op", "allreduce"}, "bad value 'allreduce' for --op"},
                        Case{{"-b", "1M", "-e", "4K"}, "-b is larger than -e"},
                        Case{{"-d", "f32", "--redop", "bxor"}, "needs an integer type"},
                        Case{{"-n"}, "needs a value"}, Case{{"--frobnicate", "1"}, "unknown option --frobnicate"},
                        Case{{"-z", "2"}, "bad value '2' for -z"}, Case{{"-a", "4"}, "bad value '4' for -a"},
                        Case{{"-d", "uint64"}, "bad value 'uint64' for -d"},
                        Case{{"-d", "f32,"}, "bad value 'f32,' for -d"}, Case{{"-d", "f32,u64"}, "bad value 'f32,u64' for -d"}, Case{{"-F", "x.csv"}, "--json PATH"},
                        Case{{"-g", "many"}, "bad value 'many' for -g"}, Case{{"-i", "0"}, "bad value '0' for -i"}}) {
    PerfOptions o;
    std::string err;
    EXPECT_FALSE(parse(c.args, &o, &err));
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
  }
}

TEST(PerfSweep, SizesFollowStepFactorOrStepBytesAndGoOnFromZero) {
  PerfOptions o;
  o.step_factor = 4;
  EXPECT_EQ(next_size(o, 0, 8), 8u);  // -b 0: on to the smallest size that carries data
  EXPECT_EQ(next_size(o, 8, 8), 32u);
  o.step_factor = 1;
  o.step_bytes = 1000;
  EXPECT_EQ(next_size(o, 0, 8), 1000u);
  EXPECT_EQ(next_size(o, 1000, 8), 2000u);
  o.step_factor = 2;  // never wraps around
  EXPECT_GT(next_size(o, size_t{1} << 63, 8), size_t{1} << 63);
}

TEST(PerfReport, ColumnsOutOfPlaceAndInPlaceWithNotApplicable) {
  PerfOptions o;
  o.check_iters = 0;
  Row row;
  row.bytes = 4096;
  row.count = 1024;
  row.algo = "ring";
  row.out_of_place = {true, 12.5, 0.3, 0.3, -1};
  row.in_place = {};  // no in-place form
  const std::string line = format_row(o, row);
  std::vector<std::string> fields;
  for (size_t at = 0; at < line.size();) {
    size_t b = line.find_first_not_of(" \n", at);
    if (b == std::string::npos) break;
    size_t e = line.find_first_of(" \n", b);
    fields.push_back(line.substr(b, e - b));
    at = e;
  }
  ASSERT_EQ(fields.size(), 14u) << line;
  EXPECT_EQ(fields[0], "4096");
  EXPECT_EQ(fields[5], "ring");
  EXPECT_EQ(fields[6], "12.50");
  EXPECT_EQ(fields[9], "N/A");  // -c 0: not "0"
  for (size_t i = 10; i < 14; ++i) EXPECT_EQ(fields[i], "N/A") << line;
  RunInfo info;
  info.version = "braid-perf x";
  info.ranks = 2;
  info.hosts = {"a", "b"};
  const std::string header = format_header(o, info);
  EXPECT_NE(header.find("out-of-place"), std::string::npos);
  EXPECT_NE(header.find("in-place"), std::string::npos);
  const std::string footer = format_footer(o, {{0, row}});
  EXPECT_NE(footer.find("# Out of bounds values : N/A"), std::string::npos) << footer;
  EXPECT_EQ(footer.find("OK"), std::string::npos) << footer;
  EXPECT_NE(footer.find("# Avg bus bandwidth    : 0.3000 GB/s"), std::string::npos) << footer;
  o.check_iters = 1;
  row.out_of_place.wrong = 0;
  EXPECT_NE(format_footer(o, {{0, row}}).find("# Out of bounds values : 0 OK"), std::string::npos);
  row.out_of_place.wrong = 3;
  EXPECT_NE(format_footer(o, {{0, row}}).find("# Out of bounds values : 3 FAILED"), std::string::npos);
}

TEST(PerfData, ExpectedResultsAreExactIntegers) {
  // 3 ranks: inputs at element 0 are 0, 3 % 4 = 3, 6 % 4 = 2 -> sum 5.
  EXPECT_EQ(expected_reduction(3, 0, DType::f32, Op::sum), input_value(0, 0, Op::sum) + input_value(1, 0, Op::sum) +
                                                               input_value(2, 0, Op::sum));
  // prod of 1s and 2s over 8 ranks fits bf16 exactly; u8 wraps as the kernels do.
  double p = 1;
  for (int r = 0; r < 8; ++r) p *= input_value(r, 1, Op::prod);
  EXPECT_EQ(expected_reduction(8, 1, DType::bf16, Op::prod), p);
  EXPECT_EQ(expected_reduction(8, 1, DType::u8, Op::prod), static_cast<double>(static_cast<uint8_t>(p)));
  // Values survive a round trip through every dtype.
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i32, DType::i64}) {
    char buf[8];
    store_value(buf, 0, t, 27);
    EXPECT_EQ(load_value(buf, 0, t), 27) << to_string(t);
  }
  EXPECT_TRUE(close_enough(1.0 / 3, 0.33333334, DType::f32, Op::avg));
  EXPECT_FALSE(close_enough(1.0 / 3, 0.3334, DType::f32, Op::avg));
  EXPECT_FALSE(close_enough(5, 6, DType::f32, Op::sum));
}

// The collective computed with plain loops over every rank's input template: what a correct
// run leaves in `rank`'s receive buffer.
std::vector<char> simulate(const std::string& op, int n, int rank, int root, size_t count, DType dt, Op redop) {
  const size_t es = dtype_size(dt), nn = static_cast<size_t>(n), r = static_cast<size_t>(rank);
  std::vector<Expected> in;
  for (int q = 0; q < n; ++q) in.push_back(expected_for(op, n, q, root, count, dt, redop));
  auto value = [&](int q, size_t i) { return load_value(in[static_cast<size_t>(q)].input.data(), i, dt); };
  std::vector<char> out;
  auto put = [&](size_t i, double v) {
    out.resize(std::max(out.size(), (i + 1) * es));
    store_value(out.data(), i, dt, v);
  };
  auto reduce = [&](size_t i) {  // over ranks in order, in double: inputs are small integers
    double acc = value(0, i);
    for (int q = 1; q < n; ++q) {
      const double v = value(q, i);
      switch (redop) {
        case Op::sum: case Op::avg: acc += v; break;
        case Op::prod: acc *= v; break;
        case Op::min: acc = std::min(acc, v); break;
        case Op::max: acc = std::max(acc, v); break;
        default: ADD_FAILURE() << "not simulated";
      }
    }
    return redop == Op::avg ? acc / n : acc;
  };
  if (op == "all_reduce") for (size_t i = 0; i < count; ++i) put(i, reduce(i));
  if (op == "reduce_scatter") for (size_t i = 0; i < count; ++i) put(i, reduce(r * count + i));
  if (op == "broadcast") for (size_t i = 0; i < count; ++i) put(i, value(root, i));
  if (op == "all_gather") for (size_t q = 0; q < nn; ++q) for (size_t i = 0; i < count; ++i) put(q * count + i, value(static_cast<int>(q), i));
  if (op == "scatter") for (size_t i = 0; i < count; ++i) put(i, value(root, r * count + i));
  if (op == "all_to_all") for (size_t q = 0; q < nn; ++q) for (size_t i = 0; i < count; ++i) put(q * count + i, value(static_cast<int>(q), r * count + i));
  if (op == "sendrecv") for (size_t i = 0; i < count; ++i) put(i, value((rank + n - 1) % n, i));
  return out;
}

TEST(PerfCheck, InputsAndExpectedResultsAgreeForEveryOperation) {
  for (const char* op : {"all_reduce", "reduce_scatter", "broadcast", "all_gather", "scatter", "all_to_all", "sendrecv"}) {
    for (DType dt : {DType::f32, DType::bf16, DType::i32}) {
      for (Op redop : {Op::sum, Op::max, Op::prod}) {
        for (int rank = 0; rank < 3; ++rank) {
          SCOPED_TRACE(std::string(op) + " " + to_string(dt) + " " + to_string(redop) + " rank " + std::to_string(rank));
          const Expected e = expected_for(op, 3, rank, 1, 1000, dt, redop);
          const std::vector<char> got = simulate(op, 3, rank, 1, 1000, dt, redop);
          ASSERT_EQ(got.size(), e.result.size());
          EXPECT_EQ(count_wrong(got.data(), e, dt, redop), 0);
        }
      }
    }
  }
}

TEST(PerfCheck, CountsEveryWrongElementAndToleratesRoundingOnlyForAvg) {
  const Expected e = expected_for("all_reduce", 4, 0, 0, 10000, DType::f32, Op::sum);
  std::vector<char> got = e.result;
  EXPECT_EQ(count_wrong(got.data(), e, DType::f32, Op::sum), 0);
  for (size_t i : {size_t{0}, size_t{4095}, size_t{4096}, size_t{9999}}) store_value(got.data(), i, DType::f32, 1e6);
  EXPECT_EQ(count_wrong(got.data(), e, DType::f32, Op::sum), 4);

  // avg: a result one ulp away from the expected value is right; a value 1% away is not.
  const Expected a = expected_for("all_reduce", 3, 0, 0, 100, DType::f32, Op::avg);
  std::vector<char> near = a.result;
  float f;
  std::memcpy(&f, near.data() + 4 * 7, 4);
  f = std::nextafter(f, 1e9f);
  std::memcpy(near.data() + 4 * 7, &f, 4);
  EXPECT_EQ(count_wrong(near.data(), a, DType::f32, Op::avg), 0);
  store_value(near.data(), 9, DType::f32, load_value(a.result.data(), 9, DType::f32) * 1.01 + 0.01);
  EXPECT_EQ(count_wrong(near.data(), a, DType::f32, Op::avg), 1);

  // Moved data is compared exactly, whatever --redop says.
  const Expected m = expected_for("all_gather", 2, 1, 0, 50, DType::f32, Op::avg);
  std::vector<char> moved = m.result;
  std::memcpy(&f, moved.data() + 4 * 60, 4);
  f = std::nextafter(f, 1e9f);
  std::memcpy(moved.data() + 4 * 60, &f, 4);
  EXPECT_EQ(count_wrong(moved.data(), m, DType::f32, Op::avg), 1);

  // Ranks without a result to check.
  EXPECT_TRUE(expected_for("reduce", 3, 1, 0, 100, DType::f32, Op::sum).result.empty());
  EXPECT_EQ(expected_for("reduce", 3, 0, 0, 100, DType::f32, Op::sum).result.size(), 400u);
}

TEST(PerfData, HashSeesEveryByte) {
  std::vector<unsigned char> a(1001);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<unsigned char>(i * 7);
  const int64_t h = hash_bytes(a.data(), a.size());
  for (size_t i : {size_t{0}, size_t{7}, size_t{8}, size_t{999}, size_t{1000}}) {
    auto b = a;
    b[i] ^= 1;
    EXPECT_NE(hash_bytes(b.data(), b.size()), h) << "byte " << i;
  }
}

// --calls: how -z 1 issues each operation; async (the public Work path) unless told.
TEST(PerfOptions, CallsChoosesTheBlockingOrTheAsyncPath) {
  PerfOptions o;
  std::string err;
  ASSERT_TRUE(parse({}, &o, &err)) << err;
  EXPECT_FALSE(o.blocking_calls);
  ASSERT_TRUE(parse({"--calls", "blocking"}, &o, &err)) << err;
  EXPECT_TRUE(o.blocking_calls);
  PerfOptions a;
  ASSERT_TRUE(parse({"--calls=async"}, &a, &err)) << err;
  EXPECT_FALSE(a.blocking_calls);
  EXPECT_FALSE(parse({"--calls", "sync"}, &a, &err));
  EXPECT_NE(err.find("--calls"), std::string::npos) << err;
  EXPECT_NE(format_header(o, RunInfo{}).find("blocking calls (--calls blocking)"), std::string::npos);
  EXPECT_NE(format_header(a, RunInfo{}).find("*_async calls and Work::wait() (--calls async)"), std::string::npos);
  EXPECT_NE(format_json(o, RunInfo{}, {}).find("\"calls\": \"blocking\""), std::string::npos);
}

// --barrier: with -z 1, a barrier before each timed operation unless told 0 (a latency loop).
TEST(PerfOptions, BarrierZeroTimesALoopWithoutBarriers) {
  PerfOptions o;
  std::string err;
  ASSERT_TRUE(parse({}, &o, &err)) << err;
  EXPECT_TRUE(o.barrier_each);
  EXPECT_NE(format_header(o, RunInfo{}).find("each timed alone after a barrier (-z 1)"), std::string::npos);
  ASSERT_TRUE(parse({"--barrier", "0"}, &o, &err)) << err;
  EXPECT_FALSE(o.barrier_each);
  EXPECT_NE(format_header(o, RunInfo{}).find("without a barrier (-z 1 --barrier 0)"), std::string::npos);
  EXPECT_NE(format_json(o, RunInfo{}, {}).find("\"barrier\": 0"), std::string::npos);
  PerfOptions b;
  EXPECT_FALSE(parse({"--barrier", "2"}, &b, &err));
  EXPECT_NE(err.find("--barrier"), std::string::npos) << err;
}

// Communicator::peer_transports() lists grouped for the header and the JSON summary.
TEST(PerfReport, TransportsAreGroupedPerRank) {
  EXPECT_EQ(group_transports({"self", "tcp (io_uring)", "tcp (io_uring)", "tcp (io_uring)"}), "tcp (io_uring) x3");
  EXPECT_EQ(group_transports({"shm", "self", "tcp (io_uring)", "shm"}), "shm x2, tcp (io_uring) x1");
  EXPECT_EQ(group_transports({"self"}), "none");

  PerfOptions opt;
  RunInfo info;
  info.ranks = 2;
  info.transports = {{"self", "tcp (epoll)"}, {"tcp (epoll)", "self"}};
  std::string h = format_header(opt, info);
  EXPECT_NE(h.find("# transports: tcp (epoll) x1 (every rank, to its peers)\n"), std::string::npos) << h;
  const std::string j = format_json(opt, info, {});
  EXPECT_NE(j.find("\"per_peer\": [[\"self\", \"tcp (epoll)\"], [\"tcp (epoll)\", \"self\"]]"), std::string::npos) << j;
  EXPECT_NE(j.find("\"summary\": [\"tcp (epoll) x1\", \"tcp (epoll) x1\"]"), std::string::npos) << j;

  // Ranks that see their peers differently get a line each.
  info.transports = {{"self", "shm"}, {"tcp (io_uring)", "self"}};
  h = format_header(opt, info);
  EXPECT_NE(h.find("# transports: rank 0 to its peers: shm x1\n# transports: rank 1 to its peers: tcp (io_uring) x1\n"),
            std::string::npos) << h;
}

}  // namespace
}  // namespace braid::perf
