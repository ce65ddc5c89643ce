// runtime/store/socket_util.h - small socket helpers the store client and server share.
#pragma once

#include <netdb.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace braid::store {

// "host:port", with IPv6 literals in brackets ("[::1]:29500").
std::string format_address(const std::string& host, uint16_t port);

// A key as error messages show it: printable bytes as is, others as \xNN, long keys cut.
std::string printable_key(std::string_view key);
// "a, b, c" of printable keys, at most `limit` of them, then "(and N more)".
std::string printable_keys(const std::vector<std::string>& keys, size_t limit = 16);

// Resolves host:port for a TCP socket (IPv4 or IPv6). `passive` asks for addresses to bind;
// an empty host then means every interface.
struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;
Result<AddrInfoPtr> resolve(const std::string& host, uint16_t port, bool passive);

// A non-blocking listening socket on host:port (port 0: the kernel picks one, returned in
// *bound_port). A port in use is an error naming host:port with what to do about it.
Result<UniqueFd> listen_tcp(const std::string& host, uint16_t port, uint16_t* bound_port);

// "host:port" of a connected socket's peer, for messages ("unknown peer" when it is gone).
std::string peer_name(int fd);

// Disables Nagle: store requests are small and latency-bound.
void set_no_delay(int fd);

}  // namespace braid::store
