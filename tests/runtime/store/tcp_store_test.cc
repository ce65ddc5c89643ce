// The store's operations through a real TcpStoreServer on 127.0.0.1.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "braid/error.h"
#include "braid/store.h"
#include "tests/runtime/store/store_contract.h"

namespace braid {
namespace {

using namespace std::chrono_literals;

class TcpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { server_ = TcpStoreServer::start("127.0.0.1", 0); }
  std::unique_ptr<TcpStore> client(std::chrono::milliseconds timeout = 2s) {
    return TcpStore::connect("127.0.0.1", server_->port(), {.timeout = timeout});
  }
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(TcpStoreTest, SetGetOverwrite) { store_test::expect_set_get_overwrite(*client()); }

TEST_F(TcpStoreTest, BinaryKeysAndValues) { store_test::expect_binary_round_trip(*client()); }

TEST_F(TcpStoreTest, AddCountsAsDecimalText) { store_test::expect_add_counts_as_decimal_text(*client()); }

TEST_F(TcpStoreTest, AddFromManyThreadsIsAtomic) {
  constexpr int kThreads = 8, kAdds = 200;
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> seen(kThreads);
  auto shared = client();  // half the threads share one client (serialized), half have their own
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<TcpStore> own = t % 2 ? client() : nullptr;
      TcpStore* s = own ? own.get() : shared.get();
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(s->add("counter", 1));
    });
  }
  for (auto& th : threads) th.join();
  std::set<int64_t> all;
  for (auto& v : seen) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), size_t{kThreads * kAdds});  // every value handed out exactly once
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
}

TEST_F(TcpStoreTest, CompareSet) { store_test::expect_compare_set(*client()); }

TEST_F(TcpStoreTest, CheckDeleteNumKeys) { store_test::expect_check_delete_num_keys(*client()); }

TEST_F(TcpStoreTest, GetWakesWhenAnotherClientSets) {
  auto waiter = client(5s);
  auto setter = client();
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    setter->set("late", "value");
  });
  EXPECT_EQ(waiter->get("late"), "value");
  t.join();
}

TEST_F(TcpStoreTest, WaitWakesWhenAllKeysAppear) {
  auto waiter = client(5s);
  auto setter = client();
  std::atomic<bool> done{false};
  std::thread t([&] {
    // Through Store&: TcpStore's override hides the timeout-less overload (see report).
    static_cast<Store&>(*waiter).wait({"x", "y", "z"});
    done = true;
  });
  setter->set("y", "1");
  setter->add("x", 1);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(done.load());
  setter->compare_set("z", "", "3");
  t.join();
  EXPECT_TRUE(done.load());
}

TEST_F(TcpStoreTest, WaitTimeoutNamesMissingKeysAndAddressAndStaysUsable) {
  auto s = client();
  s->set("here", "1");
  auto start = std::chrono::steady_clock::now();
  try {
    s->wait({"here", "missing1", "missing2"}, 300ms);
    FAIL() << "wait must time out";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::timeout);
    EXPECT_NE(m.find("'missing1', 'missing2'"), std::string::npos) << m;
    EXPECT_EQ(m.find("'here'", m.find("still missing")), std::string::npos) << m;
    EXPECT_NE(m.find(s->address()), std::string::npos) << m;
    EXPECT_NE(m.find("BRAID_RENDEZVOUS_TIMEOUT_S"), std::string::npos) << m;
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  // The server answered the timeout itself, so the connection is still in step.
  s->set("after", "ok");
  EXPECT_EQ(s->get("after"), "ok");
}

TEST_F(TcpStoreTest, GetTimesOutWithTheStoreTimeout) {
  auto s = client(200ms);
  try {
    s->get("never");
    FAIL() << "get must time out";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout);
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  s->set("never", "now");
  EXPECT_EQ(s->get("never"), "now");
}

TEST_F(TcpStoreTest, HugeTimeoutsAreCappedNotOverflowed) {
  auto s = client();
  s->set("k", "v");
  s->set_timeout(std::chrono::milliseconds::max());
  EXPECT_EQ(s->get("k"), "v");
  s->wait({"k"}, std::chrono::milliseconds::max());
  EXPECT_THROW(s->set_timeout(0ms), Error);
}

TEST_F(TcpStoreTest, KeyDeletedWhileWaitingIsStillAwaited) {
  auto waiter = client(5s);
  auto setter = client();
  setter->set("a", "1");
  std::thread t([&] { waiter->wait({"a", "b"}, 5s); });
  std::this_thread::sleep_for(50ms);
  setter->delete_key("a");
  setter->set("b", "1");
  std::this_thread::sleep_for(50ms);
  setter->set("a", "again");
  t.join();
}

TEST_F(TcpStoreTest, PrefixStoreNamespacesKeys) {
  std::shared_ptr<Store> base = client();
  PrefixStore p("job1", base), q("job2", base);
  p.set("k", "p");
  q.set("k", "q");
  EXPECT_EQ(p.get("k"), "p");
  EXPECT_EQ(q.get("k"), "q");
  EXPECT_EQ(base->get("job1/k"), "p");
  EXPECT_EQ(p.add("n", 3), 3);
  EXPECT_EQ(p.compare_set("k", "p", "p2"), "p2");
  EXPECT_TRUE(p.check({"k", "n"}));
  EXPECT_FALSE(q.check({"n"}));
  p.wait({"k", "n"}, 100ms);
  EXPECT_EQ(p.num_keys(), 3);  // the whole base store, like torch
  EXPECT_TRUE(p.delete_key("n"));
  EXPECT_FALSE(base->check({"job1/n"}));
  try {
    q.wait({"zz"}, 50ms);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'job2/zz'"), std::string::npos) << e.what();
  }
  p.set_timeout(1234ms);
  EXPECT_EQ(base->timeout(), 1234ms);
  EXPECT_EQ(p.address(), base->address());
}

TEST_F(TcpStoreTest, ServerCountsClients) {
  auto a = client();
  auto b = client();
  a->num_keys();
  b->num_keys();
  EXPECT_EQ(server_->num_clients(), 2u);
  b.reset();
  for (int i = 0; i < 200 && server_->num_clients() != 1; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(server_->num_clients(), 1u);
}

TEST(TcpStoreServerTest, Ipv6Loopback) {
  std::unique_ptr<TcpStoreServer> server;
  try {
    server = TcpStoreServer::start("::1", 0);
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  EXPECT_EQ(server->address(), "[::1]:" + std::to_string(server->port()));
  auto s = TcpStore::connect("::1", server->port(), {.timeout = 2s});
  s->set("v6", "yes");
  EXPECT_EQ(s->get("v6"), "yes");
}

TEST(TcpStoreServerTest, WildcardHostServesLoopback) {
  auto server = TcpStoreServer::start("", 0);
  auto s = TcpStore::connect("127.0.0.1", server->port(), {.timeout = 2s});
  s->set("k", "v");
  EXPECT_EQ(s->get("k"), "v");
}

}  // namespace
}  // namespace braid
