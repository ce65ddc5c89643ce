// A rank process for multi-process tests: rendezvous through the environment, then one mode.
//   comm_rank join          - print who it is, exchange data through the store, all_reduce
//   comm_rank leave_early   - rank 0 returns right after joining; the others use the store later
//   comm_rank tags          - 2 ranks: a tagged send/recv that match, then tags that differ
//   comm_rank mixed         - blocking all_reduces alone, then interleaved with async ones
//                             (whichever thread runs them, the sums must be right)
//   comm_rank repeat        - collectives of a few shapes, again and again, on buffers that change
//                             between calls (the runtime runs kept runs again), and a burst of
//                             asynchronous ones of one shape in flight together, then a
//                             collective above 1 MiB three times (never kept)
//   comm_rank repeat_mismatch - 2 ranks: five all_reduces of one count, then rank 1 calls a
//                             different count while rank 0 repeats (runs again) the first
//   comm_rank repeat_p2p    - send/recv groups of two shapes to the next rank, again and again, on
//                             buffers and tags that change between calls (kept runs run again)
//   comm_rank big_groups    - 2 ranks: an all_reduce, then a group of 5 sends and 5 receives, ten
//                             times (the group's runs are not kept: the all_reduce's stays)
//   comm_rank repeat_p2p_mismatch - 2 ranks: five tagged send/recv groups, then rank 1 receives
//                             with another tag (its receive runs again) while rank 0 repeats the first
//   comm_rank url URL       - like join, but through Communicator::from_url(URL) (tcp://, file://)
//   comm_rank sum COUNT     - one all_reduce of COUNT f32 elements; exit 6 when any element is wrong
//   comm_rank foreign_store - the program's own store (as torch hands its store in): rank 0 serves
//                             a TcpStore at MASTER_PORT, every rank joins with from_store, one
//                             all_reduce, then rank 0 exits first and the others leave after it
//   comm_rank first_ops     - a fresh communicator's 4 KiB all_reduces: after 5, prints the page
//                             faults the process took in the next 300 (a communicator that
//                             sets up lazily, page by page, pays them in its first operations)
//   comm_rank split_drop_parent - split by rank parity and destroy the parent on every rank at once
//                             (comm = comm.split(...)); ranks other than 0 wait a moment, then
//                             each child runs an all_reduce and a further split that meets
//                             through the store, and is destroyed; exit 6 on a wrong sum
//   comm_rank churn ROUNDS  - on the job's communicator, creates and destroys ROUNDS communicators
//                             (and a split of each) on its store; rank 0 prints the store's key
//                             count after the first round and after the last
#include <braid/braid.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

int foreign_store_rank() {
  const int r = std::stoi(std::getenv("RANK")), n = std::stoi(std::getenv("WORLD_SIZE"));
  const auto port = static_cast<uint16_t>(std::stoi(std::getenv("MASTER_PORT")));
  std::unique_ptr<braid::TcpStoreServer> server = r == 0 ? braid::TcpStoreServer::start("127.0.0.1", port) : nullptr;
  std::shared_ptr<braid::Store> store = braid::TcpStore::connect("127.0.0.1", port);
  {
    braid::Communicator comm = braid::Communicator::from_store(store, r, n);
    std::vector<int32_t> v(4, 1);
    comm.all_reduce(v.data(), v.size(), braid::DType::i32, braid::Op::sum);
    if (v[0] != n) return 7;
    comm.barrier();
    if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 0 and its store go first
  }
  std::printf("rank %d left\n", r);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "join";
  if (mode == "foreign_store") return foreign_store_rank();
  try {
    braid::Communicator comm =
        mode == "url" && argc > 2 ? braid::Communicator::from_url(argv[2]) : braid::Communicator::from_env();
    int r = comm.rank(), n = comm.size();
    std::printf("rank %d of %d (local %d of %d) joined\n", r, n, comm.local_rank(), comm.local_size());
    std::fflush(stdout);
    if (mode == "leave_early") {
      if (r == 0) return 0;  // the destructor keeps the store up for the others
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      auto store = comm.store();
      store->set("late/" + std::to_string(r), "here");
      for (int q = 1; q < n; ++q) store->get("late/" + std::to_string(q));
      std::printf("rank %d used the store after rank 0 left\n", r);
      return 0;
    }
    if (mode == "mixed") {
      // Blocking calls with nothing queued run on this thread; an async one queued ahead of a
      // blocking one makes the blocking one queue behind it; wait() on a lone queued one may
      // run it here. The io_uring ring changes hands between threads along the way.
      int wrong = 0;
      for (int i = 0; i < 40; ++i) {
        std::vector<int32_t> v(1000, r + i);
        comm.all_reduce(v.data(), v.size(), braid::DType::i32, braid::Op::sum);
        wrong += v[999] != n * i + n * (n - 1) / 2;
      }
      for (int i = 0; i < 40; ++i) {
        std::vector<float> a(1 << 16, 1.0f), b(1000, static_cast<float>(r));
        braid::Work w = comm.all_reduce_async(a.data(), a.size(), braid::DType::f32, braid::Op::sum);
        comm.all_reduce(b.data(), b.size(), braid::DType::f32, braid::Op::max);
        w.wait();
        braid::Work lone = comm.broadcast_async(b.data(), b.size(), braid::DType::f32, i % n);
        lone.wait();
        wrong += a[12345] != static_cast<float>(n) || b[999] != static_cast<float>(n - 1);
      }
      // The uneven and rooted forms, asynchronous: issued together, waited for at the end.
      std::vector<size_t> counts(n);
      size_t total = 0;
      for (int q = 0; q < n; ++q) total += counts[q] = static_cast<size_t>(q + 1);
      std::vector<int32_t> mine(counts[r], r), gathered_v(total, -1), rs_in(total, 1), rs_out(counts[r], -1);
      std::vector<int32_t> one(1, r * 10), gathered(n, -1), scattered(1, -1), scatter_src(n);
      for (int q = 0; q < n; ++q) scatter_src[q] = 100 + q;
      std::vector<size_t> a2a_counts(n, 2);
      std::vector<int32_t> a2a_in(2 * n, r), a2a_out(2 * n, -1);
      std::vector<int32_t> bcast_out(4, -1), bcast_in(4, 77);
      std::vector<braid::Work> works;
      works.push_back(comm.all_gatherv_async(mine.data(), gathered_v.data(), counts, braid::DType::i32));
      works.push_back(comm.reduce_scatterv_async(rs_in.data(), rs_out.data(), counts, braid::DType::i32, braid::Op::sum));
      works.push_back(comm.gather_async(one.data(), gathered.data(), 1, braid::DType::i32, 0));
      works.push_back(comm.scatter_async(scatter_src.data(), scattered.data(), 1, braid::DType::i32, n - 1));
      works.push_back(comm.all_to_allv_async(a2a_in.data(), a2a_counts, a2a_out.data(), a2a_counts, braid::DType::i32));
      works.push_back(comm.broadcast_async(bcast_in.data(), bcast_out.data(), 4, braid::DType::i32, 0));
      for (auto& w : works) w.wait();
      for (int q = 0, at = 0; q < n; at += q + 1, ++q) wrong += gathered_v[at] != q || gathered_v[at + q] != q;
      wrong += rs_out[0] != n || rs_out[counts[r] - 1] != n;
      if (r == 0) {
        for (int q = 0; q < n; ++q) wrong += gathered[q] != q * 10;
      }
      wrong += scattered[0] != 100 + r;
      for (int q = 0; q < n; ++q) wrong += a2a_out[2 * q] != q || a2a_out[2 * q + 1] != q;
      wrong += bcast_out[3] != 77;
      std::printf("rank %d: mixed done, %d wrong\n", r, wrong);
      return wrong == 0 ? 0 : 1;
    }
    if (mode == "repeat") {
      int wrong = 0;
      const int32_t tri = n * (n - 1) / 2;
      std::vector<int32_t> a(500), b(500), out(500), g(3 * static_cast<size_t>(n));
      for (int i = 0; i < 30; ++i) {
        std::vector<int32_t>& v = i % 2 ? a : b;  // the same shape on alternating buffers
        std::fill(v.begin(), v.end(), r + i);
        comm.all_reduce(v.data(), v.size(), braid::DType::i32, braid::Op::sum);
        wrong += v[0] != n * i + tri || v[499] != n * i + tri;
        std::vector<int32_t>& src = i % 2 ? b : a;  // out of place: another shape
        std::fill(src.begin(), src.end(), r * i);
        comm.all_reduce(src.data(), out.data(), out.size(), braid::DType::i32, braid::Op::sum);
        wrong += out[0] != tri * i || out[499] != tri * i;
        const int root = i % n;
        std::fill(v.begin(), v.end(), r == root ? 1000 + i : -1);
        comm.broadcast(v.data(), v.size(), braid::DType::i32, root);
        wrong += v[0] != 1000 + i || v[499] != 1000 + i;
        std::fill(src.begin(), src.end(), r + 1);
        std::fill(out.begin(), out.end(), -1);
        comm.reduce(src.data(), out.data(), out.size(), braid::DType::i32, braid::Op::sum, root);
        if (r == root) wrong += out[0] != tri + n || out[499] != tri + n;
        const int32_t mine[3] = {r, r + i, -r};
        comm.all_gather(mine, g.data(), 3, braid::DType::i32);
        for (int q = 0; q < n; ++q) wrong += g[3 * q] != q || g[3 * q + 1] != q + i || g[3 * q + 2] != -q;
        comm.barrier();
      }
      for (int round = 0; round < 3; ++round) {  // runs of one shape, several in flight at once
        std::vector<std::vector<float>> burst(6, std::vector<float>(256));
        std::vector<braid::Work> works;
        for (size_t k = 0; k < burst.size(); ++k) {
          std::fill(burst[k].begin(), burst[k].end(), static_cast<float>(r * 10 + static_cast<int>(k) + round));
          works.push_back(comm.all_reduce_async(burst[k].data(), burst[k].size(), braid::DType::f32, braid::Op::sum));
        }
        for (auto& w : works) w.wait();
        for (size_t k = 0; k < burst.size(); ++k) {
          const float want = static_cast<float>(10 * tri + n * (static_cast<int>(k) + round));
          wrong += burst[k][0] != want || burst[k][255] != want;
        }
      }
      for (int i = 0; i < 3; ++i) {  // above 1 MiB: built anew each time, and still right
        std::vector<float> big(300000, static_cast<float>(r + i));
        comm.all_reduce(big.data(), big.size(), braid::DType::f32, braid::Op::sum);
        const float want = static_cast<float>(tri + n * i);
        wrong += big[0] != want || big[299999] != want;
      }
      std::printf("rank %d: repeat done, %d wrong\n", r, wrong);
      return wrong == 0 ? 0 : 1;
    }
    if (mode == "repeat_p2p") {
      int wrong = 0;
      const int next = (r + 1) % n, prev = (r + n - 1) % n;
      std::vector<int32_t> a(100), b(100), in_a(100), in_b(100);
      for (int i = 0; i < 40; ++i) {
        std::vector<int32_t>& out = i % 2 ? a : b;  // buffers alternate between calls of one shape
        std::vector<int32_t>& in = i % 4 < 2 ? in_a : in_b;
        const size_t count = i % 3 == 0 ? 7 : 100;  // and two shapes interleave
        const uint64_t tag = static_cast<uint64_t>(i % 5);
        std::fill(out.begin(), out.end(), 1000 * r + i);
        std::fill(in.begin(), in.end(), -1);
        comm.group_start();
        comm.send_async(out.data(), count, braid::DType::i32, next, tag);
        comm.recv_async(in.data(), count, braid::DType::i32, prev, tag);
        comm.group_end().wait();
        wrong += in[0] != 1000 * prev + i || in[count - 1] != 1000 * prev + i || (count < 100 && in[count] != -1);
      }
      std::printf("rank %d: repeat_p2p done, %d wrong\n", r, wrong);
      return wrong == 0 ? 0 : 1;
    }
    if (mode == "big_groups") {
      int wrong = 0;
      const int peer = 1 - r;
      std::vector<int32_t> v(100);
      std::vector<std::vector<int32_t>> out(5, std::vector<int32_t>(10)), in(5, std::vector<int32_t>(10));
      for (int i = 0; i < 10; ++i) {
        std::fill(v.begin(), v.end(), r + i);
        comm.all_reduce(v.data(), v.size(), braid::DType::i32, braid::Op::sum);
        wrong += v[0] != 1 + 2 * i || v[99] != 1 + 2 * i;
        comm.group_start();
        for (int k = 0; k < 5; ++k) {
          std::fill(out[k].begin(), out[k].end(), 100 * r + 10 * i + k);
          comm.send_async(out[k].data(), out[k].size(), braid::DType::i32, peer);
          comm.recv_async(in[k].data(), in[k].size(), braid::DType::i32, peer);
        }
        comm.group_end().wait();
        for (int k = 0; k < 5; ++k) wrong += in[k][0] != 100 * peer + 10 * i + k || in[k][9] != 100 * peer + 10 * i + k;
      }
      std::printf("rank %d: big_groups done, %d wrong\n", r, wrong);
      return wrong == 0 ? 0 : 1;
    }
    if (mode == "repeat_p2p_mismatch") {
      std::vector<int32_t> out(10, r), in(10, -1);
      const int peer = 1 - r;
      for (int i = 0; i < 5; ++i) {
        comm.group_start();
        comm.send_async(out.data(), out.size(), braid::DType::i32, peer, 5);
        comm.recv_async(in.data(), in.size(), braid::DType::i32, peer, 5);
        comm.group_end().wait();
      }
      std::printf("rank %d: five tagged exchanges done\n", r);
      std::fflush(stdout);
      comm.group_start();
      comm.send_async(out.data(), out.size(), braid::DType::i32, peer, 5);
      comm.recv_async(in.data(), in.size(), braid::DType::i32, peer, r == 1 ? 6 : 5);
      comm.group_end().wait();
      // Rank 0's receive (tag 5) did meet rank 1's send (tag 5): only rank 1 can tell.
      std::printf(r == 0 ? "rank %d: its send and receive matched\n" : "rank %d: the differing tags went unnoticed: wrong\n", r);
      return r == 0 ? 0 : 5;
    }
    if (mode == "repeat_mismatch") {
      std::vector<int32_t> v(1000, 1);
      for (int i = 0; i < 5; ++i) comm.all_reduce(v.data(), v.size(), braid::DType::i32, braid::Op::sum);
      std::printf("rank %d: five all_reduces done\n", r);
      std::fflush(stdout);
      comm.all_reduce(v.data(), r == 1 ? 999 : 1000, braid::DType::i32, braid::Op::sum);
      std::printf("rank %d: the differing counts went unnoticed: wrong\n", r);
      return 5;
    }
    if (mode == "sum") {
      const size_t count = argc > 2 ? std::stoul(argv[2]) : 1024;
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>((r + 1) * (i % 7 + 1));
      comm.all_reduce(v.data(), v.size(), braid::DType::f32, braid::Op::sum);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += v[i] != static_cast<float>(n * (n + 1) / 2 * (i % 7 + 1));
      std::printf("rank %d: all_reduce of %zu elements returned, %zu wrong\n", r, count, wrong);
      return wrong == 0 ? 0 : 6;
    }
    if (mode == "first_ops") {
      std::vector<float> v(1024), want(1024);
      size_t wrong = 0;
      auto one = [&](int i) {
        for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(r + i + static_cast<int>(k % 5));
        comm.all_reduce(v.data(), v.size(), braid::DType::f32, braid::Op::sum);
        for (size_t k = 0; k < v.size(); ++k) {
          wrong += v[k] != static_cast<float>(n * (i + static_cast<int>(k % 5)) + n * (n - 1) / 2);
        }
      };
      for (int i = 0; i < 5; ++i) one(i);
      rusage before{}, after{};
      getrusage(RUSAGE_SELF, &before);
      for (int i = 5; i < 305; ++i) one(i);
      getrusage(RUSAGE_SELF, &after);
      std::printf("rank %d: first_ops %ld page faults in 300 operations, %zu wrong\n", r,
                  after.ru_minflt - before.ru_minflt, wrong);
      return wrong == 0 ? 0 : 6;
    }
    if (mode == "split_drop_parent") {
      comm = comm.split(r % 2, r);
      // Rank 0 (serving the store in-process) drops its parent first; the others come later.
      if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
      int32_t v = r, want = 0;
      for (int q = r % 2; q < n; q += 2) want += q;
      comm.all_reduce(&v, 1, braid::DType::i32, braid::Op::sum);
      braid::Communicator grand = comm.split(0, -comm.rank());
      int32_t g = r;
      grand.all_reduce(&g, 1, braid::DType::i32, braid::Op::sum);
      std::printf("rank %d used its child after the parent went: sums %d %d\n", r, v, g);
      return v == want && g == want ? 0 : 6;
    }
    if (mode == "churn") {
      const int rounds = argc > 2 ? std::stoi(argv[2]) : 10;
      auto store = comm.store();
      int64_t first = 0, last = 0;
      for (int round = 0; round < rounds; ++round) {
        {
          braid::Communicator c = braid::Communicator::from_store(store, r, n);
          std::vector<int32_t> v(4, 1);
          c.all_reduce(v.data(), v.size(), braid::DType::i32, braid::Op::sum);
          const bool left_out = r == n - 1 && n > 2;
          braid::Communicator sub = c.split(left_out ? braid::Communicator::kNoColor : 0, -r);
          if (!left_out) sub.barrier();
          if (v[0] != n) return 7;
        }
        comm.barrier();  // every rank has destroyed both, and deleted what it deletes
        if (r == 0 && round == 0) first = store->num_keys();
        if (r == 0 && round == rounds - 1) last = store->num_keys();
        comm.barrier();  // and none goes on (to the next round, or to leave) before rank 0 has counted
      }
      if (r == 0) std::printf("keys after the first round %lld, after round %d %lld\n", static_cast<long long>(first),
                              rounds, static_cast<long long>(last));
      return 0;
    }
    if (mode == "tags") {
      std::vector<int32_t> v(16, r == 0 ? 42 : 0);
      if (r == 0) comm.send(v.data(), v.size(), braid::DType::i32, 1, /*tag=*/7);
      if (r == 1) comm.recv(v.data(), v.size(), braid::DType::i32, 0, /*tag=*/7);
      std::printf("rank %d: tag 7 matched, v[0] = %d\n", r, v[0]);
      std::fflush(stdout);
      if (r == 0) comm.send(v.data(), v.size(), braid::DType::i32, 1, /*tag=*/8);
      if (r == 1) comm.recv(v.data(), v.size(), braid::DType::i32, 0, /*tag=*/9);
      comm.barrier();  // the sender's send may finish locally; it learns of the mismatch here
      std::printf("rank %d: tags 8 and 9 matched: wrong\n", r);
      return 5;
    }
    auto store = comm.store();
    store->set("hello/" + std::to_string(r), "from rank " + std::to_string(r));
    for (int q = 0; q < n; ++q) {
      std::string v = store->get("hello/" + std::to_string(q));
      if (v != "from rank " + std::to_string(q)) {
        std::fprintf(stderr, "rank %d read '%s' for rank %d\n", r, v.c_str(), q);
        return 3;
      }
    }
    std::vector<int32_t> data(1000, r + 1);
    comm.all_reduce(data.data(), data.size(), braid::DType::i32, braid::Op::sum);
    int32_t want = n * (n + 1) / 2;
    for (int32_t x : data) {
      if (x != want) {
        std::fprintf(stderr, "rank %d: all_reduce gave %d, want %d\n", r, x, want);
        return 4;
      }
    }
    std::printf("rank %d exchanged with %d ranks through the store; all_reduce sum = %d\n", r, n, want);
    return 0;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "comm_rank: %s\n", e.what());
    return 1;
  }
}
