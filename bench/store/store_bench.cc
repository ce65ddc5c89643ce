// Store round trips on 127.0.0.1: one set plus one get per iteration, from 1 and from 64
// client threads (each with its own connection) against one server.
//
//   ninja -C build-store bench/store/store_bench && build-store/bench/store/store_bench
//
// items_per_second counts set+get pairs; round trips per second is twice that.
#include <benchmark/benchmark.h>

#include <memory>
#include <mutex>

#include "braid/store.h"

namespace {

std::mutex g_mu;
std::unique_ptr<braid::TcpStoreServer> g_server;

void BM_SetGet(benchmark::State& state) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_server) g_server = braid::TcpStoreServer::start("127.0.0.1", 0);
  }
  auto client = braid::TcpStore::connect("127.0.0.1", g_server->port(), {.timeout = std::chrono::seconds(10)});
  std::string key = "bench/" + std::to_string(state.thread_index());
  std::string value(static_cast<size_t>(state.range(0)), 'v');
  for (auto _ : state) {
    client->set(key, value);
    benchmark::DoNotOptimize(client->get(key));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SetGet)->Arg(8)->Arg(4096)->Threads(1)->UseRealTime();
BENCHMARK(BM_SetGet)->Arg(8)->Threads(64)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
