// braid/work.h - the handle of an operation that runs in the background.
#pragma once

#include <chrono>
#include <memory>

#include "braid/error.h"

namespace braid {

namespace detail {
struct WorkState;
}

// Returned by every *_async call. Copyable (copies share the operation). The buffers passed to
// the call must stay valid, and untouched, until wait() returned or test() returned true.
// Thread-safe: any thread may wait() or test().
class Work {
 public:
  Work() = default;  // an empty handle: already complete
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  // Blocks until the operation finished; rethrows its failure as braid::Error.
  void wait();
  // Like wait(), but gives up after `timeout` and returns false (the operation goes on).
  bool wait_for(std::chrono::milliseconds timeout);
  // True once finished (successfully or not); never blocks. Does not throw.
  bool test() const;
  // After completion: ErrorCode::ok or the failure's code, and its message.
  ErrorCode error_code() const;
  std::string error_message() const;

 private:
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace braid
