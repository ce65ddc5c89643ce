// python/braid/src/errors.h - braid::Error as Python exceptions of the braid.Error hierarchy
// (python/braid/errors.py), one class per ErrorCode, with the same message.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "braid/error.h"

namespace braid::python {

namespace py = pybind11;

// Makes every braid::Error escaping a binding arrive as the braid.errors class of its code.
void register_error_translator();

// The exception object (not raised) for a failure, as Work.exception() returns it.
py::object make_error(ErrorCode code, const std::string& message);

}  // namespace braid::python
