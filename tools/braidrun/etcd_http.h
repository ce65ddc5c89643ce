// tools/braidrun/etcd_http.h - one HTTP/1.1 POST to an etcd member, on a plain socket, bounded.
//
// etcd's gateway is asked one question per connection ("Connection: close"): braidrun asks a
// few times a second at most, and a fresh connection per call means a member that died or
// froze between two calls costs nothing but that call. Every step (name lookup aside, which
// uses getaddrinfo) is bounded by the caller's deadline: a non-blocking connect, then writes
// and reads that poll with what is left of it. The reply may come with Content-Length, chunked,
// or end at close; bodies above kMaxHttpReplyBytes are refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"

namespace braid::braidrun::etcd {

constexpr size_t kMaxHttpReplyBytes = size_t{64} << 20;
constexpr uint16_t kDefaultEtcdPort = 2379;

struct Endpoint {
  std::string host;
  uint16_t port = kDefaultEtcdPort;
  std::string text() const;  // "host:port", "[v6]:port"
};

// "h1:p1,h2:p2,[::1]:p3" (a port left out is 2379; an "http://" in front is accepted).
// Errors are invalid_argument naming the bad part.
Result<std::vector<Endpoint>> parse_endpoints(const std::string& list);
// "h1:p1,h2:p2", for messages.
std::string endpoints_text(const std::vector<Endpoint>& endpoints);

struct HttpReply {
  int status = 0;
  std::string body;
};

// POSTs `body` (JSON) to http://endpoint`path`. Fails with peer_lost when the member cannot be
// reached or the connection broke, timeout when `deadline` passed, protocol for a reply that
// is no HTTP; every message names the endpoint.
Result<HttpReply> http_post(const Endpoint& endpoint, const std::string& path, const std::string& body,
                            const Deadline& deadline);

// Parses what a member sent back on one connection (everything up to its close): the status
// line, the headers that matter (Content-Length, Transfer-Encoding: chunked) and the body.
// Anything else is a protocol error naming `from`.
Result<HttpReply> parse_http_reply(const std::string& raw, const Endpoint& from);

// The address of this host that a connection to `endpoint` leaves from (what the kernel picks
// for it): an address of this node the others can reach when they reach the same member.
Result<std::string> local_address_towards(const Endpoint& endpoint, const Deadline& deadline);

}  // namespace braid::braidrun::etcd
