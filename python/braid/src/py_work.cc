#include "py_work.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "errors.h"

namespace braid::python {
namespace {

// How long one wait without the GIL lasts before Python may run its signal handlers, so that
// Ctrl-C interrupts Work.wait().
constexpr std::chrono::milliseconds kSignalCheck{100};

}  // namespace

bool PyWork::wait(std::optional<double> timeout) {
  if (timeout && (!std::isfinite(*timeout) || *timeout < 0)) {
    throw py::value_error("Work.wait: timeout must be a finite number of seconds >= 0 or None");
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      timeout ? Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(std::ceil(*timeout * 1000.0)))
              : Clock::time_point::max();
  for (;;) {
    bool done;
    {
      py::gil_scoped_release nogil;
      CommHolder::Use use(*holder_);
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      done = work_.wait_for(std::clamp(left, std::chrono::milliseconds(0), kSignalCheck));
    }
    if (done) break;
    if (Clock::now() >= deadline) return false;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // KeyboardInterrupt; the operation goes on
  }
  held_.clear();
  return true;
}

py::object PyWork::exception() const {
  if (!work_.test() || work_.error_code() == ErrorCode::ok) return py::none();
  return make_error(work_.error_code(), work_.error_message());
}

void bind_work(py::module_& m) {
  py::class_<PyWork, std::shared_ptr<PyWork>>(m, "Work",
      "An operation running in the background, returned by the *_async calls. Its buffers "
      "must not be touched until it is complete.")
      .def("wait", &PyWork::wait, py::arg("timeout") = py::none(),
           "Block (without the GIL) until complete; True, or False if `timeout` seconds passed "
           "first. Raises the operation's braid.Error if it failed. Ctrl-C interrupts it (the "
           "operation goes on).")
      .def("is_completed", &PyWork::is_completed, "True once finished, successfully or not; never blocks.")
      .def("exception", &PyWork::exception, "The braid.Error of a failed operation, else None.");
}

}  // namespace braid::python
