// braid/error.h - the exception the public API throws, and the categories callers can test.
#pragma once

#include <stdexcept>
#include <string>

namespace braid {

// What kind of failure happened. Stable: callers switch on these.
enum class ErrorCode : int {
  ok = 0,
  invalid_argument,  // bad arguments or configuration (environment variables included)
  timeout,           // a bounded wait expired
  peer_lost,         // a peer process died, reset or went silent
  mismatch,          // ranks called different collectives, counts, dtypes or roots
  aborted,           // the communicator was aborted
  system,            // an operating-system call failed (errno in the message)
  protocol,          // malformed or unexpected bytes from a peer
  internal,          // a bug in braid
  unauthenticated,   // a peer or client did not prove it knows the job's secret (BRAID_SECRET)
};

const char* to_string(ErrorCode code) noexcept;

// Thrown by every public call that fails. what() is the whole message: which operation,
// which rank, which peer and address, and what to try.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace braid
