#include "tools/braid_perf/perf_options.h"

#include <cstdlib>

namespace braid::perf {

const char* perf_usage() {
  return "usage: braid-perf [options]   (run it under braidrun, torchrun --no-python, mpirun or srun)\n"
         "  --op NAME      all_reduce (default), broadcast, reduce, all_gather, reduce_scatter, gather,\n"
         "                 scatter, all_to_all, barrier, sendrecv\n"
         "  -b SIZE        smallest size in bytes (K/M/G = 2^10/2^20/2^30), default 32M\n"
         "  -e SIZE        largest size, default 32M\n"
         "  -f FACTOR      multiply the size by FACTOR each step, default 2\n"
         "  -n N           timed iterations per size, default 20\n"
         "  -w N           warm-up iterations per size, default 5\n"
         "  -c 0|1         check every result (default 1)\n"
         "  -d TYPE        f32 f64 f16 bf16 i8 u8 i32 i64, default f32\n"
         "  --redop OP     sum prod min max avg band bor bxor, default sum\n"
         "  --root R       root of rooted collectives, default 0\n"
         "  --algo NAME    force an algorithm (sets BRAID_ALGO): ring tree rd chain pairwise auto\n"
         "  --json FILE    rank 0 writes the rows as JSON\n"
         "  --result-rows  also print tab-separated RESULT rows (the anchors' format)\n";
}

bool is_known_op(const std::string& op) {
  for (const char* k : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "gather", "scatter",
                        "all_to_all", "barrier", "sendrecv"}) {
    if (op == k) return true;
  }
  return false;
}

bool parse_size(const std::string& text, size_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || text[0] == '-') return false;
  std::string suffix = end;
  size_t mult = 1;
  if (suffix == "K" || suffix == "k") mult = size_t{1} << 10;
  else if (suffix == "M" || suffix == "m") mult = size_t{1} << 20;
  else if (suffix == "G" || suffix == "g") mult = size_t{1} << 30;
  else if (!suffix.empty()) return false;
  *out = static_cast<size_t>(v) * mult;
  return true;
}

namespace {

bool parse_int(const std::string& text, int min, int* out) {
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < min || v > 1 << 30) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

bool parse_perf_options(const std::vector<std::string>& args, PerfOptions* out, std::string* error, bool* help) {
  *help = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    if (flag == "-h" || flag == "--help") {
      *help = true;
      return true;
    }
    if (flag == "--result-rows") {
      out->result_rows = true;
      continue;
    }
    if (size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      *error = "option " + flag + " needs a value";
      return false;
    }
    bool ok = true;
    int n = 0;
    if (flag == "--op") {
      out->op = value;
      ok = is_known_op(value);
    } else if (flag == "-b" || flag == "--minbytes") {
      ok = parse_size(value, &out->min_bytes);
    } else if (flag == "-e" || flag == "--maxbytes") {
      ok = parse_size(value, &out->max_bytes);
    } else if (flag == "-f" || flag == "--stepfactor") {
      ok = parse_int(value, 2, &n);
      out->step_factor = static_cast<size_t>(n);
    } else if (flag == "-n" || flag == "--iters") {
      ok = parse_int(value, 1, &out->iters);
    } else if (flag == "-w" || flag == "--warmup_iters") {
      ok = parse_int(value, 0, &out->warmup);
    } else if (flag == "-c" || flag == "--check") {
      ok = parse_int(value, 0, &n) && n <= 1;
      out->check = n == 1;
    } else if (flag == "-d" || flag == "--datatype") {
      ok = parse_dtype(value.c_str(), &out->dtype);
    } else if (flag == "--redop" || flag == "-o") {
      ok = parse_op(value.c_str(), &out->redop);
    } else if (flag == "--root" || flag == "-r") {
      ok = parse_int(value, 0, &out->root);
    } else if (flag == "--algo") {
      out->algo = value;
    } else if (flag == "--json") {
      out->json_path = value;
    } else {
      *error = "unknown option " + flag;
      return false;
    }
    if (!ok) {
      *error = "bad value '" + value + "' for " + flag;
      return false;
    }
  }
  if (out->min_bytes > out->max_bytes) {
    *error = "-b is larger than -e";
    return false;
  }
  if (is_bitwise(out->redop) && is_floating(out->dtype)) {
    *error = std::string("--redop ") + to_string(out->redop) + " needs an integer type (-d i32, ...), not " +
             to_string(out->dtype);
    return false;
  }
  return true;
}

}  // namespace braid::perf
