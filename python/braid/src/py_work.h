// python/braid/src/py_work.h - braid.Work: an asynchronous operation as Python sees it.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // std::optional and std::vector arguments; in every unit alike (ODR)

#include <memory>
#include <optional>
#include <vector>

#include "braid/work.h"
#include "buffer.h"
#include "comm_holder.h"

namespace braid::python {

namespace py = pybind11;

using HeldBuffers = std::vector<std::shared_ptr<Buffer>>;

class PyWork {
 public:
  // `held`: the buffers the operation reads and writes, kept (with their Python objects) until
  // it is complete. Its communicator keeps them too, so dropping the Work early is safe.
  PyWork(Work work, HeldBuffers held, std::shared_ptr<CommHolder> holder)
      : work_(std::move(work)), held_(std::move(held)), holder_(std::move(holder)) {}

  // Waits without the GIL. timeout in seconds (None: as long as the operation's own timeout
  // allows). True once complete; False when `timeout` passed first (the operation goes on).
  // A failed operation raises its braid.Error here.
  bool wait(std::optional<double> timeout);
  bool is_completed() const { return work_.test(); }
  // None while running or after success; the braid.Error instance after a failure.
  py::object exception() const;

 private:
  Work work_;
  HeldBuffers held_;
  std::shared_ptr<CommHolder> holder_;  // keeps close() from destroying it while we wait
};

void bind_work(py::module_& m);

}  // namespace braid::python
