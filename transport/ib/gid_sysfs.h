// transport/ib/gid_sysfs.h - a port's GID table as sysfs shows it.
//
// Kernels before 5.9 cannot answer ibv_query_gid_table; sysfs has the same facts:
// /sys/class/infiniband/DEV/ports/N/gids/I ("fe80:0000:...:0001"), gid_attrs/types/I ("RoCE v2",
// "IB/RoCE v1") and gid_attrs/ndevs/I ("eth0"). No verbs, so it is tested on a fabricated tree.
#pragma once

#include <string>
#include <vector>

#include "transport/ib/port_choice.h"

namespace braid::transport::ib {

// The valid (non-zero) entries among indices [0, table_len) under `port_dir`
// (".../ports/N"); entries that cannot be read are skipped.
std::vector<GidInfo> read_gids_sysfs(const std::string& port_dir, int table_len);

}  // namespace braid::transport::ib
