// transport/ib/reg_cache_verbs.h - the RegCache registrar that registers with a protection domain.
#pragma once

#include <string>

#include "transport/ib/reg_cache.h"

struct ibv_pd;

namespace braid::transport::ib {

// Registers with ibv_reg_mr (host memory), or through dma-buf when `dmabuf` (CUDA memory with
// GPUDirect; see gdr.h), for local write and remote read/write. A failure becomes
// registration_error naming `device`. `pd` must outlive the registrar and every region.
RegCache::Registrar verbs_registrar(ibv_pd* pd, std::string device, bool dmabuf);

}  // namespace braid::transport::ib
