// runtime/bootstrap/agreed_settings.h - the settings every rank of a communicator must share, and the
// check that they do.
//
// Some settings change what bytes go where: the algorithm (BRAID_ALGO), how a message is cut
// into segments (BRAID_CHUNK_BYTES), how many segments a ring hop keeps moving
// (BRAID_RING_DEPTH), the order of ranks around a ring (BRAID_RING_ORDER), the transports
// (BRAID_TRANSPORT: explicit lists must be equal, auto agrees with any; transport_choice.h then
// picks per peer). Ranks that differ in one of them
// pair messages that do not belong together: results come out wrong, or the ranks wait for
// each other forever. So each rank publishes a card of them when a communicator is created
// (agree_on_settings, in the communicator's store namespace) and reads every
// other rank's before it connects to anyone; a difference is an error on every rank, naming
// the setting, each value and the ranks holding it.
//
// Not on the card: settings each rank may choose for itself. BRAID_NSOCKS (the connecting side
// tells the accepting side how many sockets it stripes over), timeouts, BRAID_SOCKET_IFNAME
// and BRAID_PORT_RANGE (per host), BRAID_ZCOPY_BYTES, BRAID_SPIN_US, BRAID_CALLER_PROGRESS,
// BRAID_LOOPBACK_CC, BRAID_NETWORK_CC, BRAID_GDR (local choices). The job secret is checked by
// the handshakes.
//
// Card format (text; "\t" separates fields, one setting per line):
//   braid-settings 1 <digest: 16 hex digits of FNV-1a over the "<name>\t<key>\n" lines>
//   <name>\t<key>\t<shown>      key: what must be equal; shown: the value as the user set it
#pragma once

#include <string>
#include <vector>

#include "braid/store.h"
#include "common/env.h"
#include "common/status.h"

namespace braid {

// This rank's card for `env`.
std::string settings_card(const Env& env);

// Checks every rank's card (cards[r] is rank r's, as read from the store).
// ErrorCode::mismatch naming every setting that differs, with each value and its ranks, when
// they disagree; invalid_argument when a card is not one this build can read.
Status check_settings(const std::vector<std::string>& cards);

// Publishes this rank's card in `store` (the communicator's namespace), reads every other
// rank's and checks them all (check_settings), before any transport is made or connection
// built. Every rank reads every card, so every rank finds a difference itself and names the
// same ranks.
Status agree_on_settings(Store& store, const Env& env, int rank, int size);

}  // namespace braid
