#include "transport/registry.h"

#include <atomic>

#include "braid_config.h"
#include "common/log.h"
#include "transport/tcp/tcp_transport.h"
#if BRAID_HAVE_INPROC
#include "transport/inproc/inproc_transport.h"
#endif
#if BRAID_HAVE_SHM
#include "transport/shm/shm_transport.h"
#endif
#if BRAID_HAVE_IB
#include "transport/ib/ib_transport.h"
#endif

namespace braid::transport {

namespace {

[[maybe_unused]] TransportEntry unavailable(std::string name, std::string reason) {
  TransportEntry e;
  e.name = std::move(name);
  e.unavailable_reason = std::move(reason);
  return e;
}

std::vector<TransportEntry> register_builtin_transports() {
  std::vector<TransportEntry> r;
#if BRAID_HAVE_LIBURING
  r.push_back({"tcp", true, "", [](const TransportOptions& o) -> Result<std::unique_ptr<Transport>> {
                 auto t = tcp::TcpTransport::create(o, tcp::EngineKind::io_uring);
                 if (!t.is_ok()) {
                   return Status(t.status().code(),
                                 "BRAID_TRANSPORT=tcp needs io_uring, which cannot be set up here (" +
                                     t.status().message() + "); use BRAID_TRANSPORT=auto or tcp-poll");
                 }
                 return t;
               }});
#else
  r.push_back(unavailable("tcp", "braid was built without liburing (the io_uring engine); use tcp-poll or auto"));
#endif
  r.push_back({"tcp-poll", true, "", [](const TransportOptions& o) {
                 return tcp::TcpTransport::create(o, tcp::EngineKind::epoll);
               }});
#if BRAID_HAVE_IB
  r.push_back({"ib", true, "", [](const TransportOptions& o) { return ib::IbTransport::create(o); }});
#else
  r.push_back(unavailable("ib", "braid was built without libibverbs (install libibverbs-dev, configure with "
                                "-Dibverbs=enabled)"));
#endif
#if BRAID_HAVE_SHM
  // Ranks of one host only: connect() refuses an address of another host, naming both.
  r.push_back({"shm", true, "", [](const TransportOptions& o) { return shm::ShmTransport::create(o); }});
#else
  r.push_back(unavailable("shm", "braid was built without transport/shm; use tcp"));
#endif
#if BRAID_HAVE_INPROC
  r.push_back({"inproc", true, "", [](const TransportOptions& o) -> Result<std::unique_ptr<Transport>> {
                 if (o.inproc_fabric == nullptr) {
                   // Only a job whose ranks are threads of one process has a Fabric to share.
                   return invalid_argument(
                       "BRAID_TRANSPORT=inproc: the inproc transport is for tests whose ranks are threads of one "
                       "process, not for a job of separate processes; use BRAID_TRANSPORT=auto (or tcp, tcp-poll)");
                 }
                 return inproc::create_inproc_transport(*static_cast<inproc::Fabric*>(o.inproc_fabric));
               }});
#else
  r.push_back(unavailable("inproc", "braid was built without transport/inproc"));
#endif
  return r;
}

const TransportEntry* find(const std::string& name) {
  for (const auto& e : transport_registry()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Result<std::unique_ptr<Transport>> create_entry(const std::string& name, const TransportOptions& options) {
  const TransportEntry* e = find(name);
  if (e == nullptr) {
    std::string names = "auto";
    for (const auto& x : transport_registry()) names += ", " + x.name;
    return invalid_argument("unknown transport '" + name + "' (known: " + names + ")");
  }
  if (!e->available) return invalid_argument("transport '" + name + "' is unavailable: " + e->unavailable_reason);
  return e->create(options);
}

}  // namespace

const std::vector<TransportEntry>& transport_registry() {
  static const std::vector<TransportEntry> registry = register_builtin_transports();
  return registry;
}

Result<std::unique_ptr<Transport>> create_transport(const std::string& name, const TransportOptions& options) {
  if (name != "auto") return create_entry(name, options);
  static std::atomic<bool> logged{false};
  // auto asks the io_uring engine itself (not the "tcp" entry, whose error is written for
  // someone who demanded it), so the reason it falls back is the kernel's own.
  std::string why;
#if BRAID_HAVE_LIBURING
  auto uring = tcp::TcpTransport::create(options, tcp::EngineKind::io_uring);
  if (uring.is_ok()) {
    if (!logged.exchange(true)) {
      BRAID_LOG(info) << "transport: tcp over io_uring";
    }
    return uring;
  }
  why = uring.status().message();
#else
  why = "braid was built without liburing";
#endif
  auto t = create_entry("tcp-poll", options);
  if (t.is_ok() && !logged.exchange(true)) {
    BRAID_LOG(warn) << "transport: BRAID_TRANSPORT=auto fell back to tcp over epoll, because io_uring is "
                       "unavailable here ("
                    << why << "); set BRAID_TRANSPORT=tcp-poll to choose it and silence this warning";
  }
  return t;
}

}  // namespace braid::transport
