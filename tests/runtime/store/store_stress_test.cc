// The store under a crowd and an attack at once, the server in a process of its own so that its
// memory can be read apart from its clients': every legitimate client gets correct answers,
// strangers hold nothing, and the server stays small.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "braid/error.h"
#include "braid/store.h"
#include "tests/runtime/store/store_test_util.h"
#include "tests/support/subprocess.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
using namespace store_test;
using testing::Subprocess;

const std::string kSecret = "stress-test-secret-0123456789";
constexpr size_t kRssBound = 100u << 20;

struct Server {
  std::unique_ptr<Subprocess> process;
  uint16_t port = 0;
};

Server start_server(const std::map<std::string, std::string>& env, const std::vector<std::string>& args = {}) {
  Server s;
  std::vector<std::string> argv{testing::binary_from_env("STORE_SERVER_CHILD")};
  argv.insert(argv.end(), args.begin(), args.end());
  s.process = std::make_unique<Subprocess>(argv, env);
  for (int i = 0; i < 1000 && s.port == 0; ++i) {
    std::string out = s.process->output();
    if (auto at = out.find("port "); at != std::string::npos && out.find('\n', at) != std::string::npos) {
      s.port = static_cast<uint16_t>(std::stoi(out.substr(at + 5)));
    } else {
      std::this_thread::sleep_for(10ms);
    }
  }
  EXPECT_NE(s.port, 0) << s.process->output();
  return s;
}

// Peak resident memory of `pid` (VmHWM: the most its VmRSS ever was), in bytes.
size_t peak_rss(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// 8 strangers and 8 insiders (they know the secret) each sending almost a whole 64 MiB frame,
// each on its own thread (the caller joins them).
std::vector<std::thread> start_huge_frame_attacks(uint16_t port) {
  std::vector<std::thread> attackers;
  for (int i = 0; i < 8; ++i) {
    attackers.emplace_back([port] { send_almost_a_huge_frame(connect_raw(port).get()); });
    attackers.emplace_back([port] {
      UniqueFd fd = connect_authenticated(port, kSecret);
      if (fd.valid()) send_almost_a_huge_frame(fd.get());
    });
  }
  return attackers;
}

TEST(StoreStress, LegitimateClientsAreServedCorrectlyUnderAttackAndTheServerStaysSmall) {
  if (raise_fd_limit() < 3500) GTEST_SKIP() << "the open-file limit is too low for 2500 connections";
  Server server = start_server({{"BRAID_SECRET", kSecret}});
  ASSERT_NE(server.port, 0);

  std::vector<UniqueFd> idle;
  for (int i = 0; i < 2000; ++i) idle.push_back(connect_raw(server.port));
  std::vector<std::thread> attackers = start_huge_frame_attacks(server.port);

  constexpr int kThreads = 32, kPerThread = 16, kClients = kThreads * kPerThread;
  std::atomic<int> wrong{0}, connected{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        std::vector<std::unique_ptr<TcpStore>> mine;
        for (int i = 0; i < kPerThread; ++i) {
          mine.push_back(TcpStore::connect("127.0.0.1", server.port, {.timeout = 20s, .secret = kSecret}));
          connected++;
        }
        for (int i = 0; i < kPerThread; ++i) {
          const int c = t * kPerThread + i;
          const std::string me = "client/" + std::to_string(c);
          mine[i]->set(me, me);
          wrong += mine[i]->get(me) != me;
          wrong += mine[i]->compare_set(me + "/cas", "", "first") != "first";
          wrong += mine[i]->compare_set(me + "/cas", "nope", "second") != "first";
          mine[i]->add("total", 1);
        }
        for (int i = 0; i < kPerThread; ++i) {  // every client's neighbour has set its key by now or soon
          const std::string next = "client/" + std::to_string((t * kPerThread + i + 1) % kClients);
          mine[i]->wait({next}, 20s);
          wrong += !mine[i]->check({next});
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        wrong++;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (auto& th : attackers) th.join();
  EXPECT_EQ(connected.load(), kClients);
  EXPECT_EQ(wrong.load(), 0);
  auto check = TcpStore::connect("127.0.0.1", server.port, {.timeout = 5s, .secret = kSecret});
  EXPECT_EQ(check->get("total"), std::to_string(kClients));
  EXPECT_EQ(check->num_keys(), 2 * kClients + 1);
  size_t peak = peak_rss(server.process->pid());
  EXPECT_GT(peak, 0u);
  EXPECT_LT(peak, kRssBound) << "the server's peak VmRSS";
  EXPECT_LT(rss_bytes(server.process->pid()), kRssBound);
}

// 8 connections each send all but the last byte of a 64 MiB frame (the old server buffered every
// byte of them), and 8 more that know the secret do the same after their handshake: both are refused
// at the length, so the server's memory never grows.
TEST(StoreStress, AlmostWholeHugeFramesCostTheServerNoMemory) {
  Server server = start_server({{"BRAID_SECRET", kSecret}});
  ASSERT_NE(server.port, 0);
  std::vector<std::thread> attackers = start_huge_frame_attacks(server.port);
  for (auto& th : attackers) th.join();
  auto c = TcpStore::connect("127.0.0.1", server.port, {.timeout = 5s, .secret = kSecret});
  c->set("still", "serving");
  EXPECT_EQ(c->get("still"), "serving");
  EXPECT_LT(peak_rss(server.process->pid()), kRssBound) << "the server's peak VmRSS";
}

// Under the usual 1024 open-file limit, 2000 connections that never say a word must not lock
// the job's clients out: the oldest unauthenticated ones make room.
TEST(StoreStress, TwoThousandIdleConnectionsDoNotLockTheJobOut) {
  if (raise_fd_limit() < 2500) GTEST_SKIP() << "the open-file limit is too low for 2000 connections";
  Server server = start_server({{"BRAID_SECRET", kSecret}}, {"--fd-limit", "1024"});
  ASSERT_NE(server.port, 0);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 2000; ++i) idle.push_back(connect_raw(server.port));
  for (int i = 0; i < 16; ++i) {
    auto c = TcpStore::connect("127.0.0.1", server.port, {.timeout = 20s, .secret = kSecret});
    c->add("joined", 1);
  }
  auto c = TcpStore::connect("127.0.0.1", server.port, {.timeout = 20s, .secret = kSecret});
  EXPECT_EQ(c->get("joined"), "16");
}

}  // namespace
}  // namespace braid
