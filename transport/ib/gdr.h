// transport/ib/gdr.h - whether CUDA buffers go to the NIC directly (GPUDirect RDMA via dma-buf).
//
// The choice is pure (decide_gdr), so its whole table is tested without a GPU; the probe that
// feeds it (probe_gdr) tries the real thing once: export a small CUDA allocation as a dma-buf
// (cuMemGetHandleForAddressRange) and register it with the NIC (ibv_reg_dmabuf_mr). Without
// GPUDirect, CUDA buffers are staged through pinned host memory.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

struct ibv_pd;

namespace braid::transport::ib {

enum class GdrSetting { automatic, off, on };  // BRAID_GDR=auto|0|1

// BRAID_GDR's value ("auto", "0", "1"; Env has checked it) as a setting.
Result<GdrSetting> parse_gdr_setting(std::string_view text);

struct GdrProbe {
  bool cuda_built = false;          // braid was built with CUDA
  bool device_memory_seen = false;  // a CUDA device exists and an allocation on it succeeded
  bool dmabuf_supported = false;    // the allocation was exported and the NIC registered it
  std::string why_not;              // when not supported: which step failed, and its error
};

struct GdrDecision {
  bool use_dmabuf = false;
  bool error = false;  // BRAID_GDR=1 where it cannot work: the transport refuses to start
  std::string line;    // the BRAID_DEBUG=INFO line, or the error's message
};

// auto: use it when the probe succeeded; 0: never; 1: use it, and an error when the probe failed.
GdrDecision decide_gdr(GdrSetting setting, const GdrProbe& probe);

// A dma-buf file descriptor for the CUDA memory [base, base+bytes) (page-aligned, within one
// allocation), from the CUDA driver's cuMemGetHandleForAddressRange; the caller closes it. An
// error in a build without CUDA, or where the driver cannot export dma-bufs. Defined in
// gdr_probe.cc.
Result<int> export_dmabuf(void* base, size_t bytes);

// Tries a dma-buf registration on `pd` (defined in gdr_probe.cc, which needs verbs). In a build
// without CUDA, or on a machine without a CUDA device, why_not says so and nothing is tried.
// With a device, the probe allocates on the calling thread's current CUDA device, which creates
// that device's context if the program has none yet: call it only when the answer matters
// (BRAID_GDR is not 0, and CUDA buffers are possible), on the thread whose device the job uses.
GdrProbe probe_gdr(ibv_pd* pd);

}  // namespace braid::transport::ib
