// braid/store.h - the key-value store ranks meet through.
//
// A Store is what rendezvous and every later address exchange use. braid serves one over TCP
// (TcpStoreServer, run by braidrun or rank 0); a program can also hand braid a Store of its own.
// Keys and values are binary-safe byte strings. Every blocking call is bounded by the store's
// timeout and throws braid::Error (ErrorCode::timeout) naming the missing keys and the address.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/error.h"

namespace braid {

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits (up to timeout()) until `key` exists, then returns its value.
  virtual std::string get(const std::string& key) = 0;
  // Adds `delta` to the integer stored at `key` (absent = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if its value is `expected` (or if it is absent and `expected` is
  // empty); returns the value after the call.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  // Waits until every key exists; throws ErrorCode::timeout naming the missing ones.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  // True when every key exists, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Removes `key`; true when it existed.
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;

  virtual std::chrono::milliseconds timeout() const = 0;
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
  // Where the store lives, for error messages ("127.0.0.1:29500").
  virtual std::string address() const = 0;
};

// Every key of `base` seen with `prefix + "/"` in front: a namespace inside a shared store.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  using Store::wait;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;  // keys of the whole base store, as torch's PrefixStore does
  std::chrono::milliseconds timeout() const override;
  void set_timeout(std::chrono::milliseconds timeout) override;
  std::string address() const override;

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

struct TcpStoreOptions {
  // Bounds the first connect (retried with backoff) and every wait/get.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // The job's secret (its text, at least 16 characters). Unset: this process's BRAID_SECRET or
  // BRAID_SECRET_FILE, none when neither is set. Empty: none.
  std::optional<std::string> secret{};
  // This job's id. Unset: BRAID_JOB_ID. Empty: unknown (not compared).
  std::optional<std::string> job_id{};
};

// A client of a TcpStoreServer. One TCP connection; calls from several threads are serialized.
// connect() proves this process knows the job's secret and checks that the server does too
// (store_protocol.h), and that the store serves this job: a server that refuses, or that fails
// its own proof, fails connect() with ErrorCode::unauthenticated at once (no retrying); a store
// of another job (a different job id) with ErrorCode::invalid_argument naming both ids.
// A connection lost after it was established fails the call at once, naming the address.
class TcpStore : public Store {
 public:
  static std::unique_ptr<TcpStore> connect(const std::string& host, uint16_t port, TcpStoreOptions options = {});
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;
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
  std::string address() const override;

  struct Impl;

 private:
  explicit TcpStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreServerOptions {
  // As in TcpStoreOptions: unset means this process's BRAID_SECRET(_FILE) / BRAID_JOB_ID.
  std::optional<std::string> secret{};
  std::optional<std::string> job_id{};
  // 0: the environment's BRAID_STORE_MAX_FRAME_BYTES, BRAID_STORE_MAX_CLIENTS,
  // BRAID_STORE_MAX_PENDING (common/env.h).
  size_t max_frame_bytes = 0;
  size_t max_clients = 0;
  size_t max_pending = 0;
  // How long a new connection has to complete its handshake.
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(2)};
};

// Serves the store on a TCP port from one background thread (epoll). Survives malformed and
// vanishing clients; one bad client never stalls the others. Strangers get nothing: until a
// connection has proved the job's secret it may send only its handshake (a few hundred bytes,
// within handshake_timeout), and at most max_pending such connections are kept (the oldest is
// dropped for a new one), so they cannot crowd out the job's ranks. A request above
// max_frame_bytes is refused before any of it is buffered. Raises the process's soft
// open-file limit to its hard limit (said at INFO), since every rank holds connections.
class TcpStoreServer {
 public:
  // Binds host:port (port 0 picks a free one) and starts serving. Throws braid::Error when the
  // port is in use, naming it, or when the secret cannot be read.
  static std::unique_ptr<TcpStoreServer> start(const std::string& host, uint16_t port,
                                               TcpStoreServerOptions options = {});
  ~TcpStoreServer();  // stops the thread and closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const;
  std::string address() const;
  // Connections that completed the handshake (clients of this job) and are still open.
  size_t num_clients() const;

  struct Impl;

 private:
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A store in one file on a filesystem every process can reach (`file:///shared/path`
// rendezvous, like torch's FileStore): no server to start, nothing to outlive. Every call takes
// an exclusive lock on the file (fcntl open-file-description locks, which NFS honours), reads
// what other processes appended since this one last looked, and appends its own change; waits
// poll the file with backoff, bounded by the timeout. add is atomic across processes and threads.
// The file is never removed by braid: give each job a fresh path (a file left by an earlier job
// would hand its keys to this one). Safe to call from several threads.
class FileStore : public Store {
 public:
  // Opens or creates the file at `path`. Throws braid::Error naming the path when its directory
  // is missing, it cannot be written, or it holds something other than a braid store.
  FileStore(std::string path, std::chrono::milliseconds timeout = std::chrono::seconds(300));
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;
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
  std::string address() const override;  // "file://" + path

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid
