#include "transport/ib/gid_sysfs.h"

#include <cctype>
#include <fstream>

namespace braid::transport::ib {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

// "fe80:0000:0000:0000:0211:22ff:fe33:4455" (eight groups of four hex digits) to bytes.
bool parse_gid(const std::string& text, Gid& gid) {
  size_t pos = 0;
  for (size_t group = 0; group < 8; ++group) {
    if (group > 0 && (pos >= text.size() || text[pos++] != ':')) return false;
    unsigned value = 0;
    for (size_t d = 0; d < 4; ++d, ++pos) {
      if (pos >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[pos]))) return false;
      const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(text[pos])));
      value = value * 16 + static_cast<unsigned>(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    gid[2 * group] = static_cast<uint8_t>(value >> 8);
    gid[2 * group + 1] = static_cast<uint8_t>(value & 0xff);
  }
  return pos == text.size();
}

}  // namespace

std::vector<GidInfo> read_gids_sysfs(const std::string& port_dir, int table_len) {
  std::vector<GidInfo> out;
  for (int i = 0; i < table_len; ++i) {
    const std::string index = std::to_string(i);
    GidInfo info;
    info.index = i;
    if (!parse_gid(read_line(port_dir + "/gids/" + index), info.gid) || info.gid == Gid{}) continue;
    info.roce_v2 = read_line(port_dir + "/gid_attrs/types/" + index) == "RoCE v2";
    info.netdev = read_line(port_dir + "/gid_attrs/ndevs/" + index);
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace braid::transport::ib
