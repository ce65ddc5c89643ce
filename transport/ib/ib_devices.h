// transport/ib/ib_devices.h - what RDMA devices and ports this host has (verbs).
#pragma once

#include <vector>

#include "common/status.h"
#include "transport/ib/port_choice.h"

namespace braid::transport::ib {

// Every port of every device ibv_get_device_list returns, with its state, MTU, link layer and
// valid GID table entries (type and network interface from ibv_query_gid_table, or from sysfs'
// gid_attrs where the kernel lacks that query). A device that cannot be opened or queried
// appears as one entry with port 0, not active, its state_name saying why, so that messages
// listing what exists still name it. An error only when verbs itself cannot list devices.
Result<std::vector<PortInfo>> enumerate_ports();

}  // namespace braid::transport::ib
