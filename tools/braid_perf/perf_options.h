// tools/braid_perf/perf_options.h - braid-perf's command line, with nccl-tests' meanings.
//
// Every nccl-tests flag is accepted. Those that name something braid-perf has no use for (GPUs
// per thread, CUDA graphs, buffer registration, ...) are kept as notes that the header prints,
// so a command line copied from an nccl-tests run works and says what it ignored.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "braid/types.h"

namespace braid::perf {

// How a row's time is combined across ranks (nccl-tests' -a).
enum class Average { rank0 = 0, mean = 1, min = 2, max = 3 };

struct PerfOptions {
  std::string op = "all_reduce";        // --op: any collective, or sendrecv
  size_t min_bytes = 32 << 20;          // -b
  size_t max_bytes = 32 << 20;          // -e
  size_t step_bytes = 1 << 20;          // -i: used while -f is 1
  size_t step_factor = 1;               // -f: >1 multiplies, as nccl-tests
  int iters = 20;                       // -n
  int warmup = 5;                       // -w
  int agg = 1;                          // -m: operations per timed iteration, as one group
  int check_iters = 1;                  // -c: checked iterations after the timed ones; 0 = none
  bool blocking = true;                 // -z: time each operation alone (1) or back to back (0)
  bool blocking_calls = false;          // --calls: the blocking calls (true) or *_async + wait() (false)
  bool barrier_each = true;             // --barrier: with -z 1, a barrier before each timed operation
  Average average = Average::max;       // -a
  int cycles = 1;                       // -N: sweeps; 0 = until killed
  std::vector<DType> dtypes{DType::f32};  // -d (all: every dtype)
  std::vector<Op> redops{Op::sum};      // -o (all: sum prod min max avg)
  int root = 0;                         // -r; -1 = all
  int timeout_s = 0;                    // -T: sets BRAID_TIMEOUT_S; 0 = leave it
  std::string algo;                     // --algo (sets BRAID_ALGO)
  std::string json_path;                // --json
  std::string label;                    // --label: the run's name in braid-plot
  bool result_rows = false;             // --result-rows: also print ../shared/bench's RESULT rows
  std::vector<std::string> notes;       // flags accepted but not applicable, said in the header
};

enum class Parsed { run, help, version, error };

// Parses argv (without argv[0]); on error sets *error.
Parsed parse_perf_options(const std::vector<std::string>& args, PerfOptions* out, std::string* error);
// "4K" -> 4096, "256M", "1G"; plain numbers are bytes.
bool parse_size(const std::string& text, size_t* out);
const char* perf_usage();
// The next size of the sweep after `bytes` (-f, else -i); from 0 it goes on to `smallest`, the
// smallest size that carries data. Never wraps: past SIZE_MAX it returns SIZE_MAX.
size_t next_size(const PerfOptions& opt, size_t bytes, size_t smallest);
// "braid-perf 0.1.0 (io_uring, ib; without cuda, torch)".
std::string perf_version();
// The collectives braid-perf knows, and what they are.
bool is_known_op(const std::string& op);
bool is_reducing(const std::string& op);
bool is_rooted(const std::string& op);
bool is_split(const std::string& op);  // the message is n blocks, one per rank
const char* to_string(Average a);

}  // namespace braid::perf
