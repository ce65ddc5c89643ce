#include "transport/ib/port_choice.h"

namespace braid::transport::ib {

Result<PortChoice> choose_port(const std::vector<PortInfo>&, const HcaSpec&, std::optional<int>,
                               const std::string&) {
  return internal_error("choose_port: not implemented yet");
}
std::string format_gid(const Gid&) { return {}; }
bool is_ipv4_mapped(const Gid&) { return false; }
std::optional<Gid> gid_of_address(const std::string&) { return std::nullopt; }
std::string describe_port(const PortInfo& port) { return port.device; }

}  // namespace braid::transport::ib
