#include "tools/braid_perf/perf_options.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>

#include "braid_config.h"
#include "common/version.h"

namespace braid::perf {

const char* perf_usage() {
  return "usage: braid-perf [options]   (run it under braidrun, torchrun --no-python, mpirun or srun)\n"
         "nccl-tests' flags, with their meanings:\n"
         "  -b, --minbytes SIZE     smallest size (K/M/G = 2^10/2^20/2^30), default 32M; 0 is allowed\n"
         "  -e, --maxbytes SIZE     largest size, default 32M\n"
         "  -i, --stepbytes SIZE    add SIZE each step while -f is 1, default 1M\n"
         "  -f, --stepfactor N      multiply the size by N each step (N > 1), default 1 (use -i)\n"
         "  -n, --iters N           timed iterations per size, default 20\n"
         "  -w, --warmup_iters N    untimed iterations before them, default 5\n"
         "  -m, --agg_iters N       operations per timed iteration, issued as one group, default 1\n"
         "  -c, --check N           checked iterations after the timed ones, default 1; 0: no check (N/A)\n"
         "  -z, --blocking 0|1      1: time each operation alone, after a barrier, and report the median\n"
         "                          (default); 0: issue all iterations back to back, report the mean\n"
         "  -a, --average 0|1|2|3   combine ranks' times by rank 0, mean, min or max; default 3 (max;\n"
         "                          nccl-tests defaults to 1)\n"
         "  -d, --datatype TYPE     f32 f64 f16 bf16 i8 u8 i32 i64 (or float, half, int32, ...), a list\n"
         "                          of them (f32,bf16), or all\n"
         "  -o, --op OP             reduction: sum prod min max avg band bor bxor, or all (sum..avg);\n"
         "      --redop OP          the same\n"
         "  -r, --root R            root of rooted collectives, default 0, or all\n"
         "  -N, --run_cycles N      run the whole sweep N times, default 1; 0: until killed\n"
         "  -T, --timeout S         fail an operation after S seconds (sets BRAID_TIMEOUT_S)\n"
         "  -t, -g, -p, -R, -G, -y, -C, -M  accepted; not applicable here (the header says why)\n"
         "braid's own:\n"
         "      --op NAME           the collective: all_reduce (default), broadcast, reduce, all_gather,\n"
         "                          reduce_scatter, gather, scatter, all_to_all, barrier, sendrecv\n"
         "      --algo NAME         force an algorithm (sets BRAID_ALGO): ring tree rd chain pairwise auto\n"
         "      --calls async|blocking  how -z 1 issues each operation: *_async then Work::wait()\n"
         "                          (default, the path a training program takes), or the blocking\n"
         "                          call (sendrecv: send() and recv(), even ranks sending first)\n"
         "      --barrier 1|0       with -z 1: a barrier before each timed operation (1, default), or none\n"
         "                          (0: a latency loop, each operation issued as the last one completed on\n"
         "                          this rank, like perftest's ping-pong; no barrier's exit skew in the time)\n"
         "      --json PATH         rank 0 writes the run (settings, hosts, every row) as JSON\n"
         "      --label TEXT        the run's name in that JSON (braid-plot's legend)\n"
         "      --result-rows       also print tab-separated RESULT rows (../shared/bench's format)\n"
         "  -h, --help              this text\n"
         "      --version           version and the features this build has\n";
}

std::string perf_version() {
  return std::string("braid-perf ") + BRAID_VERSION + " (features: " + feature_list() + ")";
}

bool is_known_op(const std::string& op) {
  for (const char* k : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "gather", "scatter",
                        "all_to_all", "barrier", "sendrecv"}) {
    if (op == k) return true;
  }
  return false;
}

bool is_reducing(const std::string& op) { return op == "all_reduce" || op == "reduce" || op == "reduce_scatter"; }
bool is_rooted(const std::string& op) { return op == "broadcast" || op == "reduce" || op == "gather" || op == "scatter"; }
bool is_split(const std::string& op) {
  return op == "all_gather" || op == "reduce_scatter" || op == "gather" || op == "scatter" || op == "all_to_all";
}

const char* to_string(Average a) {
  switch (a) {
    case Average::rank0: return "rank 0";
    case Average::mean: return "mean";
    case Average::min: return "min";
    case Average::max: return "max";
  }
  return "?";
}

bool parse_size(const std::string& text, size_t* out) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  std::string suffix = end;
  size_t mult = 1;
  if (suffix == "K" || suffix == "k") mult = size_t{1} << 10;
  else if (suffix == "M" || suffix == "m") mult = size_t{1} << 20;
  else if (suffix == "G" || suffix == "g") mult = size_t{1} << 30;
  else if (!suffix.empty()) return false;
  *out = static_cast<size_t>(v) * mult;
  return true;
}

size_t next_size(const PerfOptions& opt, size_t bytes, size_t smallest) {
  constexpr size_t kEnd = std::numeric_limits<size_t>::max();
  if (opt.step_factor <= 1) return bytes > kEnd - opt.step_bytes ? kEnd : bytes + opt.step_bytes;
  if (bytes == 0) return std::max<size_t>(smallest, 1);
  return bytes > kEnd / opt.step_factor ? kEnd : bytes * opt.step_factor;
}

namespace {

bool parse_int(const std::string& text, int min, int max, int* out) {
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < min || v > max) return false;
  *out = static_cast<int>(v);
  return true;
}

constexpr int kMaxInt = 1 << 30;

// nccl-tests flags that do nothing here: a nonzero (or, for -t/-g, non-1) value is a note.
struct Ignored {
  int quiet_value;
  const char* why;
};

const std::map<std::string, Ignored>& ignored_flags() {
  static const std::map<std::string, Ignored> k = {
      {"-t", {1, "braid-perf runs one rank per process; start more ranks with braidrun --nproc-per-node"}},
      {"-g", {1, "braid-perf runs one rank per process; start more ranks with braidrun --nproc-per-node"}},
      {"-p", {0, "each rank is its own process and initialises on its own"}},
      {"-R", {0, "braid registers buffers itself (a registration cache per transport)"}},
      {"-G", {0, "buffers are host memory: there is no CUDA graph to capture"}},
      {"-y", {0, "buffers are host memory: there is no CUDA stream"}},
      {"-C", {0, "operations run on the CPU: the time reported is already CPU time"}},
      {"-M", {0, "there is no device memory to report"}},
  };
  return k;
}

const std::map<std::string, std::string>& long_names() {
  static const std::map<std::string, std::string> k = {
      {"--nthreads", "-t"},     {"--ngpus", "-g"},       {"--minbytes", "-b"},      {"--maxbytes", "-e"},
      {"--stepbytes", "-i"},    {"--stepfactor", "-f"},  {"--iters", "-n"},         {"--agg_iters", "-m"},
      {"--warmup_iters", "-w"}, {"--parallel_init", "-p"}, {"--check", "-c"},       {"--datatype", "-d"},
      {"--root", "-r"},         {"--blocking", "-z"},    {"--stream_null", "-y"},   {"--timeout", "-T"},
      {"--cudagraph", "-G"},    {"--report_cputime", "-C"}, {"--average", "-a"},    {"--run_cycles", "-N"},
      {"--local_register", "-R"}, {"--memory_report", "-M"}, {"--redop", "-o"},     {"--output_file", "-F"},
  };
  return k;
}

bool parse_redops(const std::string& v, std::vector<Op>* out) {
  if (v == "all") {
    *out = {Op::sum, Op::prod, Op::min, Op::max, Op::avg};
    return true;
  }
  Op op;
  if (!parse_op(v.c_str(), &op)) return false;
  *out = {op};
  return true;
}

// One dtype, a comma-separated list of them ("f32,bf16,i32": one job checks several), or all.
bool parse_dtypes(const std::string& v, std::vector<DType>* out) {
  if (v == "all") {
    *out = {DType::i8, DType::u8, DType::i32, DType::i64, DType::f16, DType::f32, DType::f64, DType::bf16};
    return true;
  }
  std::vector<DType> list;
  size_t start = 0;
  for (;;) {
    const size_t comma = v.find(',', start);
    DType t;
    if (!parse_dtype(v.substr(start, comma - start).c_str(), &t)) return false;
    if (std::find(list.begin(), list.end(), t) == list.end()) list.push_back(t);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  *out = std::move(list);
  return true;
}

// One flag with its value; false with *error set when the value is wrong.
bool apply(const std::string& flag, const std::string& value, PerfOptions* o, std::string* error) {
  int n = 0;
  bool ok = true;
  if (auto it = ignored_flags().find(flag); it != ignored_flags().end()) {
    ok = parse_int(value, 0, kMaxInt, &n);
    if (ok && n != it->second.quiet_value) o->notes.push_back(flag + " " + value + ": not applicable, " + it->second.why);
  } else if (flag == "--op") {
    // nccl-tests' --op is the reduction; braid-perf's names the collective. The names differ.
    if (is_known_op(value)) o->op = value;
    else ok = parse_redops(value, &o->redops);
  } else if (flag == "-o") {
    ok = parse_redops(value, &o->redops);
  } else if (flag == "-b") {
    ok = parse_size(value, &o->min_bytes);
  } else if (flag == "-e") {
    ok = parse_size(value, &o->max_bytes);
  } else if (flag == "-i") {
    ok = parse_size(value, &o->step_bytes) && o->step_bytes > 0;
  } else if (flag == "-f") {
    ok = parse_int(value, 1, kMaxInt, &n);
    o->step_factor = static_cast<size_t>(n);
  } else if (flag == "-n") {
    ok = parse_int(value, 1, kMaxInt, &o->iters);
  } else if (flag == "-w") {
    ok = parse_int(value, 0, kMaxInt, &o->warmup);
  } else if (flag == "-m") {
    ok = parse_int(value, 1, 1024, &o->agg);
  } else if (flag == "-c") {
    ok = parse_int(value, 0, kMaxInt, &o->check_iters);
  } else if (flag == "-z") {
    ok = parse_int(value, 0, 1, &n);
    o->blocking = n == 1;
  } else if (flag == "-a") {
    ok = parse_int(value, 0, 3, &n);
    o->average = static_cast<Average>(n);
  } else if (flag == "-N") {
    ok = parse_int(value, 0, kMaxInt, &o->cycles);
  } else if (flag == "-d") {
    ok = parse_dtypes(value, &o->dtypes);
  } else if (flag == "-r") {
    if (value == "all") o->root = -1;
    else ok = parse_int(value, 0, kMaxInt, &o->root);
  } else if (flag == "-T") {
    ok = parse_int(value, 1, kMaxInt, &o->timeout_s);
  } else if (flag == "-F") {
    *error = "-F (CSV output) is not supported; --json PATH writes every row";
    return false;
  } else if (flag == "--algo") {
    o->algo = value;
  } else if (flag == "--json") {
    ok = !value.empty();
    o->json_path = value;
  } else if (flag == "--calls") {
    ok = value == "async" || value == "blocking";
    o->blocking_calls = value == "blocking";
  } else if (flag == "--barrier") {
    ok = value == "0" || value == "1";
    o->barrier_each = value == "1";
  } else if (flag == "--label") {
    o->label = value;
  } else {
    *error = "unknown option " + flag + " (braid-perf --help lists them)";
    return false;
  }
  if (!ok) *error = "bad value '" + value + "' for " + flag + " (braid-perf --help says what it takes)";
  return ok;
}

}  // namespace

Parsed parse_perf_options(const std::vector<std::string>& args, PerfOptions* out, std::string* error) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool has_value = false;
    if (flag == "-h" || flag == "--help") return Parsed::help;
    if (flag == "--version") return Parsed::version;
    if (flag == "--result-rows") {
      out->result_rows = true;
      continue;
    }
    if (size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    } else if (flag.size() > 2 && flag[0] == '-' && flag[1] != '-') {  // getopt's "-b8"
      value = flag.substr(2);
      flag = flag.substr(0, 2);
      has_value = true;
    }
    if (auto it = long_names().find(flag); it != long_names().end()) flag = it->second;
    if (!has_value) {
      if (i + 1 >= args.size()) {
        *error = "option " + flag + " needs a value";
        return Parsed::error;
      }
      value = args[++i];
    }
    if (!apply(flag, value, out, error)) return Parsed::error;
  }
  if (out->min_bytes > out->max_bytes) {
    *error = "-b is larger than -e";
    return Parsed::error;
  }
  for (DType t : out->dtypes) {
    for (Op op : out->redops) {
      if (is_bitwise(op) && is_floating(t) && out->dtypes.size() == 1) {
        *error = std::string("--redop ") + to_string(op) + " needs an integer type (-d i32, ...), not " + to_string(t);
        return Parsed::error;
      }
    }
  }
  return Parsed::run;
}

}  // namespace braid::perf
