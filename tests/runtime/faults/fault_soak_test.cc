// Fault soak: ranks on emulated hosts (one network namespace each, on a bridge), a long loop of
// checked collectives (fault_rank.cc), and at a random point one fault on a random rank: kill -9,
// SIGSTOP, its link set down, or 30% packet loss both ways (tc netem, or iptables' statistic
// match where the kernel lacks netem). Every survivor must end
// non-zero within BRAID_TIMEOUT_S + margin naming that rank; nothing may hang or be wrong. With
// loss, TCP may still carry the job through: completing with every result right is then fine.
//
// FAULT_SOAK_TRIALS (default 1: CI's run, every fault once) sets the trials per fault, FAULT_SOAK_SEED the seed,
// FAULT_SOAK_ONLY a part of one fault's name to run only that one ("loss"), and FAULT_SOAK_TABLE
// a file that gets the outcome table (scripts/fault_soak.sh). Needs root.
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/rank_job.h"
#include "tests/support/subprocess.h"

namespace braid {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Subprocess;

constexpr int kRanks = 4;
constexpr int kTimeoutS = 5;
constexpr auto kMargin = seconds(20);  // as in fault_test.cc
constexpr long kIters = 6000;          // several seconds of collectives unless a fault ends them

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v ? std::atol(v) : fallback;
}

// Hosts "fs<pid>h<i>" (10.91.0.<i+1>) joined by veths to bridge br0 in "fs<pid>sw"; the switch
// side of host i's cable is "p<i>". Deleted by the destructor whatever happened.
class Hosts {
 public:
  Hosts() : base_("fs" + std::to_string(getpid())) {
    ok_ = sh("ip netns add " + sw()) && sh("ip -n " + sw() + " link add br0 type bridge") &&
          sh("ip -n " + sw() + " link set br0 up");
    for (int i = 0; ok_ && i < kRanks; ++i) {
      const std::string h = host(i), p = port_name(i);
      ok_ = sh("ip netns add " + h) && sh("ip -n " + sw() + " link add " + p + " type veth peer name eth0 netns " + h) &&
            sh("ip -n " + sw() + " link set " + p + " master br0") && sh("ip -n " + sw() + " link set " + p + " up") &&
            sh("ip -n " + h + " addr add " + addr(i) + "/24 dev eth0") && sh("ip -n " + h + " link set eth0 up") &&
            sh("ip -n " + h + " link set lo up");
      made_ = i + 1;
    }
  }
  ~Hosts() {
    for (int i = 0; i < made_; ++i) sh("ip netns del " + host(i));
    sh("ip netns del " + sw());
  }
  bool ok() const { return ok_; }
  std::string sw() const { return base_ + "sw"; }
  std::string host(int i) const { return base_ + "h" + std::to_string(i); }
  static std::string addr(int i) { return std::string("10.91.0.").append(std::to_string(i + 1)); }
  // The switch side of host i's cable.
  static std::string port_name(int i) { return std::string("p").append(std::to_string(i)); }
  // Host i's cable as it was: up, no loss.
  void repair(int i) {
    const std::string p = port_name(i);
    sh("ip -n " + sw() + " link set " + p + " up");
    sh("ip netns exec " + sw() + " tc qdisc del dev " + p + " root");
    sh("ip netns exec " + host(i) + " tc qdisc del dev eth0 root");
    sh("ip netns exec " + host(i) + " iptables -F");
  }
  bool cut(int i) { return sh("ip -n " + sw() + " link set " + port_name(i) + " down"); }
  // `percent` of host i's packets lost both ways: tc netem where the kernel has it, else an
  // iptables statistic rule in the host (this VM's kernel has no sch_netem). Says which.
  std::string lose(int i, int percent) {
    const std::string netem = " root netem loss " + std::to_string(percent) + "%";
    if (sh("ip netns exec " + sw() + " tc qdisc add dev " + port_name(i) + netem) &&
        sh("ip netns exec " + host(i) + " tc qdisc add dev eth0" + netem)) {
      return "netem";
    }
    const std::string rule = " -m statistic --mode random --probability 0." + std::to_string(percent) + " -j DROP";
    if (sh("ip netns exec " + host(i) + " iptables -A INPUT -i eth0" + rule) &&
        sh("ip netns exec " + host(i) + " iptables -A OUTPUT -o eth0" + rule)) {
      return "iptables statistic";
    }
    return "";
  }

 private:
  std::string base_;
  bool ok_ = false;
  int made_ = 0;
};

enum class Fault { kill, stop, link_down, loss };
std::string g_loss_by = "netem";  // how the last loss was made
const char* name(Fault f) {
  switch (f) {
    case Fault::kill: return "kill -9";
    case Fault::stop: return "SIGSTOP";
    case Fault::link_down: return "ip link set down";
    case Fault::loss: return "30% loss";
  }
  return "?";
}

struct Outcome {
  std::string what;     // "all survivors failed naming the rank", "completed, all results right", ...
  bool good = false;
  long slowest_ms = 0;  // the last survivor's exit after the fault
  std::string detail;   // for a bad outcome: the first offending output
};

// A timeout report that found most retransmissions on one link, with `victim` at one end.
bool names_link_of(const std::string& out, int victim) {
  for (int other = 0; other < kRanks; ++other) {
    if (other == victim) continue;
    const int a = std::min(victim, other), b = std::max(victim, other);
    if (has(out, "the link between rank " + std::to_string(a) + " and rank " + std::to_string(b) + ":")) return true;
  }
  return false;
}

Outcome trial(Hosts& hosts, Fault fault, std::mt19937& rng, int trial_no) {
  const int victim = static_cast<int>(rng() % kRanks);
  testing::RankJob job{.argv = {testing::binary_from_env("FAULT_RANK")},
                       .env = {{"BRAID_TIMEOUT_S", std::to_string(kTimeoutS)},
                               {"BRAID_RENDEZVOUS_TIMEOUT_S", "30"},
                               {"FAULT_ITERS", std::to_string(kIters)},
                               {"FAULT_SEED", std::to_string(trial_no)}},
                       .master_addr = Hosts::addr(0),
                       .port = 29500 + trial_no % 100};
  job.per_rank = [&hosts](int r, testing::EnvMap&, std::vector<std::string>& argv) {
    argv.insert(argv.begin(), {"/usr/sbin/ip", "netns", "exec", hosts.host(r)});
  };
  auto ranks = testing::start_ranks(kRanks, job);
  Outcome o;
  const auto ready_by = Clock::now() + seconds(30);
  for (int r = 0; r < kRanks; ++r) {
    while (!has(ranks[r]->output(), "READY rank=" + std::to_string(r)) && Clock::now() < ready_by) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    if (!has(ranks[r]->output(), "READY")) return {"did not start", false, 0, ranks[r]->output()};
  }
  std::this_thread::sleep_for(milliseconds(100 + rng() % 1500));
  bool injected = true;
  switch (fault) {
    case Fault::kill: ranks[victim]->kill(SIGKILL); break;
    case Fault::stop: ranks[victim]->kill(SIGSTOP); break;
    case Fault::link_down: injected = hosts.cut(victim); break;
    case Fault::loss:
      g_loss_by = hosts.lose(victim, 30);
      injected = !g_loss_by.empty();
      break;
  }
  const auto fault_at = Clock::now();
  if (!injected && fault == Fault::loss) {
    return {"not run: neither tc netem nor iptables works here (scripts/setup.sh installs iptables)", true, 0, ""};
  }
  if (!injected) return {"could not inject the fault", false, 0, ""};
  // With loss the job may go on slowly: it gets as long as the loop would take at a tenth of
  // the speed, and still must then be done or have failed.
  const auto bound = fault == Fault::loss ? seconds(kTimeoutS) + kMargin + seconds(60) : seconds(kTimeoutS) + kMargin;
  int completed = 0, named = 0, named_link = 0;
  for (int r = 0; r < kRanks; ++r) {
    if (r == victim && fault != Fault::loss) continue;
    const auto left = std::chrono::duration_cast<milliseconds>(fault_at + bound - Clock::now());
    const int rc = ranks[r]->wait(std::max(left, milliseconds(0)));
    const std::string out = ranks[r]->output();
    o.slowest_ms = std::max<long>(o.slowest_ms, std::chrono::duration_cast<milliseconds>(Clock::now() - fault_at).count());
    if (rc == -1) return {"HANG: rank " + std::to_string(r) + " still running", false, o.slowest_ms, out};
    if (has(out, "WRONG")) return {"WRONG RESULT on rank " + std::to_string(r), false, o.slowest_ms, out};
    if (rc == 0 && has(out, "DONE rank=")) {
      ++completed;
    } else if (rc != 0 && (has(out, "because of rank " + std::to_string(victim) + " ") ||
                           has(out, "because of rank " + std::to_string(victim) + ":"))) {
      ++named;
    } else if (rc != 0 && fault == Fault::loss && names_link_of(out, victim)) {
      ++named_link;
    } else if (!(fault == Fault::loss && r == victim)) {
      return {"rank " + std::to_string(r) + " did not name rank " + std::to_string(victim), false, o.slowest_ms, out};
    }
  }
  hosts.repair(victim);
  const int survivors = fault == Fault::loss ? kRanks : kRanks - 1;
  if (completed == survivors) return {"completed, every result right", true, o.slowest_ms, ""};
  if (completed == 0 && named_link == 0) return {"every survivor failed naming the rank", true, o.slowest_ms, ""};
  if (completed == 0 && named == 0) {
    return {"every survivor failed naming the lossy link (the rank and a neighbour)", true, o.slowest_ms, ""};
  }
  if (completed == 0) return {"every survivor failed naming the rank or its lossy link", true, o.slowest_ms, ""};
  return {"some completed, the others failed naming the rank", true, o.slowest_ms, ""};
}

TEST(FaultSoak, EverySurvivorNamesTheFaultyRankNothingHangsNothingWrong) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces and tc";
  Hosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "cannot build network namespaces on a bridge here (ip netns, veth, bridge)";
  const long trials = env_long("FAULT_SOAK_TRIALS", 1);
  std::mt19937 rng(static_cast<unsigned>(env_long("FAULT_SOAK_SEED", 1)));
  std::map<std::string, std::map<std::string, int>> table;  // fault -> outcome -> trials
  std::map<std::string, long> slowest;
  int n = 0;
  const std::string only = std::getenv("FAULT_SOAK_ONLY") ? std::getenv("FAULT_SOAK_ONLY") : "";
  for (Fault f : {Fault::kill, Fault::stop, Fault::link_down, Fault::loss}) {
    if (!only.empty() && !has(name(f), only)) continue;
    for (long t = 0; t < trials; ++t) {
      Outcome o = trial(hosts, f, rng, n++);
      for (int i = 0; i < kRanks; ++i) hosts.repair(i);
      const std::string fault = f == Fault::loss ? "30% loss (" + g_loss_by + ")" : name(f);
      ++table[fault][o.what];
      slowest[fault] = std::max(slowest[fault], o.slowest_ms);
      EXPECT_TRUE(o.good) << name(f) << ", trial " << t << ": " << o.what << "\n" << o.detail;
    }
  }
  std::string md = "| fault | trials | outcome | slowest survivor exit after the fault |\n|---|---|---|---|\n";
  for (const auto& [fault, outcomes] : table) {
    for (const auto& [what, count] : outcomes) {
      md += "| " + fault + " | " + std::to_string(count) + " | " + what + " | " +
            std::to_string(slowest[fault] / 100 / 10.0).substr(0, 4) + " s |\n";
    }
  }
  std::printf("%s", md.c_str());
  if (const char* path = std::getenv("FAULT_SOAK_TABLE")) std::ofstream(path) << md;
}

}  // namespace
}  // namespace braid
