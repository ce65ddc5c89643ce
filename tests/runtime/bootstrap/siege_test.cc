// A job of 4 ranks (rank 0 serving the store, every rank with the job's secret) under every
// attack of issue #17 at once, by someone who knows everything but the secret: 2000 idle
// connections and 8 unfinished 64 MiB frames to the store, raw requests that read, forge and
// claim, and, as soon as a rank publishes its transport address, hellos that claim each rank
// it will accept from, with the right communicator id. The job must finish with the right
// result on every rank, and no stranger may get anything but a refusal.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "braid/error.h"
#include "braid/store.h"
#include "common/job_secret.h"
#include "runtime/links/transport_choice.h"
#include "runtime/store/store_protocol.h"
#include "tests/runtime/store/store_test_util.h"
#include "tests/support/rank_job.h"
#include "tests/support/subprocess.h"
#include "transport/common/handshake.h"
#include "transport/common/socket_address.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
using namespace store_test;
using testing::Subprocess;

constexpr int kRanks = 4;
constexpr auto kBound = 90s;  // no part of the test may take anywhere near this long
const std::string kSecret = "siege-test-secret-0123456789abcdef";

const testing::EnvMap kJobEnv = {{"BRAID_RENDEZVOUS_TIMEOUT_S", "60"}, {"BRAID_SECRET", kSecret}};

// A stranger's raw requests, sent without a handshake: read a key, post a forged failure, claim
// a rank. True when the store answered nothing but its hello and an error, then closed.
bool stranger_gets_only_a_refusal(uint16_t port) {
  using store::FrameWriter;
  using store::Opcode;
  UniqueFd fd = connect_raw(port);
  if (!fd.valid()) return true;  // refused outright (accept paused): nothing answered either
  send_raw(fd.get(), FrameWriter().u8(static_cast<uint8_t>(Opcode::get)).bytes("braid/c1/comm_id").i64(0).finish() +
                         FrameWriter().u8(static_cast<uint8_t>(Opcode::set)).bytes("braid/c1/abort").bytes("7\n1\nforged").finish() +
                         FrameWriter().u8(static_cast<uint8_t>(Opcode::compare_set)).bytes("braid/owner/3").bytes("").bytes("x:1").finish());
  bool closed = false;
  std::string got = read_until_eof(fd.get(), 10s, &closed);
  size_t frames = 0;
  for (std::string_view rest = got; rest.size() >= 4 && rest.size() >= 4 + store::decode_u32(rest.data()); ++frames) {
    if (frames > 0 && static_cast<store::ReplyKind>(rest[4]) != store::ReplyKind::error) return false;
    rest.remove_prefix(4 + store::decode_u32(rest.data()));
  }
  return closed && frames <= 2;
}

// Watches the store (as the test harness, with the secret: the attacker is granted everything
// but the secret) for each rank's transport address and claims, on it, every rank it accepts
// from, with a hello of the right communicator made under another secret. Counts hellos that
// were admitted (must stay 0) and those the rank answered (it proved itself, the claim could
// not): a claim may also come too late, after the rank took its real peers, and go unanswered.
void claim_every_rank(uint16_t port, std::atomic<int>* admitted, std::atomic<int>* answered) {
  auto harness = TcpStore::connect("127.0.0.1", port, {.timeout = 60s, .secret = kSecret});
  const uint64_t comm_id = std::stoull(harness->get("braid/c1/comm_id"));
  auto wrong = auth::JobSecret::from_text("a-guess-at-the-secret-0123456789", "attacker");
  ASSERT_TRUE(wrong.is_ok());
  std::vector<std::thread> claims;
  for (int target = 1; target < kRanks; ++target) {
    // The rank's card of transport addresses (runtime/links/transport_choice.h): its tcp one.
    auto card = parse_links_card(harness->get("braid/c1/addr/" + std::to_string(target)), target);
    ASSERT_TRUE(card.is_ok()) << card.status().message();
    std::string address;
    for (const auto& a : card.value().addresses) {
      if (a.family == "tcp") address = a.address;
    }
    auto where = transport::SocketAddress::parse(address);
    ASSERT_TRUE(where.is_ok()) << address;
    for (int claimed = 0; claimed < target; ++claimed) {
      claims.emplace_back([&, addr = where.value(), target, claimed] {
        UniqueFd fd(socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (::connect(fd.get(), addr.get(), addr.length) != 0) return;
        transport::Handshake hello;
        hello.comm_id = comm_id;
        hello.from_rank = claimed;
        hello.to_rank = target;
        auto r = transport::connector_handshake(fd.get(), hello, wrong.value(), Deadline::after(10s));
        if (r.is_ok()) *admitted += 1;
        if (r.status().code() == ErrorCode::unauthenticated) *answered += 1;
      });
    }
  }
  for (auto& c : claims) c.join();
}

TEST(Siege, AFourRankJobSurvivesEveryAttackWithCorrectResults) {
  if (raise_fd_limit() < 2600) GTEST_SKIP() << "the open-file limit is too low for 2000 idle connections";
  const int port = testing::free_port();
  std::vector<std::unique_ptr<Subprocess>> ranks;
  ranks.push_back(std::make_unique<Subprocess>(
      std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "join"},
      testing::rank_env(port, 0, kRanks, kJobEnv)));
  for (int i = 0; i < 1000 && !connect_raw(static_cast<uint16_t>(port)).valid(); ++i) std::this_thread::sleep_for(10ms);

  std::vector<UniqueFd> idle;
  for (int i = 0; i < 2000; ++i) idle.push_back(connect_raw(static_cast<uint16_t>(port)));
  std::vector<std::thread> attackers;
  for (int i = 0; i < 8; ++i) {
    attackers.emplace_back([&] { send_almost_a_huge_frame(connect_raw(static_cast<uint16_t>(port)).get()); });
  }
  std::atomic<int> strangers_answered{0};
  attackers.emplace_back([&] {
    for (int i = 0; i < 5; ++i) strangers_answered += !stranger_gets_only_a_refusal(static_cast<uint16_t>(port));
  });
  std::atomic<int> admitted{0}, answered{0};
  std::thread claimer([&] { claim_every_rank(static_cast<uint16_t>(port), &admitted, &answered); });

  for (int r = 1; r < kRanks; ++r) {
    ranks.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "join"},
        testing::rank_env(port, r, kRanks, kJobEnv)));
  }
  const std::string sum = "all_reduce sum = " + std::to_string(kRanks * (kRanks + 1) / 2);
  for (auto& p : ranks) {
    EXPECT_EQ(p->wait(kBound), 0) << p->output();
    EXPECT_NE(p->output().find(sum), std::string::npos) << p->output();
  }
  claimer.join();
  for (auto& a : attackers) a.join();
  EXPECT_EQ(strangers_answered.load(), 0) << "a stranger got an answer other than a refusal";
  EXPECT_EQ(admitted.load(), 0) << "a hello under another secret was admitted as a rank";
  std::printf("claims on ranks' transport ports answered during setup and refused: %d of %d\n", answered.load(),
              kRanks * (kRanks - 1) / 2);
}

}  // namespace
}  // namespace braid
