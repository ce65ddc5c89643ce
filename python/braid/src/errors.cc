#include "errors.h"

namespace braid::python {

py::object make_error(ErrorCode code, const std::string& message) {
  // Looked up each time: cheap (sys.modules), and the Python classes stay the one definition.
  py::object cls = py::module_::import("braid.errors").attr("class_for")(to_string(code));
  return cls(message);
}

void register_error_translator() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object exc = make_error(e.code(), e.what());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
}

}  // namespace braid::python
