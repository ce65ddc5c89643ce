#include "runtime/links/comm_links.h"

#include <algorithm>
#include <mutex>

#include "collectives/ring_depth.h"
#include "collectives/selection.h"
#include "common/job_secret.h"
#include "common/log.h"
#include "common/version.h"
#include "runtime/bootstrap/agreed_settings.h"

namespace braid {

Status CommLinks::connect(CommunicatorConfig& cfg) {
  static std::once_flag build_logged;
  std::call_once(build_logged, [] { BRAID_LOG(info) << build_summary(); });  // version and features
  const int rank = cfg.rank, size = cfg.size;
  if (size > 1) RETURN_IF_ERROR(agree_on_settings(*cfg.store, cfg.env, rank, size));
  LinkSetup setup;
  setup.rank = rank;
  setup.size = size;
  setup.comm_id = cfg.comm_id;
  setup.env = cfg.env;
  setup.master_addr = cfg.master_addr;
  setup.inproc_fabric = cfg.inproc_fabric;
  ASSIGN_OR_RETURN(setup.secret, Result<auth::JobSecret>(auth::process_secret()));
  ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links,
                   PeerLinks::connect(setup, *cfg.store, Deadline::after_seconds(cfg.env.rendezvous_timeout_s)));
  // The spin depends on where the other ranks run, which their links cards told; the transports
  // came up before those were read and take it now, before the first collective polls them.
  cfg.env.spin_us = settle_spin(links->rank_cpus(), cfg.env, rank).spin_us;
  links->set_spin_us(cfg.env.spin_us);
  // Every rank sees the same cards and the same BRAID_CHUNK_BYTES (agreed settings), so every
  // rank picks the same depth (it fixes the order of a ring's messages).
  collectives::RingDepth depth =
      collectives::choose_ring_depth(static_cast<size_t>(std::max(0, cfg.env.ring_depth)),
                                     size == 1 || links->all_host_local(), cfg.env.chunk_bytes,
                                     static_cast<size_t>(size));
  ring_depth_ = depth.depth;
  ring_depth_why_ = std::move(depth.why);
  {
    MutexLock lock(mu_);
    links_ = std::move(links);
  }
  BRAID_LOG(info) << "communicator ready: rank " << cfg.rank << " of " << cfg.size << " (comm " << std::hex
                  << cfg.comm_id << std::dec << "), transport " << links_->describe() << ", timeout "
                  << cfg.env.timeout_s << " s, operation headers on, ring depth " << ring_depth_ << " ("
                  << ring_depth_why_ << "), algorithms "
                  << (cfg.env.algo == "auto" ? "by size: " + collectives::describe_selection(cfg.size)
                                             : cfg.env.algo + " (BRAID_ALGO) where the collective has it")
                  << "; waiters spin " << cfg.env.spin_us << " us";
  // Each peer's own transport (shm, ib or tcp), as the links chose it.
  peer_transports_.resize(static_cast<size_t>(cfg.size));
  for (int r = 0; r < cfg.size; ++r) {
    peer_transports_[static_cast<size_t>(r)] = r == cfg.rank ? std::string("self") : links_->transport_name(r);
  }
  return Status::ok();
}

void CommLinks::wake() {
  MutexLock lock(mu_);
  if (links_) links_->wake();
}

void CommLinks::reset() {
  MutexLock lock(mu_);
  links_.reset();
}

}  // namespace braid
