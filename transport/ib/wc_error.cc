#include "transport/ib/wc_error.h"

#include <cstdio>

namespace braid::transport::ib {

ErrorCode wc_error_code(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return ErrorCode::peer_lost;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
      return ErrorCode::protocol;
    default:
      return ErrorCode::system;
  }
}

namespace {

std::string advice(ibv_wc_status status, const QpSettings& s) {
  switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
      return "the peer's NIC stopped acknowledging: the rank died, its link is down, or the route between the two "
             "GIDs does not work (check the peer's log, the link, BRAID_IB_GID_INDEX); on a lossy or slow fabric raise "
             "BRAID_IB_TIMEOUT (now " + std::to_string(s.timeout) + ") or BRAID_IB_RETRY_CNT (now " +
             std::to_string(s.retry_cnt) + ")";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "the peer had no receive work request posted for too long (is it stuck or gone?)";
    case IBV_WC_REM_ACCESS_ERR:
      return "the peer refused the write into its buffer (a stale registration: memory freed and reused without "
             "deregister_memory?)";
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
      return "a local buffer was not registered for this access (memory freed while an operation used it?)";
    case IBV_WC_WR_FLUSH_ERR:
      return "the QP had already failed; an earlier error is the cause";
    default:
      return "see both ranks' logs (BRAID_DEBUG=INFO); BRAID_TRANSPORT=tcp avoids ib";
  }
}

}  // namespace

std::string describe_wc_failure(const ibv_wc& wc, const std::string& doing, const QpSettings& settings) {
  char vendor[32];
  std::snprintf(vendor, sizeof vendor, "0x%x", wc.vendor_err);
  return doing + " failed: " + ibv_wc_status_str(wc.status) + " (verbs status " + std::to_string(wc.status) +
         ", vendor error " + vendor + "); " + advice(wc.status, settings);
}

}  // namespace braid::transport::ib
