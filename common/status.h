// common/status.h - failures as values inside the library.
//
// A Status is an ErrorCode plus a message; OK is a null pointer, so passing success around costs
// nothing. Result<T> holds either a value or a non-OK Status. The public API turns a failed
// Status into braid::Error at its boundary (raise_if_error).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "braid/error.h"

namespace braid {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message);

  static Status ok() { return Status(); }
  bool is_ok() const { return rep_ == nullptr; }
  explicit operator bool() const = delete;  // say is_ok(): a Status is not a bool
  ErrorCode code() const { return rep_ ? rep_->code : ErrorCode::ok; }
  const std::string& message() const;

  // The same failure with context put in front: "all_reduce #3: " + message.
  Status with_context(const std::string& prefix) const;

 private:
  struct Rep {
    ErrorCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;
};

inline Status invalid_argument(std::string m) { return Status(ErrorCode::invalid_argument, std::move(m)); }
inline Status timeout_error(std::string m) { return Status(ErrorCode::timeout, std::move(m)); }
inline Status peer_lost(std::string m) { return Status(ErrorCode::peer_lost, std::move(m)); }
inline Status protocol_error(std::string m) { return Status(ErrorCode::protocol, std::move(m)); }
inline Status internal_error(std::string m) { return Status(ErrorCode::internal, std::move(m)); }
// A failed system call: the message gets ": <strerror(err)>" appended.
Status system_error(std::string what, int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: must not be OK
  bool is_ok() const { return status_.is_ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

// Throws braid::Error when `s` failed. Used only at the public API boundary.
void raise_if_error(const Status& s);

template <typename T>
T value_or_raise(Result<T>&& r) {
  raise_if_error(r.status());
  return std::move(r).value();
}

}  // namespace braid

#define BRAID_CONCAT_INNER(a, b) a##b
#define BRAID_CONCAT(a, b) BRAID_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` failed.
#define RETURN_IF_ERROR(expr)                              \
  do {                                                     \
    ::braid::Status braid_status_ = (expr);                \
    if (!braid_status_.is_ok()) return braid_status_;      \
  } while (0)

// ASSIGN_OR_RETURN(auto x, make_x()); declares x from a Result or returns its Status.
#define ASSIGN_OR_RETURN(decl, expr) ASSIGN_OR_RETURN_IMPL(BRAID_CONCAT(braid_result_, __LINE__), decl, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                           \
  if (!tmp.is_ok()) return tmp.status();       \
  decl = std::move(tmp).value()
