// bench/transport/ib_pingpong_bench.cc - the ib transport alone, below the runtime: an 8-byte
// ping-pong between two transports of one process, one on rxe0 (10.99.0.1) and one on rxe1
// (10.99.0.2), each driven by its own thread through the seam exactly as the runtime drives it
// (post_recv, post_send, poll with a timeout). Prints the median half round trip, comparable
// with ib_write_lat's t_typical, and how each end waited (IbTransport::wait_stats): passes spun
// over the CQs, sleeps on the completion channel, CQ events read. Run inside the Soft-RoCE guest
// (bench/ib_guest.sh does); BRAID_SPIN_US and the other BRAID_* variables apply as usual.
// --capacity posts each receive with room for that many bytes (the runtime posts the first
// receive of an operation with room for a header and 64 KiB: --capacity 65600 does the same).
// --exchange makes both ends send at once, as a 2-rank sendrecv or all_reduce does: each
// iteration both post a receive and a send and wait for both; the time printed is then one
// whole iteration (comparable with ib_write_lat's one-way figure: both directions overlap).
// --one-thread drives both ends of the ping-pong from one thread, one step after the other
// (the echo's receive, the ping, the echo, the completions): no end ever waits for the other's
// thread, so an instruction count per round trip (callgrind) does not depend on how the two
// threads happened to interleave or sleep; on Soft-RoCE a write's packet path, the peer's side
// included, runs inside its doorbell's system call, so each wait finds its completion at once.
//
//   ib_pingpong_bench [--iters 2000] [--warmup 100] [--bytes 8] [--capacity BYTES] [--exchange]
//                     [--one-thread] [--hosts 10.99.0.1,10.99.0.2]
//
// Output: one line "RESULT<TAB>half_rtt_us (with --exchange: iteration_us)<TAB>p10<TAB>p90<TAB>polls<TAB>spin_passes<TAB>sleeps
// <TAB>channel_events<TAB>doorbells<TAB>cts<TAB>rts<TAB>arms" (polls to channel events summed
// over both ends per round trip; doorbells to arms per message, IbTransport::post_stats and
// wait_stats), after two readable ones.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "transport/ib/ib_transport.h"
#include "transport/registry.h"

namespace {

using namespace braid;
using namespace braid::transport;
using Clock = std::chrono::steady_clock;
constexpr uint64_t kComm = 0x9109;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "ib_pingpong_bench: %s\n", why.c_str());
  std::exit(1);
}

struct Stats {
  ib::IbTransport::WaitStats waits;
  ib::IbPostStats posts;
};

class End {
 public:
  explicit End(const std::string& host) {
    TransportOptions o;
    const Result<Env>& env = global_env();
    if (!env.is_ok()) die(env.status().message());
    o.env = env.value();
    o.listen_host = host;
    auto t = create_transport("ib", o);
    if (!t.is_ok()) die(t.status().message());
    transport_ = std::move(t).value();
  }
  std::string listen() {
    auto a = transport_->listen();
    if (!a.is_ok()) die(a.status().message());
    return a.value();
  }
  void accept() { set(transport_->accept({kComm, 1, 0}, Deadline::after_seconds(60))); }
  void connect(const std::string& to) { set(transport_->connect(to, {kComm, 0, 1}, Deadline::after_seconds(60))); }

  void round_trip(size_t bytes) {
    check(conn_->post_recv(in_.data(), in_.size(), 0), "post_recv");
    check(conn_->post_send(out_.data(), bytes, 1), "post_send");
    await(2);
    // Which completion came last: with both directions at once, a send whose completion (the
    // peer's acknowledgement) comes after the peer's message makes the iteration wait for it.
    if (send_at_ > recv_at_) {
      ++send_last_;
      send_lag_us_.push_back(std::chrono::duration<double, std::micro>(send_at_ - recv_at_).count());
    }
  }
  // Both directions at once: what each rank of a 2-rank sendrecv does.
  void exchange(size_t bytes) { round_trip(bytes); }
  // One round trip with both ends on this thread (--one-thread); `this` pings, `echo` answers.
  // Each wait polls both ends without a timeout: an end may need the other's pass to move (a
  // request to send answered by a CTS), and nothing else runs them.
  void round_trip_with(End& echo, size_t bytes) {
    check(echo.conn_->post_recv(echo.in_.data(), echo.in_.size(), 0), "post_recv");
    check(conn_->post_recv(in_.data(), in_.size(), 0), "post_recv");
    check(conn_->post_send(out_.data(), bytes, 1), "post_send");
    int mine = 2, theirs = 1;
    while (theirs > 0) {
      mine -= poll_now();
      theirs -= echo.poll_now();
    }
    check(echo.conn_->post_send(echo.in_.data(), bytes, 1), "post_send");
    theirs = 1;
    while (mine > 0 || theirs > 0) {
      mine -= poll_now();
      theirs -= echo.poll_now();
    }
  }
  void echo(size_t bytes) {
    check(conn_->post_recv(in_.data(), in_.size(), 0), "post_recv");
    await(1);
    check(conn_->post_send(in_.data(), bytes, 1), "post_send");
    await(1);
  }
  Stats stats() const {
    const auto& ib = dynamic_cast<const ib::IbTransport&>(*transport_);
    return Stats{ib.wait_stats(), ib.post_stats()};
  }
  void resize(size_t bytes, size_t capacity) {
    in_.assign(std::max(bytes, capacity), 0);
    out_.assign(bytes, 1);
  }

 private:
  void set(Result<std::unique_ptr<Connection>> c) {
    if (!c.is_ok()) die(c.status().message());
    conn_ = std::move(c).value();
  }
  static void check(const Status& s, const char* what) {
    if (!s.is_ok()) die(std::string(what) + ": " + s.message());
  }
  int poll_now() {
    done_.clear();
    check(transport_->poll(done_, std::chrono::microseconds(0)), "poll");
    for (const Completion& c : done_) {
      if (!c.status.is_ok()) die("transfer failed: " + c.status.message());
    }
    return static_cast<int>(done_.size());
  }
  void await(int n) {
    while (n > 0) {
      done_.clear();
      check(transport_->poll(done_, std::chrono::seconds(5)), "poll");
      const auto now = Clock::now();
      for (const Completion& c : done_) {
        if (!c.status.is_ok()) die("transfer failed: " + c.status.message());
        (c.cookie == 1 ? send_at_ : recv_at_) = now;
        --n;
      }
    }
  }

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Connection> conn_;
  Clock::time_point send_at_{}, recv_at_{};

 public:
  int send_last_ = 0;               // round trips whose send completed after their receive
  std::vector<double> send_lag_us_;  // by how much

 private:
  std::vector<Completion> done_;
  std::vector<unsigned char> in_, out_;
};

Stats minus(Stats a, const Stats& b) {
  a.waits.polls -= b.waits.polls;
  a.waits.spin_passes -= b.waits.spin_passes;
  a.waits.sleeps -= b.waits.sleeps;
  a.waits.channel_events -= b.waits.channel_events;
  a.waits.arms -= b.waits.arms;
  a.posts.doorbells -= b.posts.doorbells;
  a.posts.work_requests -= b.posts.work_requests;
  a.posts.messages -= b.posts.messages;
  a.posts.cts_written -= b.posts.cts_written;
  a.posts.cts_requests -= b.posts.cts_requests;
  a.posts.cts_overdue -= b.posts.cts_overdue;
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 2000, warmup = 100;
  size_t bytes = 8, capacity = 0;
  bool exchange = false, one_thread = false;
  std::string host0 = "10.99.0.1", host1 = "10.99.0.2";
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--exchange" || k == "--one-thread") {
      (k == "--exchange" ? exchange : one_thread) = true;
      --i;  // a flag without a value
      continue;
    }
    if (i + 1 >= argc) die("option " + k + " needs a value");
    const std::string v = argv[i + 1];
    if (k == "--iters") iters = std::atoi(v.c_str());
    else if (k == "--warmup") warmup = std::atoi(v.c_str());
    else if (k == "--bytes") bytes = static_cast<size_t>(std::atoll(v.c_str()));
    else if (k == "--capacity") capacity = static_cast<size_t>(std::atoll(v.c_str()));
    else if (k == "--hosts" && v.find(',') != std::string::npos) {
      host0 = v.substr(0, v.find(','));
      host1 = v.substr(v.find(',') + 1);
    } else die("unknown option " + k + " (options: --iters --warmup --bytes --capacity --exchange --one-thread --hosts)");
  }
  if (iters < 1 || warmup < 0) die("--iters must be at least 1, --warmup at least 0");
  if (one_thread && exchange) die("--one-thread is a ping-pong: not with --exchange");

  std::promise<std::string> address;
  auto address_ready = address.get_future();
  Stats echo_stats;
  if (one_thread) {
    End e1(host1), e0(host0);
    e1.resize(bytes, capacity);
    e0.resize(bytes, capacity);
    const std::string at = e1.listen();
    std::thread accept([&] { e1.accept(); });
    e0.connect(at);
    accept.join();
    for (int i = 0; i < warmup; ++i) e0.round_trip_with(e1, bytes);
    const auto before0 = e0.stats(), before1 = e1.stats();
    std::vector<double> half_us;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      e0.round_trip_with(e1, bytes);
      half_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
    }
    const auto a = minus(e0.stats(), before0), b = minus(e1.stats(), before1);
    std::sort(half_us.begin(), half_us.end());
    const double n = iters;
    std::printf("ib ping-pong %zu B, both ends on one thread, %d round trips: half round trip median %.2f us; per "
                "round trip, both ends: %.2f polls, %.3f sleeps; per message %.3f doorbells\n",
                bytes, iters, half_us[half_us.size() / 2], static_cast<double>(a.waits.polls + b.waits.polls) / n,
                static_cast<double>(a.waits.sleeps + b.waits.sleeps) / n,
                static_cast<double>(a.posts.doorbells + b.posts.doorbells) / (2 * n));
    std::printf("RESULT\t%.2f\t%.2f\t%.2f\t%.3f\t%.3f\t%.3f\n", half_us[half_us.size() / 2], half_us[half_us.size() / 10],
                half_us[half_us.size() * 9 / 10], static_cast<double>(a.waits.polls + b.waits.polls) / n,
                static_cast<double>(a.waits.spin_passes + b.waits.spin_passes) / n,
                static_cast<double>(a.waits.sleeps + b.waits.sleeps) / n);
    return 0;
  }
  std::thread echo([&] {
    End end(host1);
    end.resize(bytes, capacity);
    address.set_value(end.listen());
    end.accept();
    const auto step = [&] { exchange ? end.exchange(bytes) : end.echo(bytes); };
    for (int i = 0; i < warmup; ++i) step();
    const auto before = end.stats();
    for (int i = 0; i < iters; ++i) step();
    echo_stats = minus(end.stats(), before);
  });
  End end(host0);
  end.resize(bytes, capacity);
  end.connect(address_ready.get());
  for (int i = 0; i < warmup; ++i) end.round_trip(bytes);
  end.send_last_ = 0;
  end.send_lag_us_.clear();
  const auto before = end.stats();
  std::vector<double> half_us;
  half_us.reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    end.round_trip(bytes);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    half_us.push_back(exchange ? us : us / 2);
  }
  const auto pinger = minus(end.stats(), before);
  echo.join();
  std::sort(half_us.begin(), half_us.end());
  const auto at = [&](double q) { return half_us[static_cast<size_t>(q * static_cast<double>(half_us.size() - 1))]; };
  const double n = iters;
  const double messages = 2.0 * iters;
  const auto sum = [&](auto field) { return static_cast<double>(field(pinger) + field(echo_stats)); };
  const double polls = sum([](const Stats& s) { return s.waits.polls; }) / n;
  const double spins = sum([](const Stats& s) { return s.waits.spin_passes; }) / n;
  const double sleeps = sum([](const Stats& s) { return s.waits.sleeps; }) / n;
  const double events = sum([](const Stats& s) { return s.waits.channel_events; }) / n;
  const double doorbells = sum([](const Stats& s) { return s.posts.doorbells; }) / messages;
  const double wrs = sum([](const Stats& s) { return s.posts.work_requests; }) / messages;
  const double cts = sum([](const Stats& s) { return s.posts.cts_written; }) / messages;
  const double rts = sum([](const Stats& s) { return s.posts.cts_requests; }) / messages;
  const double overdue = sum([](const Stats& s) { return s.posts.cts_overdue; }) / messages;
  const double arms = sum([](const Stats& s) { return s.waits.arms; }) / messages;
  std::printf("ib %s %zu B (receives of %zu B), %d %s: %s median %.2f us (p10 %.2f, "
              "p90 %.2f); per %s, both ends: %.2f polls, %.1f spin passes, %.3f sleeps, %.3f channel "
              "events\n",
              exchange ? "exchange" : "ping-pong", bytes, std::max(bytes, capacity), iters,
              exchange ? "iterations" : "round trips", exchange ? "iteration" : "half round trip", at(0.5), at(0.1),
              at(0.9), exchange ? "iteration" : "round trip", polls, spins, sleeps, events);
  std::printf("per message: %.3f doorbells, %.3f work requests, %.3f CTS written (%.3f at the hold's bound), "
              "%.3f CTS requested, %.3f CQ arms\n", doorbells, wrs, cts, overdue, rts, arms);
  if (exchange) {
    std::sort(end.send_lag_us_.begin(), end.send_lag_us_.end());
    const double lag = end.send_lag_us_.empty() ? 0 : end.send_lag_us_[end.send_lag_us_.size() / 2];
    std::printf("on %s's end the send completed after the receive in %.1f%% of the iterations (median lag %.2f "
                "us)\n", host0.c_str(), 100.0 * end.send_last_ / n, lag);
  }
  std::printf("RESULT\t%.2f\t%.2f\t%.2f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", at(0.5), at(0.1),
              at(0.9), polls, spins, sleeps, events, doorbells, cts, rts, arms);
  return 0;
}
