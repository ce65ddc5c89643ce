#include "transport/ib/write_batch.h"

namespace braid::transport::ib {

void WriteBatch::add(uint32_t qp, const ibv_send_wr& wr) {
  Lane& lane = lanes_[qp];
  lane.wrs.push_back(wr);
  lane.wrs.back().next = nullptr;
  lane.sges.push_back(wr.num_sge > 0 ? wr.sg_list[0] : ibv_sge{});
  ++queued_;
}

Status WriteBatch::flush(const std::vector<QpPtr>& qps, uint64_t* doorbells, uint64_t* work_requests) {
  Status result;
  if (queued_ == 0) return result;
  queued_ = 0;
  for (size_t q = 0; q < lanes_.size(); ++q) {
    Lane& lane = lanes_[q];
    const size_t n = lane.wrs.size();
    if (n == 0) continue;
    // The vectors no longer grow: pointers into them hold until the post returns.
    for (size_t i = 0; i < n; ++i) {
      lane.wrs[i].next = i + 1 < n ? &lane.wrs[i + 1] : nullptr;
      if (lane.wrs[i].num_sge > 0) lane.wrs[i].sg_list = &lane.sges[i];
    }
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(qps[q].get(), lane.wrs.data(), &bad);
    if (doorbells != nullptr) ++*doorbells;
    if (work_requests != nullptr) *work_requests += n;
    if (rc != 0 && result.is_ok()) {
      const size_t posted = bad == nullptr ? 0 : static_cast<size_t>(bad - lane.wrs.data());
      result = system_error("posting " + std::to_string(n) + " writes on QP " + std::to_string(q) + " (" +
                                std::to_string(n - posted) + " refused)",
                            rc);
    }
    lane.wrs.clear();
    lane.sges.clear();
  }
  return result;
}

void WriteBatch::clear() {
  queued_ = 0;
  for (Lane& lane : lanes_) {
    lane.wrs.clear();
    lane.sges.clear();
  }
}

}  // namespace braid::transport::ib
