#include "transport/ib/hca_spec.h"

#include <cctype>

namespace braid::transport::ib {
namespace {

constexpr std::string_view kAllowed =
    "allowed: comma-separated DEVICE or DEVICE:PORT entries (names match as prefixes), '^' in front to "
    "exclude them, '=' in front to match names exactly; e.g. mlx5_0:1,mlx5_1 or ^mlx5_2 or =rxe0";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

Status bad(std::string_view text, const std::string& what) {
  return invalid_argument("BRAID_IB_HCA='" + std::string(text) + "': " + what + "; " + std::string(kAllowed));
}

// Device names as the kernel gives them (mlx5_0, rxe0, bnxt_re1, irdma-0...): no separators of
// this syntax, no spaces.
bool valid_device(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<HcaSpec> parse_hca_spec(std::string_view text) {
  HcaSpec spec;
  spec.text = std::string(text);
  std::string_view rest = trim(text);
  if (rest.empty()) return spec;
  if (rest.front() == '^') spec.exclude = true, rest.remove_prefix(1);
  if (!rest.empty() && rest.front() == '=') spec.exact = true, rest.remove_prefix(1);
  if (trim(rest).empty()) return bad(text, "no device named after '" + std::string(spec.exclude ? "^" : "=") + "'");
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    if (item.empty()) return bad(text, "an empty entry");
    HcaEntry entry;
    const size_t colon = item.find(':');
    entry.device = std::string(item.substr(0, colon));
    if (!valid_device(entry.device)) {
      return bad(text, "'" + entry.device + "' is not a device name (letters, digits, '_', '-', '.')");
    }
    if (colon != std::string_view::npos) {
      const std::string_view port = item.substr(colon + 1);
      int n = 0;
      bool ok = !port.empty() && port.size() <= 3;
      for (char c : port) ok = ok && std::isdigit(static_cast<unsigned char>(c)), n = n * 10 + (c - '0');
      if (!ok || n < 1 || n > 255) {
        return bad(text, "port '" + std::string(port) + "' of " + entry.device + " is not a number in [1, 255]");
      }
      entry.port = n;
    }
    spec.entries.push_back(std::move(entry));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return spec;
}

bool hca_spec_allows(const HcaSpec& spec, std::string_view device, int port) {
  if (spec.entries.empty()) return true;
  bool listed = false;
  for (const HcaEntry& e : spec.entries) {
    const bool name = spec.exact ? device == e.device : device.starts_with(e.device);
    listed = listed || (name && (e.port == -1 || e.port == port));
  }
  return listed != spec.exclude;
}

}  // namespace braid::transport::ib
