// The far end for ib_peer_ended_guest_test: one ib transport on the address given as argv[1]
// (10.99.0.2, rxe1, in the Soft-RoCE guest) that accepts one connection from rank 0 and then
// only lives, driving nothing, until it is killed. SIGUSR1 closes the connection normally (the
// goodbye, then the socket's end) while the process lives on. It prints one line per step:
//   ADDRESS <address>    listening; what to connect() to
//   CONNECTED            accept() returned
//   CLOSED               close() returned (after SIGUSR1)
//   ERROR <message>      a step failed (exit 1)
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "common/deadline.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace {

volatile std::sig_atomic_t close_asked = 0;

void on_usr1(int) { close_asked = 1; }

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace braid::transport;
  if (argc != 2) {
    say("ERROR usage: ib_peer_ended_peer LISTEN_HOST");
    return 1;
  }
  std::signal(SIGUSR1, on_usr1);
  TransportOptions o;
  o.listen_host = argv[1];
  auto t = create_transport("ib", o);
  if (!t.is_ok()) {
    say("ERROR " + t.status().message());
    return 1;
  }
  auto address = t.value()->listen();
  if (!address.is_ok()) {
    say("ERROR " + address.status().message());
    return 1;
  }
  say("ADDRESS " + address.value());
  auto c = t.value()->accept(PeerIdentity{.comm_id = 33, .self_rank = 1, .peer_rank = 0},
                             braid::Deadline::after(std::chrono::seconds(60)));
  if (!c.is_ok()) {
    say("ERROR " + c.status().message());
    return 1;
  }
  say("CONNECTED");
  for (bool closed = false;;) {
    if (close_asked && !closed) {
      c.value()->close();
      closed = true;
      say("CLOSED");
    }
    ::usleep(10'000);
  }
}
