// tools/braid_perf/perf_options.h - braid-perf's command line, with nccl-tests' meanings.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "braid/types.h"

namespace braid::perf {

struct PerfOptions {
  std::string op = "all_reduce";  // any collective, or sendrecv
  size_t min_bytes = 32 << 20;    // -b
  size_t max_bytes = 32 << 20;    // -e
  size_t step_factor = 2;         // -f
  int iters = 20;                 // -n
  int warmup = 5;                 // -w
  bool check = true;              // -c
  DType dtype = DType::f32;       // -d
  Op redop = Op::sum;             // --redop
  int root = 0;                   // --root
  std::string algo;               // --algo (sets BRAID_ALGO)
  std::string json_path;          // --json
  bool result_rows = false;       // --result-rows: also print ../shared/bench's RESULT rows
};

// Parses argv; on error returns false and sets *error; "--help" sets *help.
bool parse_perf_options(const std::vector<std::string>& args, PerfOptions* out, std::string* error, bool* help);
// "4K" -> 4096, "256M", "1G"; plain numbers are bytes.
bool parse_size(const std::string& text, size_t* out);
const char* perf_usage();
// The collectives braid-perf knows.
bool is_known_op(const std::string& op);

}  // namespace braid::perf
