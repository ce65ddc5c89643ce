// The job's store, as rank 0 serves it, against people outside the job: it listens only where
// MASTER_ADDR points, answers nobody without the job's secret, cannot be held up by silent
// connections, and refuses the ranks of a second job given the same port. Each test ends with
// the job itself completing correctly.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "braid/error.h"
#include "braid/store.h"
#include "runtime/store/store_protocol.h"
#include "tests/runtime/store/store_test_util.h"
#include "tests/support/rank_job.h"
#include "tests/support/subprocess.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
using namespace store_test;
using testing::Subprocess;

constexpr auto kBound = 60s;  // no test here may take anywhere near this long
const std::string kSecret = "store-trust-test-secret-0123456789";

const testing::EnvMap kJobEnv = {{"BRAID_RENDEZVOUS_TIMEOUT_S", "20"}};

std::unique_ptr<Subprocess> start_rank(const std::map<std::string, std::string>& env) {
  return std::make_unique<Subprocess>(std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "join"}, env);
}

// Waits until rank 0's store accepts connections on 127.0.0.1:port.
void wait_for_store(int port) {
  for (int i = 0; i < 1000; ++i) {
    if (connect_raw(static_cast<uint16_t>(port)).valid()) return;
    std::this_thread::sleep_for(10ms);
  }
  FAIL() << "rank 0 never served the store on port " << port;
}

void expect_job_done(Subprocess& p, int size) {
  EXPECT_EQ(p.wait(kBound), 0) << p.output();
  EXPECT_NE(p.output().find("all_reduce sum = " + std::to_string(size * (size + 1) / 2)), std::string::npos)
      << p.output();
}

TEST(StoreTrust, RankZerosStoreListensOnlyWhereMasterAddrPoints) {
  int port = testing::free_port();
  auto r0 = start_rank(testing::rank_env(port, 0, 2, kJobEnv));
  wait_for_store(port);
  // 127.0.0.2 is this host too, but not MASTER_ADDR: a store bound to 0.0.0.0 would answer.
  EXPECT_FALSE(connect_raw(static_cast<uint16_t>(port), "127.0.0.2").valid());
  auto r1 = start_rank(testing::rank_env(port, 1, 2, kJobEnv));
  expect_job_done(*r0, 2);
  expect_job_done(*r1, 2);
}

TEST(StoreTrust, AStrangerWithoutTheSecretCannotReadForgeOrClaimARank) {
  int port = testing::free_port();
  auto env0 = testing::rank_env(port, 0, 2, kJobEnv), env1 = testing::rank_env(port, 1, 2, kJobEnv);
  env0["BRAID_SECRET"] = env1["BRAID_SECRET"] = kSecret;
  auto r0 = start_rank(env0);
  wait_for_store(port);

  try {
    TcpStore::connect("127.0.0.1", static_cast<uint16_t>(port), {.timeout = 3s, .secret = ""});
    ADD_FAILURE() << "a client without the secret got in";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unauthenticated) << e.what();
  }
  // The old server's requests, sent raw: read rank 0's owner key, post a forged failure, claim
  // rank 1 for the stranger.
  using store::FrameWriter;
  using store::Opcode;
  std::string attack =
      FrameWriter().u8(static_cast<uint8_t>(Opcode::get)).bytes("braid/owner/0").i64(0).finish() +
      FrameWriter().u8(static_cast<uint8_t>(Opcode::set)).bytes("braid/c1/abort").bytes("7\n1\nforged").finish() +
      FrameWriter().u8(static_cast<uint8_t>(Opcode::compare_set)).bytes("braid/owner/1").bytes("").bytes("x:1").finish();
  UniqueFd raw = connect_raw(static_cast<uint16_t>(port));
  ASSERT_TRUE(raw.valid());
  send_raw(raw.get(), attack);
  bool closed = false;
  std::string got = read_until_eof(raw.get(), 3s, &closed);
  EXPECT_TRUE(closed);
  // The hello, then nothing but an error.
  size_t frames = 0;
  for (std::string_view rest = got; rest.size() >= 4 && rest.size() >= 4 + store::decode_u32(rest.data()); ++frames) {
    uint32_t len = store::decode_u32(rest.data());
    if (frames > 0) {
      EXPECT_EQ(static_cast<store::ReplyKind>(rest[4]), store::ReplyKind::error) << "the stranger got an answer";
    }
    rest.remove_prefix(4 + len);
  }
  EXPECT_EQ(frames, 2u);
  EXPECT_EQ(got.find(std::to_string(r0->pid())), std::string::npos) << "the stranger read rank 0's owner key";

  auto r1 = start_rank(env1);
  expect_job_done(*r0, 2);
  expect_job_done(*r1, 2);
}

// Silent connections to the store are pending ones: they are closed at their handshake
// deadline and never hold up a rank. (The observed 2 s per silent connection was the tcp
// transport's listener, which reads each new connection's handshake in turn.)
TEST(StoreTrust, SilentConnectionsDuringSetupCostTheJobNothing) {
  int port = testing::free_port();
  auto r0 = start_rank(testing::rank_env(port, 0, 2, kJobEnv));
  wait_for_store(port);
  std::vector<UniqueFd> silent;
  for (int i = 0; i < 20; ++i) silent.push_back(connect_raw(static_cast<uint16_t>(port)));
  auto r1 = start_rank(testing::rank_env(port, 1, 2, kJobEnv));
  expect_job_done(*r0, 2);
  expect_job_done(*r1, 2);
  for (UniqueFd& fd : silent) {
    bool closed = false;
    read_until_eof(fd.get(), 5s, &closed);  // detection bound: the 2 s deadline plus margin
    EXPECT_TRUE(closed);
  }
}

TEST(StoreTrust, ASecondJobOnTheSamePortIsRefusedNamingThePortAndTheFirstJob) {
  int port = testing::free_port();
  auto a0env = testing::rank_env(port, 0, 2, kJobEnv), a1env = testing::rank_env(port, 1, 2, kJobEnv);
  auto b0env = testing::rank_env(port, 0, 2, kJobEnv), b1env = testing::rank_env(port, 1, 2, kJobEnv);
  a0env["BRAID_JOB_ID"] = a1env["BRAID_JOB_ID"] = "job-A";
  b0env["BRAID_JOB_ID"] = b1env["BRAID_JOB_ID"] = "job-B";
  auto a0 = start_rank(a0env);
  wait_for_store(port);
  // Job B's rank 1 reaches job A's store and must not join it; job B's rank 0 cannot serve.
  auto b1 = start_rank(b1env);
  int rc = b1->wait(kBound);
  EXPECT_NE(rc, 0) << b1->output();
  EXPECT_NE(rc, -1) << "hung: " << b1->output();
  EXPECT_NE(b1->output().find(std::to_string(port)), std::string::npos) << b1->output();
  EXPECT_NE(b1->output().find("job-A"), std::string::npos) << b1->output();
  auto b0 = start_rank(b0env);
  rc = b0->wait(kBound);
  EXPECT_NE(rc, 0) << b0->output();
  EXPECT_NE(b0->output().find("MASTER_PORT=" + std::to_string(port)), std::string::npos) << b0->output();
  EXPECT_NE(b0->output().find("job-A"), std::string::npos) << b0->output();
  // Job A is undisturbed.
  auto a1 = start_rank(a1env);
  expect_job_done(*a0, 2);
  expect_job_done(*a1, 2);
}

}  // namespace
}  // namespace braid
