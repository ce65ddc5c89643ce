// transport/registry.h - transports by name, filled by one explicit function.
//
// A transport compiled out (no liburing, no verbs) is still listed, as unavailable with its
// reason, so "BRAID_TRANSPORT=ib" says why it cannot be had instead of "unknown transport".
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/job_secret.h"
#include "transport/transport.h"

namespace braid::transport {

struct TransportOptions {
  Env env;                       // BRAID_* settings (interfaces, sockets, timeouts, ...)
  std::string master_addr;       // picks the interface that routes there, when set
  void* inproc_fabric = nullptr; // inproc only: the shared in-process fabric (see inproc.h)
  std::string listen_host;       // tcp only: bind this numeric address ("::1") instead of choosing an
                                 // interface by BRAID_SOCKET_IFNAME / master_addr (tests, multi-homed hosts)
  // tcp: every connection proves knowledge of it both ways before it carries a byte
  // (transport/tcp/wire_format.h); none (the default) runs the same exchange under the all-zero
  // key and warns once that the job is unauthenticated. The runtime passes the process's
  // (auth::process_secret()). inproc ignores it: its ends are threads of one process, which
  // nobody outside can reach.
  auth::JobSecret secret;
};

using TransportFactory = std::function<Result<std::unique_ptr<Transport>>(const TransportOptions&)>;

struct TransportEntry {
  std::string name;            // "tcp", "tcp-poll", "ib", "inproc"
  bool available = false;
  std::string unavailable_reason;  // "braid was built without liburing"
  TransportFactory create;
};

// Every transport braid knows, available or not. Filled once by register_builtin_transports().
const std::vector<TransportEntry>& transport_registry();

// Creates the transport `name` ("auto" tries tcp, then tcp-poll, logging once which engine runs).
Result<std::unique_ptr<Transport>> create_transport(const std::string& name, const TransportOptions& options);

}  // namespace braid::transport
