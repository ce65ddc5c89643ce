#include "tools/braid_perf/perf_options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tools/braid_perf/perf_check.h"
#include "tools/braid_perf/perf_data.h"

namespace braid::perf {
namespace {

bool parse(std::vector<std::string> args, PerfOptions* o, std::string* err) {
  bool help = false;
  return parse_perf_options(args, o, err, &help);
}

TEST(PerfOptions, NcclTestsFlags) {
  PerfOptions o;
  std::string err;
  ASSERT_TRUE(parse({"--op", "all_gather", "-b", "4K", "-e", "256M", "-f", "2", "-n", "20", "-w", "5", "-d", "bf16",
                     "-c", "1", "--redop=max", "--root", "3", "--algo", "ring", "--json", "out.json"},
                    &o, &err))
      << err;
  EXPECT_EQ(o.op, "all_gather");
  EXPECT_EQ(o.min_bytes, 4096u);
  EXPECT_EQ(o.max_bytes, 256u << 20);
  EXPECT_EQ(o.step_factor, 2u);
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmup, 5);
  EXPECT_EQ(o.dtype, DType::bf16);
  EXPECT_TRUE(o.check);
  EXPECT_EQ(o.redop, Op::max);
  EXPECT_EQ(o.root, 3);
  EXPECT_EQ(o.algo, "ring");
  EXPECT_EQ(o.json_path, "out.json");
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
                        Case{{"-c", "2"}, "bad value '2' for -c"}}) {
    PerfOptions o;
    std::string err;
    EXPECT_FALSE(parse(c.args, &o, &err));
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
  }
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

}  // namespace
}  // namespace braid::perf
