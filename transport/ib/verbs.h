// transport/ib/verbs.h - owners of verbs objects (device context, PD, completion channel, CQ,
// QP, MR), so each is released exactly once and in the right order, and the QP state changes
// INIT -> RTR -> RTS with the attributes an RC connection needs.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "transport/ib/ib_wire.h"
#include "transport/ib/port_choice.h"

namespace braid::transport::ib {

// One opened device with its protection domain and the completion channel every CQ of the
// transport reports to (its fd is what an idle poll() sleeps on).
class Device {
 public:
  // Opens `choice.device` and checks `choice.port`; the message names the device on failure.
  static Result<std::unique_ptr<Device>> open(const PortChoice& choice);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  ibv_comp_channel* channel() const { return channel_; }
  const PortChoice& port() const { return choice_; }
  const ibv_device_attr& attr() const { return attr_; }
  uint32_t max_msg_bytes() const { return max_msg_; }
  // "rxe0 port 1" for messages.
  std::string where() const;

 private:
  Device() = default;
  PortChoice choice_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_device_attr attr_{};
  uint32_t max_msg_ = 0;
};

struct CqDeleter {
  void operator()(ibv_cq* cq) const { ibv_destroy_cq(cq); }
};
struct QpDeleter {
  void operator()(ibv_qp* qp) const { ibv_destroy_qp(qp); }
};
struct MrDeleter {
  void operator()(ibv_mr* mr) const { ibv_dereg_mr(mr); }
};
using CqPtr = std::unique_ptr<ibv_cq, CqDeleter>;
using QpPtr = std::unique_ptr<ibv_qp, QpDeleter>;
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;

// Memory the connection owns (its rings), page-aligned, registered for remote writes.
class RegisteredBuffer {
 public:
  static Result<RegisteredBuffer> make(const Device& dev, size_t bytes);
  RegisteredBuffer() = default;
  RegisteredBuffer(RegisteredBuffer&&) = default;
  RegisteredBuffer& operator=(RegisteredBuffer&&) = default;

  unsigned char* data() const { return mem_.get(); }
  size_t bytes() const { return bytes_; }
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> mem_;
  size_t bytes_ = 0;
  MrPtr mr_;
};

struct QpSettings {
  int timeout = 18;    // BRAID_IB_TIMEOUT: 4.096 us * 2^timeout per retry
  int retry_cnt = 7;   // BRAID_IB_RETRY_CNT
  int sl = 0;          // BRAID_IB_SL
  int tc = 0;          // BRAID_IB_TC
};

// An RC QP on `cq` with room for `send_depth`/`recv_depth` work requests and, when the device
// allows, `inline_bytes` of inline data (max_inline() says what it got). Left in RESET.
Result<QpPtr> create_rc_qp(const Device& dev, ibv_cq* cq, uint32_t send_depth, uint32_t recv_depth,
                           uint32_t inline_bytes, uint32_t* max_inline);
// RESET -> INIT -> RTR -> RTS towards the peer's QP. `mtu_bytes`: the smaller of both ends'.
Status connect_qp(ibv_qp* qp, const Device& dev, const QpAddress& self, const QpAddress& peer,
                  const ConnectionCard& peer_card, uint32_t mtu_bytes, const QpSettings& s);

}  // namespace braid::transport::ib
