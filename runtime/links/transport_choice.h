// runtime/links/transport_choice.h - which transport carries each peer's connection, decided from
// what every rank published, so both ends of every pair reach the same answer.
//
// Each rank brings up every transport of its preference list (BRAID_TRANSPORT: auto = shm, ib,
// tcp; or a list such as "shm,tcp"; BRAID_SHM_DISABLE=1 drops shm) and publishes a card: its
// host (transport/common/host_identity.h's label), the CPUs it may run on (for the spin rule,
// runtime/links/spin_policy.h) and one address per transport that came up, in its order. A pair of ranks takes the first family in the lower rank's card that the higher rank
// published too and that reaches across the pair: shm and inproc only between ranks of one
// host, the others always. Both ranks compute that from the same two cards.
//
// Two explicit lists that differ are an error (ranks meant different things); auto agrees with
// any list, taking what the two have in common.
//
// Card format (text, one field per line, "\t" between parts):
//   braid-links 2
//   host\t<host label>
//   cpus\t<affinity mask: spin_policy.h's cpu_mask_text; all zero when unknown>
//   setting\t<BRAID_TRANSPORT as set>
//   addr\t<family>\t<1: the address is host-local (Transport::is_host_local), else 0>\t<address>
#pragma once

#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "transport/common/host_identity.h"

namespace braid {

// One transport to bring up: `family` is what peers agree on ("shm", "ib", "tcp", "inproc");
// `create` is what transport::create_transport() gets ("tcp-poll", or "auto" for tcp over
// whichever engine works).
struct TransportPick {
  std::string family;
  std::string create;
};

// The transports `env` asks for, in order of preference. invalid_argument when none is left
// (BRAID_TRANSPORT=shm with BRAID_SHM_DISABLE=1).
Result<std::vector<TransportPick>> preference_list(const Env& env);
// "tcp" for tcp and tcp-poll (one wire protocol), the name itself otherwise.
std::string transport_family(const std::string& name);

struct PublishedAddress {
  std::string family;
  std::string address;
  bool host_local = false;  // a CPU copy inside one host (loopback, shared memory)
};

struct PublishedLinks {
  std::string host;     // host label: equal labels, same host
  std::string setting;  // BRAID_TRANSPORT as this rank set it, for messages
  transport::CpuMask cpus{};  // the rank's affinity mask; all zero: unknown
  std::vector<PublishedAddress> addresses;  // the transports that came up, in preference order
  // Why none came up, when none did: published so that the peers fail at once, naming this
  // rank and the reason, instead of waiting out the rendezvous timeout for its addresses.
  std::string failed;
};

std::string links_card(const PublishedLinks& links);
// `rank` names the publisher in the error.
Result<PublishedLinks> parse_links_card(const std::string& text, int rank);

// The family the connection between ranks a and b uses. ErrorCode::mismatch when their explicit
// lists differ or they have no family in common that reaches across, naming both ranks' lists.
Result<std::string> choose_transport(const std::vector<PublishedLinks>& all, int a, int b);
// choose_transport(all, rank, peer) for every peer; "" for `rank` itself.
Result<std::vector<std::string>> choose_transports(const std::vector<PublishedLinks>& all, int rank);

// Whether every pair's connection (as choose_transport picks it) is host-local at both ends, so
// a ring may keep one segment per hop in flight: the same answer on every rank.
bool every_link_host_local(const std::vector<PublishedLinks>& all);

}  // namespace braid
