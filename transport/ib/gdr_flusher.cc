#include "transport/ib/gdr_flusher.h"

#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "transport/ib/wc_error.h"  // wc_error_code

namespace braid::transport::ib {

namespace {

std::mutex stats_mutex;
FlushStats stats;

void count(bool posted, bool completed, bool failed, const unsigned char* last, size_t last_bytes) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats.posted += posted;
  stats.completed += completed;
  stats.failed += failed;
  if (last != nullptr) {
    std::memcpy(stats.last, last, last_bytes);
    stats.last_bytes = last_bytes;
  }
}

}  // namespace

FlushStats gdr_flush_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  return stats;
}

Result<std::unique_ptr<GdrFlusher>> GdrFlusher::create(const Device& dev, const QpSettings& qp, bool gdr_on,
                                                       FlushTestMode mode, std::chrono::milliseconds bound) {
  std::unique_ptr<GdrFlusher> f(new GdrFlusher(dev, gdr_on, mode, bound));
  const std::string where = "ib: the GPUDirect flush QP on " + dev.where();
  f->cq_.reset(ibv_create_cq(dev.context(), 4, nullptr, nullptr, 0));
  if (!f->cq_) return system_error(where + ": ibv_create_cq", errno);
  uint32_t max_inline = 0;
  ASSIGN_OR_RETURN(f->qp_, create_rc_qp(dev, f->cq_.get(), 2, 1, 0, &max_inline));
  ASSIGN_OR_RETURN(f->sink_, RegisteredBuffer::make(dev, 4096));
  // Connected to itself: the card this port would publish, and the QP's own number.
  const PortChoice& port = dev.port();
  ConnectionCard self_card;
  self_card.lid = port.lid;
  if (port.ethernet || port.gid_index != 0) self_card.gid = port.gid;
  const QpAddress self{f->qp_->qp_num, static_cast<uint32_t>(std::random_device{}() & 0xffffff)};
  Status st = connect_qp(f->qp_.get(), dev, self, self, self_card, static_cast<uint32_t>(port.mtu_bytes), qp);
  if (!st.is_ok()) return st.with_context(where + " (connected to itself): ");
  return f;
}

Status GdrFlusher::before_delivery(const Mr& mr, const void* data, size_t bytes, bool written_by_nic) {
  if (!needs_gdr_flush(FlushCase{gdr_on_, mr.kind, written_by_nic, bytes}, mode_)) return Status::ok();
  return flush(mr, data, bytes);
}

Status GdrFlusher::flush(const Mr& mr, const void* data, size_t bytes) {
  const std::string what = "the GPUDirect flush (an RDMA READ on " + dev_.where() + " of the received " +
                           std::to_string(bytes) + "-byte message)";
  if (broken_) return Status(ErrorCode::system, what + " cannot run: an earlier flush failed and left its QP in error");
  // The last bytes of the message: any address in the region orders the writes before it; the
  // tail lets a test check that the READ really saw this message.
  const size_t n = std::min(bytes, kReadBytes);
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(sink_.data());
  sge.length = static_cast<uint32_t>(n);
  sge.lkey = sink_.lkey();
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(data) + bytes - n;
  wr.wr.rdma.rkey = mode_ == FlushTestMode::wrong_rkey ? mr.rkey ^ 0x5a5a00 : mr.rkey;
  const int rc = ibv_post_send(qp_.get(), &wr, &bad);
  if (rc != 0) {
    broken_ = true;
    count(false, false, true, nullptr, 0);
    return system_error(what + ": ibv_post_send", rc);
  }
  count(true, false, false, nullptr, 0);
  const auto deadline = std::chrono::steady_clock::now() + bound_;
  for (;;) {
    ibv_wc wc{};
    const int got = ibv_poll_cq(cq_.get(), 1, &wc);
    if (got < 0) {
      broken_ = true;
      count(false, false, true, nullptr, 0);
      return Status(ErrorCode::system, what + ": ibv_poll_cq failed (the device is gone?)");
    }
    if (got == 1) {
      if (wc.status != IBV_WC_SUCCESS) {
        broken_ = true;
        count(false, false, true, nullptr, 0);
        return Status(wc_error_code(wc.status),
                      what + " failed: " + ibv_wc_status_str(wc.status) + " (verbs status " +
                          std::to_string(wc.status) + "); the NIC could not read back the buffer it had just " +
                          "written (its registration was dropped, or the memory freed, during the operation?)");
      }
      count(false, true, false, sink_.data(), n);
      return Status::ok();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      broken_ = true;
      count(false, false, true, nullptr, 0);
      return Status(ErrorCode::timeout,
                    what + " did not complete within " + std::to_string(bound_.count()) +
                        " ms; the NIC stopped answering its own READ (check the port with ibv_devinfo)");
    }
    std::this_thread::yield();
  }
}

}  // namespace braid::transport::ib
