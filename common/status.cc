#include "common/status.h"

#include <cstring>

namespace braid {

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::peer_lost: return "peer lost";
    case ErrorCode::mismatch: return "mismatch";
    case ErrorCode::aborted: return "aborted";
    case ErrorCode::system: return "system error";
    case ErrorCode::protocol: return "protocol error";
    case ErrorCode::internal: return "internal error";
    case ErrorCode::unauthenticated: return "not authenticated";
  }
  return "unknown";
}

Status::Status(ErrorCode code, std::string message) {
  if (code != ErrorCode::ok) rep_ = std::make_shared<const Rep>(Rep{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

Status Status::with_context(const std::string& prefix) const {
  if (is_ok()) return *this;
  return Status(rep_->code, prefix + rep_->message);
}

Status system_error(std::string what, int err) {
  return Status(ErrorCode::system, what + ": " + std::strerror(err));
}

void raise_if_error(const Status& s) {
  if (!s.is_ok()) throw Error(s.code(), s.message());
}

}  // namespace braid
