#include "errors.h"

namespace braid::python {
namespace {

// The enumerator's own spelling (to_string(ErrorCode) gives prose: "peer lost"), which is what
// braid.errors keys its classes by and what `code` shows.
const char* code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::peer_lost: return "peer_lost";
    case ErrorCode::mismatch: return "mismatch";
    case ErrorCode::aborted: return "aborted";
    case ErrorCode::system: return "system";
    case ErrorCode::protocol: return "protocol";
    case ErrorCode::internal: return "internal";
    case ErrorCode::unauthenticated: return "unauthenticated";
  }
  return "internal";
}

}  // namespace

py::object make_error(ErrorCode code, const std::string& message) {
  // Looked up each time: cheap (sys.modules), and the Python classes stay the one definition.
  py::object cls = py::module_::import("braid.errors").attr("class_for")(code_name(code));
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
