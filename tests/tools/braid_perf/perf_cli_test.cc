// braid-perf as nccl-tests' users drive it, run for real under braidrun on loopback: the header
// before the first row, the table's shape (out-of-place and in-place columns, N/A when nothing
// is checked, -b 0 going on), the transports each rank's peers use, the *_async operations run
// on the caller's thread, the JSON record parsed by Python, an unwritable JSON path refused
// before anything is measured, and braid-plot drawing a PNG from that record.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "braid_config.h"
#include "tests/support/subprocess.h"

namespace braid {
namespace {

using testing::Subprocess;

std::vector<std::string> perf_under_braidrun(int ranks, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {testing::binary_from_env("BRAIDRUN"), "--standalone", "--nproc-per-node",
                                   std::to_string(ranks), testing::binary_from_env("BRAID_PERF")};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// rank 0's table rows (lines that are neither comments nor braidrun's own), split into fields.
std::vector<std::vector<std::string>> data_rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const std::string prefix = "[rank 0] ";
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream words(line.substr(prefix.size()));
    std::vector<std::string> fields;
    for (std::string w; words >> w;) fields.push_back(w);
    if (!fields.empty() && fields[0][0] != '#' && fields[0].find_first_not_of("0123456789") == std::string::npos) {
      rows.push_back(fields);
    }
  }
  return rows;
}

std::string temp_path(const char* suffix) {
  return "/tmp/braid-perf-cli-" + std::to_string(getpid()) + suffix;
}

TEST(PerfCli, VersionAndHelpNeedNoJob) {
  Subprocess v({testing::binary_from_env("BRAID_PERF"), "--version"});
  ASSERT_EQ(v.wait(std::chrono::seconds(10)), 0) << v.output();
  EXPECT_EQ(v.output().find(std::string("braid-perf ") + BRAID_VERSION + " (features: "), 0u) << v.output();
  Subprocess h({testing::binary_from_env("BRAID_PERF"), "--help"});
  ASSERT_EQ(h.wait(std::chrono::seconds(10)), 0) << h.output();
  EXPECT_NE(h.output().find("--stepbytes"), std::string::npos) << h.output();
}

// braidrun shows each line as it comes; the header must not wait for the first row. A 32 MiB
// all_reduce with 20 iterations takes long enough that the header is seen alone.
TEST(PerfCli, HeaderIsShownBeforeTheFirstRow) {
  Subprocess p(perf_under_braidrun(2, {"-b", "32M", "-e", "32M", "-n", "20", "-w", "2", "-c", "0"}));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string seen;
  while (std::chrono::steady_clock::now() < deadline) {
    seen = p.output();
    if (seen.find("(elements)") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_NE(seen.find("(elements)"), std::string::npos) << "no header within 60 s:\n" << seen;
  EXPECT_TRUE(data_rows(seen).empty()) << "the header came only with the first row:\n" << seen;
  EXPECT_EQ(p.wait(std::chrono::seconds(120)), 0) << p.output();
  EXPECT_EQ(data_rows(p.output()).size(), 1u) << p.output();
}

TEST(PerfCli, TableHasBothColumnGroupsAndSaysNotApplicable) {
  // -b 0 with -f 4 goes on to 4, 16, ... bytes; -c 0 checks nothing: #wrong is N/A, not 0.
  Subprocess p(perf_under_braidrun(2, {"-b", "0", "-e", "1K", "-f", "4", "-n", "2", "-w", "0", "-c", "0", "-g", "8"}));
  ASSERT_EQ(p.wait(std::chrono::seconds(60)), 0) << p.output();
  const std::string out = p.output();
  const auto rows = data_rows(out);
  std::vector<std::string> sizes;
  for (const auto& r : rows) sizes.push_back(r[0]);
  EXPECT_EQ(sizes, (std::vector<std::string>{"0", "4", "16", "64", "256", "1024"})) << out;
  for (const auto& r : rows) {
    ASSERT_EQ(r.size(), 14u) << out;  // size count type redop root algo + 4 out-of-place + 4 in-place
    EXPECT_EQ(r[9], "N/A") << out;
    EXPECT_EQ(r[13], "N/A") << out;
  }
  for (const char* text : {"out-of-place", "in-place", "#wrong", "# Out of bounds values : N/A",
                           "# Avg bus bandwidth    : ", "# note: -g 8: not applicable"}) {
    EXPECT_NE(out.find(text), std::string::npos) << text << " missing in\n" << out;
  }
  EXPECT_EQ(out.find("0 OK"), std::string::npos) << out;
}

TEST(PerfCli, SendrecvHasNoInPlaceForm) {
  Subprocess p(perf_under_braidrun(2, {"--op", "sendrecv", "-b", "4K", "-e", "4K", "-n", "2", "-w", "0", "-c", "1"}));
  ASSERT_EQ(p.wait(std::chrono::seconds(60)), 0) << p.output();
  const auto rows = data_rows(p.output());
  ASSERT_EQ(rows.size(), 1u) << p.output();
  ASSERT_EQ(rows[0].size(), 14u) << p.output();
  EXPECT_EQ(rows[0][9], "0");
  EXPECT_EQ(rows[0][10], "N/A");
  EXPECT_NE(p.output().find("# Out of bounds values : 0 OK"), std::string::npos) << p.output();
}

// -m groups several operations per timed iteration and -z 0 issues iterations back to back; the
// check still runs one operation (in place, a second reduce would reduce the first's result).
TEST(PerfCli, AggregatedAndBackToBackIterationsCheckClean) {
  for (const char* op : {"reduce", "all_reduce", "reduce_scatter"}) {
    for (const char* blocking : {"1", "0"}) {
      Subprocess p(perf_under_braidrun(3, {"--op", op, "-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "-w", "1", "-m",
                                           "3", "-z", blocking, "-a", "1", "-c", "2"}));
      ASSERT_EQ(p.wait(std::chrono::seconds(60)), 0) << op << " -z " << blocking << "\n" << p.output();
      EXPECT_NE(p.output().find("# Out of bounds values : 0 OK"), std::string::npos) << p.output();
      EXPECT_EQ(data_rows(p.output()).size(), 3u) << p.output();
    }
  }
}

// The header names the transport each rank's connections took (Communicator::peer_transports),
// not the one asked for: BRAID_TRANSPORT=tcp-poll is the tcp transport on its epoll engine.
TEST(PerfCli, HeaderNamesTheTransportOfEveryPeer) {
  Subprocess p(perf_under_braidrun(3, {"-b", "1K", "-e", "1K", "-n", "2", "-w", "0", "-c", "0"}),
               {{"BRAID_TRANSPORT", "tcp-poll"}});
  ASSERT_EQ(p.wait(std::chrono::seconds(60)), 0) << p.output();
  EXPECT_NE(p.output().find("[rank 0] # transports: tcp (epoll) x2 (every rank, to its peers)"), std::string::npos)
      << p.output();
}

// Each rank's closing line at BRAID_DEBUG=TRACE: how many operations ran on callers' threads and
// how many on the progress thread.
std::vector<std::pair<unsigned long, unsigned long>> where_operations_ran(const std::string& output) {
  std::vector<std::pair<unsigned long, unsigned long>> out;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    unsigned long here = 0, there = 0;
    const size_t at = line.find(" closing: ");
    if (at != std::string::npos &&
        std::sscanf(line.c_str() + at, " closing: %lu operations ran on callers' threads, %lu", &here, &there) == 2) {
      out.emplace_back(here, there);
    }
  }
  return out;
}

// braid-perf issues *_async + wait() (--calls async), and the runtime runs such an operation on
// the waiting caller's thread when nothing else is queued (runtime/communicator_impl.h, the
// hand-off): at BRAID_DEBUG=TRACE each rank says at the end where its operations ran. A few
// may land on the progress thread when the machine is busy (a caller descheduled between the
// call and its wait); before the hand-off about a quarter did.
TEST(PerfCli, AsyncOperationsRunOnTheCallersThread) {
  Subprocess p(perf_under_braidrun(2, {"-b", "4K", "-e", "4K", "-n", "200", "-w", "5", "-c", "0"}),
               {{"BRAID_DEBUG", "TRACE"}});
  ASSERT_EQ(p.wait(std::chrono::seconds(120)), 0) << p.output().substr(0, 4000);
  const auto counts = where_operations_ran(p.output());
  EXPECT_EQ(counts.size(), 2u) << "no closing line per rank at TRACE";
  for (const auto& [here, there] : counts) {
    EXPECT_GE(here, 800u);  // 2 x 205 barriers and as many all_reduces, and a few more
    EXPECT_LE(there, (here + there) / 20) << here << " on callers' threads, " << there << " on the progress thread";
  }
}

// --barrier 0 times a loop of operations with no barrier between them: each rank runs about
// half the operations of the default run (which has a barrier before each), and the results
// are still checked right.
TEST(PerfCli, BarrierZeroRunsNoBarrierBetweenIterations) {
  Subprocess p(perf_under_braidrun(2, {"--op", "sendrecv", "-b", "8", "-e", "8", "-n", "200", "-w", "5", "--barrier", "0"}),
               {{"BRAID_DEBUG", "TRACE"}});
  ASSERT_EQ(p.wait(std::chrono::seconds(120)), 0) << p.output().substr(0, 4000);
  EXPECT_NE(p.output().find("without a barrier (-z 1 --barrier 0)"), std::string::npos) << p.output().substr(0, 4000);
  EXPECT_NE(p.output().find("Out of bounds values : 0 OK"), std::string::npos) << p.output().substr(0, 4000);
  const auto counts = where_operations_ran(p.output());
  EXPECT_EQ(counts.size(), 2u) << "no closing line per rank at TRACE";
  for (const auto& [here, there] : counts) {
    // 205 send/recv groups and the few collectives around them; with a barrier each, 410 and more.
    EXPECT_GE(here + there, 205u);
    EXPECT_LE(here + there, 260u);
  }
}

// Several sockets per peer (BRAID_NSOCKS, or a fast NIC's default) leave receives armed between
// operations, and operations move between the caller's thread and the progress thread: the
// io_uring engine must follow them (it failed "has I/O in flight" within a few hundred
// operations), and closing must not leak sockets ("did not quiesce").
// The smallest run that shows it: ring segments of 512 KiB and 1 MiB (each rank's share of a 1 and
// a 2 MiB all_reduce, under BRAID_CHUNK_BYTES=1M), above TcpConnection::kStripeMinBytes (256 KiB)
// so that both sockets carry each one, and ~800 operations (2 sizes x 204 iterations x 2
// columns, each after a barrier) moving between the threads. Little work; the 120 s
// bound only ends a hang.
TEST(PerfCli, SeveralSocketsPerPeerFollowTheOperationsAcrossThreads) {
  if (!BRAID_HAVE_LIBURING) GTEST_SKIP() << "built without liburing: the io_uring engine this guards is not here";
  Subprocess p(perf_under_braidrun(2, {"-b", "1M", "-e", "2M", "-n", "200", "-w", "4"}),
               {{"BRAID_NSOCKS", "2"}, {"BRAID_TRANSPORT", "tcp"}, {"BRAID_CHUNK_BYTES", "1M"}});
  ASSERT_EQ(p.wait(std::chrono::seconds(120)), 0) << p.output().substr(0, 4000);
  for (const char* bad : {"in flight", "did not quiesce", "failed"}) {
    EXPECT_EQ(p.output().find(bad), std::string::npos) << bad << " in:\n" << p.output().substr(0, 4000);
  }
  EXPECT_NE(p.output().find("Out of bounds values : 0 OK"), std::string::npos) << p.output().substr(0, 4000);
}

// Python's json module reads the record and finds what reproducing and comparing a run needs.
const char* kJsonCheck = R"(
import json, sys
d = json.load(open(sys.argv[1]))
need = ["tool", "version", "build", "label", "timestamp", "command_line", "op", "ranks", "hosts", "peers", "transport",
        "algorithm", "settings", "env", "rows", "avg_busbw_gbps", "wrong"]
missing = [k for k in need if k not in d]
assert not missing, missing
assert d["tool"] == "braid-perf" and d["version"] == sys.argv[2], d["version"]
assert d["label"] == "cli test" and d["ranks"] == 2 and len(d["hosts"]) == 2 and len(d["peers"]) == 2
assert d["command_line"][1:4] == ["-b", "4K", "-e"], d["command_line"]
assert d["transport"]["requested"] and d["algorithm"]["requested"] == "ring"
# Each rank's Communicator::peer_transports(): itself "self", its one peer (same host, so shared
# memory under BRAID_TRANSPORT=auto; tcp where shm is left out) the same transport on both sides.
per_peer = d["transport"]["per_peer"]
assert per_peer[0][0] == "self" and per_peer[1][1] == "self", per_peer
assert per_peer[0][1] == "shm" or per_peer[0][1].startswith("tcp ("), per_peer
assert per_peer[1][0] == per_peer[0][1], per_peer
assert d["transport"]["summary"] == [per_peer[0][1] + " x1"] * 2, d["transport"]
assert d["settings"]["iters"] == 2 and d["settings"]["run_cycles"] == 2 and d["wrong"] == 0
assert "BRAID_TIMEOUT_S=60" in d["env"] and not any(e.startswith("BRAID_SECRET") for e in d["env"])
assert [r["bytes"] for r in d["rows"]] == [4096, 8192, 16384] * 2, d["rows"]
assert [r["cycle"] for r in d["rows"]] == [0, 0, 0, 1, 1, 1]
for r in d["rows"]:
    assert r["op"] == "all_reduce" and r["dtype"] == "f32" and r["redop"] == "sum" and r["algo"] == "ring", r
    for col in ("out_of_place", "in_place"):
        t = r[col]
        assert t["time_us"] > 0 and t["busbw_gbps"] > 0 and t["algbw_gbps"] > 0 and t["wrong"] == 0, t
print("JSON OK")
)";

TEST(PerfCli, JsonRecordsTheRunAndBraidPlotDrawsIt) {
  const std::string json = temp_path(".json"), png = temp_path(".png");
  Subprocess p(perf_under_braidrun(2, {"-b", "4K", "-e", "16K", "-f", "2", "-n", "2", "-w", "0", "-N", "2",
                                       "--algo", "ring", "--label", "cli test", "--json", json}),
               {{"BRAID_TIMEOUT_S", "60"}});
  ASSERT_EQ(p.wait(std::chrono::seconds(60)), 0) << p.output();
  // At the default level (WARN) nothing informational is printed, e.g. that BRAID_TRANSPORT=auto
  // went on without ib on a host that has no RDMA device.
  EXPECT_EQ(p.output().find(" INFO: "), std::string::npos) << p.output();
  Subprocess check({"/usr/bin/python3", "-c", kJsonCheck, json, BRAID_VERSION});
  EXPECT_EQ(check.wait(std::chrono::seconds(30)), 0) << check.output() << "\n" << testing::read_file(json);
  EXPECT_NE(check.output().find("JSON OK"), std::string::npos) << check.output();

  Subprocess has_mpl({"/usr/bin/python3", "-c", "import matplotlib"});
  if (has_mpl.wait(std::chrono::seconds(30)) != 0) {
    unlink(json.c_str());
    GTEST_SKIP() << "python3-matplotlib is missing (scripts/setup.sh installs it)";
  }
  Subprocess plot({testing::binary_from_env("BRAID_PLOT"), json, "-o", png});
  EXPECT_EQ(plot.wait(std::chrono::seconds(60)), 0) << plot.output();
  const std::string picture = testing::read_file(png);
  EXPECT_GT(picture.size(), 1000u);
  EXPECT_EQ(picture.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  unlink(json.c_str());
  unlink(png.c_str());
}

// The Gloo/Open MPI bench scripts' RESULT rows plot too: one line per library, algorithm and
// rank count; a leading round tag is skipped and rows without busbw (memcpy baselines) ignored.
TEST(PerfCli, BraidPlotReadsBenchResultRows) {
  Subprocess has_mpl({"/usr/bin/python3", "-c", "import matplotlib"});
  if (has_mpl.wait(std::chrono::seconds(30)) != 0) {
    GTEST_SKIP() << "python3-matplotlib is missing (scripts/setup.sh installs it)";
  }
  const std::string tsv = temp_path(".tsv"), png = temp_path("-bench.png");
  FILE* f = std::fopen(tsv.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("loopback\tRESULT\tmem\tmemcpy\t1\t4096\t20\t5.0\t4.0\t1.0\n", f);
  for (const char* lib : {"gloo\tring", "mpi\ttcp-lo"}) {
    for (const char* row : {"4096\t20\t50.0\t40.0\t60.0\t0.08\t0.08\tok", "65536\t20\t90.0\t80.0\t99.0\t0.7\t0.7\tok"}) {
      std::fprintf(f, "round1\tRESULT\t%s\t2\t%s\n", lib, row);
    }
  }
  std::fclose(f);
  Subprocess plot({testing::binary_from_env("BRAID_PLOT"), tsv, "-o", png});
  EXPECT_EQ(plot.wait(std::chrono::seconds(60)), 0) << plot.output();
  EXPECT_NE(plot.output().find("(2 lines)"), std::string::npos) << plot.output();
  EXPECT_GT(testing::read_file(png).size(), 1000u);
  unlink(tsv.c_str());
  unlink(png.c_str());
}

TEST(PerfCli, UnwritableJsonPathFailsBeforeMeasuring) {
  const std::string path = "/nonexistent-braid-dir/run.json";
  Subprocess p(perf_under_braidrun(2, {"-b", "4K", "-e", "4K", "-n", "2", "--json", path}));
  const int rc = p.wait(std::chrono::seconds(60));
  EXPECT_NE(rc, 0) << p.output();
  EXPECT_NE(rc, -1) << "still running after 60 s:\n" << p.output();
  EXPECT_NE(p.output().find("cannot write --json " + path), std::string::npos) << p.output();
  EXPECT_TRUE(data_rows(p.output()).empty()) << p.output();
  struct stat st;
  EXPECT_NE(stat(path.c_str(), &st), 0);
}

}  // namespace
}  // namespace braid
