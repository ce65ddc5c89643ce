#include "buffer.h"

#include <cstring>
#include <string>

namespace braid::python {
namespace {

std::string where(const char* op, const char* arg) { return std::string(op) + ": argument '" + arg + "'"; }

std::string type_name(py::handle obj) { return py::str(py::type::handle_of(obj).attr("__name__")); }

// A torch tensor, recognised without importing torch: torch is loaded iff a tensor can exist.
bool is_torch_tensor(py::handle obj) {
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("torch")) return false;
  return py::isinstance(obj, modules["torch"].attr("Tensor"));
}

bool dtype_from_torch(const std::string& name, DType* out) {
  struct Row { const char* torch; DType t; };
  static constexpr Row kRows[] = {
      {"torch.float32", DType::f32}, {"torch.float64", DType::f64}, {"torch.float16", DType::f16},
      {"torch.bfloat16", DType::bf16}, {"torch.int8", DType::i8}, {"torch.uint8", DType::u8},
      {"torch.int32", DType::i32}, {"torch.int64", DType::i64},
  };
  for (const Row& r : kRows) {
    if (name == r.torch) {
      *out = r.t;
      return true;
    }
  }
  return false;
}

// struct-module format characters (PEP 3118) of the element types braid has. Signed integers
// go by size, since 'l' is 8 bytes here and 4 on other platforms.
bool dtype_from_format(const char* format, size_t itemsize, DType* out) {
  if (format == nullptr) format = "B";
  if (*format == '@' || *format == '=' || *format == '<') ++format;  // native: little-endian here
  if (std::strlen(format) != 1) return false;
  switch (*format) {
    case 'f': *out = DType::f32; return itemsize == 4;
    case 'd': *out = DType::f64; return itemsize == 8;
    case 'e': *out = DType::f16; return itemsize == 2;
    case 'b': *out = DType::i8; return itemsize == 1;
    case 'B': case 'c': *out = DType::u8; return itemsize == 1;
    case 'i': case 'l': case 'q':
      if (itemsize == 4) *out = DType::i32;
      else if (itemsize == 8) *out = DType::i64;
      else return false;
      return true;
    default: return false;
  }
}

constexpr const char* kAccepted =
    "pass a C-contiguous numpy array, bytearray, memoryview, array.array or torch CPU tensor";
constexpr const char* kDTypes = "braid has float32, float64, float16, bfloat16 (torch), int8, uint8, int32, int64";

}  // namespace

std::shared_ptr<Buffer> Buffer::acquire(py::handle obj, const char* op, const char* arg, Access access) {
  if (obj.is_none()) throw py::type_error(where(op, arg) + " is None: " + kAccepted);
  if (is_torch_tensor(obj)) return from_tensor(obj, op, arg);
  return from_buffer_protocol(obj, op, arg, access);
}

std::shared_ptr<Buffer> Buffer::from_tensor(py::handle obj, const char* op, const char* arg) {
  std::string device = py::str(obj.attr("device").attr("type"));
  if (device != "cpu") {
    throw py::value_error(where(op, arg) + " is a " + device +
                          " tensor: `import braid` works on CPU memory; move it with .cpu() or use the "
                          "torch.distributed backend");
  }
  if (!obj.attr("is_contiguous")().cast<bool>()) {
    throw py::value_error(where(op, arg) + " is a non-contiguous tensor: pass tensor.contiguous()");
  }
  std::string dtype_name = py::str(obj.attr("dtype"));
  std::shared_ptr<Buffer> b(new Buffer());
  if (!dtype_from_torch(dtype_name, &b->dtype_)) {
    throw py::type_error(where(op, arg) + " has dtype " + dtype_name + ", which braid lacks: " + kDTypes);
  }
  b->owner_ = py::reinterpret_borrow<py::object>(obj);
  b->data_ = reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>());
  b->count_ = obj.attr("numel")().cast<size_t>();
  return b;
}

std::shared_ptr<Buffer> Buffer::from_buffer_protocol(py::handle obj, const char* op, const char* arg,
                                                     Access access) {
  std::shared_ptr<Buffer> b(new Buffer());
  if (PyObject_GetBuffer(obj.ptr(), &b->view_, PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
    PyErr_Clear();
    throw py::type_error(where(op, arg) + " (" + type_name(obj) + ") does not expose a buffer: " + kAccepted);
  }
  b->has_view_ = true;
  b->owner_ = py::reinterpret_borrow<py::object>(obj);
  if (!PyBuffer_IsContiguous(&b->view_, 'C')) {
    throw py::value_error(where(op, arg) + " (" + type_name(obj) +
                          ") is not C-contiguous: pass a contiguous copy (numpy.ascontiguousarray)");
  }
  if (access == Access::write && b->view_.readonly) {
    throw py::value_error(where(op, arg) + " (" + type_name(obj) +
                          ") is read-only, and braid writes its result there: pass a writable buffer");
  }
  size_t itemsize = static_cast<size_t>(b->view_.itemsize);
  if (!dtype_from_format(b->view_.format, itemsize, &b->dtype_)) {
    throw py::type_error(where(op, arg) + " holds elements of format '" +
                         (b->view_.format ? b->view_.format : "B") + "' (" + std::to_string(itemsize) +
                         " bytes), which braid lacks: " + kDTypes);
  }
  b->data_ = b->view_.buf;
  b->count_ = static_cast<size_t>(b->view_.len) / itemsize;
  return b;
}

Buffer::~Buffer() {
  if (has_view_) PyBuffer_Release(&view_);
}

}  // namespace braid::python
