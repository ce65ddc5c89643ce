#include "transport/ib/gdr.h"

namespace braid::transport::ib {

Result<GdrSetting> parse_gdr_setting(std::string_view text) {
  if (text == "auto") return GdrSetting::automatic;
  if (text == "0") return GdrSetting::off;
  if (text == "1") return GdrSetting::on;
  return invalid_argument("BRAID_GDR='" + std::string(text) + "' is not one of: 0, 1, auto");
}

GdrDecision decide_gdr(GdrSetting setting, const GdrProbe& probe) {
  constexpr const char* kStaged = "CUDA buffers are staged through pinned host memory";
  const bool works = probe.cuda_built && probe.device_memory_seen && probe.dmabuf_supported;
  const std::string why_not = probe.why_not.empty() ? "the probe found no support" : probe.why_not;
  switch (setting) {
    case GdrSetting::off:
      return {false, false, std::string("GPUDirect RDMA off (BRAID_GDR=0): ") + kStaged};
    case GdrSetting::on:
      if (works) return {true, false, "GPUDirect RDMA on (BRAID_GDR=1): CUDA buffers are registered through dma-buf"};
      return {false, true,
              "ib: BRAID_GDR=1 asks for GPUDirect RDMA, which is unavailable here: " + why_not +
                  ". Set BRAID_GDR=auto (or 0) to stage CUDA buffers through pinned host memory"};
    case GdrSetting::automatic:
      break;
  }
  if (works) return {true, false, "GPUDirect RDMA on: CUDA buffers are registered through dma-buf (BRAID_GDR=auto)"};
  return {false, false, "GPUDirect RDMA off: " + why_not + "; " + kStaged};
}

}  // namespace braid::transport::ib
