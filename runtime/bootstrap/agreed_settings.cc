#include "runtime/bootstrap/agreed_settings.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "braid/error.h"
#include "runtime/bootstrap/store_join.h"
#include "runtime/engine/op_header.h"

namespace braid {
namespace {

constexpr const char* kCardTag = "braid-settings 1 ";

struct Setting {
  std::string name;
  std::string key;    // compared
  std::string shown;  // named in the message
  std::string hint;   // what to do when it differs
};

const char* kSetAlike = "set it the same on every rank (or leave it unset)";

// Tabs and newlines would break the card's fields; a value holding one is odd anyway.
std::string field(std::string s) {
  for (char& c : s) {
    if (c == '\t' || c == '\n') c = '?';
  }
  return s;
}

std::string quoted(const std::string& v) {
  std::string q = field(v);
  q.insert(q.begin(), '\'');
  q.push_back('\'');
  return q;
}

std::string automatic_or(size_t v) { return v == 0 ? "'0' (automatic)" : quoted(std::to_string(v)); }

constexpr const char* kTransport = "BRAID_TRANSPORT";

// BRAID_TRANSPORT's families in order ("shm,tcp"): tcp (io_uring) and tcp-poll (epoll) speak
// one wire protocol, so ranks may mix them. auto stays "auto": it agrees with any list, each
// pair then taking what the two ranks have in common (runtime/links/transport_choice.h).
std::string wire_families(const std::string& transport) {
  if (transport == "auto" || transport.empty()) return "auto";
  std::string out;
  size_t at = 0;
  for (;;) {
    const size_t comma = transport.find(',', at);
    const std::string name = transport.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!out.empty()) out += ',';
    out += name == "tcp-poll" ? "tcp" : name;
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

std::vector<Setting> settings_of(const Env& env) {
  return {
      {"BRAID_ALGO", field(env.algo), quoted(env.algo), kSetAlike},
      {"BRAID_CHUNK_BYTES", std::to_string(env.chunk_bytes), automatic_or(env.chunk_bytes), kSetAlike},
      {"BRAID_RING_DEPTH", std::to_string(env.ring_depth), automatic_or(static_cast<size_t>(env.ring_depth)),
       kSetAlike},
      {"BRAID_RING_ORDER", field(env.ring_order), quoted(env.ring_order), kSetAlike},
      {kTransport, field(wire_families(env.transport)), quoted(env.transport),
       "set the same list on every rank (tcp and tcp-poll mix; auto agrees with any list), or leave it unset"},
      {"the operation header version", std::to_string(OpHeader::kVersion), quoted(std::to_string(OpHeader::kVersion)),
       "run the same braid build on every rank"},
  };
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// BRAID_TRANSPORT stays out of the digest: auto agrees with every list (check_settings
// compares it by itself).
std::string digest_of(const std::vector<Setting>& settings) {
  std::string keys;
  for (const Setting& s : settings) {
    if (s.name != kTransport) keys += s.name + "\t" + s.key + "\n";
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(keys)));
  return hex;
}

struct Card {
  std::string digest;
  std::vector<Setting> settings;
};

Result<Card> parse_card(const std::string& text, int rank) {
  auto bad = [&] {
    return invalid_argument("rank " + std::to_string(rank) + " published settings this build cannot read (" +
                            std::to_string(text.size()) + " bytes); run the same braid build on every rank");
  };
  const std::string tag = kCardTag;
  size_t end = text.find('\n');
  if (text.compare(0, tag.size(), tag) != 0 || end == std::string::npos) return bad();
  Card card;
  card.digest = text.substr(tag.size(), end - tag.size());
  for (size_t at = end + 1; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    if (end == std::string::npos) return bad();
    const std::string line = text.substr(at, end - at);
    const size_t t1 = line.find('\t'), t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
    if (t2 == std::string::npos || line.find('\t', t2 + 1) != std::string::npos) return bad();
    card.settings.push_back({line.substr(0, t1), line.substr(t1 + 1, t2 - t1 - 1), line.substr(t2 + 1), ""});
  }
  return card;
}

// "rank 2", "ranks 0, 1, 3" (the first few of a long list, and how many).
std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) s += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  if (ranks.size() > 8) s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return s;
}

}  // namespace

std::string settings_card(const Env& env) {
  const std::vector<Setting> settings = settings_of(env);
  std::string text = kCardTag + digest_of(settings) + "\n";
  for (const Setting& s : settings) text += s.name + "\t" + s.key + "\t" + s.shown + "\n";
  return text;
}

Status check_settings(const std::vector<std::string>& cards) {
  std::vector<Card> parsed;
  bool same = true;
  std::string explicit_transport;  // the first rank's list other than auto
  for (size_t r = 0; r < cards.size(); ++r) {
    ASSIGN_OR_RETURN(Card c, parse_card(cards[r], static_cast<int>(r)));
    same = same && (parsed.empty() || c.digest == parsed.front().digest);
    for (const Setting& s : c.settings) {
      if (s.name != kTransport || s.key == "auto") continue;
      if (explicit_transport.empty()) explicit_transport = s.key;
      same = same && s.key == explicit_transport;
    }
    parsed.push_back(std::move(c));
  }
  if (same) return Status::ok();

  // Every setting any rank named, in the order the first rank naming it lists it.
  std::vector<std::string> names;
  for (const Card& c : parsed) {
    for (const Setting& s : c.settings) {
      if (std::find(names.begin(), names.end(), s.name) == names.end()) names.push_back(s.name);
    }
  }
  std::map<std::string, std::string> hints;
  for (const Setting& s : settings_of(Env{})) hints[s.name] = s.hint;
  std::string message;
  for (const std::string& name : names) {
    // The ranks holding each value, values in the order of the lowest rank holding them.
    std::vector<std::pair<std::string, std::string>> values;  // (key, shown)
    std::vector<std::vector<int>> holders;
    for (size_t r = 0; r < parsed.size(); ++r) {
      std::pair<std::string, std::string> v{"", "nothing (an older braid build)"};
      for (const Setting& s : parsed[r].settings) {
        if (s.name == name) v = {s.key, s.shown};
      }
      if (name == kTransport && v.first == "auto") continue;  // agrees with any list
      size_t i = 0;
      while (i < values.size() && values[i].first != v.first) ++i;
      if (i == values.size()) {
        values.push_back(v);
        holders.emplace_back();
      }
      holders[i].push_back(static_cast<int>(r));
    }
    if (values.size() < 2) continue;
    message += (message.empty() ? "" : ". ") + name + " differs between ranks: ";
    for (size_t i = 0; i < values.size(); ++i) {
      message += (i == 0 ? "" : ", ") + rank_list(holders[i]) + (holders[i].size() == 1 ? " has " : " have ") +
                 values[i].second;
    }
    message += "; " + (hints.count(name) != 0 ? hints[name] : kSetAlike);
  }
  if (message.empty()) {  // equal values under different digests: cards of different builds
    message = "the ranks' settings cards differ in form; run the same braid build on every rank";
  }
  return Status(ErrorCode::mismatch, message);
}

Status agree_on_settings(Store& store, const Env& env, int rank, int size) {
  std::vector<std::string> cards(static_cast<size_t>(size));
  cards[static_cast<size_t>(rank)] = settings_card(env);
  try {
    store.set("settings/" + std::to_string(rank), cards[static_cast<size_t>(rank)]);
    RETURN_IF_ERROR(wait_for_ranks(store, "settings", "settings card", rank, size));  // saying who is late
    for (int r = 0; r < size; ++r) {
      if (r != rank) cards[static_cast<size_t>(r)] = store.get("settings/" + std::to_string(r));
    }
  } catch (const Error& e) {
    return Status(e.code(), "rank " + std::to_string(rank) + " exchanging settings through the store at " +
                                store.address() + ": " + e.what());
  }
  return check_settings(cards).with_context("rank " + std::to_string(rank) + " creating a communicator of " +
                                            std::to_string(size) + " ranks: ");
}

}  // namespace braid
