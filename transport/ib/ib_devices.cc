#include "transport/ib/ib_devices.h"

namespace braid::transport::ib {

Result<std::vector<PortInfo>> enumerate_ports() { return internal_error("enumerate_ports: not implemented yet"); }

}  // namespace braid::transport::ib
