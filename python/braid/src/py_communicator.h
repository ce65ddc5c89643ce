// python/braid/src/py_communicator.h - braid.Communicator: a braid::Communicator plus the
// Python objects its pending operations use.
//
// Every *_async call registers its buffers here as well as in its Work, so that an operation
// whose Work was dropped still has live memory; completed entries are pruned on each call and
// all of them at close().
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/communicator.h"
#include "comm_holder.h"
#include "py_work.h"

namespace braid::python {

namespace py = pybind11;

class PyCommunicator {
 public:
  explicit PyCommunicator(Communicator comm);
  PyCommunicator(const PyCommunicator&) = delete;
  PyCommunicator& operator=(const PyCommunicator&) = delete;
  ~PyCommunicator();

  // The communicator for a call; ValueError once closed. `op` names the call.
  Communicator& get(const char* op);
  // Registers a started operation and wraps it for Python.
  std::shared_ptr<PyWork> track(Work work, HeldBuffers held);
  CommHolder& holder() { return *holder_; }

  // Waits (bounded, without the GIL) for pending operations and releases everything.
  void close();
  bool closed() const { return holder_->get() == nullptr; }
  void abort(const std::string& reason);
  // split() and new_group(): wait for the other ranks without the GIL.
  py::object split(int color, std::optional<int> key);
  py::object new_group(const std::vector<int>& ranks);
  // shrink(): the new communicator of the ranks that go on (None for an excluded rank), waiting
  // for the other survivors without the GIL.
  py::object shrink(const std::vector<int>& exclude);

 private:
  struct Pending {
    Work work;
    HeldBuffers held;
  };
  void prune();

  std::shared_ptr<CommHolder> holder_;
  std::vector<Pending> pending_;
};

void bind_communicator(py::module_& m);
// The collectives, in-place and out-of-place, blocking and *_async (bind_collectives.cc).
void bind_collectives(py::class_<PyCommunicator, std::shared_ptr<PyCommunicator>>& cls);

}  // namespace braid::python
