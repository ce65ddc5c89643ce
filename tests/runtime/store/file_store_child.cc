// Helper process for file_store_test: opens the FileStore at argv[1] and calls add(argv[2], 1)
// argv[3] times, printing each returned value on its own line so the test can check that no two
// adds anywhere returned the same number. It first waits until argv[4] helpers have started, so
// their adds really overlap instead of running one process after another.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "braid/store.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s PATH KEY COUNT PROCESSES\n", argv[0]);
    return 2;
  }
  try {
    braid::FileStore store(argv[1], std::chrono::seconds(10));
    long count = std::strtol(argv[3], nullptr, 10);
    long processes = std::strtol(argv[4], nullptr, 10);
    store.add("started", 1);
    // A busy poll, not wait(): the helpers must leave this loop within microseconds of each other.
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::stol(store.get("started")) < processes) {
      if (std::chrono::steady_clock::now() > give_up) throw std::runtime_error("the other helpers never started");
    }
    std::string out;
    for (long i = 0; i < count; ++i) out += std::to_string(store.add(argv[2], 1)) + "\n";
    std::fputs(out.c_str(), stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "file_store_child: %s\n", e.what());
    return 1;
  }
  return 0;
}
