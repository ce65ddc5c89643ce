#include "runtime/links/peer_links.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "braid/error.h"
#include "collectives/ring_order.h"
#include "common/log.h"
#include "runtime/bootstrap/store_join.h"
#include "runtime/links/transport_choice.h"
#include "transport/common/host_identity.h"
#include "transport/registry.h"

namespace braid {
namespace {

// How long one poll sleeps in a transport without a wait_fd() while others are in use too: the
// longest a completion of another transport waits to be seen.
constexpr auto kSliceWithoutFd = std::chrono::milliseconds(1);

}  // namespace

PeerLinks::PeerLinks(int rank, std::vector<std::unique_ptr<transport::Transport>> transports,
                     std::vector<std::unique_ptr<transport::Connection>> peers, std::vector<size_t> transport_of)
    : rank_(rank), transports_(std::move(transports)), owned_(std::move(peers)), transport_of_(std::move(transport_of)) {
  finish_setup();
}

PeerLinks::~PeerLinks() {
  owned_.clear();  // connections before the transports whose engines drive them
  transports_.clear();
}

void PeerLinks::finish_setup() {
  peers_.assign(owned_.size(), nullptr);
  for (size_t r = 0; r < owned_.size(); ++r) peers_[r] = owned_[r].get();
  transport_of_.resize(owned_.size(), 0);
  wait_fds_.clear();
  for (const auto& t : transports_) {
    if (t->wait_fd() < 0) {
      wait_fds_.clear();
      break;
    }
    wait_fds_.push_back(t->wait_fd());
  }
}

namespace {

// connect()'s first phase: every transport of the preference list that comes up here, and this
// rank's card (its addresses, host and CPUs).
struct BroughtUp {
  std::vector<std::unique_ptr<transport::Transport>> up;
  std::vector<std::string> families;  // by index in up
  PublishedLinks mine;
  std::string not_up;  // why the others did not come up
};

// With no transport up, the peers learn why at once from this rank's card (transport_choice.h).
Status give_up(const LinkSetup& s, Store& store, PublishedLinks& mine, Status why) {
  mine.failed = why.message();
  try {
    if (s.size > 1) store.set("addr/" + std::to_string(s.rank), links_card(mine));
  } catch (const Error&) {
    // The store is gone too: the peers' own waits end with that; this rank's reason stands.
  }
  return why;
}

Result<BroughtUp> bring_up(const LinkSetup& s, Store& store, const RankCpus& local) {
  ASSIGN_OR_RETURN(std::vector<TransportPick> wishes, preference_list(s.env));
  const bool is_auto = s.env.transport == "auto";
  transport::TransportOptions options;
  options.env = s.env;
  options.master_addr = s.master_addr;
  options.inproc_fabric = s.inproc_fabric;
  options.secret = s.secret;
  BroughtUp b;
  b.mine.host = local.host;
  b.mine.cpus = local.cpus;
  b.mine.setting = s.env.transport;
  for (const TransportPick& w : wishes) {
    // A second engine of a family already up ("tcp,tcp-poll") is its fallback: a peer is reached
    // through one listener of each family, the first.
    if (std::find(b.families.begin(), b.families.end(), w.family) != b.families.end()) continue;
    auto made = transport::create_transport(w.create, options);
    if (!made.is_ok()) {
      if (wishes.size() == 1) return give_up(s, store, b.mine, made.status());  // the one transport asked for
      if (!b.not_up.empty()) b.not_up += "; ";
      b.not_up += w.family + ": " + made.status().message();
      // auto tries what may be missing; a list named it, so its absence deserves a warning.
      const LogLevel level = is_auto ? LogLevel::info : LogLevel::warn;
      if (log_enabled(level)) {
        log_line(level, "transport: rank " + std::to_string(s.rank) + " goes on without " + w.family + " (" +
                            made.status().message() + ")");
      }
      continue;
    }
    std::unique_ptr<transport::Transport> t = std::move(made).value();
    if (s.size > 1) {
      ASSIGN_OR_RETURN(std::string address, t->listen());
      if (address.find('\n') != std::string::npos) {
        return internal_error("transport " + w.family + " on rank " + std::to_string(s.rank) +
                              " returned an address with a line break, which the store's card cannot carry");
      }
      b.mine.addresses.push_back({w.family, address, t->is_host_local(address)});
    }
    b.up.push_back(std::move(t));
    b.families.push_back(w.family);
  }
  if (b.up.empty()) {
    return give_up(s, store, b.mine,
                   invalid_argument("rank " + std::to_string(s.rank) + ": no transport of BRAID_TRANSPORT='" +
                                    s.env.transport + "' could be brought up here (" + b.not_up + ")"));
  }
  return b;
}

// connect()'s second phase: publishes this rank's card and reads every other rank's.
Result<std::vector<PublishedLinks>> exchange_cards(const LinkSetup& s, Store& store, const PublishedLinks& mine) {
  std::vector<PublishedLinks> all(static_cast<size_t>(s.size));
  try {
    store.set("addr/" + std::to_string(s.rank), links_card(mine));
    RETURN_IF_ERROR(wait_for_ranks(store, "addr", "transport addresses", s.rank, s.size));  // saying who is late
    for (int r = 0; r < s.size; ++r) {
      if (r == s.rank) {
        all[static_cast<size_t>(r)] = mine;
        continue;
      }
      ASSIGN_OR_RETURN(all[static_cast<size_t>(r)], parse_links_card(store.get("addr/" + std::to_string(r)), r));
    }
    store.add("read", 1);  // this rank needs no other rank's keys any more (leave_store)
  } catch (const Error& e) {
    return Status(e.code(), std::string("exchanging transport addresses: ") + e.what());
  }
  return all;
}

}  // namespace

Result<std::unique_ptr<PeerLinks>> PeerLinks::connect(const LinkSetup& s, Store& store, Deadline deadline) {
  const RankCpus local = local_rank_cpus();
  ASSIGN_OR_RETURN(BroughtUp brought, bring_up(s, store, local));
  std::unique_ptr<PeerLinks> links(new PeerLinks());
  links->rank_ = s.rank;
  links->owned_.resize(static_cast<size_t>(s.size));
  links->transport_of_.assign(static_cast<size_t>(s.size), 0);
  if (s.size == 1) {
    brought.up.resize(1);  // no peer: the first is kept, to describe and for its capabilities
    links->transports_ = std::move(brought.up);
    links->rank_cpus_ = {local};
    links->finish_setup();
    return links;
  }
  ASSIGN_OR_RETURN(std::vector<PublishedLinks> all, exchange_cards(s, store, brought.mine));
  auto choice = choose_transports(all, s.rank);
  if (!choice.is_ok()) {
    return choice.status().with_context("rank " + std::to_string(s.rank) + " choosing a transport per peer: ");
  }
  RETURN_IF_ERROR(links->connect_peers(s, all, choice.value(), brought.up, brought.families, deadline));
  for (size_t r = 0; r < all.size(); ++r) {
    links->hosts_.push_back(all[r].host);
    const bool watched = static_cast<int>(r) != s.rank && links->owned_[r] != nullptr &&
                         links->transports_[links->transport_of_[r]]->capabilities().watches_peer_cpu;
    links->rank_cpus_.push_back({all[r].host, all[r].cpus, watched});
  }
  std::vector<int> order = collectives::ring_order(links->hosts_);
  if (s.env.ring_order == "host" && !collectives::is_identity(order)) links->ring_order_ = std::make_shared<const std::vector<int>>(std::move(order));
  links->all_host_local_ = every_link_host_local(all);
  links->finish_setup();
  return links;
}

Status PeerLinks::connect_peers(const LinkSetup& s, const std::vector<PublishedLinks>& all,
                                const std::vector<std::string>& chosen,
                                std::vector<std::unique_ptr<transport::Transport>>& up,
                                const std::vector<std::string>& families, const Deadline& deadline) {
  // Lower ranks connect to higher ones and accept from lower ones, in rank order, whatever
  // the transport: each rank takes its pairs in increasing (lower, higher) order, so the
  // smallest pair not yet connected always has both ends at it (see transport/common/handshake_format.h).
  std::vector<bool> used(up.size(), false);
  for (int r = 0; r < s.size; ++r) {
    if (r == s.rank) continue;
    const std::string& family = chosen[static_cast<size_t>(r)];
    const size_t t = static_cast<size_t>(std::find(families.begin(), families.end(), family) - families.begin());
    if (t == families.size()) {
      return internal_error("rank " + std::to_string(s.rank) + " chose " + family + " for rank " + std::to_string(r) +
                            " without having brought it up");
    }
    const transport::PeerIdentity who{s.comm_id, s.rank, r};
    std::unique_ptr<transport::Connection>& c = owned_[static_cast<size_t>(r)];
    if (r > s.rank) {
      const std::string* address = nullptr;
      for (const auto& a : all[static_cast<size_t>(r)].addresses) {
        if (a.family == family) {
          address = &a.address;
          break;
        }
      }
      ASSIGN_OR_RETURN(c, up[t]->connect(*address, who, deadline));
    } else {
      ASSIGN_OR_RETURN(c, up[t]->accept(who, deadline));
    }
    transport_of_[static_cast<size_t>(r)] = t;
    used[t] = true;
  }
  // Only the transports some peer uses stay (and are polled).
  std::vector<size_t> index(up.size(), 0);
  for (size_t t = 0; t < up.size(); ++t) {
    if (!used[t]) continue;
    index[t] = transports_.size();
    transports_.push_back(std::move(up[t]));
  }
  for (auto& t : transport_of_) t = index[t];
  up.clear();
  return Status::ok();
}

void PeerLinks::set_spin_us(int us) {
  for (const auto& t : transports_) t->set_spin_us(us);
}

std::string PeerLinks::transport_name(int peer) const {
  if (peer < 0 || peer >= size() || peers_[static_cast<size_t>(peer)] == nullptr) return "";
  return transports_[transport_of_[static_cast<size_t>(peer)]]->name();
}

transport::Capabilities PeerLinks::capabilities() const {
  bool any = false;
  transport::Capabilities all;
  for (const transport::Connection* c : peers_) {
    if (c == nullptr) continue;
    const transport::Capabilities x = c->capabilities();
    if (!any) {
      all = x;
      any = true;
      continue;
    }
    all.host_memory = all.host_memory && x.host_memory;
    all.cuda_memory = all.cuda_memory && x.cuda_memory;
    all.dmabuf = all.dmabuf && x.dmabuf;
    all.zero_copy_send = all.zero_copy_send && x.zero_copy_send;
    all.needs_registration = all.needs_registration || x.needs_registration;
    all.max_in_flight = std::min(all.max_in_flight, x.max_in_flight);
  }
  if (!any && !transports_.empty()) return transports_.front()->capabilities();
  return all;
}

std::string PeerLinks::describe() const {
  std::string s;
  for (size_t t = 0; t < transports_.size(); ++t) {
    std::string whom;
    for (size_t r = 0; r < peers_.size(); ++r) {
      if (peers_[r] == nullptr || transport_of_[r] != t) continue;
      if (!whom.empty()) whom += ',';
      whom += std::to_string(r);
    }
    if (!s.empty()) s += "; ";
    s += transports_[t]->describe();
    if (!whom.empty()) s += " to peers " + whom;
  }
  if (!hosts_.empty()) {
    // Null: rank order, which is also the host order or what BRAID_RING_ORDER=rank asked for.
    std::vector<int> order(hosts_.size());
    for (size_t v = 0; v < order.size(); ++v) order[v] = ring_order_ ? (*ring_order_)[v] : static_cast<int>(v);
    s += "; ring " + collectives::describe_ring(order, hosts_) + (ring_order_ ? " (ordered by host)" : "");
  }
  return s;
}

Status PeerLinks::poll(std::vector<transport::Completion>& out, std::chrono::microseconds timeout) {
  if (transports_.size() == 1) return transports_.front()->poll(out, timeout);
  for (const auto& t : transports_) RETURN_IF_ERROR(t->poll(out, std::chrono::microseconds(0)));
  if (!out.empty() || timeout.count() <= 0 || transports_.empty()) return Status::ok();
  if (!wait_fds_.empty()) {
    bool armed = true;
    for (const auto& t : transports_) armed = t->arm_wait() && armed;
    if (!armed) {  // news while arming: taken now instead of after a sleep
      for (const auto& t : transports_) RETURN_IF_ERROR(t->poll(out, std::chrono::microseconds(0)));
      return Status::ok();
    }
    // One sleep on all of them; what woke it is then taken without blocking.
    std::vector<pollfd> fds;
    fds.reserve(wait_fds_.size());
    for (int fd : wait_fds_) fds.push_back(pollfd{fd, POLLIN, 0});
    const timespec ts{static_cast<time_t>(timeout.count() / 1000000), static_cast<long>(timeout.count() % 1000000) * 1000};
    if (::ppoll(fds.data(), fds.size(), &ts, nullptr) < 0 && errno != EINTR) {
      return system_error("ppoll on the transports' descriptors", errno);
    }
    for (const auto& t : transports_) RETURN_IF_ERROR(t->poll(out, std::chrono::microseconds(0)));
    return Status::ok();
  }
  // A transport without a descriptor: it sleeps a short slice, the others are seen after it.
  for (const auto& t : transports_) {
    if (t->wait_fd() >= 0) continue;
    return t->poll(out, std::min<std::chrono::microseconds>(timeout, kSliceWithoutFd));
  }
  return Status::ok();
}

Status PeerLinks::drive(LinkWork& work, const Deadline& deadline, std::chrono::microseconds slice) {
  return drive_known(work, deadline, slice);
}

void PeerLinks::drain(FunctionRef<size_t()> outstanding, FunctionRef<void(const transport::Completion&)> take,
                      std::chrono::milliseconds bound) {
  const Deadline until = Deadline::after(bound);
  std::vector<transport::Completion> done;
  while (outstanding() > 0 && !until.expired()) {
    done.clear();
    if (!poll(done, std::chrono::milliseconds(10)).is_ok()) break;
    for (const auto& c : done) take(c);
  }
}

void PeerLinks::close(int peer) {
  if (peer >= 0 && peer < size() && peers_[static_cast<size_t>(peer)] != nullptr) peers_[static_cast<size_t>(peer)]->close();
}

void PeerLinks::close_all() {
  for (transport::Connection* c : peers_) {
    if (c != nullptr) c->close();
  }
}

std::vector<int> PeerLinks::ended_peers() const {
  std::vector<int> out;
  for (size_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r] != nullptr && peers_[r]->peer_ended()) out.push_back(static_cast<int>(r));
  }
  return out;
}

std::string PeerLinks::peer_host(int peer) const {
  if (peer < 0 || peer >= size() || peers_[static_cast<size_t>(peer)] == nullptr) return "";
  const auto p = static_cast<size_t>(peer), me = static_cast<size_t>(rank_);
  if (p < hosts_.size() && me < hosts_.size() && hosts_[p] == hosts_[me]) return "this host";
  std::string a = peers_[p]->peer_address();
  const size_t colon = a.rfind(':');
  if (colon != std::string::npos && colon + 1 < a.size() && a.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
    a.resize(colon);
  }
  return a;
}

std::vector<std::pair<int, uint64_t>> PeerLinks::retransmits() const {
  std::vector<std::pair<int, uint64_t>> out;
  for (size_t r = 0; r < peers_.size(); ++r) {
    const uint64_t n = peers_[r] != nullptr ? peers_[r]->retransmissions() : 0;
    if (n > 0) out.emplace_back(static_cast<int>(r), n);
  }
  return out;
}

void PeerLinks::wake() {
  for (const auto& t : transports_) t->wake();
}

}  // namespace braid
