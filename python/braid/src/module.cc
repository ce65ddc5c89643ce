// braid._core: the extension behind `import braid` (python/braid/__init__.py re-exports it).
// It uses braid's public API (include/braid/) only.
#include <pybind11/pybind11.h>

#include <string>

#include "braid/braid.h"
#include "errors.h"
#include "py_communicator.h"
#include "py_work.h"

namespace py = pybind11;
using braid::python::PyCommunicator;

namespace {

// Rendezvous waits for the other ranks: without the GIL, so the program's threads go on.
std::shared_ptr<PyCommunicator> init_from_env() {
  braid::Communicator comm = [] {
    py::gil_scoped_release nogil;
    return braid::Communicator::from_env();
  }();
  return std::make_shared<PyCommunicator>(std::move(comm));
}

std::shared_ptr<PyCommunicator> init_from_url(const std::string& url, int rank, int size) {
  braid::Communicator comm = [&] {
    py::gil_scoped_release nogil;
    return braid::Communicator::from_url(url, rank, size);
  }();
  return std::make_shared<PyCommunicator>(std::move(comm));
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "braid's C++ library, bound for Python (use the `braid` package, not this module).";
  braid::python::register_error_translator();

  py::enum_<braid::Op>(m, "Op", "Reduction operations (methods also take their names as strings).")
      .value("sum", braid::Op::sum)
      .value("prod", braid::Op::prod)
      .value("min", braid::Op::min)
      .value("max", braid::Op::max)
      .value("avg", braid::Op::avg)
      .value("band", braid::Op::band)
      .value("bor", braid::Op::bor)
      .value("bxor", braid::Op::bxor);

  braid::python::bind_work(m);
  braid::python::bind_communicator(m);

  m.def("from_env", &init_from_env);
  m.def("from_url", &init_from_url, py::arg("url"), py::arg("rank") = -1, py::arg("size") = -1);
  m.def("version", [] { return std::string(braid::version()); });
  m.def("features", &braid::features);
}
