// common/log.h - one-line diagnostics on stderr, filtered by BRAID_DEBUG.
//
//   BRAID_LOG(info) << "transport " << name << " ready";
//
// Lines read "braid[rank 3] INFO: ...". Errors do not depend on logging: they travel as Status
// and are complete without any debug flag.
#pragma once

#include <sstream>

#include "common/env.h"

namespace braid {

bool log_enabled(LogLevel level);
void set_log_level(LogLevel level);
// The rank shown in front of every line; -1 (the default) shows none.
void set_log_rank(int rank);
void log_line(LogLevel level, const std::string& text);

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage() { log_line(level_, stream_.str()); }
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace braid

#define BRAID_LOG(level)                                      \
  if (!::braid::log_enabled(::braid::LogLevel::level)) {      \
  } else                                                      \
    ::braid::LogMessage(::braid::LogLevel::level).stream()
