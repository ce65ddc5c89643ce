#include "tools/braidrun/etcd_store.h"

#include <charconv>
#include <thread>

#include "common/deadline.h"

namespace braid::braidrun {
namespace {

using std::chrono::milliseconds;
using etcd::base64_encode;
using etcd::json_quote;
using etcd::JsonValue;

constexpr milliseconds kFirstPoll{5};
constexpr milliseconds kMaxPoll{100};
constexpr milliseconds kFirstMemberBackoff{50};
constexpr milliseconds kMaxMemberBackoff{1000};
// etcd refuses a transaction of more than 128 operations by default (--max-txn-ops).
constexpr size_t kMaxTxnOps = 100;

std::string b64(const std::string& s) { return json_quote(base64_encode(s)); }

std::string ms_text(milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

// A key as messages show it: printable bytes as they are, others as \xNN.
std::string printable(const std::string& key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : key) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xF];
    }
  }
  return out;
}

std::string printable_list(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 16; ++i) s += (s.empty() ? "" : ", ") + printable(keys[i]);
  if (keys.size() > 16) s += " (and " + std::to_string(keys.size() - 16) + " more)";
  return s;
}

// The first kv of a range reply, decoded.
struct Kv {
  bool found = false;
  std::string value;
  int64_t mod_revision = 0;
};

Result<Kv> first_kv(const JsonValue& range_reply) {
  Kv kv;
  const JsonValue* kvs = range_reply.find("kvs");
  if (!kvs || kvs->items.empty()) return kv;
  const JsonValue& first = kvs->items.front();
  kv.found = true;
  kv.mod_revision = first.int_of("mod_revision");
  ASSIGN_OR_RETURN(kv.value, etcd::base64_decode(first.text_of("value")));
  return kv;
}

// Whether an etcd error reply means "this member cannot answer now; another may": gRPC's
// Unavailable (14), DeadlineExceeded (4), Aborted (10), Internal (13), Unknown (2) (etcd's "no
// leader", "leader changed", "request timed out"), or any 5xx.
bool another_member_may_answer(int http_status, const JsonValue& body) {
  const int64_t code = body.int_of("code");
  return http_status >= 500 || code == 14 || code == 4 || code == 10 || code == 13 || code == 2;
}

Result<int64_t> parse_counter(const std::string& key, const std::string& v) {
  int64_t x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size()) {
    return invalid_argument("add on key " + printable(key) + ": its value '" + printable(v) +
                            "' is not a decimal integer (it was written by set, not add)");
  }
  return x;
}

}  // namespace

EtcdStore::EtcdStore(std::vector<etcd::Endpoint> endpoints, EtcdStoreOptions options)
    : endpoints_(std::move(endpoints)), options_(options), timeout_ms_(options.timeout.count()) {
  if (endpoints_.empty()) raise_if_error(invalid_argument("EtcdStore: no etcd endpoint given"));
}

std::string EtcdStore::address() const { return "etcd " + etcd::endpoints_text(endpoints_); }

milliseconds EtcdStore::timeout() const { return milliseconds(timeout_ms_.load()); }

void EtcdStore::set_timeout(milliseconds timeout) {
  if (timeout.count() <= 0) raise_if_error(invalid_argument("EtcdStore::set_timeout: must be positive"));
  timeout_ms_.store(timeout.count());
}

const etcd::Endpoint& EtcdStore::current_member() const { return endpoints_[current_.load() % endpoints_.size()]; }

Result<std::string> EtcdStore::local_address() {
  std::string errors;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const etcd::Endpoint& ep = endpoints_[(current_.load() + i) % endpoints_.size()];
    auto got = etcd::local_address_towards(ep, Deadline::after(options_.member_timeout));
    if (got.is_ok()) return got;
    errors += (errors.empty() ? "" : "; ") + got.status().message();
  }
  return peer_lost("no etcd member of " + address() + " accepts a connection: " + errors);
}

Result<JsonValue> EtcdStore::call(const std::string& what, const std::string& path, const std::string& body) {
  const Deadline overall = Deadline::after(options_.request_timeout);
  milliseconds backoff = kFirstMemberBackoff;
  std::vector<std::string> last_error(endpoints_.size());
  for (size_t tried = 0;; ++tried) {
    const size_t at = current_.load() % endpoints_.size();
    const etcd::Endpoint& ep = endpoints_[at];
    const Deadline member =
        Deadline::after(std::min<std::chrono::nanoseconds>(options_.member_timeout, overall.remaining()));
    Result<etcd::HttpReply> reply = etcd::http_post(ep, path, body, member);
    std::string error;
    if (reply.is_ok()) {
      Result<JsonValue> json = etcd::parse_json(reply->body);
      if (reply->status == 200 && json.is_ok()) return json;
      error = "HTTP " + std::to_string(reply->status) +
              (json.is_ok() ? ": " + json->text_of("message") : ", " + json.status().message());
      // A member that answers, but not with etcd's JSON, or refuses the request itself: asking
      // another one would get the same answer.
      const bool retry = reply->status >= 500 || (json.is_ok() && another_member_may_answer(reply->status, *json));
      if (!retry) {
        const std::string hint =
            reply->status == 404 ? "; is this an etcd 3.4 or later client port? Its JSON gateway answers on /v3/" : "";
        return Status(reply->status == 400 ? ErrorCode::invalid_argument : ErrorCode::protocol,
                      "etcd store " + what + ": member " + ep.text() + " refused it (" + error + ")" + hint);
      }
    } else {
      error = reply.status().message();
    }
    last_error[at] = error;
    // The next member, if any; the one that answered stays first for later calls.
    size_t expected = at;
    current_.compare_exchange_strong(expected, (at + 1) % endpoints_.size());
    if (overall.expired()) {
      std::string each;
      for (size_t i = 0; i < endpoints_.size(); ++i) {
        each += (each.empty() ? "" : "; ") + endpoints_[i].text() + ": " +
                (last_error[i].empty() ? std::string("not tried") : last_error[i]);
      }
      return peer_lost("etcd store " + what + ": no member of " + address() + " answered within " +
                       ms_text(options_.request_timeout) + " (" + each + "). Is the etcd cluster up and does it " +
                       "have a quorum (etcdctl --endpoints " + etcd::endpoints_text(endpoints_) +
                       " endpoint health)? --rdzv-endpoint must list the members' client addresses");
    }
    // Every member failed once more: wait a little before the next turn.
    if ((tried + 1) % endpoints_.size() == 0) {
      std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(backoff, overall.remaining()));
      backoff = std::min(backoff * 2, kMaxMemberBackoff);
    }
  }
}

Result<EtcdStore::Versioned> EtcdStore::read(const std::string& key) {
  ASSIGN_OR_RETURN(JsonValue r, call("read of " + printable(key), "/v3/kv/range", "{\"key\":" + b64(key) + "}"));
  ASSIGN_OR_RETURN(Kv kv, first_kv(r));
  return Versioned{.found = kv.found, .value = std::move(kv.value), .mod_revision = kv.mod_revision};
}

Result<std::vector<std::string>> EtcdStore::missing(const std::vector<std::string>& keys) {
  std::vector<std::string> absent;
  for (size_t from = 0; from < keys.size(); from += kMaxTxnOps) {
    const size_t to = std::min(keys.size(), from + kMaxTxnOps);
    std::string ops;
    for (size_t i = from; i < to; ++i) {
      ops += std::string(ops.empty() ? "" : ",") + "{\"request_range\":{\"key\":" + b64(keys[i]) + ",\"count_only\":true}}";
    }
    ASSIGN_OR_RETURN(JsonValue r, call("check", "/v3/kv/txn", "{\"success\":[" + ops + "]}"));
    const JsonValue* responses = r.find("responses");
    if (!responses || responses->items.size() != to - from) {
      return protocol_error("etcd store check: the transaction's reply has no answer for each key");
    }
    for (size_t i = from; i < to; ++i) {
      const JsonValue* range = responses->items[i - from].find("response_range");
      if (!range || range->int_of("count") == 0) absent.push_back(keys[i]);
    }
  }
  return absent;
}

void EtcdStore::set(const std::string& key, const std::string& value) {
  raise_if_error(
      call("set of " + printable(key), "/v3/kv/put", "{\"key\":" + b64(key) + ",\"value\":" + b64(value) + "}").status());
}

std::string EtcdStore::get(const std::string& key) {
  const milliseconds t = timeout();
  const Deadline deadline = Deadline::after(t);
  milliseconds poll = kFirstPoll;
  for (;;) {
    Versioned v = value_or_raise(read(key));
    if (v.found) return v.value;
    if (deadline.expired()) {
      raise_if_error(timeout_error("etcd store get timed out after " + ms_text(t) + " at " + address() +
                                   "; still missing: " + printable(key) +
                                   ". Did every node reach this point? --rdzv-timeout-s raises the bound."));
    }
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(poll, deadline.remaining()));
    poll = std::min(poll * 2, kMaxPoll);
  }
}

void EtcdStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  if (timeout.count() < 0) raise_if_error(invalid_argument("etcd store wait: negative timeout"));
  const Deadline deadline = Deadline::after(timeout);
  milliseconds poll = kFirstPoll;
  for (;;) {
    std::vector<std::string> absent = value_or_raise(missing(keys));
    if (absent.empty()) return;
    if (deadline.expired()) {
      raise_if_error(timeout_error("etcd store wait timed out after " + ms_text(timeout) + " at " + address() +
                                   "; still missing: " + printable_list(absent) +
                                   ". Did every node reach this point? --rdzv-timeout-s raises the bound."));
    }
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(poll, deadline.remaining()));
    poll = std::min(poll * 2, kMaxPoll);
  }
}

bool EtcdStore::check(const std::vector<std::string>& keys) { return value_or_raise(missing(keys)).empty(); }

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  const Deadline deadline = Deadline::after(options_.request_timeout);
  Versioned v = value_or_raise(read(key));
  for (;;) {
    const int64_t now = v.found ? value_or_raise(parse_counter(key, v.value)) : 0;
    int64_t next = 0;
    if (__builtin_add_overflow(now, delta, &next)) {
      raise_if_error(invalid_argument("add on key " + printable(key) + ": " + std::to_string(now) + " + " +
                                      std::to_string(delta) + " overflows int64"));
    }
    // An absent key has mod_revision 0, so one comparison covers both cases.
    const std::string body = "{\"compare\":[{\"key\":" + b64(key) + ",\"target\":\"MOD\",\"mod_revision\":\"" +
                             std::to_string(v.mod_revision) + "\",\"result\":\"EQUAL\"}],\"success\":[{\"request_put\":" +
                             "{\"key\":" + b64(key) + ",\"value\":" + b64(std::to_string(next)) + "}}],\"failure\":[" +
                             "{\"request_range\":{\"key\":" + b64(key) + "}}]}";
    JsonValue r = value_or_raise(call("add on " + printable(key), "/v3/kv/txn", body));
    if (r.bool_of("succeeded")) return next;
    if (deadline.expired()) {
      raise_if_error(timeout_error("etcd store add on " + printable(key) + " at " + address() +
                                   ": other clients changed the key on every try for " +
                                   ms_text(options_.request_timeout)));
    }
    // Another client changed the key first: go again from the value the failure branch read.
    const JsonValue* responses = r.find("responses");
    const JsonValue* range = responses && !responses->items.empty() ? responses->items[0].find("response_range") : nullptr;
    if (range == nullptr) raise_if_error(protocol_error("etcd store add: the transaction's reply has no read"));
    Kv kv = value_or_raise(first_kv(*range));
    v = Versioned{.found = kv.found, .value = std::move(kv.value), .mod_revision = kv.mod_revision};
  }
}

std::string EtcdStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  // "Absent" and "present with the expected value" are two comparisons; etcd's transaction
  // ANDs its comparisons, so an empty `expected` tries absence first, then an empty value.
  auto attempt = [&](const std::string& condition) {
    const std::string body = "{\"compare\":[" + condition + "],\"success\":[{\"request_put\":{\"key\":" + b64(key) +
                             ",\"value\":" + b64(desired) + "}}],\"failure\":[{\"request_range\":{\"key\":" + b64(key) +
                             "}}]}";
    return value_or_raise(call("compare_set of " + printable(key), "/v3/kv/txn", body));
  };
  const std::string k = b64(key);
  JsonValue r = expected.empty()
                    ? attempt("{\"key\":" + k + ",\"target\":\"CREATE\",\"create_revision\":\"0\",\"result\":\"EQUAL\"}")
                    : attempt("{\"key\":" + k + ",\"target\":\"VALUE\",\"value\":" + b64(expected) +
                              ",\"result\":\"EQUAL\"}");
  if (r.bool_of("succeeded")) return desired;
  const JsonValue* responses = r.find("responses");
  const JsonValue* range = responses && !responses->items.empty() ? responses->items[0].find("response_range") : nullptr;
  if (range == nullptr) raise_if_error(protocol_error("etcd store compare_set: the transaction's reply has no read"));
  Kv kv = value_or_raise(first_kv(*range));
  if (expected.empty() && kv.found && kv.value.empty()) {
    r = attempt("{\"key\":" + k + ",\"target\":\"VALUE\",\"value\":\"\",\"result\":\"EQUAL\"}");
    if (r.bool_of("succeeded")) return desired;
    responses = r.find("responses");
    range = responses && !responses->items.empty() ? responses->items[0].find("response_range") : nullptr;
    if (range == nullptr) raise_if_error(protocol_error("etcd store compare_set: the transaction's reply has no read"));
    kv = value_or_raise(first_kv(*range));
  }
  return kv.value;  // the value after the call: unchanged, or empty for an absent key
}

bool EtcdStore::delete_key(const std::string& key) {
  JsonValue r = value_or_raise(call("delete of " + printable(key), "/v3/kv/deleterange", "{\"key\":" + b64(key) + "}"));
  return r.int_of("deleted") > 0;
}

int64_t EtcdStore::delete_prefix(const std::string& prefix) {
  if (prefix.empty()) raise_if_error(invalid_argument("EtcdStore::delete_prefix: empty prefix"));
  // The end of the range is the prefix with its last byte one higher (a trailing 0xff carries).
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) {
    end = std::string(1, '\0');  // every key from `prefix` on
  } else {
    end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  }
  JsonValue r = value_or_raise(call("delete of the keys under " + printable(prefix), "/v3/kv/deleterange",
                                    "{\"key\":" + b64(prefix) + ",\"range_end\":" + b64(end) + "}"));
  return r.int_of("deleted");
}

int64_t EtcdStore::num_keys() {
  // From the smallest key ("\0") to the end of the key space (range_end "\0").
  JsonValue r = value_or_raise(call("num_keys", "/v3/kv/range",
                                    "{\"key\":\"AA==\",\"range_end\":\"AA==\",\"count_only\":true}"));
  return r.int_of("count");
}

}  // namespace braid::braidrun
