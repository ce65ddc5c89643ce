// transport/ib/wc_error.h - what a failed work completion means and what to try.
//
// Pure but for ibv_wc_status_str: the status codes and their advice are tested on hosts
// without RDMA.
#pragma once

#include <infiniband/verbs.h>

#include <string>

#include "common/status.h"
#include "transport/ib/verbs.h"

namespace braid::transport::ib {

// peer_lost for the statuses that mean the peer stopped answering (retries exhausted), protocol
// for a write the peer refused, system otherwise.
ErrorCode wc_error_code(ibv_wc_status status);
// "writing failed: transport retry counter exceeded (verbs status 12, vendor error 0x81);
// <what it usually means and what to try>". `doing` is "writing" or "receiving".
std::string describe_wc_failure(const ibv_wc& wc, const std::string& doing, const QpSettings& settings);

}  // namespace braid::transport::ib
