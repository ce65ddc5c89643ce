// runtime/links/peer_links.h - a communicator's links: the transports it brought up, one connection
// per peer from the transport that fits that peer, and the one loop that drives them.
//
// connect() brings up every transport of BRAID_TRANSPORT's preference list (transport/
// registry.h: a transport compiled out, or one that cannot start here, such as ib without a
// usable port, is left out with a line saying why), publishes one address per transport that
// came up, and gives each peer a connection from the first family both ranks published that
// reaches it (runtime/links/transport_choice.h). Transports no peer uses are closed again. The
// published host labels also give the ring order (collectives/ring_order.h) and the ring depth,
// and with the published CPU masks they are kept for the spin rule (runtime/links/spin_policy.h),
// which the communicator then applies through set_spin_us(): one exchange serves both.
//
// drive() is the poll/drain loop every caller uses: the runtime's progress engine and the
// collectives tests. It polls each transport in use (one: with the caller's timeout; several:
// each with timeout 0, then one sleep on all their wait_fd()s) and hands every completion to
// the work it drives.
//
// Threading: like a Transport (transport.h), driven by one owner thread at a time; wake() from
// any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "braid/store.h"
#include "common/deadline.h"
#include "common/env.h"
#include "common/function_ref.h"
#include "common/job_secret.h"
#include "common/status.h"
#include "runtime/links/spin_policy.h"
#include "transport/transport.h"

namespace braid {

struct PublishedLinks;

// What PeerLinks::drive moves forward: one or more operations posting on the links.
class LinkWork {
 public:
  virtual ~LinkWork() = default;
  virtual bool done() const = 0;
  // Starts what may start and posts what can be posted; never blocks.
  virtual Status advance() = 0;
  // One completion from any connection; *ours: it belonged to this work. Every completion of a
  // poll is handed over, even after one failed, so counts of outstanding operations stay true.
  virtual Status on_completion(const transport::Completion& c, bool* ours) = 0;
  // Before each poll, with the time read once for the pass (coarse_now(): up to a tick behind):
  // the deadline, an abort, the failure board. Non-OK ends drive() with it.
  virtual Status check(Clock::time_point now) = 0;
  // A completion no operation of this work claimed (a finished operation's): for TRACE lines.
  virtual void dropped(const transport::Completion& c) { (void)c; }
  // What drive() returns when polling failed: the status with the work's context.
  virtual Status poll_failed(Status s) { return s; }
};

// A LinkWork made of callables, for a loop whose state lives in the caller's locals. Each must
// outlive the drive() call it is given to.
class LinkWorkFns final : public LinkWork {
 public:
  LinkWorkFns(FunctionRef<bool()> done, FunctionRef<Status()> advance,
              FunctionRef<Status(const transport::Completion&, bool*)> take, FunctionRef<Status(Clock::time_point)> check,
              FunctionRef<void(const transport::Completion&)> dropped = {}, FunctionRef<Status(Status)> poll_failed = {})
      : done_(done), advance_(advance), take_(take), check_(check), dropped_(dropped), poll_failed_(poll_failed) {}
  bool done() const override { return done_(); }
  Status advance() override { return advance_(); }
  Status on_completion(const transport::Completion& c, bool* ours) override { return take_(c, ours); }
  Status check(Clock::time_point now) override { return check_(now); }
  void dropped(const transport::Completion& c) override {
    if (dropped_) dropped_(c);
  }
  Status poll_failed(Status s) override { return poll_failed_ ? poll_failed_(std::move(s)) : s; }

 private:
  FunctionRef<bool()> done_;
  FunctionRef<Status()> advance_;
  FunctionRef<Status(const transport::Completion&, bool*)> take_;
  FunctionRef<Status(Clock::time_point)> check_;
  FunctionRef<void(const transport::Completion&)> dropped_;
  FunctionRef<Status(Status)> poll_failed_;
};

struct LinkSetup {
  int rank = 0;
  int size = 1;
  uint64_t comm_id = 0;
  Env env;
  std::string master_addr;
  void* inproc_fabric = nullptr;
  auth::JobSecret secret;
};

class PeerLinks {
 public:
  // Brings up the transports, publishes this rank's card under "addr/<rank>" in `store` (the
  // communicator's namespace), reads every rank's and connects to every peer; bounded by
  // `deadline` and the store's timeout.
  static Result<std::unique_ptr<PeerLinks>> connect(const LinkSetup& setup, Store& store, Deadline deadline);
  // Links over connections made elsewhere (tests: InprocCluster). peers[r] belongs to
  // transports[transport_of[r]]; peers[rank] is null.
  PeerLinks(int rank, std::vector<std::unique_ptr<transport::Transport>> transports,
            std::vector<std::unique_ptr<transport::Connection>> peers, std::vector<size_t> transport_of);
  ~PeerLinks();
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(peers_.size()); }
  // peers()[r]: the connection to rank r; null for this rank. Stable for the links' life.
  const std::vector<transport::Connection*>& peers() const { return peers_; }
  // The transport that carries the connection to `peer` ("tcp (io_uring)", "shm"); "" for this
  // rank or a peer out of range.
  std::string transport_name(int peer) const;
  // What every connection can do (the narrowest of each field), for building executors.
  transport::Capabilities capabilities() const;
  // The ring order by host (collectives/ring_order.h); null when rank order is already it.
  const std::shared_ptr<const std::vector<int>>& ring_order() const { return ring_order_; }
  // Every connection of the job moves bytes by a CPU copy inside one host (same on every rank).
  bool all_host_local() const { return all_host_local_; }
  // By rank: the host label and CPU mask each rank published (this rank's own when size is 1);
  // empty for links made elsewhere.
  const std::vector<RankCpus>& rank_cpus() const { return rank_cpus_; }
  // Gives every transport in use the spin its waits take from now (Transport::set_spin_us):
  // they came up before the cards that decide it were read. Before the first poll() elsewhere.
  void set_spin_us(int us);
  // For BRAID_DEBUG=INFO: the transports in use, each peer's, and the ring.
  std::string describe() const;

  // Polls every transport in use (see the top); at most `timeout`, returning early with
  // completions or after wake().
  [[nodiscard]] Status poll(std::vector<transport::Completion>& out, std::chrono::microseconds timeout);
  // Drives `work` until it is done or reports an error. Each poll sleeps at most `slice`, and
  // not past `deadline` (work.check() says what its expiry means).
  [[nodiscard]] Status drive(LinkWork& work, const Deadline& deadline,
                             std::chrono::microseconds slice = std::chrono::milliseconds(100));
  // The same loop for a work of a known final type (the engine's LoneRun and LeanGroup): its
  // calls are direct, and its small ones inlined, on every pass of a small operation.
  template <typename Work>
  [[nodiscard]] Status drive_known(Work& work, const Deadline& deadline,
                                   std::chrono::microseconds slice = std::chrono::milliseconds(100));
  // After a failure: polls until `outstanding()` is 0 or `bound` passed, giving each completion
  // to `take`, so buffers of closed connections' operations may be freed.
  void drain(FunctionRef<size_t()> outstanding, FunctionRef<void(const transport::Completion&)> take,
             std::chrono::milliseconds bound);
  void close(int peer);
  void close_all();
  // The peers whose end of the connection is gone (Connection::peer_ended), in rank order. Ask
  // before close_all(), which ends every connection from this side.
  std::vector<int> ended_peers() const;
  // Where `peer` runs, for messages: "this host" when its host label is this rank's, else its
  // address without the port ("10.0.0.2"); "" when out of range.
  std::string peer_host(int peer) const;
  // (peer, TCP retransmissions) for every connection that had some.
  std::vector<std::pair<int, uint64_t>> retransmits() const;
  // Makes a poll() blocked on another thread return. Any thread.
  void wake();

 private:
  PeerLinks() = default;
  void finish_setup();
  // connect()'s third phase: one connection per peer from the transport chosen for it; the
  // transports no peer uses are closed (`up` is emptied).
  Status connect_peers(const LinkSetup& s, const std::vector<PublishedLinks>& all, const std::vector<std::string>& chosen,
                       std::vector<std::unique_ptr<transport::Transport>>& up, const std::vector<std::string>& families,
                       const Deadline& deadline);

  int rank_ = 0;
  std::vector<std::unique_ptr<transport::Transport>> transports_;  // in use: each carries a peer
  std::vector<std::unique_ptr<transport::Connection>> owned_;      // by peer
  std::vector<transport::Connection*> peers_;                      // by peer
  std::vector<size_t> transport_of_;                               // by peer: index in transports_
  std::vector<int> wait_fds_;       // transports_' wait_fd()s, when every one has one
  std::vector<std::string> hosts_;  // by rank: host labels (empty when not known)
  std::vector<RankCpus> rank_cpus_;  // by rank, from the cards
  std::shared_ptr<const std::vector<int>> ring_order_;
  bool all_host_local_ = false;
  std::vector<transport::Completion> polled_;  // drive()'s, kept to reuse its storage
};

template <typename Work>
Status PeerLinks::drive_known(Work& work, const Deadline& deadline, std::chrono::microseconds slice) {
  RETURN_IF_ERROR(work.advance());
  std::vector<transport::Completion>& done = polled_;
  while (!work.done()) {
    // Once per pass, and coarse: deadlines and the board's interval are far longer than a tick,
    // and an exact clock read is a fair share of a small operation.
    const auto now = coarse_now();
    RETURN_IF_ERROR(work.check(now));
    done.clear();
    const auto left = deadline.at() > now ? deadline.at() - now : Clock::duration::zero();
    const auto wait = std::min<std::chrono::nanoseconds>(left, slice);
    Status polled = poll(done, std::chrono::duration_cast<std::chrono::microseconds>(wait));
    if (!polled.is_ok()) return work.poll_failed(std::move(polled));
    Status first;
    for (const auto& c : done) {
      bool ours = false;
      Status s = work.on_completion(c, &ours);
      if (!s.is_ok() && first.is_ok()) first = std::move(s);
      if (!ours) work.dropped(c);
    }
    RETURN_IF_ERROR(first);
    RETURN_IF_ERROR(work.advance());
  }
  return Status::ok();
}

}  // namespace braid
