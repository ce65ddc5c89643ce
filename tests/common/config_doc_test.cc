// docs/configuration.md is what common/env_vars.cc says: a variable added, removed or reworded
// in the code and not in the page (or the reverse) fails here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/env_vars.h"

namespace braid {
namespace {

TEST(ConfigDoc, CheckedInPageMatchesTheCode) {
  const char* path = std::getenv("CONFIG_DOC_MD");
  ASSERT_NE(path, nullptr) << "meson sets CONFIG_DOC_MD to docs/configuration.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream page;
  page << in.rdbuf();
  const std::string want = configuration_markdown();
  if (page.str() == want) return;
  // The first line that differs, so the failure says where.
  std::istringstream a(page.str()), b(want);
  std::string la, lb;
  int line = 1;
  while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
  ADD_FAILURE() << path << " differs from what the code generates, first at line " << line << ":\n  page: " << la
                << "\n  code: " << lb
                << "\nRegenerate it: ninja -C build tools/config_doc/braid-config-doc && "
                   "build/tools/config_doc/braid-config-doc > docs/configuration.md";
}

}  // namespace
}  // namespace braid
