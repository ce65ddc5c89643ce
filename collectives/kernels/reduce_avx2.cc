// The loops of reduce_impl.h compiled for AVX2 (meson adds -mavx2 to this file's library); reduce.cc calls it only when the CPU has AVX2.
#define BRAID_KERNEL_NS avx2
#include "collectives/kernels/reduce_impl.h"
