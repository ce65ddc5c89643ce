#include "tools/braid_perf/perf_options.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace braid::perf
