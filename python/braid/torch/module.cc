// braid.torch._c10d: builds the braid ProcessGroup for torch.distributed's backend creator
// (python/braid/torch/__init__.py registers it).
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "c10d_store.h"
#include "process_group.h"

namespace braid::torch_backend {

namespace {

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              int64_t timeout_ms, const std::string& group_name) {
  auto adapter = std::make_shared<C10dStore>(store, group_name);
  std::optional<braid::Communicator> comm;
  try {
    // torch's timeout bounds the rendezvous, as it bounds gloo's (BRAID_RENDEZVOUS_TIMEOUT_S,
    // when set, still wins).
    comm.emplace(braid::Communicator::from_store(
        adapter, rank, size,
        {.rendezvous_timeout = std::chrono::milliseconds(timeout_ms),
         .timeout_origin = "torch's timeout= (BRAID_RENDEZVOUS_TIMEOUT_S overrides it)"}));
  } catch (const braid::Error& e) {
    // A rendezvous refused for a reason posted to every rank (ranks disagree on the world size,
    // two claim one rank), or timed out at about the same moment on every rank, is described to
    // the others from torch's store, which rank 0's process serves for tcp:// and env://: stay a
    // moment so they read the reason and who is missing, not a reset socket.
    if (rank == 0 && (e.code() == braid::ErrorCode::invalid_argument || e.code() == braid::ErrorCode::timeout)) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    throw;
  }
  return c10::make_intrusive<BraidProcessGroup>(std::move(*comm), std::chrono::milliseconds(timeout_ms));
}

}  // namespace

}  // namespace braid::torch_backend

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "braid's torch.distributed ProcessGroup (use `import braid.torch`)";
  // The rendezvous waits for the other ranks: let other Python threads run meanwhile.
  m.def("create", &braid::torch_backend::create, pybind11::arg("store"), pybind11::arg("rank"),
        pybind11::arg("size"), pybind11::arg("timeout_ms"), pybind11::arg("group_name"),
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "A braid ProcessGroup over a c10d Store (torch.distributed's creator arguments).");
}
