// bench/transport/spin_cost_bench.cc - what spinning before sleeping (BRAID_SPIN_US) costs the
// CPU it spins on, and what it buys in latency, for both tcp engines side by side.
//
//   spin_cost_bench [--engines tcp,tcp-poll] [--spins 0,default,1000] [--rounds 5]
//                   [--seconds 1] [--think-us 200] [--layouts shared,apart] [--cpus 0,1]
//
// Why: a wake-up from sleep costs ~40 us on these VMs, so the engines spin for BRAID_SPIN_US
// (yielding) before they sleep in epoll_wait / io_uring_enter. Each microsecond spun is a
// microsecond some other thread of the program could have computed in. This measures both sides.
//
// Three threads of one process, each pinned:
//   echo     one end of an 8-byte ping-pong: waits (in the engine's poll) for a ping and replies.
//            It is the waiting side: between pings it has nothing to do but wait.
//   pinger   the other end: ping, wait for the reply, then "think" (busy) for --think-us, as a
//            rank computing between small collectives.
//   compute  a fixed amount of arithmetic (calibrated to take --seconds alone), timed.
// Layouts, on the two CPUs A and B of --cpus:
//   shared   echo and compute on A, pinger on B: whatever echo spins, compute cannot run, and
//            whenever echo yields to compute, echo waits for the CPU.
//   apart    echo and pinger on B, compute alone on A: what spinning on one CPU costs the other.
// Per run: the compute thread's throughput loss against compute alone (measured in the same
// round), each thread's CPU time during compute's run (pthread CPU clocks; "other" is the rest of
// the process, e.g. io_uring's kernel workers), round trips per second and the median half round
// trip while compute ran; and per engine and setting the idle latency (no compute, no think time,
// echo and pinger on their own CPUs). Every configuration runs once per round, in an order rotated
// each round; the table shows medians over rounds.
//
// The machine may be shared: /proc/stat says how busy each CPU was, and whatever this process's
// threads do not account for is other processes' load. A run during which they took more than
// kForeignLimit of CPU A or B is measured again (up to kAttempts times, then left out of the
// medians); the table's header and its last two columns say how much of that there was.
//
// A setting reaches the engine exactly as the variable would: Env::parse sees BRAID_SPIN_US=<n>
// ("default": the variable unset, whatever this process's environment says).
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "transport/registry.h"

namespace {

using namespace braid;
using namespace braid::transport;
using Clock = std::chrono::steady_clock;

constexpr unsigned char kStop = 0xff;  // first byte of the ping that ends a run
constexpr uint64_t kCommId = 0x5b1c0;
constexpr int kWarmupRoundTrips = 200;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "spin_cost_bench: %s\n", what.c_str());
  std::exit(1);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) die("cannot pin a thread to CPU " + std::to_string(cpu));
}

double thread_cpu_seconds(pthread_t t) {
  clockid_t id;
  timespec ts{};
  if (pthread_getcpuclockid(t, &id) != 0 || clock_gettime(id, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Busy time of each CPU so far (user, nice, system, irq, softirq, steal), from /proc/stat. This
// machine is shared: what the CPUs did beyond this process's own threads is someone else's load,
// and a run it disturbed is measured again (see kForeignLimit).
std::vector<double> cpu_busy_seconds() {
  std::vector<double> busy;
  FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return busy;
  static const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    unsigned cpu;
    unsigned long long user, nice, system, idle, iowait, irq, softirq, steal;
    if (std::strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9') continue;
    if (std::sscanf(line, "cpu%u %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &user, &nice, &system, &idle, &iowait,
                    &irq, &softirq, &steal) != 9) {
      continue;
    }
    if (busy.size() <= cpu) busy.resize(cpu + 1, 0);
    busy[cpu] = static_cast<double>(user + nice + system + irq + softirq + steal) * tick;
  }
  std::fclose(f);
  return busy;
}

double busy_on(const std::vector<double>& busy, int cpu) {
  return cpu >= 0 && static_cast<size_t>(cpu) < busy.size() ? busy[static_cast<size_t>(cpu)] : 0;
}

// A run during which other processes used more than this share of one of our two CPUs is
// repeated: /proc/stat counts in 10 ms ticks, so a few percent is sampling noise, not load.
constexpr double kForeignLimit = 0.08;
constexpr int kAttempts = 4;

// ---------------------------------------------------------------- the compute thread's work

// A serial chain of multiply/xor-shift steps: no memory traffic, nothing to vectorize, so its
// speed depends only on how much of its CPU it gets.
constexpr uint64_t kStepsPerUnit = uint64_t{1} << 20;

uint64_t work(uint64_t units, uint64_t seed) {
  uint64_t x = seed | 1;
  for (uint64_t i = 0; i < units * kStepsPerUnit; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    x ^= x >> 29;
  }
  return x;
}

std::atomic<uint64_t> g_sink{0};  // keeps the compiler from dropping the work

double timed_work(uint64_t units) {
  auto t = Clock::now();
  g_sink += work(units, g_sink.load() + 1);
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Units of work that take about `seconds` on an idle `cpu`.
uint64_t calibrate(int cpu, double seconds) {
  double per_unit = 0;
  std::thread t([&] {
    pin_to(cpu);
    timed_work(16);  // warm up
    std::vector<double> v;
    for (int i = 0; i < 3; ++i) v.push_back(timed_work(64) / 64);
    per_unit = median(v);
  });
  t.join();
  return std::max<uint64_t>(1, static_cast<uint64_t>(seconds / per_unit));
}

// ---------------------------------------------------------------- one end of the ping-pong

// The setting under test, passed through Env::parse as the variable would be.
Env env_with_spin(const std::string& spin) {
  EnvLookup base = process_env();
  auto parsed = Env::parse([&](const char* name) -> const char* {
    if (std::strcmp(name, "BRAID_SPIN_US") == 0) return spin == "default" ? nullptr : spin.c_str();
    return base(name);
  });
  if (!parsed.is_ok()) die(parsed.status().message());
  return parsed.value();
}

class End {
 public:
  End(const std::string& engine, const std::string& spin) {
    TransportOptions o;
    o.env = env_with_spin(spin);
    o.listen_host = "127.0.0.1";
    auto t = create_transport(engine, o);
    if (!t.is_ok()) die(t.status().message());
    transport_ = std::move(t).value();
  }

  std::string listen() {
    auto a = transport_->listen();
    if (!a.is_ok()) die(a.status().message());
    return a.value();
  }
  void accept() { set(transport_->accept({kCommId, 0, 1}, Deadline::after_seconds(30))); }
  void connect(const std::string& address) { set(transport_->connect(address, {kCommId, 1, 0}, Deadline::after_seconds(30))); }

  // Posts a receive of 8 bytes and a send of 8 bytes, and waits for both (the reply arrives
  // only after the send left, so this is one round trip on the pinger's side).
  void round_trip(unsigned char* out, unsigned char* in) {
    check(conn_->post_recv(in, 8, 0), "post_recv");
    check(conn_->post_send(out, 8, 1), "post_send");
    await(2);
  }
  // Waits for one ping and sends it back; false after the stop ping.
  bool echo_one() {
    check(conn_->post_recv(buf_, 8, 0), "post_recv");
    await(1);
    check(conn_->post_send(buf_, 8, 1), "post_send");
    await(1);
    return buf_[0] != kStop;
  }

 private:
  void set(Result<std::unique_ptr<Connection>> c) {
    if (!c.is_ok()) die(c.status().message());
    conn_ = std::move(c).value();
  }
  static void check(const Status& s, const char* what) {
    if (!s.is_ok()) die(std::string(what) + ": " + s.message());
  }
  // Blocks in the engine's poll (where it spins, then sleeps) until n operations finished.
  void await(int n) {
    while (n > 0) {
      done_.clear();
      check(transport_->poll(done_, std::chrono::seconds(5)), "poll");
      for (const Completion& c : done_) {
        if (!c.status.is_ok()) die("transfer failed: " + c.status.message());
        --n;
      }
    }
  }

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Connection> conn_;
  std::vector<Completion> done_;
  unsigned char buf_[8] = {};
};

void busy_for(std::chrono::microseconds d) {
  if (d.count() <= 0) return;
  const auto until = Clock::now() + d;
  while (Clock::now() < until) {
  }
}

// ---------------------------------------------------------------- one run

struct Placement {
  int echo_cpu, pinger_cpu, compute_cpu;
};

struct RunResult {
  double compute_s = 0;     // how long the fixed work took
  double window_s = 0;      // wall time the CPU figures cover (compute's run)
  double echo_cpu_s = 0, pinger_cpu_s = 0, other_cpu_s = 0;
  double round_trips = 0;
  double half_rtt_us = 0;   // median
  double foreign_a = 0, foreign_b = 0;  // share of CPU A / B other processes used in the window
};

// The ping-pong runs from before compute starts until after it ends; with units == 0 there is
// no compute thread, and the ping-pong runs for `idle_seconds` instead.
RunResult run(const std::string& engine, const std::string& spin, const Placement& at, uint64_t units,
              std::chrono::microseconds think, double idle_seconds) {
  std::promise<std::string> address;
  auto address_ready = address.get_future();
  std::atomic<bool> ready{false}, measuring{false}, stop{false};
  std::vector<double> samples_us;
  samples_us.reserve(1 << 20);

  std::thread echo([&] {
    pin_to(at.echo_cpu);
    End end(engine, spin);
    address.set_value(end.listen());
    end.accept();
    while (end.echo_one()) {
    }
  });
  std::thread pinger([&] {
    pin_to(at.pinger_cpu);
    End end(engine, spin);
    end.connect(address_ready.get());
    unsigned char out[8] = {}, in[8] = {};
    for (int i = 0; i < kWarmupRoundTrips; ++i) end.round_trip(out, in);
    ready.store(true);
    while (!stop.load(std::memory_order_relaxed)) {
      const bool counted = measuring.load(std::memory_order_relaxed);
      auto t = Clock::now();
      end.round_trip(out, in);
      if (counted) samples_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count() / 2);
      busy_for(think);
    }
    out[0] = kStop;
    end.round_trip(out, in);
  });

  while (!ready.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  RunResult r;
  const double echo0 = thread_cpu_seconds(echo.native_handle()), pinger0 = thread_cpu_seconds(pinger.native_handle());
  const double process0 = process_cpu_seconds();
  const std::vector<double> busy0 = cpu_busy_seconds();
  const auto t0 = Clock::now();
  measuring.store(true);
  double compute_cpu_s = 0;
  if (units > 0) {
    std::thread compute([&] {
      pin_to(at.compute_cpu);
      r.compute_s = timed_work(units);
      compute_cpu_s = thread_cpu_seconds(pthread_self());
    });
    compute.join();
  } else {
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
  }
  measuring.store(false);
  r.window_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.echo_cpu_s = thread_cpu_seconds(echo.native_handle()) - echo0;
  r.pinger_cpu_s = thread_cpu_seconds(pinger.native_handle()) - pinger0;
  // The rest of the process in the window: io_uring's workers (iou-wrk), this thread, and the
  // compute thread's setup; compute's own run is taken out.
  r.other_cpu_s = std::max(0.0, process_cpu_seconds() - process0 - r.echo_cpu_s - r.pinger_cpu_s - compute_cpu_s);
  const std::vector<double> busy1 = cpu_busy_seconds();
  double mine_a = 0, mine_b = 0;  // this process's threads on each CPU (they are pinned)
  const int cpu_a = at.compute_cpu >= 0 ? at.compute_cpu : at.echo_cpu;
  auto charge = [&](int cpu, double s) { (cpu == cpu_a ? mine_a : mine_b) += s; };
  charge(at.echo_cpu, r.echo_cpu_s);
  charge(at.pinger_cpu, r.pinger_cpu_s);
  if (units > 0) charge(at.compute_cpu, compute_cpu_s);
  const int cpu_b = at.pinger_cpu != cpu_a ? at.pinger_cpu : at.echo_cpu;
  // Ticks against nanoseconds: a few percent either way is sampling, so negatives read as none.
  r.foreign_a = std::max(0.0, (busy_on(busy1, cpu_a) - busy_on(busy0, cpu_a) - mine_a) / r.window_s);
  r.foreign_b = cpu_b == cpu_a ? 0 : std::max(0.0, (busy_on(busy1, cpu_b) - busy_on(busy0, cpu_b) - mine_b) / r.window_s);
  stop.store(true);
  pinger.join();
  echo.join();
  r.round_trips = static_cast<double>(samples_us.size());
  r.half_rtt_us = median(samples_us);
  return r;
}

// Compute with nothing of ours beside it; `foreign` gets the share of `cpu` others used meanwhile.
double compute_alone(int cpu, uint64_t units, double* foreign) {
  double s = 0, cpu_s = 0;
  const std::vector<double> busy0 = cpu_busy_seconds();
  std::thread t([&] {
    pin_to(cpu);
    s = timed_work(units);
    cpu_s = thread_cpu_seconds(pthread_self());
  });
  t.join();
  *foreign = std::max(0.0, (busy_on(cpu_busy_seconds(), cpu) - busy_on(busy0, cpu) - cpu_s) / s);
  return s;
}

// ---------------------------------------------------------------- the table

struct Config {
  std::string layout, engine, spin;
};

struct Samples {
  std::vector<double> loss_pct, echo_pct, echo_us_per_trip, pinger_pct, other_pct, trips_per_s, load_lat_us, foreign_pct;
};

// Runs `once` until other processes stayed (nearly) off our CPUs, at most kAttempts times; the
// result of a run that stayed disturbed is left out of the medians (*clean is false).
template <typename Once>
auto undisturbed(const char* what, int* repeated, int* disturbed, bool* clean, Once&& once) {
  for (int attempt = 1;; ++attempt) {
    auto result = once();
    const double foreign = std::max(result.foreign_a, result.foreign_b);
    *clean = foreign <= kForeignLimit;
    if (*clean) return result;
    if (attempt == kAttempts) {
      ++*disturbed;
      std::fprintf(stderr, "  %s: other processes still used %.0f%% of a CPU after %d attempts; left out\n", what,
                   foreign * 100, attempt);
      return result;
    }
    ++*repeated;
    std::fprintf(stderr, "  %s: other processes used %.0f%% of a CPU; measuring again\n", what, foreign * 100);
  }
}

struct AloneResult {
  double seconds = 0, foreign_a = 0, foreign_b = 0;
};

struct Args {
  std::vector<std::string> engines = {"tcp", "tcp-poll"};
  std::vector<std::string> spins = {"0", "default", "1000"};
  std::vector<std::string> layouts = {"shared", "apart"};
  int rounds = 5;
  double seconds = 1.0;
  double idle_seconds = 0.3;
  int think_us = 200;
  int cpu_a = -1, cpu_b = -1;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) die("option " + k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--engines") a.engines = split_list(v);
    else if (k == "--spins") a.spins = split_list(v);
    else if (k == "--layouts") a.layouts = split_list(v);
    else if (k == "--rounds") a.rounds = std::stoi(v);
    else if (k == "--seconds") a.seconds = std::stod(v);
    else if (k == "--idle-seconds") a.idle_seconds = std::stod(v);
    else if (k == "--think-us") a.think_us = std::stoi(v);
    else if (k == "--cpus") {
      auto c = split_list(v);
      if (c.size() != 2) die("--cpus takes two CPUs, e.g. 0,1");
      a.cpu_a = std::stoi(c[0]), a.cpu_b = std::stoi(c[1]);
    } else {
      die("unknown option " + k +
          " (options: --engines --spins --layouts --rounds --seconds --idle-seconds --think-us --cpus)");
    }
  }
  for (const auto& l : a.layouts) {
    if (l != "shared" && l != "apart") die("layouts are shared and apart, not " + l);
  }
  if (a.cpu_a < 0) {  // the first two CPUs this process may run on
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    for (int c = 0; c < CPU_SETSIZE && a.cpu_b < 0; ++c) {
      if (!CPU_ISSET(c, &set)) continue;
      (a.cpu_a < 0 ? a.cpu_a : a.cpu_b) = c;
    }
    if (a.cpu_b < 0) die("needs two CPUs to pin to");
  }
  return a;
}

std::string spin_label(const std::string& spin) {
  return spin == "default" ? "default (" + std::to_string(Env{}.spin_us) + ")" : spin;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const Args a = parse(argc, argv);
  std::vector<std::string> engines;
  for (const auto& e : a.engines) {
    TransportOptions o;
    o.listen_host = "127.0.0.1";
    auto probe = create_transport(e, o);
    if (probe.is_ok()) {
      engines.push_back(e);
    } else {
      std::printf("skipping %s: %s\n", e.c_str(), probe.status().message().c_str());
    }
  }
  if (engines.empty()) die("no engine to measure");

  const uint64_t units = calibrate(a.cpu_a, a.seconds);
  const auto think = std::chrono::microseconds(a.think_us);
  std::vector<Config> loaded, idle;
  for (const auto& layout : a.layouts) {
    for (const auto& e : engines) {
      for (const auto& s : a.spins) loaded.push_back({layout, e, s});
    }
  }
  for (const auto& e : engines) {
    for (const auto& s : a.spins) idle.push_back({"", e, s});
  }
  std::printf("spin_cost_bench: CPUs A=%d B=%d, compute %llu units (~%.2f s alone), think %d us, %d rounds\n",
              a.cpu_a, a.cpu_b, static_cast<unsigned long long>(units), a.seconds, a.think_us, a.rounds);

  std::map<std::string, Samples> by_config;
  std::map<std::string, std::vector<double>> idle_lat;
  auto key = [](const Config& c) { return c.layout + "|" + c.engine + "|" + c.spin; };
  const Placement shared{a.cpu_a, a.cpu_b, a.cpu_a}, apart{a.cpu_b, a.cpu_b, a.cpu_a}, idle_at{a.cpu_a, a.cpu_b, -1};
  int runs = 0, repeated = 0, disturbed = 0;
  for (int round = 0; round < a.rounds; ++round) {
    ++runs;
    bool clean = true;
    const double alone_s = undisturbed("compute alone", &repeated, &disturbed, &clean, [&] {
                             AloneResult r;
                             r.seconds = compute_alone(a.cpu_a, units, &r.foreign_a);
                             return r;
                           }).seconds;
    std::fprintf(stderr, "round %d: compute alone %.3f s\n", round + 1, alone_s);
    if (!clean) continue;  // no yardstick for this round's loss
    std::vector<Config> order = loaded;  // rotated, so no configuration always runs first
    std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(round % order.size()), order.end());
    for (const Config& c : order) {
      ++runs;
      const std::string what = c.layout + " " + c.engine + " spin " + c.spin;
      RunResult r = undisturbed(what.c_str(), &repeated, &disturbed, &clean,
                                [&] { return run(c.engine, c.spin, c.layout == "shared" ? shared : apart, units, think, 0); });
      if (!clean) continue;
      Samples& s = by_config[key(c)];
      s.foreign_pct.push_back(std::max(r.foreign_a, r.foreign_b) * 100);
      s.loss_pct.push_back((1 - alone_s / r.compute_s) * 100);
      s.echo_pct.push_back(r.echo_cpu_s / r.window_s * 100);
      s.echo_us_per_trip.push_back(r.round_trips > 0 ? r.echo_cpu_s / r.round_trips * 1e6 : 0);
      s.pinger_pct.push_back(r.pinger_cpu_s / r.window_s * 100);
      s.other_pct.push_back(r.other_cpu_s / r.window_s * 100);
      s.trips_per_s.push_back(r.round_trips / r.window_s);
      s.load_lat_us.push_back(r.half_rtt_us);
      std::fprintf(stderr, "  %-6s %-8s spin %-7s: compute %.3f s, echo CPU %.0f%%, %.0f round trips/s, %.1f us\n",
                   c.layout.c_str(), c.engine.c_str(), c.spin.c_str(), r.compute_s, r.echo_cpu_s / r.window_s * 100,
                   r.round_trips / r.window_s, r.half_rtt_us);
    }
    for (const Config& c : idle) {
      ++runs;
      const std::string what = "idle " + c.engine + " spin " + c.spin;
      RunResult r = undisturbed(what.c_str(), &repeated, &disturbed, &clean, [&] {
        return run(c.engine, c.spin, idle_at, 0, std::chrono::microseconds(0), a.idle_seconds);
      });
      if (!clean) continue;
      idle_lat[c.engine + "|" + c.spin].push_back(r.half_rtt_us);
    }
  }

  std::printf("\nMedians over %d rounds. loss: compute throughput lost against compute alone on CPU A.\n"
              "CPU: %% of one CPU while compute ran (echo = the waiting side, also per round trip; other = the rest\n"
              "of the process, e.g. io_uring workers). lat: median half round trip of 8 bytes, under load (with think time)\n"
              "and idle (back to back, no compute). others: the most other processes used of CPU A or B.\n"
              "%d runs, %d repeated because other processes used a CPU, %d still disturbed after %d attempts\n"
              "(left out; n = the rounds a row's medians come from).\n\n",
              a.rounds, runs, repeated, disturbed, kAttempts);
  std::printf("| layout | engine | BRAID_SPIN_US | compute loss | echo CPU | echo us/trip | pinger CPU | other CPU | round trips/s | lat under load (us) | lat idle (us) | others | n |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Config& c : loaded) {
    const Samples& s = by_config[key(c)];
    std::printf("| %s | %s | %s | %.1f%% | %.0f%% | %.1f | %.0f%% | %.0f%% | %.0f | %.1f | %.1f | %.0f%% | %zu |\n", c.layout.c_str(),
                c.engine.c_str(), spin_label(c.spin).c_str(), median(s.loss_pct), median(s.echo_pct),
                median(s.echo_us_per_trip), median(s.pinger_pct), median(s.other_pct), median(s.trips_per_s), median(s.load_lat_us),
                median(idle_lat[c.engine + "|" + c.spin]), median(s.foreign_pct), s.loss_pct.size());
  }
  return g_sink.load() == 42 ? 3 : 0;  // the work's result must look used
}
