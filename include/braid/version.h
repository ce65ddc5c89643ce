// braid/version.h - which braid a program runs and the optional features it was built with,
// for tools and language bindings that print them (`python3 -m braid --version`).
#pragma once

#include <string>

namespace braid {

// The release, "0.1.0".
const char* version() noexcept;
// "io_uring yes, ib no, cuda no, torch no": each optional feature and whether this build has it.
std::string features();

}  // namespace braid
