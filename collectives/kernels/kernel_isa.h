// collectives/kernels/kernel_isa.h - which compiled variant of the reduction loops runs.
//
// reduce.cc picks the best variant the CPU supports on first use. Tests and benchmarks force
// a variant to check each one against the reference; nothing else should.
#pragma once

namespace braid::collectives {

enum class KernelIsa { generic, avx2, avx512 };

const char* to_string(KernelIsa isa) noexcept;
KernelIsa active_kernel_isa() noexcept;
// Selects `isa` for every later call; false (and no change) when this build or CPU lacks it.
// Not thread-safe against running kernels: call it before starting any.
bool set_kernel_isa(KernelIsa isa) noexcept;

}  // namespace braid::collectives
