// common/version.h - what `--version` prints on every braid program: the version and the
// features this build was configured with, from braid_config.h (meson writes it at setup).
#pragma once

#include <string>

namespace braid {

// "io_uring yes, ib no, cuda no, torch no": each optional feature and whether it is built in.
std::string feature_list();

// Two lines, each ending in '\n': "PROGRAM (braid VERSION)" and "features: ...".
std::string version_text(const std::string& program);

}  // namespace braid
