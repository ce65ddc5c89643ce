#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <string>

namespace braid {
namespace {

std::atomic<int> g_level{-1};  // -1: not yet read from BRAID_DEBUG
std::atomic<int> g_rank{-1};

int current_level() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    const Result<Env>& env = global_env();
    l = static_cast<int>(env.is_ok() ? env.value().debug : LogLevel::warn);
    g_level.store(l, std::memory_order_relaxed);
  }
  return l;
}

}  // namespace

bool log_enabled(LogLevel level) { return static_cast<int>(level) <= current_level(); }
void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
void set_log_rank(int rank) { g_rank.store(rank); }

void log_line(LogLevel level, const std::string& text) {
  const char* name = level == LogLevel::warn ? "WARN" : level == LogLevel::info ? "INFO" : "TRACE";
  int rank = g_rank.load(std::memory_order_relaxed);
  std::string line = rank >= 0 ? "braid[rank " + std::to_string(rank) + "] " : std::string("braid: ");
  line += name;
  line += ": ";
  line += text;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write: lines of ranks do not interleave
}

}  // namespace braid
