// Every collective over BRAID_TRANSPORT=ib through real rank processes, in the Soft-RoCE guest
// (scripts/rdma_guest.sh): the project's existing rank programs and checks, run with the ib
// environment by braidrun on 2, 3 and 4 ranks. Even ranks use rxe0 and odd ranks rxe1
// (BRAID_IB_HCA per rank), so every ring crosses between the two devices.
//   every_op_rank (tests/runtime/valgrind) - every operation, in and out of place, v forms,
//                                            send/recv, groups, async, split; counts wrong results
//   comm_rank repeat / mixed (tests/runtime/comm) - kept runs, bursts in flight, caller progress
//   braid-perf -c 1 (tools/braid_perf)     - each collective against exact results, f32/bf16/i32,
//                                            sizes up to 64 MiB on a subset (the guest is slow)
// Outside the guest it skips.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/transport/ib/soft_roce_guest.h"
#include "transport/ib/ib_devices.h"

namespace braid::transport::ib {
namespace {

using braid::testing::Subprocess;


// Runs `program` on `ranks` ranks under braidrun with the ib transport; returns the output
// after checking the exit status.
// `transport`: BRAID_TRANSPORT; with "auto" shared memory is turned off (BRAID_SHM_DISABLE=1), as
// between ranks of two hosts, so that the automatic choice has ib or tcp to pick from.
std::string run_ranks(int ranks, const std::vector<std::string>& program, int qps = 1,
                      const std::string& transport = "ib") {
  std::vector<std::string> argv{BRAIDRUN, "--standalone", "--nproc-per-node", std::to_string(ranks), "/bin/sh", "-c",
                                "BRAID_IB_HCA==rxe$((RANK % 2)) exec \"$0\" \"$@\""};
  argv.insert(argv.end(), program.begin(), program.end());
  Subprocess job(argv, {{"BRAID_TRANSPORT", transport},
                        {"BRAID_SHM_DISABLE", transport == "auto" ? "1" : "0"},
                        {"BRAID_IB_QPS_PER_CONNECTION", std::to_string(qps)},
                        {"BRAID_TIMEOUT_S", "300"},
                        {"BRAID_DEBUG", "INFO"}});
  const int status = job.wait(std::chrono::minutes(8));
  const std::string out = job.output();
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("transport ib on rxe0"), std::string::npos) << "rank 0 did not run over ib\n" << out;
  if (ranks > 1) {
    EXPECT_NE(out.find("transport ib on rxe1"), std::string::npos) << "rank 1 did not use rxe1\n" << out;
  }
  return out;
}

class IbCollectivesGuest : public ::testing::TestWithParam<int> {};

TEST_P(IbCollectivesGuest, EveryOperation) {
  SKIP_OUTSIDE_GUEST();
  const std::string out = run_ranks(GetParam(), {EVERY_OP_RANK});
  EXPECT_NE(out.find("every operation done, 0 wrong"), std::string::npos) << out;
}

TEST_P(IbCollectivesGuest, RepeatedAndMixedCallsOverFourQps) {
  SKIP_OUTSIDE_GUEST();
  run_ranks(GetParam(), {COMM_RANK, "repeat"}, 4);
  run_ranks(GetParam(), {COMM_RANK, "mixed"}, 4);
}

// Each collective checked against exact results by braid-perf, sizes 0 to 1 MiB, for f32,
// bf16 and i32 (a float, a 16-bit type whose sum rounds, an integer) in one job per collective:
// a job's start (braidrun, rendezvous, queue pairs) costs seconds in the guest.
TEST_P(IbCollectivesGuest, EveryCollectiveChecked) {
  SKIP_OUTSIDE_GUEST();
  for (const char* op : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "gather", "scatter",
                         "all_to_all", "sendrecv", "barrier"}) {
    SCOPED_TRACE(op);
    const std::string out = run_ranks(GetParam(), {BRAID_PERF, "--op", op, "-d", "f32,bf16,i32", "-b", "0", "-e", "1M",
                                                   "-f", "32", "-n", "1", "-w", "0", "-c", "1"});
    EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, IbCollectivesGuest, ::testing::Values(2, 3, 4));

// A job that asks for nothing gets RDMA: with every rank holding an active port, BRAID_TRANSPORT=auto
// carries every peer over ib (braid-perf's header names each peer's transport), not tcp.
TEST(IbCollectivesGuestAuto, AutoPicksIbWhenEveryRankHasAPort) {
  SKIP_OUTSIDE_GUEST();
  const std::string out = run_ranks(3, {BRAID_PERF, "--op", "all_reduce", "-b", "4K", "-e", "64K", "-f", "4", "-n",
                                        "2", "-w", "0", "-c", "1"},
                                    1, "auto");
  const size_t at = out.find("# transports: ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string line = out.substr(at, out.find('\n', at) - at);
  EXPECT_EQ(line.rfind("# transports: ib x2 (every rank", 0), 0u) << line << "\n" << out;
}

// 64 MiB on the subset the guest's speed allows: all_reduce over 4 QPs, broadcast over 1, and a
// bf16 all_reduce on 3 ranks.
TEST(IbCollectivesGuestLarge, SixtyFourMiB) {
  SKIP_OUTSIDE_GUEST();
  run_ranks(2, {BRAID_PERF, "--op", "all_reduce", "-d", "f32", "-b", "64M", "-e", "64M", "-n", "1", "-w", "0", "-c", "1"},
            4);
  run_ranks(2, {BRAID_PERF, "--op", "broadcast", "-d", "f32", "-b", "64M", "-e", "64M", "-n", "1", "-w", "0", "-c", "1"},
            1);
  run_ranks(3, {BRAID_PERF, "--op", "all_reduce", "-d", "bf16", "-b", "64M", "-e", "64M", "-n", "1", "-w", "0", "-c",
                "1"});
}

}  // namespace
}  // namespace braid::transport::ib
