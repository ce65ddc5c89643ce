// The per-peer transport choice as a pure function over fabricated published cards: both ends
// of every pair agree, the preference order holds, shm stays inside a host and can be turned
// off, and lists that disagree are errors naming both ranks' lists.
#include "runtime/links/transport_choice.h"

#include <gtest/gtest.h>

#include "runtime/bootstrap/agreed_settings.h"

namespace braid {
namespace {

PublishedLinks rank_on(const std::string& host, const std::string& setting, std::vector<std::string> families,
                       bool host_local = false) {
  PublishedLinks l;
  l.host = host;
  l.setting = setting;
  int port = 1000;
  for (const std::string& f : families) l.addresses.push_back({f, f + ":" + host + ":" + std::to_string(++port), host_local});
  return l;
}

// Every pair, both ways: the same answer (or the same error).
void expect_agreement(const std::vector<PublishedLinks>& all) {
  for (int a = 0; a < static_cast<int>(all.size()); ++a) {
    for (int b = 0; b < static_cast<int>(all.size()); ++b) {
      if (a == b) continue;
      auto ab = choose_transport(all, a, b), ba = choose_transport(all, b, a);
      ASSERT_EQ(ab.is_ok(), ba.is_ok()) << a << " " << b;
      if (ab.is_ok()) {
        EXPECT_EQ(ab.value(), ba.value()) << a << " " << b;
      }
    }
  }
}

TEST(TransportChoice, ShmInsideAHostTheNextFamilyAcross) {
  // Two hosts x two ranks, placed round-robin, every rank on auto with shm and tcp up.
  const std::vector<PublishedLinks> all = {rank_on("A", "auto", {"shm", "tcp"}), rank_on("B", "auto", {"shm", "tcp"}),
                                           rank_on("A", "auto", {"shm", "tcp"}), rank_on("B", "auto", {"shm", "tcp"})};
  expect_agreement(all);
  auto chosen = choose_transports(all, 0);
  ASSERT_TRUE(chosen.is_ok()) << chosen.status().message();
  EXPECT_EQ(chosen.value(), (std::vector<std::string>{"", "tcp", "shm", "tcp"}));
  chosen = choose_transports(all, 3);
  ASSERT_TRUE(chosen.is_ok());
  EXPECT_EQ(chosen.value(), (std::vector<std::string>{"tcp", "shm", "tcp", ""}));
}

TEST(TransportChoice, FollowsThePreferenceOrder) {
  // ib before tcp where both ends have it; a rank without ib talks tcp to everyone.
  std::vector<PublishedLinks> all = {rank_on("A", "auto", {"shm", "ib", "tcp"}), rank_on("B", "auto", {"shm", "ib", "tcp"}),
                                     rank_on("C", "auto", {"shm", "tcp"})};
  expect_agreement(all);
  EXPECT_EQ(choose_transport(all, 0, 1).value(), "ib");
  EXPECT_EQ(choose_transport(all, 0, 2).value(), "tcp");
  EXPECT_EQ(choose_transport(all, 2, 1).value(), "tcp");
  // An explicit list puts tcp first: same-host ranks take it though both have shm.
  all = {rank_on("A", "tcp,shm", {"tcp", "shm"}), rank_on("A", "tcp,shm", {"tcp", "shm"})};
  expect_agreement(all);
  EXPECT_EQ(choose_transport(all, 0, 1).value(), "tcp");
  // tcp-poll is tcp's wire protocol: an explicit list of either agrees with the other.
  all = {rank_on("A", "shm,tcp-poll", {"shm", "tcp"}), rank_on("B", "shm,tcp", {"shm", "tcp"})};
  expect_agreement(all);
  EXPECT_EQ(choose_transport(all, 0, 1).value(), "tcp");
}

TEST(TransportChoice, ShmDisabledFallsToTheNextFamily) {
  Env env;
  auto list = preference_list(env);
  ASSERT_TRUE(list.is_ok());
  ASSERT_EQ(list.value().size(), 3u);
  EXPECT_EQ(list.value()[0].family, "shm");
  EXPECT_EQ(list.value()[1].family, "ib");
  EXPECT_EQ(list.value()[2].family, "tcp");
  EXPECT_EQ(list.value()[2].create, "auto");  // tcp over whichever engine works
  env.shm_disable = true;
  list = preference_list(env);
  ASSERT_TRUE(list.is_ok());
  ASSERT_EQ(list.value().size(), 2u);
  EXPECT_EQ(list.value()[0].family, "ib");
  // The rank that disabled shm published none: its same-host peer meets it on tcp.
  const std::vector<PublishedLinks> all = {rank_on("A", "auto", {"shm", "tcp"}), rank_on("A", "auto", {"tcp"}),
                                           rank_on("A", "auto", {"shm", "tcp"})};
  expect_agreement(all);
  EXPECT_EQ(choose_transport(all, 0, 1).value(), "tcp");
  EXPECT_EQ(choose_transport(all, 0, 2).value(), "shm");
  // Nothing left to use is an error naming both variables.
  env.transport = "shm";
  auto none = preference_list(env);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("BRAID_TRANSPORT='shm' with BRAID_SHM_DISABLE=1"), std::string::npos)
      << none.status().message();
  env.transport = "tcp-poll";
  list = preference_list(env);
  ASSERT_TRUE(list.is_ok());
  ASSERT_EQ(list.value().size(), 1u);
  EXPECT_EQ(list.value()[0].family, "tcp");
  EXPECT_EQ(list.value()[0].create, "tcp-poll");
}

TEST(TransportChoice, MismatchedExplicitListsNameBothRanksLists) {
  const std::vector<PublishedLinks> all = {rank_on("A", "shm,tcp", {"shm", "tcp"}), rank_on("A", "auto", {"shm", "tcp"}),
                                           rank_on("B", "tcp", {"tcp"})};
  auto s = choose_transport(all, 2, 0);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), ErrorCode::mismatch);
  EXPECT_NE(s.status().message().find("BRAID_TRANSPORT differs between rank 0 and rank 2: rank 0 has 'shm,tcp', "
                                      "rank 2 has 'tcp'"),
            std::string::npos)
      << s.status().message();
  // auto agrees with either list, taking what the pair has in common.
  EXPECT_EQ(choose_transport(all, 1, 0).value(), "shm");
  EXPECT_EQ(choose_transport(all, 1, 2).value(), "tcp");
  // The settings cards catch it first, before anyone connects, with the same names.
  auto card = [](const std::string& t) {
    Env e;
    e.transport = t;
    return settings_card(e);
  };
  Status cards = check_settings({card("shm,tcp"), card("auto"), card("tcp")});
  EXPECT_EQ(cards.code(), ErrorCode::mismatch);
  EXPECT_NE(cards.message().find("BRAID_TRANSPORT differs between ranks: rank 0 has 'shm,tcp', rank 2 has 'tcp'"),
            std::string::npos)
      << cards.message();
  EXPECT_TRUE(check_settings({card("shm,tcp"), card("auto"), card("shm,tcp-poll")}).is_ok());
  EXPECT_TRUE(check_settings({card("auto"), card("tcp"), card("auto")}).is_ok());
}

TEST(TransportChoice, NoCommonFamilyNamesWhatEachBroughtUp) {
  // shm reaches only inside a host: ranks on two hosts with nothing else have no way to talk.
  const std::vector<PublishedLinks> all = {rank_on("A", "shm", {"shm"}), rank_on("B", "shm", {"shm"})};
  auto s = choose_transport(all, 0, 1);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), ErrorCode::mismatch);
  EXPECT_NE(s.status().message().find("rank 0 and rank 1 have no transport in common that reaches from one to the "
                                      "other (they are on different hosts): rank 0 brought up shm "
                                      "(BRAID_TRANSPORT='shm'), rank 1 brought up shm"),
            std::string::npos)
      << s.status().message();
  EXPECT_FALSE(choose_transports(all, 1).is_ok());
}

TEST(TransportChoice, CardsRoundTripAndBadOnesAreNamed) {
  PublishedLinks l = rank_on("5e1c/net:1/shm:2", "shm,tcp", {"shm", "tcp"}, true);
  l.addresses[1].host_local = false;
  auto back = parse_links_card(links_card(l), 3);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value().host, l.host);
  EXPECT_EQ(back.value().setting, l.setting);
  ASSERT_EQ(back.value().addresses.size(), 2u);
  EXPECT_EQ(back.value().addresses[0].address, l.addresses[0].address);
  EXPECT_TRUE(back.value().addresses[0].host_local);
  EXPECT_FALSE(back.value().addresses[1].host_local);
  for (const std::string bad : {"", "10.0.0.1:4000", "braid-links 1\nweird\tx\n", "braid-links 1\naddr\ttcp\n"}) {
    auto p = parse_links_card(bad, 3);
    ASSERT_FALSE(p.is_ok()) << bad;
    EXPECT_NE(p.status().message().find("rank 3 published transport addresses this build cannot read"), std::string::npos)
        << p.status().message();
  }
}

// The spin rule reads every rank's CPUs from the links card (no exchange of its own): the mask
// comes back bit for bit, unknown stays unknown, and a card whose cpus line is missing, doubled
// or not a mask is refused with the error that names the publisher.
TEST(TransportChoice, CardsCarryTheCpuMask) {
  PublishedLinks l = rank_on("h", "auto", {"shm", "tcp"});
  for (size_t cpu : {0u, 5u, 63u, 64u, 1023u}) l.cpus[cpu / 64] |= uint64_t{1} << (cpu % 64);
  auto back = parse_links_card(links_card(l), 2);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value().cpus, l.cpus);
  EXPECT_EQ(transport::cpu_count(back.value().cpus), 5u);
  l.cpus = {};
  back = parse_links_card(links_card(l), 2);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(transport::cpu_count(back.value().cpus), 0u);

  l.cpus[0] = 0x30;
  const std::string good = links_card(l);
  const size_t at = good.find("\ncpus\t") + 1, end = good.find('\n', at) + 1;
  const std::string line = good.substr(at, end - at);
  ASSERT_EQ(line.substr(0, 5 + 16), "cpus\t0000000000000030");
  const std::string before = good.substr(0, at), after = good.substr(end);
  for (const std::string& bad : {before + after, before + line + line + after,
                                 before + "cpus\n" + after, before + "cpus\t30\n" + after,
                                 before + line.substr(0, line.size() - 1) + ",\n" + after,
                                 before + "cpus\t" + std::string(16, 'g') + line.substr(5 + 16) + after}) {
    auto p = parse_links_card(bad, 2);
    ASSERT_FALSE(p.is_ok()) << bad;
    EXPECT_NE(p.status().message().find("rank 2 published transport addresses this build cannot read"),
              std::string::npos)
        << p.status().message();
  }
  // A card of the format before the cpus line was added names its version.
  auto old = parse_links_card("braid-links 1\nhost\th\nsetting\tauto\n", 2);
  ASSERT_FALSE(old.is_ok());
  EXPECT_NE(old.status().message().find("no 'braid-links 2' line"), std::string::npos) << old.status().message();
}

// A rank that brought up nothing publishes why (w-ibfaults): every peer fails at once naming it
// and its reason, rather than waiting out the rendezvous timeout for its addresses.
TEST(TransportChoice, ARankThatBroughtUpNothingIsNamedWithItsReason) {
  PublishedLinks gave_up = rank_on("B", "ib", {});
  gave_up.failed = "ib: no usable RDMA port with BRAID_IB_HCA='=mlx5_0'.\nThis host has: rxe0";
  auto back = parse_links_card(links_card(gave_up), 1);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value().failed, "ib: no usable RDMA port with BRAID_IB_HCA='=mlx5_0'. This host has: rxe0");
  const std::vector<PublishedLinks> all = {rank_on("A", "ib", {"ib"}), back.value(), rank_on("C", "ib", {"ib"})};
  expect_agreement(all);
  for (int r : {0, 2}) {
    auto s = choose_transport(all, r, 1);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.status().message().find("rank 1 brought up no transport of BRAID_TRANSPORT='ib' and gave up: ib: no "
                                        "usable RDMA port"),
              std::string::npos)
        << s.status().message();
  }
  EXPECT_TRUE(choose_transport(all, 0, 2).is_ok());
}

TEST(TransportChoice, HostLocalOnlyWhenEveryChosenLinkIs) {
  std::vector<PublishedLinks> all = {rank_on("A", "auto", {"shm", "tcp"}, true), rank_on("A", "auto", {"shm", "tcp"}, true)};
  EXPECT_TRUE(every_link_host_local(all));
  all.push_back(rank_on("B", "auto", {"shm", "tcp"}, false));  // reached over a link
  EXPECT_FALSE(every_link_host_local(all));
}

TEST(TransportChoice, EnvTakesPreferenceListsAndNamesWhatIsWrong) {
  auto parse = [](const char* v) {
    return Env::parse([v](const char* name) -> const char* { return std::string(name) == "BRAID_TRANSPORT" ? v : nullptr; });
  };
  EXPECT_TRUE(parse("shm,tcp").is_ok());
  EXPECT_TRUE(parse("ib,tcp-poll").is_ok());
  for (const char* bad : {"shm,pigeon", "auto,tcp", "tcp,tcp", "shm,"}) {
    auto e = parse(bad);
    ASSERT_FALSE(e.is_ok()) << bad;
    EXPECT_EQ(e.status().code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.status().message().find(std::string("BRAID_TRANSPORT='") + bad + "'"), std::string::npos)
        << e.status().message();
  }
  EXPECT_NE(parse("shm,pigeon").status().message().find("'pigeon' is not one of: auto, tcp, tcp-poll, ib, shm, inproc"),
            std::string::npos);
}

}  // namespace
}  // namespace braid
