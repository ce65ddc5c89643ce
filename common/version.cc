#include "common/version.h"

#include "braid/version.h"
#include "braid_config.h"

namespace braid {
namespace {

const char* yes_no(bool on) { return on ? "yes" : "no"; }

}  // namespace

std::string feature_list() {
  return std::string("io_uring ") + yes_no(BRAID_HAVE_LIBURING) + ", ib " + yes_no(BRAID_HAVE_IB) + ", cuda " +
         yes_no(BRAID_HAVE_CUDA) + ", torch " + yes_no(BRAID_HAVE_TORCH);
}

const char* version() noexcept { return BRAID_VERSION; }

std::string features() { return feature_list(); }

std::string build_summary() { return std::string("braid ") + BRAID_VERSION + " (" + feature_list() + ")"; }

std::string version_text(const std::string& program) {
  return program + " (braid " + BRAID_VERSION + ")\nfeatures: " + feature_list() + "\n";
}

}  // namespace braid
