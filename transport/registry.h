// transport/registry.h - transports by name, filled by one explicit function.
//
// A transport compiled out (no liburing, no verbs) is still listed, as unavailable with its
// reason, so "BRAID_TRANSPORT=ib" says why it cannot be had instead of "unknown transport".
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/transport.h"
#include "transport/transport_options.h"

namespace braid::transport {

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
