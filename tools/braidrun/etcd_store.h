// tools/braidrun/etcd_store.h - a braid::Store kept in an etcd v3 cluster.
//
// braidrun's rendezvous with --rdzv-backend etcd: the store lives in etcd, which survives the
// loss of any minority of its members, instead of in one braidrun's TcpStoreServer, which
// ends with that braidrun's node. It speaks etcd's JSON gateway over HTTP/1.1 (etcd_http.h);
// no etcd library is needed.
//
// How each call maps onto etcd (keys and values are the store's bytes, base64 on the wire):
//   set          /v3/kv/put
//   get, wait    /v3/kv/range, polled with backoff (5 ms doubling to 100 ms) until the key is
//                there or the timeout passes (a watch would save the polls; the waits here are
//                short and few)
//   check        one /v3/kv/txn with no condition whose operations count each key
//   add          read the value and its mod_revision, then /v3/kv/txn "if mod_revision is still
//                that, put the sum"; a lost race reads again
//   compare_set  /v3/kv/txn "if the value equals expected (if absent, for expected empty), put
//                desired, else read it"
//   delete_key   /v3/kv/deleterange
//   num_keys     /v3/kv/range over every key, counting only
//
// Members: every call goes to the member that answered last; one that cannot be reached, fails,
// or takes longer than `member_timeout` is left for the next one in the list, round and round
// with backoff until `request_timeout` passes. Then the call fails (ErrorCode::peer_lost)
// naming every member and what went wrong with each. A call whose answer was lost may have been
// applied (etcd committed it, the reply did not arrive): set, compare_set and delete_key are
// safe to repeat, but add may then count twice; braidrun's adds are heartbeats and the node-rank
// counter, and the counter refuses a node beyond --nnodes with a message.
// No TLS or etcd authentication: run etcd where only the job's nodes reach it.
// Calls from several threads at once are fine (each call opens its own connection).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "braid/store.h"
#include "tools/braidrun/etcd_http.h"
#include "tools/braidrun/etcd_json.h"

namespace braid::braidrun {

struct EtcdStoreOptions {
  // Bounds get and wait (Store::timeout()).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // One call, every member tried in turn.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
  // One member's answer to one call.
  std::chrono::milliseconds member_timeout{std::chrono::seconds(3)};
};

class EtcdStore : public Store {
 public:
  // `endpoints`: the members' client addresses (at least one). Connects to nothing yet.
  EtcdStore(std::vector<etcd::Endpoint> endpoints, EtcdStoreOptions options = {});
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;
  using Store::wait;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  std::chrono::milliseconds timeout() const override;
  void set_timeout(std::chrono::milliseconds timeout) override;
  std::string address() const override;  // "etcd h1:p1,h2:p2,h3:p3"

  // Removes every key that starts with `prefix` (not empty); returns how many there were.
  int64_t delete_prefix(const std::string& prefix);
  // The member the next call goes to first, for messages and tests.
  const etcd::Endpoint& current_member() const;
  // The address of this host that connections to a member leave from (see etcd_http.h).
  Result<std::string> local_address();

 private:
  // POSTs `body` to `path`, member after member (see above); the reply's JSON.
  Result<etcd::JsonValue> call(const std::string& what, const std::string& path, const std::string& body);
  // The value of `key` and its mod_revision (0 when absent: then the value is empty).
  struct Versioned {
    bool found = false;
    std::string value;
    int64_t mod_revision = 0;
  };
  Result<Versioned> read(const std::string& key);
  // Which of `keys` are absent.
  Result<std::vector<std::string>> missing(const std::vector<std::string>& keys);

  std::vector<etcd::Endpoint> endpoints_;
  EtcdStoreOptions options_;
  std::atomic<int64_t> timeout_ms_;
  std::atomic<size_t> current_{0};
};

}  // namespace braid::braidrun
