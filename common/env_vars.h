// common/env_vars.h - the one list of every BRAID_* variable.
//
// Env::parse reads the user's variables by these names and takes their bounds and choices from
// here; docs/configuration.md is printed from this list (tools/config_doc); global_env() warns
// about a BRAID_* name in the environment that is not on it. A new variable is a row here, a
// field in Env and a line in Env::parse; tests/common/env_vars_test.cc checks the three agree.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

enum class EnvKind : uint8_t {
  choice,   // one of `allowed`, separated by '|'
  integer,  // in [min, max]
  bytes,    // 0 or a size in [min, max]; K/M/G suffixes
  seconds,  // a positive number of seconds
  text,     // free text; `allowed` describes it
};

// Who sets it. Only `user` variables are settings; the others are listed so that a program
// started by braidrun or by braid's tests does not warn about them.
enum class EnvScope : uint8_t {
  user,      // read by the library (Env)
  launcher,  // set by braidrun for its ranks, read by the library; users do not set it
  tool,      // read by a script or by braid's own tests, never by the library
};

struct EnvVar {
  std::string_view name;
  EnvKind kind;
  std::string_view default_value;  // as a user writes it; "" = unset, meaning in `meaning`
  std::string_view allowed;        // choices "a|b|c", or the allowed values in words
  int64_t min = 0, max = 0;        // integer and bytes only
  std::string_view meaning;        // one line
  EnvScope scope = EnvScope::user;
};

std::span<const EnvVar> env_vars();
// The row named `name`; nullptr when there is none.
const EnvVar* find_env_var(std::string_view name);
// The choices of a `choice` row, in order.
std::vector<std::string_view> env_choices(const EnvVar& var);

// Warnings for BRAID_* names in `environ`-style "NAME=value" entries (nullptr-terminated) that are
// not on the list, one per name: "BRAID_TIMOUT_S: unknown; did you mean BRAID_TIMEOUT_S?" (the
// suggestion only when a known name is within a few edits).
std::vector<std::string> unknown_env_warnings(const char* const* entries);

// Edits (insert, delete, substitute) between two strings.
size_t edit_distance(std::string_view a, std::string_view b);


// docs/configuration.md, as tools/config_doc prints it.
std::string configuration_markdown();

}  // namespace braid
