// A fresh directory under /tmp for one test, removed with everything in it when the test ends.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace braid::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "braid-test") {
    std::string tmpl("/tmp/");  // appended piecewise: gcc 12 sees a false overlap in a + b + c
    tmpl.append(prefix).append("-XXXXXX");
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + " failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace braid::testing
