// runtime/links/comm_links.h - a communicator's links (peer_links.h) and what every rank decides
// alike from them: the ring depth and which transport carries each peer.
//
// connect() runs once, on the progress thread at setup, after every rank showed it runs with
// the same settings (bootstrap/agreed_settings.h). Then only the thread that holds the engine
// (op_queue.h) uses the links, without a lock; mu_ guards only their lifetime against wake()
// from other threads (abort()).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "runtime/communicator_config.h"
#include "runtime/links/peer_links.h"

namespace braid {

class CommLinks {
 public:
  // Builds one connection to every other rank, each from the transport that fits it, and
  // settles cfg.env.spin_us from where the ranks run.
  Status connect(CommunicatorConfig& cfg) EXCLUDES(mu_);
  // Null before connect() succeeded and after reset().
  PeerLinks* get() const { return links_.get(); }
  PeerLinks* operator->() const { return links_.get(); }
  // Plan::ring_depth for every collective: collectives::choose_ring_depth (BRAID_RING_DEPTH,
  // else 1 when every connection of the job is host-local, PeerLinks::all_host_local, else
  // enough segments for kNetworkHopBytes per hop), from what every rank sees alike.
  size_t ring_depth() const { return ring_depth_; }
  // By rank: what the connection to it runs on ("self" for this rank). Constant after connect().
  const std::vector<std::string>& peer_transports() const { return peer_transports_; }
  // Makes a poll blocked on the engine's thread return. Any thread.
  void wake() EXCLUDES(mu_);
  // The progress thread's last act: the links close.
  void reset() EXCLUDES(mu_);

 private:
  Mutex mu_;
  std::unique_ptr<PeerLinks> links_;  // set and reset under mu_
  size_t ring_depth_ = 1;
  std::string ring_depth_why_;
  std::vector<std::string> peer_transports_;
};

}  // namespace braid
