#include "transport/ib/reg_cache_verbs.h"

#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>

#include "transport/ib/gdr.h"

namespace braid::transport::ib {

RegCache::Registrar verbs_registrar(ibv_pd* pd, std::string device, bool dmabuf) {
  // Peers write into registered buffers (RDMA WRITE) and read from them (the GPUDirect flush).
  constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  RegCache::Registrar r;
  r.reg = [pd, device, dmabuf](void* base, size_t bytes, MemoryKind kind) -> Result<Mr> {
    ibv_mr* mr = nullptr;
    if (kind == MemoryKind::cuda) {
      if (!dmabuf) {
        return internal_error("ib: CUDA memory was given to " + device +
                              " for registration while GPUDirect RDMA is off: it must be staged through host memory");
      }
      ASSIGN_OR_RETURN(int fd, export_dmabuf(base, bytes));
      mr = ibv_reg_dmabuf_mr(pd, 0, bytes, reinterpret_cast<uint64_t>(base), fd, kAccess);
      const int err = errno;
      close(fd);  // the registration holds its own reference to the dma-buf
      if (mr == nullptr) return registration_error(err, bytes, device);
    } else {
      mr = ibv_reg_mr(pd, base, bytes, kAccess);
      if (mr == nullptr) return registration_error(errno, bytes, device);
    }
    return Mr{base, bytes, mr->lkey, mr->rkey, mr, kind};
  };
  r.dereg = [](const Mr& m) { ibv_dereg_mr(static_cast<ibv_mr*>(m.handle)); };
  return r;
}

}  // namespace braid::transport::ib
