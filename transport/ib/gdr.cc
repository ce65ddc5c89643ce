#include "transport/ib/gdr.h"

namespace braid::transport::ib {

Result<GdrSetting> parse_gdr_setting(std::string_view text) {
  if (text == "auto") return GdrSetting::automatic;
  if (text == "0") return GdrSetting::off;
  if (text == "1") return GdrSetting::on;
  return invalid_argument("BRAID_GDR='" + std::string(text) + "' is not one of: 0, 1, auto");
}

GdrDecision decide_gdr(GdrSetting, const GdrProbe&) { return {false, true, "decide_gdr: not implemented yet"}; }

}  // namespace braid::transport::ib
