// python/braid/src/buffer.h - a Python object's memory as braid sees it: address, element
// count and dtype, without copying.
//
// Accepted: any C-contiguous object with the buffer protocol (numpy arrays, bytearray,
// memoryview, array.array, bytes as an input) and torch CPU tensors, whose data pointer is used
// directly (no torch headers needed; bfloat16 included, which numpy lacks). A Buffer keeps the
// object alive and, for the buffer protocol, its export held (so numpy refuses to resize it)
// until the Buffer is destroyed. Create and destroy Buffers with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>

#include "braid/types.h"

namespace braid::python {

namespace py = pybind11;

enum class Access { read, write };

class Buffer {
 public:
  // `op` and `arg` name the call and the argument in errors: TypeError for an object that is
  // not a buffer or holds a dtype braid lacks, ValueError for a non-contiguous, read-only (when
  // `access` is write) or non-CPU one.
  static std::shared_ptr<Buffer> acquire(py::handle obj, const char* op, const char* arg, Access access);

  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  size_t count() const { return count_; }
  DType dtype() const { return dtype_; }

 private:
  Buffer() = default;
  static std::shared_ptr<Buffer> from_tensor(py::handle obj, const char* op, const char* arg);
  static std::shared_ptr<Buffer> from_buffer_protocol(py::handle obj, const char* op, const char* arg,
                                                      Access access);

  py::object owner_;
  Py_buffer view_{};
  bool has_view_ = false;
  void* data_ = nullptr;
  size_t count_ = 0;
  DType dtype_ = DType::u8;
};

}  // namespace braid::python
