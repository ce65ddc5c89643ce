// The connection's setup: QPs, CQ and rings, its card, and the move to RTS. The data path is
// in ib_connection.cc.
#include "transport/ib/ib_connection.h"

#include <algorithm>
#include <cerrno>
#include <random>

namespace braid::transport::ib {

namespace {

uint32_t random_psn() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  return rng() & kImmSeqMask;
}

}  // namespace

IbConnection::IbConnection(const IbShared& shared, int self_rank, int peer_rank)
    : shared_(shared), self_rank_(self_rank), peer_rank_(peer_rank), batch_(shared.nqps) {}

IbConnection::~IbConnection() {
  if (shared_.forget) shared_.forget(this);
  reporting_ = false;  // nobody may receive a completion that points at this connection any more
  close();
  qps_.clear();  // before their CQ
}

Result<std::unique_ptr<IbConnection>> IbConnection::create(const IbShared& shared, int self_rank, int peer_rank) {
  std::unique_ptr<IbConnection> c(new IbConnection(shared, self_rank, peer_rank));
  Device& dev = *shared.device;
  const uint32_t send_depth = std::min<uint32_t>(kSendDepth, static_cast<uint32_t>(dev.attr().max_qp_wr));
  const uint32_t recv_depth = std::min<uint32_t>(kRecvDepth, static_cast<uint32_t>(dev.attr().max_qp_wr));
  const int cqe = std::min<int>(static_cast<int>(shared.nqps * (send_depth + recv_depth)), dev.attr().max_cqe);
  c->cq_.reset(ibv_create_cq(dev.context(), cqe, nullptr, dev.channel(), 0));
  if (!c->cq_) return system_error("ib: creating a CQ of " + std::to_string(cqe) + " entries on " + dev.where(), errno);
  for (uint32_t i = 0; i < shared.nqps; ++i) {
    uint32_t inline_bytes = 0;
    ASSIGN_OR_RETURN(QpPtr qp, create_rc_qp(dev, c->cq_.get(), send_depth, recv_depth, 256, &inline_bytes));
    c->max_inline_ = i == 0 ? inline_bytes : std::min(c->max_inline_, inline_bytes);
    c->self_qps_.push_back(QpAddress{qp->qp_num, random_psn()});
    c->qps_.push_back(std::move(qp));
  }
  c->sq_used_.assign(shared.nqps, 0);
  c->recv_owed_.assign(shared.nqps, 0);
  ASSIGN_OR_RETURN(c->cts_ring_, RegisteredBuffer::make(dev, kCtsEntries * kCtsEntryBytes));
  ASSIGN_OR_RETURN(c->cts_staging_, RegisteredBuffer::make(dev, kCtsEntries * kCtsEntryBytes));
  ASSIGN_OR_RETURN(c->eager_ring_, RegisteredBuffer::make(dev, size_t{kEagerSlots} * kEagerSlotBytes));
  ASSIGN_OR_RETURN(c->eager_staging_, RegisteredBuffer::make(dev, size_t{kEagerSlots} * kEagerSlotBytes));
  return c;
}

ConnectionCard IbConnection::card() const {
  const PortChoice& port = shared_.device->port();
  ConnectionCard c;
  c.nqps = static_cast<uint16_t>(qps_.size());
  c.lid = port.lid;
  c.mtu_bytes = static_cast<uint32_t>(port.mtu_bytes);
  if (port.ethernet || port.gid_index != 0) c.gid = port.gid;
  c.cts_addr = reinterpret_cast<uint64_t>(cts_ring_.data());
  c.cts_rkey = cts_ring_.rkey();
  c.cts_entries = kCtsEntries;
  c.eager_addr = reinterpret_cast<uint64_t>(eager_ring_.data());
  c.eager_rkey = eager_ring_.rkey();
  c.eager_slots = kEagerSlots;
  c.eager_slot_bytes = kEagerSlotBytes;
  for (size_t i = 0; i < self_qps_.size(); ++i) c.qps[i] = self_qps_[i];
  return c;
}

Status IbConnection::start(const ConnectionCard& peer, UniqueFd socket, std::string peer_address) {
  peer_ = peer;
  peer_address_ = std::move(peer_address);
  socket_ = std::move(socket);
  const uint32_t mtu = std::min<uint32_t>(peer.mtu_bytes, static_cast<uint32_t>(shared_.device->port().mtu_bytes));
  for (size_t i = 0; i < qps_.size(); ++i) {
    RETURN_IF_ERROR(connect_qp(qps_[i].get(), *shared_.device, self_qps_[i], peer.qps[i], peer, mtu, shared_.qp));
    const uint32_t depth = std::min<uint32_t>(kRecvDepth, static_cast<uint32_t>(shared_.device->attr().max_qp_wr));
    RETURN_IF_ERROR(post_recv_wrs(static_cast<uint32_t>(i), depth));
  }
  started_ = true;
  return Status::ok();
}


}  // namespace braid::transport::ib
