// EtcdStore against a real 3-member etcd cluster on 127.0.0.1: every Store call, races between
// two clients, bounded waits that name what is missing, and a member killed mid-test.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/tools/braidrun/etcd_cluster.h"
#include "tools/braidrun/etcd_store.h"

namespace braid::braidrun::testing {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<EtcdStore> client(const std::string& endpoints, EtcdStoreOptions o = {}) {
  auto eps = etcd::parse_endpoints(endpoints);
  if (!eps.is_ok()) throw std::runtime_error(eps.status().message());
  return std::make_unique<EtcdStore>(*eps, o);
}

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BRAID_SKIP_WITHOUT_ETCD();
    cluster_ = std::make_unique<EtcdCluster>();
    ASSERT_TRUE(cluster_->up()) << cluster_->error();
    // Every test uses its own keys, so a cluster shared by nothing else starts empty.
    prefix_ = std::string("t/") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }
  std::string k(const std::string& name) const { return prefix_ + name; }

  std::unique_ptr<EtcdCluster> cluster_;
  std::string prefix_;
};

TEST_F(EtcdStoreTest, EveryStoreCall) {
  auto s = client(cluster_->endpoints(), {.timeout = milliseconds(2000)});
  EXPECT_EQ(s->address(), "etcd " + cluster_->endpoints());
  EXPECT_EQ(s->num_keys(), 0);
  EXPECT_FALSE(s->check({k("a")}));

  s->set(k("a"), "one");
  EXPECT_EQ(s->get(k("a")), "one");
  EXPECT_TRUE(s->check({k("a")}));
  EXPECT_FALSE(s->check({k("a"), k("b")}));
  s->set(k("a"), "two");
  EXPECT_EQ(s->get(k("a")), "two");

  // Binary-safe keys and values, and a value large enough that etcd sends it chunked.
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  s->set(k(bytes), bytes);
  EXPECT_EQ(s->get(k(bytes)), bytes);
  const std::string big(300000, 'x');
  s->set(k("big"), big);
  EXPECT_EQ(s->get(k("big")), big);
  s->set(k("empty"), "");
  EXPECT_EQ(s->get(k("empty")), "");
  EXPECT_TRUE(s->check({k("empty")}));

  EXPECT_EQ(s->add(k("n"), 5), 5);
  EXPECT_EQ(s->add(k("n"), -2), 3);
  EXPECT_EQ(s->add(k("n"), 0), 3);
  EXPECT_EQ(s->get(k("n")), "3");
  try {
    s->add(k("a"), 1);
    ADD_FAILURE() << "add on a value that is not a number";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("is not a decimal integer"), std::string::npos) << e.what();
  }

  // compare_set: absent + "" sets; a wrong expectation returns the value unchanged (or "" when
  // absent); the right one replaces; "" also matches a present empty value.
  EXPECT_EQ(s->compare_set(k("cs"), "", "first"), "first");
  EXPECT_EQ(s->compare_set(k("cs"), "", "second"), "first");
  EXPECT_EQ(s->compare_set(k("cs"), "nope", "second"), "first");
  EXPECT_EQ(s->compare_set(k("cs"), "first", "second"), "second");
  EXPECT_EQ(s->get(k("cs")), "second");
  EXPECT_EQ(s->compare_set(k("absent"), "x", "y"), "");
  EXPECT_FALSE(s->check({k("absent")}));
  EXPECT_EQ(s->compare_set(k("empty"), "", "filled"), "filled");

  // wait returns once every key is there, also when one arrives during the wait.
  s->wait({k("a"), k("n")}, milliseconds(100));
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(200));
    client(cluster_->endpoints())->set(k("late"), "1");
  });
  s->wait({k("a"), k("late")}, milliseconds(5000));
  EXPECT_EQ(s->get(k("late")), "1");
  later.join();

  const int64_t before = s->num_keys();
  EXPECT_EQ(before, 7);  // a, bytes, big, empty, n, cs, late and nothing else
  EXPECT_TRUE(s->delete_key(k("a")));
  EXPECT_FALSE(s->delete_key(k("a")));
  EXPECT_FALSE(s->check({k("a")}));
  EXPECT_EQ(s->num_keys(), before - 1);

  s->set_timeout(milliseconds(1234));
  EXPECT_EQ(s->timeout(), milliseconds(1234));
}

TEST_F(EtcdStoreTest, CompareSetRacesHaveOneWinnerThatBothClientsSee) {
  auto a = client(cluster_->endpoints());
  auto b = client(cluster_->endpoints());
  constexpr int kSlots = 40;
  std::vector<std::string> seen_a(kSlots), seen_b(kSlots);
  std::atomic<int> go{0};
  auto race = [&](EtcdStore* s, const std::string& me, std::vector<std::string>* seen) {
    go.fetch_add(1);
    while (go.load() < 2) std::this_thread::yield();
    for (int i = 0; i < kSlots; ++i) (*seen)[i] = s->compare_set(k("slot" + std::to_string(i)), "", me);
  };
  std::thread ta(race, a.get(), "a", &seen_a), tb(race, b.get(), "b", &seen_b);
  ta.join();
  tb.join();
  for (int i = 0; i < kSlots; ++i) {
    EXPECT_EQ(seen_a[i], seen_b[i]) << "slot " << i << ": each client must see the one winner";
    EXPECT_TRUE(seen_a[i] == "a" || seen_a[i] == "b") << seen_a[i];
    EXPECT_EQ(a->get(k("slot" + std::to_string(i))), seen_a[i]);
  }
}

TEST_F(EtcdStoreTest, ConcurrentAddsFromTwoClientsLoseNothing) {
  auto a = client(cluster_->endpoints());
  auto b = client(cluster_->endpoints());
  constexpr int kEach = 40;
  std::set<int64_t> got_a, got_b;
  std::thread ta([&] {
    for (int i = 0; i < kEach; ++i) got_a.insert(a->add(k("counter"), 1));
  });
  std::thread tb([&] {
    for (int i = 0; i < kEach; ++i) got_b.insert(b->add(k("counter"), 1));
  });
  ta.join();
  tb.join();
  EXPECT_EQ(a->get(k("counter")), std::to_string(2 * kEach));
  // Every value 1..2*kEach was handed out exactly once.
  std::set<int64_t> all = got_a;
  for (int64_t v : got_b) EXPECT_TRUE(all.insert(v).second) << "two adds returned " << v;
  EXPECT_EQ(all.size(), static_cast<size_t>(2 * kEach));
}

TEST_F(EtcdStoreTest, WaitAndGetTimeOutNamingTheMissingKeys) {
  auto s = client(cluster_->endpoints());
  s->set(k("here"), "1");
  const auto start = std::chrono::steady_clock::now();
  try {
    s->wait({k("here"), k("missing1"), k("missing2")}, milliseconds(300));
    ADD_FAILURE() << "wait returned without the keys";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout);
    const std::string m = e.what();
    EXPECT_NE(m.find("still missing: " + k("missing1") + ", " + k("missing2")), std::string::npos) << m;
    EXPECT_EQ(m.find(k("here") + ","), std::string::npos) << m;
    EXPECT_NE(m.find(cluster_->endpoints()), std::string::npos) << m;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  s->set_timeout(milliseconds(200));
  try {
    s->get(k("never"));
    ADD_FAILURE() << "get returned without the key";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout);
    EXPECT_NE(std::string(e.what()).find("still missing: " + k("never")), std::string::npos) << e.what();
  }
}

// The member a client talks to dies; the next call goes to another member and nothing is lost.
TEST_F(EtcdStoreTest, AMemberKilledMidTestTheClientGoesOn) {
  auto s = client(cluster_->endpoints(), {.timeout = milliseconds(5000)});
  s->set(k("before"), "1");
  EXPECT_EQ(s->add(k("count"), 1), 1);
  const std::string first = s->current_member().text();
  ASSERT_EQ(first, cluster_->endpoint(0));
  cluster_->kill_member(0);
  // Writes need a leader: when the killed member led, the others elect one first.
  s->set(k("after"), "2");
  EXPECT_NE(s->current_member().text(), first);
  EXPECT_EQ(s->get(k("before")), "1");
  EXPECT_EQ(s->get(k("after")), "2");
  EXPECT_EQ(s->add(k("count"), 1), 2);
  EXPECT_EQ(s->compare_set(k("cs"), "", "x"), "x");
  EXPECT_TRUE(s->check({k("before"), k("after"), k("count"), k("cs")}));
  // A client that starts with the dead member first in its list goes on as well.
  auto fresh = client(cluster_->endpoints());
  EXPECT_EQ(fresh->get(k("after")), "2");
}

// A frozen member (SIGSTOP: its port still accepts connections, nothing answers) costs a call
// one member timeout; the call and the ones after it are answered by the others.
TEST_F(EtcdStoreTest, AFrozenMemberIsLeftAfterTheMemberTimeout) {
  auto s = client(cluster_->endpoints(), {.timeout = milliseconds(5000), .member_timeout = milliseconds(1000)});
  s->set(k("before"), "1");
  ASSERT_EQ(s->current_member().text(), cluster_->endpoint(0));
  cluster_->signal_member(0, SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  s->set(k("after"), "2");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_NE(s->current_member().text(), cluster_->endpoint(0));
  EXPECT_EQ(s->get(k("before")), "1");
  EXPECT_EQ(s->add(k("n"), 2), 2);
  EXPECT_TRUE(s->check({k("before"), k("after"), k("n")}));
  cluster_->signal_member(0, SIGCONT);
}

// The members' peer ports answer HTTP, but not etcd's gateway: the call fails at once, saying so.
TEST_F(EtcdStoreTest, APeerPortForAClientPortIsRefusedAtOnce) {
  auto s = client(cluster_->peer_endpoint(1), {.request_timeout = milliseconds(20000)});
  const auto start = std::chrono::steady_clock::now();
  try {
    s->set(k("x"), "1");
    ADD_FAILURE() << "set through a peer port";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::protocol) << e.what();
    EXPECT_NE(std::string(e.what()).find("member " + cluster_->peer_endpoint(1) + " refused it (HTTP 404"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("client port"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not retried for the whole bound";
}

// No member reachable: the call fails within its bound, naming every member and the fix.
TEST(EtcdStoreNoCluster, NoMemberAnsweringFailsNamingEachMember) {
  const int p1 = ::braid::testing::free_port(), p2 = ::braid::testing::free_port();
  const std::string eps = "127.0.0.1:" + std::to_string(p1) + ",127.0.0.1:" + std::to_string(p2);
  auto s = client(eps, {.request_timeout = milliseconds(500), .member_timeout = milliseconds(200)});
  const auto start = std::chrono::steady_clock::now();
  try {
    s->set("k", "v");
    ADD_FAILURE() << "set without any etcd";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::peer_lost);
    const std::string m = e.what();
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(p1) + ": etcd member"), std::string::npos) << m;
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(p2) + ": etcd member"), std::string::npos) << m;
    EXPECT_NE(m.find("endpoint health"), std::string::npos) << m;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace braid::braidrun::testing
