// braid-perf: the nccl-tests of braid. One row per size (and dtype, reduction, root): time,
// algbw, busbw and #wrong out of place and in place. perf_measure.h says how it measures.
#include <braid/braid.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/env_vars.h"
#include "tools/braid_perf/perf_measure.h"
#include "tools/braid_perf/perf_options.h"
#include "tools/braid_perf/perf_report.h"

namespace braid::perf {
namespace {

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The BRAID_* settings of this run, as recorded in the JSON: every known variable that is set
// (common/env_vars.h lists them), the secret left out.
std::vector<std::string> braid_settings() {
  std::vector<std::string> out;
  const EnvLookup lookup = process_env();
  for (const EnvVar& var : env_vars()) {
    const std::string name(var.name);
    if (name.rfind("BRAID_SECRET", 0) == 0) continue;
    if (const char* value = lookup(name.c_str())) out.push_back(name + "=" + value);
  }
  return out;
}

// Every rank's host name and pid, in rank order.
void gather_ranks(Communicator& comm, RunInfo* info) {
  constexpr size_t kHost = 128;
  std::vector<char> mine(kHost, 0), all(kHost * static_cast<size_t>(comm.size()));
  gethostname(mine.data(), kHost - 1);
  comm.all_gather(mine.data(), all.data(), kHost, DType::u8);
  int32_t pid = getpid();
  std::vector<int32_t> pids(static_cast<size_t>(comm.size()));
  comm.all_gather(&pid, pids.data(), 1, DType::i32);
  for (int r = 0; r < comm.size(); ++r) {
    const char* h = all.data() + static_cast<size_t>(r) * kHost;
    info->hosts.emplace_back(h, strnlen(h, kHost));
    info->pids.push_back(pids[static_cast<size_t>(r)]);
  }
}

// Every rank's Communicator::peer_transports(), in rank order: each rank's list travels as one
// string of names, one a line, padded to the longest.
void gather_transports(Communicator& comm, RunInfo* info) {
  std::string mine;
  for (const std::string& t : comm.peer_transports()) mine += t + "\n";
  int64_t longest = static_cast<int64_t>(mine.size());
  comm.all_reduce(&longest, 1, DType::i64, Op::max);
  const size_t width = static_cast<size_t>(longest);
  mine.resize(width, '\0');
  std::vector<char> all(width * static_cast<size_t>(comm.size()));
  comm.all_gather(mine.data(), all.data(), width, DType::u8);
  for (int r = 0; r < comm.size(); ++r) {
    std::vector<std::string> names;
    std::string name;
    for (size_t i = 0; i < width; ++i) {
      const char ch = all[static_cast<size_t>(r) * width + i];
      if (ch == '\0') break;
      if (ch != '\n') {
        name += ch;
        continue;
      }
      names.push_back(name);
      name.clear();
    }
    info->transports.push_back(std::move(names));
  }
}

// Rank 0 opens --json's file now, so a path it cannot write ends the run before it measures.
// Every rank learns the verdict and exits with it.
bool open_json(Communicator& comm, const PerfOptions& opt, FILE** out) {
  int32_t ok = 1;
  if (comm.rank() == 0 && !opt.json_path.empty()) {
    *out = std::fopen(opt.json_path.c_str(), "w");
    if (*out == nullptr) {
      std::fprintf(stderr, "braid-perf: rank 0 cannot write --json %s: %s; give a path in a writable directory\n",
                   opt.json_path.c_str(), std::strerror(errno));
      ok = 0;
    }
  }
  comm.all_reduce(&ok, 1, DType::i32, Op::min);
  return ok == 1;
}

int run_main(int argc, char** argv) {
  PerfOptions opt;
  std::string error;
  switch (parse_perf_options(std::vector<std::string>(argv + 1, argv + argc), &opt, &error)) {
    case Parsed::error:
      std::fprintf(stderr, "braid-perf: %s\n", error.c_str());
      return 2;
    case Parsed::help:
      std::fputs(perf_usage(), stdout);
      return 0;
    case Parsed::version:
      std::printf("%s\n", perf_version().c_str());
      return 0;
    case Parsed::run:
      break;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);  // a launcher shows each line as it comes
  // Both are read once, by the library, when the communicator is made.
  if (!opt.algo.empty()) setenv("BRAID_ALGO", opt.algo.c_str(), 1);
  if (opt.timeout_s > 0) setenv("BRAID_TIMEOUT_S", std::to_string(opt.timeout_s).c_str(), 1);

  RunInfo info;
  info.version = perf_version();
  info.timestamp = utc_now();
  info.command_line.assign(argv, argv + argc);
  info.env = braid_settings();
  Communicator comm = Communicator::from_env();
  info.ranks = comm.size();
  if (opt.root >= comm.size()) {
    if (comm.rank() == 0) {
      std::fprintf(stderr, "braid-perf: -r %d is not a rank of this %d-rank job (ranks are 0..%d, or -r all)\n",
                   opt.root, comm.size(), comm.size() - 1);
    }
    return 2;
  }
  FILE* json = nullptr;
  if (!open_json(comm, opt, &json)) return 2;
  gather_ranks(comm, &info);
  gather_transports(comm, &info);
  const bool printer = comm.rank() == 0;
  if (printer) {
    std::fputs(format_header(opt, info).c_str(), stdout);
    std::fflush(stdout);
  }

  std::vector<int> roots;
  if (!is_rooted(opt.op)) roots = {-1};
  else if (opt.root >= 0) roots = {opt.root};
  else for (int r = 0; r < comm.size(); ++r) roots.push_back(r);
  const std::vector<Op> redops = is_reducing(opt.op) ? opt.redops : std::vector<Op>{Op::sum};

  std::vector<RowRecord> rows;
  for (int cycle = 0; opt.cycles == 0 || cycle < opt.cycles; ++cycle) {
    for (DType dt : opt.dtypes) {
      for (Op redop : redops) {
        if (is_bitwise(redop) && is_floating(dt)) continue;  // -d all with an integer-only -o
        for (int root : roots) {
          const size_t smallest = dtype_size(dt) * (is_split(opt.op) ? static_cast<size_t>(comm.size()) : 1);
          for (size_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes = next_size(opt, bytes, smallest)) {
            Row row = measure_row(comm, opt, bytes, dt, redop, root < 0 ? 0 : root);
            rows.push_back({cycle, row});
            if (!printer) continue;
            std::fputs(format_row(opt, row).c_str(), stdout);
            if (opt.result_rows) {
              // In place: the anchors (../shared/bench) time an in-place all_reduce.
              const Timing& t = row.in_place.ran ? row.in_place : row.out_of_place;
              std::printf("RESULT\tbraid\t%s\t%d\t%zu\t%d\t%.3f\t%.3f\t%.3f\t%.4f\t%.4f\t%s\n", row.algo.c_str(),
                          comm.size(), row.bytes, opt.iters, t.time_us, t.time_us, t.time_us, t.algbw, t.busbw,
                          t.wrong <= 0 ? "ok" : "FAIL");
            }
            std::fflush(stdout);
          }
        }
      }
    }
  }
  const int64_t wrong = total_wrong(rows);
  if (printer) {
    std::fputs(format_footer(opt, rows).c_str(), stdout);
    std::fflush(stdout);
  }
  if (json != nullptr) {
    const std::string text = format_json(opt, info, rows);
    const bool written = std::fwrite(text.data(), 1, text.size(), json) == text.size();
    if (std::fclose(json) != 0 || !written) {
      std::fprintf(stderr, "braid-perf: writing --json %s failed: %s\n", opt.json_path.c_str(), std::strerror(errno));
      return 2;
    }
  }
  return wrong > 0 ? 1 : 0;
}

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) {
  try {
    return braid::perf::run_main(argc, argv);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid-perf: %s\n", e.what());
    return 1;
  }
}
