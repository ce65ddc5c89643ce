#include "transport/ib/verbs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "transport/ib/reg_cache.h"

namespace braid::transport::ib {

namespace {

ibv_mtu mtu_enum(uint32_t bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: return IBV_MTU_1024;
  }
}

}  // namespace

std::string Device::where() const { return choice_.device + " port " + std::to_string(choice_.port); }

Result<std::unique_ptr<Device>> Device::open(const PortChoice& choice) {
  std::unique_ptr<Device> d(new Device());
  d->choice_ = choice;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return system_error("ibv_get_device_list", errno);
  for (int i = 0; i < n && d->ctx_ == nullptr; ++i) {
    if (choice.device == ibv_get_device_name(list[i])) d->ctx_ = ibv_open_device(list[i]);
  }
  const int open_errno = errno;
  ibv_free_device_list(list);
  const std::string where = "ib: opening " + d->where();
  if (d->ctx_ == nullptr) return system_error(where + " (ibv_open_device; is /dev/infiniband readable?)", open_errno);
  if (ibv_query_device(d->ctx_, &d->attr_) != 0) return system_error(where + ": ibv_query_device", errno);
  ibv_port_attr pa{};
  if (ibv_query_port(d->ctx_, static_cast<uint8_t>(choice.port), &pa) != 0) {
    return system_error(where + ": ibv_query_port", errno);
  }
  d->max_msg_ = pa.max_msg_sz;
  d->pd_ = ibv_alloc_pd(d->ctx_);
  if (d->pd_ == nullptr) return system_error(where + ": ibv_alloc_pd", errno);
  d->channel_ = ibv_create_comp_channel(d->ctx_);
  if (d->channel_ == nullptr) return system_error(where + ": ibv_create_comp_channel", errno);
  // poll() drains the channel without blocking once epoll said it is readable.
  const int flags = fcntl(d->channel_->fd, F_GETFL);
  if (flags < 0 || fcntl(d->channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return system_error(where + ": making the completion channel non-blocking", errno);
  }
  return d;
}

Device::~Device() {
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  if (ctx_ != nullptr) ibv_close_device(ctx_);
}

Result<RegisteredBuffer> RegisteredBuffer::make(const Device& dev, size_t bytes) {
  RegisteredBuffer b;
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) return system_error("allocating an ib ring", ENOMEM);
  std::memset(p, 0, bytes);
  b.mem_.reset(static_cast<unsigned char*>(p));
  b.bytes_ = bytes;
  b.mr_.reset(ibv_reg_mr(dev.pd(), p, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  if (!b.mr_) return registration_error(errno, bytes, dev.where());
  return b;
}

Result<QpPtr> create_rc_qp(const Device& dev, ibv_cq* cq, uint32_t send_depth, uint32_t recv_depth,
                           uint32_t inline_bytes, uint32_t* max_inline) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = send_depth;
  a.cap.max_recv_wr = recv_depth;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = inline_bytes;
  QpPtr qp(ibv_create_qp(dev.pd(), &a));
  if (!qp) {
    a.cap.max_inline_data = 0;  // a device without inline data still carries every message
    qp.reset(ibv_create_qp(dev.pd(), &a));
  }
  if (!qp) return system_error("ib: creating a QP on " + dev.where() + " (ibv_create_qp)", errno);
  *max_inline = a.cap.max_inline_data;
  return qp;
}

Status connect_qp(ibv_qp* qp, const Device& dev, const QpAddress& self, const QpAddress& peer,
                  const ConnectionCard& peer_card, uint32_t mtu_bytes, const QpSettings& s) {
  const PortChoice& port = dev.port();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(port.port);
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    return system_error("ib: QP to INIT on " + dev.where(), errno);
  }
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu_enum(mtu_bytes);
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;  // 0.64 ms before a sender retries a write that found no receive posted
  a.ah_attr.port_num = static_cast<uint8_t>(port.port);
  a.ah_attr.sl = static_cast<uint8_t>(s.sl);
  a.ah_attr.dlid = peer_card.lid;
  // RoCE always routes by GID; InfiniBand does where the peer published one (a GID index was
  // forced) and by LID otherwise.
  const bool any_gid = std::any_of(peer_card.gid.begin(), peer_card.gid.end(), [](uint8_t b) { return b != 0; });
  if (port.ethernet || any_gid) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, peer_card.gid.data(), 16);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(port.gid_index);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = static_cast<uint8_t>(s.tc);
  }
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    return system_error("ib: QP to RTR on " + dev.where() + " towards QP " + std::to_string(peer.qpn) +
                            " (GID index " + std::to_string(port.gid_index) + ", MTU " + std::to_string(mtu_bytes) +
                            "; a wrong BRAID_IB_GID_INDEX?)",
                        errno);
  }
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = static_cast<uint8_t>(s.timeout);
  a.retry_cnt = static_cast<uint8_t>(s.retry_cnt);
  a.rnr_retry = 7;  // 7 = without limit: a receiver only runs short of receives for a moment
  a.sq_psn = self.psn;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    return system_error("ib: QP to RTS on " + dev.where(), errno);
  }
  return Status::ok();
}

}  // namespace braid::transport::ib
