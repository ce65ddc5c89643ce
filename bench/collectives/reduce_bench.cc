// In-place sum (a += b) of f32 and bf16 next to memcpy of the same bytes, in one run, so the
// ratio reduce/memcpy is measured on the same machine state. Bytes/s counts the output bytes.
// Sizes: 256 KiB (cache-resident) and 64 MiB (memory-bound). The second argument of the
// reduce benchmarks is the ISA variant (0 generic, 1 avx2, 2 avx512; skipped when unavailable).
//
//   build-kern/bench/collectives/reduce_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "bench/collectives/sum_inputs.h"
#include "collectives/kernels/kernel_isa.h"
#include "collectives/kernels/reduce.h"

namespace braid::collectives {
namespace {

constexpr int64_t kSmall = 256 << 10;
constexpr int64_t kLarge = 64 << 20;

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

template <DType kType>
void BM_SumInPlace(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const auto isa = static_cast<KernelIsa>(state.range(1));
  if (!set_kernel_isa(isa)) {
    state.SkipWithError("this build or CPU lacks the ISA variant");
    return;
  }
  const size_t count = bytes / dtype_size(kType);
  std::vector<uint8_t> a, b;
  bench::fill_sum_inputs(kType, bytes, &a, &b);
  for (auto _ : state) {
    reduce_into(a.data(), b.data(), count, kType, Op::sum);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.SetLabel(to_string(isa));
}

BENCHMARK(BM_Memcpy)->Arg(kSmall)->Arg(kLarge);
BENCHMARK(BM_SumInPlace<DType::f32>)->ArgsProduct({{kSmall, kLarge}, {0, 1, 2}});
BENCHMARK(BM_SumInPlace<DType::bf16>)->ArgsProduct({{kSmall, kLarge}, {0, 1, 2}});

}  // namespace
}  // namespace braid::collectives

BENCHMARK_MAIN();
