// The loops of reduce_impl.h compiled for the baseline ISA (every x86-64, every other CPU).
#define BRAID_KERNEL_NS generic
#include "collectives/kernels/reduce_impl.h"
