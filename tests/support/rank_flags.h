// Command-line flags of the tests' rank programs: each `--name` is bound to a field, and a
// missing value, a value that does not parse or an unknown flag ends the program with status 2
// and a line naming the flag, so a test that passes a wrong flag fails at once instead of
// training with defaults.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

namespace braid::testing {

class RankFlags {
 public:
  explicit RankFlags(std::string program) : program_(std::move(program)) {}

  RankFlags& value(const std::string& name, size_t* field) {
    return bind(name, [field](const std::string& v) { *field = std::stoul(v); });
  }
  RankFlags& value(const std::string& name, int* field) {
    return bind(name, [field](const std::string& v) { *field = std::stoi(v); });
  }
  RankFlags& value(const std::string& name, float* field) {
    return bind(name, [field](const std::string& v) { *field = std::stof(v); });
  }
  RankFlags& value(const std::string& name, double* field) {
    return bind(name, [field](const std::string& v) { *field = std::stod(v); });
  }
  RankFlags& value(const std::string& name, std::string* field) {
    return bind(name, [field](const std::string& v) { *field = v; });
  }
  // A flag without a value that sets `field` to true.
  RankFlags& toggle(const std::string& name, bool* field) {
    toggles_[name] = field;
    return *this;
  }

  void parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (auto t = toggles_.find(a); t != toggles_.end()) {
        *t->second = true;
        continue;
      }
      const auto v = values_.find(a);
      if (v == values_.end()) die("unknown flag " + a);
      if (i + 1 >= argc) die(a + " needs a value");
      try {
        v->second(argv[++i]);
      } catch (const std::exception&) {
        die(a + " got '" + argv[i] + "', which does not parse");
      }
    }
  }

 private:
  RankFlags& bind(const std::string& name, std::function<void(const std::string&)> set) {
    values_[name] = std::move(set);
    return *this;
  }
  [[noreturn]] void die(const std::string& what) const {
    std::fprintf(stderr, "%s: %s\n", program_.c_str(), what.c_str());
    std::exit(2);
  }

  std::string program_;
  std::map<std::string, std::function<void(const std::string&)>> values_;
  std::map<std::string, bool*> toggles_;
};

}  // namespace braid::testing
