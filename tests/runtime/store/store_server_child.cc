// Helper process for the store's stress tests: serves a TcpStoreServer on 127.0.0.1 (port 0),
// prints "port N" and serves until killed, so a test can measure the server's own memory
// (/proc/<pid>/status) apart from its clients'. The secret and limits come from the environment
// (BRAID_SECRET, BRAID_STORE_MAX_*), as for any rank. `--fd-limit N` first sets both the soft
// and the hard open-file limit to N, as on a machine with the usual 1024.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "braid/store.h"

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--fd-limit") == 0) {
    rlimit rl{};
    rl.rlim_cur = rl.rlim_max = std::strtoul(argv[2], nullptr, 10);
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      std::perror("setrlimit");
      return 2;
    }
  }
  try {
    auto server = braid::TcpStoreServer::start("127.0.0.1", 0);
    std::printf("port %u\n", server->port());
    std::fflush(stdout);
    for (;;) pause();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_server_child: %s\n", e.what());
    return 1;
  }
}
