#include "runtime/store/store_state.h"

#include <algorithm>
#include <charconv>

#include "braid/error.h"
#include "runtime/store/socket_util.h"
#include "runtime/store/store_protocol.h"

namespace braid::store {
namespace {

std::string ok_reply() { return FrameWriter().u8(static_cast<uint8_t>(ReplyKind::ok)).finish(); }
std::string value_reply(std::string_view v) {
  return FrameWriter().u8(static_cast<uint8_t>(ReplyKind::value)).bytes(v).finish();
}
std::string integer_reply(int64_t v) {
  return FrameWriter().u8(static_cast<uint8_t>(ReplyKind::integer)).i64(v).finish();
}
std::string boolean_reply(bool v) {
  return FrameWriter().u8(static_cast<uint8_t>(ReplyKind::boolean)).u8(v ? 1 : 0).finish();
}
std::string timed_out_reply(const std::vector<std::string>& missing) {
  return FrameWriter().u8(static_cast<uint8_t>(ReplyKind::timed_out)).keys(missing).finish();
}
std::string error_reply(ErrorCode code, std::string_view message) {
  FrameWriter w;
  w.u8(static_cast<uint8_t>(ReplyKind::error)).u8(static_cast<uint8_t>(code)).bytes(message);
  return w.finish();
}

// A day is far beyond any sane rendezvous timeout and keeps time_point arithmetic from overflowing.
constexpr int64_t kMaxWaitMs = int64_t{24} * 3600 * 1000;

}  // namespace

void StoreState::handle(ConnId conn, std::string_view body, Clock::time_point now, std::vector<Reply>& out) {
  if (waiting(conn)) {
    // The server never hands over a second request while one waits; answering keeps order anyway.
    out.push_back({conn, error_reply(ErrorCode::protocol, "a request arrived while this connection's wait pends")});
    return;
  }
  FrameReader r(body);
  auto op = static_cast<Opcode>(r.u8());
  auto malformed = [&](const char* what) {
    out.push_back({conn, error_reply(ErrorCode::protocol, std::string("malformed ") + what + " request (" +
                                                              std::to_string(body.size()) + "-byte body)")});
  };
  switch (op) {
    case Opcode::set: {
      std::string key = r.bytes(), value = r.bytes();
      if (!r.ok() || !r.at_end()) return malformed("set");
      return handle_set(conn, std::move(key), std::move(value), out);
    }
    case Opcode::get: {
      std::string key = r.bytes();
      int64_t timeout_ms = r.i64();
      if (!r.ok() || !r.at_end()) return malformed("get");
      return start_wait(conn, WaitKind::get, {std::move(key)}, timeout_ms, now, out);
    }
    case Opcode::add: {
      std::string key = r.bytes();
      int64_t delta = r.i64();
      if (!r.ok() || !r.at_end()) return malformed("add");
      return handle_add(conn, key, delta, out);
    }
    case Opcode::compare_set: {
      std::string key = r.bytes(), expected = r.bytes(), desired = r.bytes();
      if (!r.ok() || !r.at_end()) return malformed("compare_set");
      return handle_compare_set(conn, key, expected, std::move(desired), out);
    }
    case Opcode::wait: {
      auto keys = r.keys();
      int64_t timeout_ms = r.i64();
      if (!r.ok() || !r.at_end()) return malformed("wait");
      return start_wait(conn, WaitKind::wait, std::move(keys), timeout_ms, now, out);
    }
    case Opcode::check: {
      auto keys = r.keys();
      if (!r.ok() || !r.at_end()) return malformed("check");
      out.push_back({conn, boolean_reply(missing(keys).empty())});
      return;
    }
    case Opcode::delete_key: {
      std::string key = r.bytes();
      if (!r.ok() || !r.at_end()) return malformed("delete_key");
      out.push_back({conn, boolean_reply(data_.erase(key) != 0)});
      return;
    }
    case Opcode::num_keys: {
      if (!r.ok() || !r.at_end()) return malformed("num_keys");
      out.push_back({conn, integer_reply(static_cast<int64_t>(data_.size()))});
      return;
    }
  }
  out.push_back({conn, error_reply(ErrorCode::protocol,
                                   body.empty() ? std::string("empty request frame")
                                                : "unknown opcode " + std::to_string(static_cast<int>(op)))});
}

void StoreState::handle_set(ConnId conn, std::string key, std::string value, std::vector<Reply>& out) {
  out.push_back({conn, ok_reply()});
  put(key, std::move(value), out);
}

void StoreState::handle_add(ConnId conn, const std::string& key, int64_t delta, std::vector<Reply>& out) {
  int64_t current = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    const std::string& s = it->second;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), current);
    if (ec != std::errc() || end != s.data() + s.size()) {
      out.push_back({conn, error_reply(ErrorCode::invalid_argument,
                                       "add on key " + printable_key(key) + ": its value " + printable_key(s) +
                                           " is not a decimal integer (it was written by set, not add)")});
      return;
    }
  }
  int64_t next = 0;
  if (__builtin_add_overflow(current, delta, &next)) {
    out.push_back({conn, error_reply(ErrorCode::invalid_argument, "add on key " + printable_key(key) + ": " +
                                                                      std::to_string(current) + " + " +
                                                                      std::to_string(delta) + " overflows int64")});
    return;
  }
  out.push_back({conn, integer_reply(next)});
  put(key, std::to_string(next), out);
}

void StoreState::handle_compare_set(ConnId conn, const std::string& key, const std::string& expected,
                                    std::string desired, std::vector<Reply>& out) {
  auto it = data_.find(key);
  bool matches = it == data_.end() ? expected.empty() : it->second == expected;
  if (!matches) {
    // The value after the call: unchanged, or none (empty) for an absent key.
    out.push_back({conn, value_reply(it == data_.end() ? std::string_view() : std::string_view(it->second))});
    return;
  }
  out.push_back({conn, value_reply(desired)});
  put(key, std::move(desired), out);
}

void StoreState::start_wait(ConnId conn, WaitKind kind, std::vector<std::string> keys, int64_t timeout_ms,
                            Clock::time_point now, std::vector<Reply>& out) {
  if (timeout_ms < 0) {
    out.push_back({conn, error_reply(ErrorCode::invalid_argument,
                                     "negative wait timeout " + std::to_string(timeout_ms) + " ms")});
    return;
  }
  Waiter w{kind, std::move(keys), now + std::chrono::milliseconds(std::min(timeout_ms, kMaxWaitMs)), {}};
  if (settle(conn, w, out)) return;
  if (timeout_ms == 0) {
    unwatch(conn, w);
    out.push_back({conn, timed_out_reply(missing(w.keys))});
    return;
  }
  deadlines_.emplace(w.deadline, conn);
  waiters_.emplace(conn, std::move(w));
}

void StoreState::put(const std::string& key, std::string value, std::vector<Reply>& out) {
  data_[key] = std::move(value);
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  std::vector<ConnId> woken = std::move(it->second);
  watchers_.erase(it);
  for (ConnId conn : woken) {
    auto wit = waiters_.find(conn);
    if (wit == waiters_.end()) continue;
    wit->second.watched.clear();  // its watch entry was just taken
    if (settle(conn, wit->second, out)) {
      deadlines_.erase({wit->second.deadline, conn});
      waiters_.erase(wit);
    }
  }
}

bool StoreState::settle(ConnId conn, Waiter& w, std::vector<Reply>& out) {
  for (const auto& k : w.keys) {
    if (data_.count(k) == 0) {
      w.watched = k;
      watchers_[k].push_back(conn);
      return false;
    }
  }
  out.push_back({conn, w.kind == WaitKind::get ? value_reply(data_.at(w.keys.front())) : ok_reply()});
  return true;
}

void StoreState::unwatch(ConnId conn, const Waiter& w) {
  if (w.watched.empty()) return;
  auto it = watchers_.find(w.watched);
  if (it == watchers_.end()) return;
  auto& v = it->second;
  v.erase(std::remove(v.begin(), v.end(), conn), v.end());
  if (v.empty()) watchers_.erase(it);
}

void StoreState::expire(Clock::time_point now, std::vector<Reply>& out) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    ConnId conn = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = waiters_.find(conn);
    if (it == waiters_.end()) continue;
    unwatch(conn, it->second);
    out.push_back({conn, timed_out_reply(missing(it->second.keys))});
    waiters_.erase(it);
  }
}

std::optional<Clock::time_point> StoreState::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

void StoreState::drop(ConnId conn) {
  auto it = waiters_.find(conn);
  if (it == waiters_.end()) return;
  unwatch(conn, it->second);
  deadlines_.erase({it->second.deadline, conn});
  waiters_.erase(it);
}

std::vector<std::string> StoreState::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> m;
  for (const auto& k : keys)
    if (data_.count(k) == 0) m.push_back(k);
  return m;
}

}  // namespace braid::store
