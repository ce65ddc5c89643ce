// common/version.h - what `--version` prints on every braid program: the version and the
// features this build was configured with, from braid_config.h (meson writes it at setup).
#pragma once

#include <string>

namespace braid {

// "io_uring yes, ib no, cuda no, torch no": each optional feature and whether it is built in
// ("ib": the ib transport itself, not only libibverbs).
std::string feature_list();

// "braid 0.1.0 (io_uring yes, ib no, cuda no, torch no)": the BRAID_DEBUG=INFO line.
std::string build_summary();

// Two lines, each ending in '\n': "PROGRAM (braid VERSION)" and "features: ...".
std::string version_text(const std::string& program);

}  // namespace braid
