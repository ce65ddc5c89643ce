// A rank process for the failure-handling tests. Joins through the environment, runs one mode,
// and prints one line per outcome:
//   OK rank=R ...                                  the mode finished as planned
//   FAILED rank=R code=CODE ms=ELAPSED msg=...      a braid::Error, caught
// Exits 0 when it printed its outcome (the test reads the lines): under braidrun a rank that
// exits non-zero would make braidrun stop the others before they could report.
#include <braid/braid.h>
#include <dirent.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using braid::DType;
using braid::Op;

Clock::time_point g_start = Clock::now();

long ms_since(Clock::time_point t) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

void report(int rank, const braid::Error& e, Clock::time_point since = g_start) {
  std::printf("FAILED rank=%d code=%s ms=%ld msg=%s\n", rank, braid::to_string(e.code()), ms_since(since), e.what());
  std::fflush(stdout);
}

int count_entries(const char* dir) {
  int n = 0;
  DIR* d = opendir(dir);
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int count_fds() { return count_entries("/proc/self/fd") - 1; }  // less the directory stream itself
int count_threads() { return count_entries("/proc/self/task"); }

// Two ranks disagree on operation #2: rank 1 calls something else than the rest.
void mismatch(braid::Communicator& comm, const std::string& how) {
  const int r = comm.rank();
  std::vector<float> buf(1024, 1.0f);
  comm.all_reduce(buf.data(), buf.size(), DType::f32, Op::sum);  // #1 agrees
  auto t = Clock::now();
  try {
    const bool odd = r == 1;
    if (how == "kind") {
      if (odd) comm.broadcast(buf.data(), buf.size(), DType::f32, 0);
      else comm.all_reduce(buf.data(), buf.size(), DType::f32, Op::sum);
    } else if (how == "count") {
      comm.all_reduce(buf.data(), odd ? 512 : 1024, DType::f32, Op::sum);
    } else if (how == "dtype") {
      comm.all_reduce(buf.data(), 1024, odd ? DType::i32 : DType::f32, Op::sum);
    } else if (how == "root") {
      comm.broadcast(buf.data(), buf.size(), DType::f32, odd ? 1 : 0);
    } else if (how == "op") {
      comm.all_reduce(buf.data(), buf.size(), DType::f32, odd ? Op::max : Op::sum);
    }
    std::printf("OK rank=%d no error\n", r);
  } catch (const braid::Error& e) {
    report(r, e, t);
  }
  try {  // fails fast with the same reason
    comm.barrier();
    std::printf("OK rank=%d barrier after a failure ran\n", r);
  } catch (const braid::Error& e) {
    std::printf("LATER rank=%d code=%s state=%s ms=%ld msg=%s\n", r, braid::to_string(e.code()),
                braid::to_string(comm.state()), ms_since(t), e.what());
  }
}

// One 4 MiB all_reduce (a ring of several segments); the test sets BRAID_RING_DEPTH or
// BRAID_CHUNK_BYTES differently on one rank.
void pipeline(braid::Communicator& comm) {
  std::vector<float> buf(size_t{1} << 20, 1.0f);
  auto t = Clock::now();
  try {
    comm.all_reduce(buf.data(), buf.size(), DType::f32, Op::sum);
    std::printf("OK rank=%d sum=%g\n", comm.rank(), static_cast<double>(buf[0]));
  } catch (const braid::Error& e) {
    report(comm.rank(), e, t);
  }
}

// Rank LATE_RANK sleeps before operation #2; BRAID_TIMEOUT_S is short.
void timeout(braid::Communicator& comm) {
  const int r = comm.rank();
  std::vector<float> buf(4096, 1.0f);
  comm.all_reduce(buf.data(), buf.size(), DType::f32, Op::sum);
  if (r == env_int("LATE_RANK", 1)) std::this_thread::sleep_for(std::chrono::milliseconds(env_int("LATE_MS", 7000)));
  auto t = Clock::now();
  try {
    comm.all_reduce(buf.data(), buf.size(), DType::f32, Op::sum);
    std::printf("OK rank=%d no error\n", r);
  } catch (const braid::Error& e) {
    report(r, e, t);
  }
}

// Rank 1 aborts (from another thread) while its operation waits for rank 0, which sleeps.
void abort_mode(braid::Communicator& comm) {
  const int r = comm.rank();
  std::vector<float> a(1024, 1.0f), b(1024, 1.0f);
  comm.all_reduce(a.data(), a.size(), DType::f32, Op::sum);
  auto t = Clock::now();
  if (r == 0) std::this_thread::sleep_for(std::chrono::seconds(4));
  std::thread aborter;
  if (r == 1) {
    aborter = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.abort("the test gave up");
    });
  }
  braid::Work w2 = comm.all_reduce_async(a.data(), a.size(), DType::f32, Op::sum);
  braid::Work w3 = comm.all_reduce_async(b.data(), b.size(), DType::f32, Op::sum);
  for (braid::Work* w : {&w2, &w3}) {
    try {
      w->wait();
      std::printf("OK rank=%d op completed\n", r);
    } catch (const braid::Error& e) {
      report(r, e, t);
    }
  }
  if (aborter.joinable()) aborter.join();
  std::printf("STATE rank=%d state=%s code=%s\n", r, braid::to_string(comm.state()), braid::to_string(comm.error_code()));
  try {
    comm.barrier();
  } catch (const braid::Error& e) {
    std::printf("LATER rank=%d code=%s ms=%ld\n", r, braid::to_string(e.code()), ms_since(t));
  }
}

// all_reduce in a loop of random sizes until a peer is killed; prints how it ended.
void loop_until_killed(braid::Communicator& comm) {
  const int r = comm.rank();
  std::mt19937 rng(1234);  // the same sizes on every rank
  std::vector<float> buf(1 << 18, 1.0f);
  std::printf("READY rank=%d\n", r);
  std::fflush(stdout);
  try {
    for (long i = 0;; ++i) {
      size_t n = 1 + rng() % buf.size();
      auto t = Clock::now();
      try {
        comm.all_reduce(buf.data(), n, DType::f32, Op::max);
      } catch (const braid::Error& e) {
        report(r, e, t);
        return;
      }
      if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // idle moments too
    }
  } catch (...) {
  }
}

// The destructor closes every descriptor it opened and joins its threads.
int fds(int fds_before, int threads_before) {
  const int after = count_fds(), threads_after = count_threads();
  std::printf("FDS before=%d after=%d threads_before=%d threads_after=%d\n", fds_before, after, threads_before,
              threads_after);
  return after == fds_before && threads_after == threads_before ? 0 : 5;
}

// A child communicator per parity, used from a second thread while the parent runs too.
void split_mode(braid::Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  braid::Communicator child = comm.split(r % 2, -r);  // keys reverse the order
  const int cn = child.size();
  std::atomic<int> bad{0};
  auto parent_loop = [&] {
    std::vector<int32_t> v(3000);
    for (int i = 0; i < 200; ++i) {
      std::fill(v.begin(), v.end(), r + i);
      comm.all_reduce(v.data(), v.size(), DType::i32, Op::sum);
      if (v[7] != n * (n - 1) / 2 + n * i) ++bad;
    }
  };
  auto child_loop = [&] {
    std::vector<int32_t> v(5000);
    for (int i = 0; i < 200; ++i) {
      std::fill(v.begin(), v.end(), 1 + i);
      child.all_reduce(v.data(), v.size(), DType::i32, Op::sum);
      if (v[11] != cn * (1 + i)) ++bad;
    }
  };
  std::thread t(child_loop);
  parent_loop();
  t.join();
  // new_group: ranks 3 and 1, in that order.
  braid::Communicator g = comm.new_group({3, 1});
  int32_t who = r;
  if (g.is_member()) {
    g.broadcast(&who, 1, DType::i32, 0);
    if (who != 3) ++bad;
  } else {
    try {
      (void)g.rank();
      ++bad;
    } catch (const braid::Error&) {
    }
  }
  std::printf("SPLIT rank=%d child_rank=%d child_size=%d group=%s bad=%d\n", r, child.rank(), cn,
              g.is_member() ? std::to_string(g.rank()).c_str() : "none", bad.load());
}

// Group calls: a ring of send/recv at once (one at a time would deadlock), coalesced
// all_reduce of buffers of many sizes, and a wait inside an open group.
void group_mode(braid::Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  int bad = 0;
  for (size_t count : {size_t{1024}, size_t{300000}}) {
    for (int iter = 0; iter < 10; ++iter) {
      std::vector<int32_t> out(count, r * 1000 + iter), in(count, -1);
      comm.group_start();
      braid::Work s = comm.send_async(out.data(), count, DType::i32, (r + 1) % n);
      braid::Work q = comm.recv_async(in.data(), count, DType::i32, (r + n - 1) % n);
      comm.group_end().wait();
      s.wait();
      q.wait();
      if (in[count - 1] != ((r + n - 1) % n) * 1000 + iter) ++bad;
    }
  }
  std::vector<std::vector<int32_t>> bufs;
  comm.group_start();
  for (int i = 0; i < 10; ++i) {
    bufs.emplace_back(static_cast<size_t>(1 + i * 97), r + i);
    comm.all_reduce_async(bufs.back().data(), bufs.back().size(), DType::i32, Op::sum);
  }
  braid::Work all = comm.group_end();
  all.wait();
  for (int i = 0; i < 10; ++i) {
    for (int32_t x : bufs[static_cast<size_t>(i)]) bad += x != n * (n - 1) / 2 + n * i;
  }
  bool threw = false;
  comm.group_start();
  int32_t one = 1;
  braid::Work w = comm.all_reduce_async(&one, 1, DType::i32, Op::sum);
  try {
    w.wait();
  } catch (const braid::Error& e) {
    threw = e.code() == braid::ErrorCode::invalid_argument;
  }
  comm.group_end().wait();
  bad += !threw + (one != n);
  std::printf("GROUP rank=%d bad=%d last=%s\n", r, bad, comm.last_algorithm().c_str());
}

// Not a test: 16 small all_reduce calls per step, one by one (async) or as one group.
void bench_group(braid::Communicator& comm) {
  std::vector<std::vector<float>> bufs(16, std::vector<float>(256, 1.0f));
  for (bool grouped : {false, true, false, true}) {
    auto t = Clock::now();
    const int steps = 300;
    for (int i = 0; i < steps; ++i) {
      std::vector<braid::Work> works;
      if (grouped) comm.group_start();
      for (auto& b : bufs) works.push_back(comm.all_reduce_async(b.data(), b.size(), DType::f32, Op::max));
      if (grouped) comm.group_end();
      for (auto& w : works) w.wait();
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t).count() / steps;
    if (comm.rank() == 0) std::printf("BENCH %s: %.1f us per step of 16 x 1 KiB all_reduce\n", grouped ? "grouped" : "separate", us);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int fds_before = count_fds(), threads_before = count_threads();
  int rank = -1;
  try {
    int rc = 0;
    {
      braid::Communicator comm = braid::Communicator::from_env();
      rank = comm.rank();
      if (mode.rfind("mismatch_", 0) == 0) mismatch(comm, mode.substr(9));
      else if (mode == "timeout") timeout(comm);
      else if (mode == "pipeline") pipeline(comm);
      else if (mode == "abort") abort_mode(comm);
      else if (mode == "kill") loop_until_killed(comm);
      else if (mode == "split") split_mode(comm);
      else if (mode == "group") group_mode(comm);
      else if (mode == "bench_group") bench_group(comm);
      else if (mode == "fds") {
        std::vector<float> v(100000, 1.0f);
        comm.all_reduce(v.data(), v.size(), DType::f32, Op::sum);
        braid::Communicator child = comm.split(0, 0);
        child.all_reduce(v.data(), v.size(), DType::f32, Op::sum);
        std::printf("DURING fds=%d threads=%d\n", count_fds(), count_threads());
      } else {
        std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
        return 2;
      }
    }
    if (mode == "fds") rc = fds(fds_before, threads_before);
    std::fflush(stdout);
    return rc;
  } catch (const braid::Error& e) {
    report(rank, e);
    return 1;
  }
}
