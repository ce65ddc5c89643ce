#include "transport/inproc/inproc_transport.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "common/log.h"
#include "transport/inproc/inproc_link.h"

namespace braid::transport::inproc {
namespace {

// Waits on the fabric in short slices so that Deadline::never() needs no special case.
constexpr std::chrono::milliseconds kWaitSlice{50};

std::string address_of(uint64_t id) { return "inproc:" + std::to_string(id); }

bool parse_address(const std::string& address, uint64_t* id) {
  constexpr std::string_view kPrefix = "inproc:";
  if (address.size() <= kPrefix.size() || address.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  const char* begin = address.data() + kPrefix.size();
  const char* end = address.data() + address.size();
  auto [ptr, ec] = std::from_chars(begin, end, *id);
  return ec == std::errc() && ptr == end;
}

Capabilities inproc_capabilities() {
  Capabilities caps;
  caps.max_in_flight = size_t{1} << 16;  // queues grow as needed; this bounds nothing but is honest
  return caps;
}

class InprocConnection final : public Connection {
 public:
  InprocConnection(std::shared_ptr<Link> link, int side)
      : link_(std::move(link)), side_(side), peer_address_(link_->address(1 - side)) {}
  ~InprocConnection() override { close(); }

  Status post_send(const void* data, size_t bytes, uint64_t cookie) override {
    RETURN_IF_ERROR(check_post("post_send", data, bytes));
    link_->post_send(side_, data, bytes, cookie);
    return Status::ok();
  }

  Status post_recv(void* data, size_t capacity, uint64_t cookie) override {
    RETURN_IF_ERROR(check_post("post_recv", data, capacity));
    link_->post_recv(side_, data, capacity, cookie);
    return Status::ok();
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    link_->close(side_);
  }

  int peer_rank() const override { return link_->rank(1 - side_); }
  const std::string& peer_address() const override { return peer_address_; }
  Capabilities capabilities() const override { return inproc_capabilities(); }

 private:
  Status check_post(const char* what, const void* data, size_t bytes) const {
    if (closed_) {
      return Status(ErrorCode::aborted, std::string("inproc ") + what + " on rank " + std::to_string(link_->rank(side_)) +
                                            " to rank " + std::to_string(peer_rank()) + " (" + peer_address_ +
                                            "): the connection was closed");
    }
    if (data == nullptr && bytes > 0) {
      return invalid_argument(std::string("inproc ") + what + ": null buffer for " + std::to_string(bytes) + " bytes");
    }
    return Status::ok();
  }

  std::shared_ptr<Link> link_;
  int side_;
  std::string peer_address_;
  bool closed_ = false;
};

class InprocTransport final : public Transport {
 public:
  explicit InprocTransport(Fabric::Impl* fabric) : fabric_(fabric), cq_(std::make_shared<CompletionQueue>()) {
    std::lock_guard<std::mutex> lk(fabric_->mu);
    id_ = fabric_->next_id++;
    address_ = address_of(id_);
  }

  ~InprocTransport() override {
    std::lock_guard<std::mutex> lk(fabric_->mu);
    fabric_->listening.erase(id_);
    auto it = fabric_->incoming.find(id_);
    if (it == fabric_->incoming.end()) return;
    for (Incoming& in : it->second) {
      in.link->fail(peer_lost(address_ + " was destroyed before it accepted the connection from rank " +
                              std::to_string(in.who.self_rank)));
    }
    fabric_->incoming.erase(it);
  }

  const char* name() const override { return "inproc"; }

  bool is_host_local(const std::string&) const override { return true; }  // threads of one process

  Capabilities capabilities() const override { return inproc_capabilities(); }

  Result<std::string> listen() override {
    std::lock_guard<std::mutex> lk(fabric_->mu);
    fabric_->listening.insert(id_);
    fabric_->incoming[id_];
    fabric_->cv.notify_all();
    return address_;
  }

  Result<std::unique_ptr<Connection>> connect(const std::string& address, const PeerIdentity& who,
                                              Deadline deadline) override {
    uint64_t target = 0;
    if (!parse_address(address, &target)) {
      return invalid_argument("inproc connect from rank " + std::to_string(who.self_rank) + " to rank " +
                              std::to_string(who.peer_rank) + ": \"" + address +
                              "\" is not an inproc address (expected inproc:<n>, as listen() returns)");
    }
    std::unique_lock<std::mutex> lk(fabric_->mu);
    for (;;) {
      RETURN_IF_ERROR(check_alive(who, "connect", address));
      if (fabric_->listening.count(target) != 0) break;
      if (deadline.expired()) {
        return timeout_error("inproc connect from rank " + std::to_string(who.self_rank) + " to rank " +
                             std::to_string(who.peer_rank) + " at " + address +
                             " timed out: nothing listens there (did the peer call listen() on this Fabric?)");
      }
      fabric_->cv.wait_for(lk, std::min<std::chrono::nanoseconds>(deadline.remaining(), kWaitSlice));
    }
    LinkSide mine{cq_, nullptr, true, who.self_rank, address_, {}, {}};
    LinkSide theirs{nullptr, nullptr, true, who.peer_rank, address, {}, {}};
    auto link = std::make_shared<Link>(who.comm_id, std::move(mine), std::move(theirs));
    auto conn = std::make_unique<InprocConnection>(link, 0);
    link->attach(0, cq_, conn.get());
    fabric_->incoming[target].push_back(Incoming{who, link});
    remember(link);
    fabric_->cv.notify_all();
    return std::unique_ptr<Connection>(std::move(conn));
  }

  Result<std::unique_ptr<Connection>> accept(const PeerIdentity& who, Deadline deadline) override {
    std::unique_lock<std::mutex> lk(fabric_->mu);
    if (fabric_->listening.count(id_) == 0) {
      return invalid_argument("inproc accept on rank " + std::to_string(who.self_rank) + " (" + address_ +
                              "): call listen() first");
    }
    for (;;) {
      RETURN_IF_ERROR(check_alive(who, "accept", "(accepting)"));
      std::deque<Incoming>& queue = fabric_->incoming[id_];
      // Strangers are refused on every pass, before any match returns, so none lingers.
      for (auto it = queue.begin(); it != queue.end();) {
        if (it->who.comm_id != who.comm_id || it->who.peer_rank != who.self_rank) {
          Status refused = protocol_error(address_ + " (rank " + std::to_string(who.self_rank) + ", comm " +
                                          std::to_string(who.comm_id) + ") refused a connection from rank " +
                                          std::to_string(it->who.self_rank) + " of comm " +
                                          std::to_string(it->who.comm_id) + " that wanted rank " +
                                          std::to_string(it->who.peer_rank));
          BRAID_LOG(warn) << refused.message();
          it->link->fail(refused);
          it = queue.erase(it);
          continue;
        }
        ++it;
      }
      // Other peers of the same communicator stay queued for their own accept calls.
      auto match = std::find_if(queue.begin(), queue.end(),
                                [&](const Incoming& in) { return in.who.self_rank == who.peer_rank; });
      if (match != queue.end()) {
        std::shared_ptr<Link> link = std::move(match->link);
        queue.erase(match);
        auto conn = std::make_unique<InprocConnection>(link, 1);
        link->attach(1, cq_, conn.get());
        return std::unique_ptr<Connection>(std::move(conn));
      }
      if (deadline.expired()) {
        return timeout_error("inproc accept on rank " + std::to_string(who.self_rank) + " (" + address_ +
                             ") timed out waiting for rank " + std::to_string(who.peer_rank) + " of comm " +
                             std::to_string(who.comm_id) + " to connect");
      }
      fabric_->cv.wait_for(lk, std::min<std::chrono::nanoseconds>(deadline.remaining(), kWaitSlice));
    }
  }

  Status poll(std::vector<Completion>& out, std::chrono::microseconds timeout) override {
    cq_->drain(out, timeout);
    return Status::ok();
  }

  void wake() override { cq_->wake(); }

 private:
  // Caller holds fabric_->mu.
  Status check_alive(const PeerIdentity& who, const char* op, const std::string& address) const {
    for (int rank : {who.peer_rank, who.self_rank}) {
      if (fabric_->killed.count(rank) != 0) {
        return peer_lost("inproc " + std::string(op) + " between rank " + std::to_string(who.self_rank) +
                         " and rank " + std::to_string(who.peer_rank) + " " + address + ": rank " +
                         std::to_string(rank) + " was killed (Fabric::kill)");
      }
    }
    return Status::ok();
  }

  // Caller holds fabric_->mu. Dead links are dropped here so the list stays as long as the live ones.
  void remember(const std::shared_ptr<Link>& link) {
    auto& links = fabric_->links;
    links.erase(std::remove_if(links.begin(), links.end(), [](const std::weak_ptr<Link>& w) { return w.expired(); }),
                links.end());
    links.push_back(link);
  }

  Fabric::Impl* fabric_;
  uint64_t id_ = 0;
  std::string address_;
  std::shared_ptr<CompletionQueue> cq_;
};

}  // namespace

Fabric::Fabric() : impl_(std::make_unique<Impl>()) {}
Fabric::~Fabric() = default;

void Fabric::kill(int rank) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->killed.insert(rank);
  const Status why = peer_lost("rank " + std::to_string(rank) + " was killed (Fabric::kill); it is lost");
  for (const std::weak_ptr<Link>& weak : impl_->links) {
    if (std::shared_ptr<Link> link = weak.lock(); link && link->involves(rank)) link->fail(why);
  }
  impl_->cv.notify_all();
}

std::unique_ptr<Transport> create_inproc_transport(Fabric& fabric) {
  return std::make_unique<InprocTransport>(fabric.impl());
}

}  // namespace braid::transport::inproc
