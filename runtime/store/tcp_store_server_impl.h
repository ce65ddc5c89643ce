// runtime/store/tcp_store_server_impl.h - TcpStoreServer's state, shared by its two source files:
// tcp_store_server.cc moves bytes (the epoll loop, reads, writes, requests);
// tcp_store_server_admit.cc decides who gets in (accept, handshake, limits, bad-client log).
#pragma once

#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "braid/store.h"
#include "common/job_secret.h"
#include "runtime/store/socket_util.h"
#include "runtime/store/store_handshake.h"
#include "runtime/store/store_state.h"

namespace braid {

namespace store_server {

inline constexpr uint64_t kListenId = 0;
inline constexpr uint64_t kWakeId = 1;
inline constexpr size_t kReadChunk = 64 << 10;
// Read at most this much from one connection per event, so a fast sender cannot starve others.
inline constexpr size_t kReadPerEvent = 1 << 20;
// Stop reading from a client whose replies pile up unread (it is not reading them).
inline constexpr size_t kMaxQueuedOutput = 16 << 20;
// A buffer that grew for one large frame is given back once empty, if above this.
inline constexpr size_t kKeepCapacity = 64 << 10;

struct Connection {
  UniqueFd fd;
  std::string peer;  // "host:port", for messages
  std::string in;
  size_t in_off = 0;
  std::string out;
  size_t out_off = 0;
  uint32_t events = 0;
  bool dead = false;
  bool dirty = false;    // has output to flush at the end of this loop turn
  bool closing = false;  // sent a fatal error: flush, shut down writing, drain, close
  bool parked = false;   // stopped parsing input (a pending wait, or too much unread output)
  // Set from accept until the client proved the job's secret: such a connection is "pending".
  std::unique_ptr<store::ServerHandshake> handshake;
  Clock::time_point linger_until{};
  bool pending() const { return handshake != nullptr; }
  size_t pending_in() const { return in.size() - in_off; }
  size_t pending_out() const { return out.size() - out_off; }
};

}  // namespace store_server

struct TcpStoreServer::Impl {
  using Connection = store_server::Connection;

  std::string host;
  uint16_t port = 0;
  std::string address;
  UniqueFd listen_fd;
  UniqueFd epoll_fd;
  UniqueFd wake_fd;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<size_t> num_clients{0};  // authenticated ones

  // Fixed at start.
  struct Settings {
    auth::JobSecret secret;
    std::string job_id;
    size_t max_frame_bytes = 0;
    size_t max_clients = 0;
    size_t max_pending = 0;
    std::chrono::milliseconds handshake_timeout{0};
  } fixed;

  // Server-thread state.
  store::StoreState state;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns;
  uint64_t next_id = 2;
  std::vector<uint64_t> dirty;      // connections with output to flush
  std::deque<uint64_t> runnable;    // connections whose wait ended with input still buffered
  std::vector<uint64_t> lingering;  // closing connections, drained until their deadline
  std::vector<uint64_t> dead;       // closed this loop turn, freed at its end
  std::vector<char> scratch;        // recv lands here, then is appended to a connection's input
  // Pending connections in accept order with their handshake deadlines (which are therefore
  // in order too). Entries of connections that authenticated or closed are skipped lazily.
  std::deque<std::pair<Clock::time_point, uint64_t>> pending;
  size_t num_pending = 0;
  bool accept_paused = false;
  Clock::time_point accept_resume{};
  // Bad clients: the first few are warned about, then one INFO line a second at most.
  struct BadClients {
    size_t count = 0;
    size_t unlogged = 0;  // since the last line
    Clock::time_point logged_at{};
  } bad;

  ~Impl() { shutdown(); }
  void shutdown() {
    if (!thread.joinable()) return;
    stop.store(true);
    uint64_t one = 1;
    // eventfd writes of 8 bytes cannot be short; a failure leaves nothing better to do.
    (void)!::write(wake_fd.get(), &one, sizeof(one));
    thread.join();
  }

  // tcp_store_server.cc
  void run();
  int epoll_timeout_ms(Clock::time_point now) const;
  void on_event(uint64_t id, uint32_t ev);
  void read_from(Connection& c, uint64_t id);
  void process(Connection& c, uint64_t id);
  void deliver(std::vector<store::StoreState::Reply>& replies);
  void queue_output(Connection& c, uint64_t id, const std::string& frame);
  void flush(Connection& c, uint64_t id);
  void update_interest(Connection& c, uint64_t id);
  // Logs `message` (rate-limited), sends `frame` (an error reply), then closes after a linger.
  void fail_connection(Connection& c, uint64_t id, const std::string& message, const std::string& frame);
  void mark_dead(Connection& c, uint64_t id);
  void resume(Connection& c, uint64_t id) {
    if (!c.parked) return;
    c.parked = false;
    runnable.push_back(id);
  }
  void reap();
  Connection* find(uint64_t id) {
    auto it = conns.find(id);
    return it == conns.end() || it->second->dead ? nullptr : it->second.get();
  }
  // The most input a connection may have buffered: one whole frame.
  size_t input_limit(const Connection& c) const {
    return store::kFrameHeaderBytes + (c.pending() ? store::kMaxHandshakeBytes : fixed.max_frame_bytes);
  }

  // tcp_store_server_admit.cc
  void accept_all();
  // Judges a pending connection's buffered input; false while it has not authenticated.
  bool admit(Connection& c, uint64_t id);
  // Closes pending connections whose handshake deadline passed.
  void expire_pending(Clock::time_point now);
  // Closes the oldest pending connection to make room; false when there is none.
  bool evict_oldest_pending(const std::string& why);
  std::optional<Clock::time_point> next_pending_deadline() const;
  // `quiet`: not worth a warning (a port probe that connects and closes), INFO only.
  void note_bad_client(const std::string& message, bool quiet = false);
};

// Raises RLIMIT_NOFILE's soft limit to the hard limit, once per process (tcp_store_server_admit.cc).
void raise_open_file_limit_once(const std::string& who);

}  // namespace braid
