// tools/braid_perf/perf_report.h - what braid-perf prints and writes: nccl-tests' table (size,
// count, type, redop, root, then time/algbw/busbw/#wrong out of place and in place), and the
// JSON record of a run (--json) that braid-plot reads.
#pragma once

#include <string>
#include <vector>

#include "tools/braid_perf/perf_measure.h"
#include "tools/braid_perf/perf_options.h"

namespace braid::perf {

// What a run was, to reproduce it and compare it with another.
struct RunInfo {
  std::string version;                    // perf_version()
  std::string timestamp;                  // UTC, ISO 8601, when the run started
  std::vector<std::string> command_line;  // argv
  int ranks = 0;
  std::vector<std::string> hosts;         // per rank
  std::vector<int> pids;                  // per rank
  std::vector<std::string> env;           // BRAID_* settings in effect ("NAME=value"), secrets left out
  // transports[r][p]: the transport rank r's connection to rank p uses (Communicator::peer_transports).
  std::vector<std::vector<std::string>> transports;
};

struct RowRecord {
  int cycle = 0;
  Row row;
};

// One rank's peer_transports() grouped, in order of first use, own rank left out:
// "tcp (io_uring) x3", "shm x1, tcp (io_uring) x2"; "none" when it has no peer.
std::string group_transports(const std::vector<std::string>& per_peer);

// The header, up to and including the column titles (every line starts with '#').
std::string format_header(const PerfOptions& opt, const RunInfo& info);
std::string format_row(const PerfOptions& opt, const Row& row);
// "# Out of bounds values : ..." and "# Avg bus bandwidth    : ..." over every column that ran.
std::string format_footer(const PerfOptions& opt, const std::vector<RowRecord>& rows);
std::string format_json(const PerfOptions& opt, const RunInfo& info, const std::vector<RowRecord>& rows);
// Wrong elements over all rows (-1 when nothing was checked).
int64_t total_wrong(const std::vector<RowRecord>& rows);

}  // namespace braid::perf
