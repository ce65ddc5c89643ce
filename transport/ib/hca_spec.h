// transport/ib/hca_spec.h - which RDMA devices and ports BRAID_IB_HCA lets the ib transport use.
//
// The syntax is NCCL_IB_HCA's, so a cluster's existing setting carries over:
//   "mlx5_0:1,mlx5_1"  devices whose names start with mlx5_0 (port 1 only) or mlx5_1 (any port)
//   "^mlx5_2"          every device except those starting with mlx5_2
//   "=mlx5_0"          names match exactly, not as prefixes ("^=mlx5_0" excludes exactly one)
//   ""                 every device
// Pure: no verbs, so it is tested on any machine.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace braid::transport::ib {

struct HcaEntry {
  std::string device;
  int port = -1;  // -1: any port of the device
};

struct HcaSpec {
  bool exclude = false;  // '^': the entries say which devices NOT to use
  bool exact = false;    // '=': names compare whole, not as prefixes
  std::vector<HcaEntry> entries;  // empty: every device
  std::string text;      // as the user wrote it, for messages
};

// Parses BRAID_IB_HCA's value. Errors name the variable, the text and what is allowed.
Result<HcaSpec> parse_hca_spec(std::string_view text);

// Whether `spec` lets the transport use `port` of `device`.
bool hca_spec_allows(const HcaSpec& spec, std::string_view device, int port);

}  // namespace braid::transport::ib
