// The probe behind GPUDirect RDMA's choice: one small CUDA allocation, exported as a dma-buf and
// registered with the NIC, exactly as every later CUDA buffer would be.
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "braid_config.h"
#include "transport/ib/gdr.h"

#if BRAID_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#endif

namespace braid::transport::ib {

#if BRAID_HAVE_CUDA
namespace {

// The driver API's entry point, found at run time: braid links only the CUDA runtime, and the
// driver library (libcuda, installed with the GPU driver) is already loaded by it.
using GetHandleFn = CUresult (*)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);

struct DriverEntry {
  GetHandleFn fn = nullptr;
  std::string why_not;  // when fn is null
};

const DriverEntry& driver_entry() {
  static const DriverEntry entry = [] {
    DriverEntry e;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == nullptr) {
      const char* err = dlerror();
      e.why_not = std::string("the CUDA driver library cannot be loaded (") + (err ? err : "libcuda.so.1") + ")";
      return e;
    }
    e.fn = reinterpret_cast<GetHandleFn>(dlsym(lib, "cuMemGetHandleForAddressRange"));
    if (e.fn == nullptr) {
      e.why_not = "the CUDA driver has no cuMemGetHandleForAddressRange: dma-buf export needs CUDA 11.7 or later";
    }
    return e;
  }();
  return entry;
}

}  // namespace

Result<int> export_dmabuf(void* base, size_t bytes) {
  const DriverEntry& driver = driver_entry();
  if (driver.fn == nullptr) return Status(ErrorCode::system, driver.why_not);
  int fd = -1;
  CUresult rc = driver.fn(&fd, reinterpret_cast<CUdeviceptr>(base), bytes, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (rc != CUDA_SUCCESS) {
    return Status(ErrorCode::system, "cuMemGetHandleForAddressRange(dma-buf) refused " + std::to_string(bytes) +
                                         " bytes of CUDA memory: CUresult " + std::to_string(static_cast<int>(rc)) +
                                         " (the GPU driver cannot export dma-bufs; that needs NVIDIA's open kernel modules)");
  }
  return fd;
}

GdrProbe probe_gdr(ibv_pd* pd) {
  GdrProbe probe;
  probe.cuda_built = true;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    probe.why_not = "no CUDA device is visible to this process";
    return probe;
  }
  constexpr size_t kBytes = size_t{2} << 20;
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, kBytes) != cudaSuccess) {
    probe.why_not = "cudaMalloc of the probe's 2 MiB failed";
    return probe;
  }
  probe.device_memory_seen = true;
  Result<int> fd = export_dmabuf(ptr, kBytes);
  if (!fd.is_ok()) {
    probe.why_not = fd.status().message();
  } else {
    constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    ibv_mr* mr = pd == nullptr ? nullptr
                               : ibv_reg_dmabuf_mr(pd, 0, kBytes, reinterpret_cast<uint64_t>(ptr), fd.value(), kAccess);
    const int err = errno;
    close(fd.value());
    if (mr != nullptr) {
      probe.dmabuf_supported = true;
      ibv_dereg_mr(mr);
    } else {
      probe.why_not = pd == nullptr ? "no protection domain to probe with"
                                    : std::string("the NIC's driver refused a dma-buf registration (ibv_reg_dmabuf_mr: ") +
                                          std::strerror(err) + ")";
    }
  }
  cudaFree(ptr);
  return probe;
}

#else

Result<int> export_dmabuf(void*, size_t) {
  return internal_error("ib: CUDA memory reached the ib transport in a build without CUDA (BRAID_HAVE_CUDA=0)");
}

GdrProbe probe_gdr(ibv_pd*) {
  GdrProbe probe;
  probe.why_not = "braid was built without CUDA";
  return probe;
}

#endif

}  // namespace braid::transport::ib
