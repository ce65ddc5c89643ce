// runtime/store/store_state.h - the keys a TcpStoreServer holds and the clients waiting on them.
//
// Pure logic, no sockets: the server hands it each request body with the id of the connection
// that sent it, and sends the reply frames it returns. A get or wait on a missing key parks a
// waiter for that connection; the request that later creates the key (or the expiry of the
// waiter's deadline) produces the parked reply. While a connection has a waiter the server must
// not hand it further requests: one connection, one request in flight.
//
// A waiter watches one missing key at a time (the first one still missing); when that key
// appears it re-checks all of them and either answers or moves on to the next missing key. So
// each waiter sits in exactly one watch list and nothing needs de-duplicating.
//
// Not thread-safe: only the server thread uses it.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/deadline.h"

namespace braid::store {

class StoreState {
 public:
  using ConnId = uint64_t;
  struct Reply {
    ConnId conn;
    std::string frame;  // a whole frame, length prefix included
  };

  // Handles one request body from `conn`; appends to `out` its reply (unless it now waits) and
  // the replies of any waiters it satisfied.
  void handle(ConnId conn, std::string_view body, Clock::time_point now, std::vector<Reply>& out);
  // Answers `timed_out` to every waiter whose deadline is <= now.
  void expire(Clock::time_point now, std::vector<Reply>& out);
  // The earliest waiter deadline, if any waiter exists.
  std::optional<Clock::time_point> next_deadline() const;
  bool waiting(ConnId conn) const { return waiters_.count(conn) != 0; }
  // Forgets the connection's waiter (it closed).
  void drop(ConnId conn);
  size_t num_keys() const { return data_.size(); }

 private:
  enum class WaitKind : uint8_t { get, wait };
  struct Waiter {
    WaitKind kind;
    std::vector<std::string> keys;
    Clock::time_point deadline;
    std::string watched;  // the key whose watch list holds this waiter
  };

  void handle_set(ConnId conn, std::string key, std::string value, std::vector<Reply>& out);
  void handle_add(ConnId conn, const std::string& key, int64_t delta, std::vector<Reply>& out);
  void handle_compare_set(ConnId conn, const std::string& key, const std::string& expected, std::string desired,
                          std::vector<Reply>& out);
  void start_wait(ConnId conn, WaitKind kind, std::vector<std::string> keys, int64_t timeout_ms,
                  Clock::time_point now, std::vector<Reply>& out);
  // Writes `key`; wakes the waiters watching it.
  void put(const std::string& key, std::string value, std::vector<Reply>& out);
  // Answers the waiter if all its keys exist, else makes it watch the first missing one.
  // Returns true when it answered.
  bool settle(ConnId conn, Waiter& w, std::vector<Reply>& out);
  void unwatch(ConnId conn, const Waiter& w);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<ConnId, Waiter> waiters_;
  std::unordered_map<std::string, std::vector<ConnId>> watchers_;
  std::set<std::pair<Clock::time_point, ConnId>> deadlines_;
};

}  // namespace braid::store
