// The loops of reduce_impl.h compiled for AVX-512 (F, BW, VL, DQ; meson adds the flags to this
// file's library); reduce.cc calls it only when the CPU has them.
#define BRAID_KERNEL_NS avx512
#include "collectives/kernels/reduce_impl.h"
