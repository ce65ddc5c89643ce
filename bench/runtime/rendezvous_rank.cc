// One rank of the rendezvous benchmark: join, then leave.
#include <braid/braid.h>

#include <cstdio>

int main() {
  try {
    braid::Communicator comm = braid::Communicator::from_env();
    return comm.size() > 0 ? 0 : 1;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "rendezvous_rank: %s\n", e.what());
    return 1;
  }
}
