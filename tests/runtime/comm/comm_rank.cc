// A rank process for multi-process tests: rendezvous through the environment, then one mode.
//   comm_rank join          - print who it is, exchange data through the store, all_reduce
//   comm_rank leave_early   - rank 0 returns right after joining; the others use the store later
//   comm_rank tags          - 2 ranks: a tagged send/recv that match, then tags that differ
//   comm_rank url URL       - like join, but through Communicator::from_url(URL) (tcp://, file://)
#include <braid/braid.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "join";
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
