// transport/transport_options.h - what every transport is created with.
//
// One struct for all transports, each reading the fields it needs; the runtime fills it once per
// communicator (runtime/links/peer_links.h) and the registry hands it to a transport's factory.
#pragma once

#include <string>

#include "common/env.h"
#include "common/job_secret.h"

namespace braid::transport {

struct TransportOptions {
  Env env;                       // BRAID_* settings (interfaces, sockets, timeouts, ...)
  std::string master_addr;       // picks the interface that routes there, when set
  void* inproc_fabric = nullptr; // inproc only: the shared in-process fabric (see inproc.h)
  std::string listen_host;       // tcp only: bind this numeric address ("::1") instead of choosing an
                                 // interface by BRAID_SOCKET_IFNAME / master_addr (tests, multi-homed hosts)
  // tcp: every connection proves knowledge of it both ways before it carries a byte
  // (transport/common/handshake_format.h); none (the default) runs the same exchange under the all-zero
  // key and warns once that the job is unauthenticated. The runtime passes the process's
  // (auth::process_secret()). inproc ignores it: its ends are threads of one process, which
  // nobody outside can reach.
  auth::JobSecret secret;
};

}  // namespace braid::transport
