// braid-config-doc: prints docs/configuration.md from common/env_vars.cc, the one list of BRAID_*
// variables. tests/common/config_doc_test.cc fails when the checked-in page differs.
#include <cstdio>
#include <cstring>
#include <string>

#include "common/env_vars.h"
#include "common/version.h"

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("usage: braid-config-doc > docs/configuration.md\nPrints the BRAID_* variables braid knows as markdown.\n");
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("%s\n", braid::build_summary().c_str());
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "braid-config-doc: unexpected argument '%s' (try --help)\n", argv[1]);
    return 2;
  }
  const std::string md = braid::configuration_markdown();
  return std::fwrite(md.data(), 1, md.size(), stdout) == md.size() ? 0 : 1;
}
