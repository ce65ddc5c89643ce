// Forming a round with --nnodes MIN:MAX, as torchrun's c10d rendezvous forms one (its
// DynamicRendezvousHandler). The keys are listed in node_rendezvous.h.
//
// Words: a node's id is its rank in the job (0 serves the store, with etcd the first to arrive;
// the others take ids in arrival order, never reused); a round's members are the node ids it
// started with; a node that found a round closed without it is waiting (for the next round).
//
// A round's membership is one value, round/<R>/state, and every change to it is a compare_set
// of the whole value, so two nodes changing it at once cannot both win: the loser reads the new
// value and decides again. Node 0 opens the round ("open:0"; with etcd, the first node to look
// once the previous round failed, and the round's leader is settled after it closed: see
// settle_round_leader below); a node finding it open with room
// adds itself; a member closes it ("closed:<ids>") once MAX nodes joined, or once
// last_call_timeout passed since it first saw MIN of them (each member keeps its own clock:
// the earliest to see MIN closes first, never sooner than last_call_timeout after MIN joined).
// A node that finds the round closed without it adds one to round/<R>/waiting (the running
// members then end the round while it has room: poll_job) and looks at round R+1. Every wait is
// bounded by --rdzv-timeout-s and SIGINT/SIGTERM, and ends when a node ended the job.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <thread>

#include "tools/braidrun/node_rendezvous.h"
#include "tools/braidrun/output_relay.h"

namespace braid::braidrun {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLookEvery{50};

// round/<R>/state: "open:<id>,<id>,..." or "closed:<id>,...".
struct RoundState {
  bool closed = false;
  std::vector<int> ids;
  bool has(int id) const { return std::find(ids.begin(), ids.end(), id) != ids.end(); }
};

std::string format_state(const RoundState& s) {
  std::string v = s.closed ? "closed:" : "open:";
  for (size_t i = 0; i < s.ids.size(); ++i) {
    if (i > 0) v += ',';
    v += std::to_string(s.ids[i]);
  }
  return v;
}

RoundState parse_state(const std::string& v) {
  RoundState s;
  s.closed = v.rfind("closed:", 0) == 0;
  for (size_t from = v.find(':') + 1; from < v.size();) {
    size_t comma = v.find(',', from);
    if (comma == std::string::npos) comma = v.size();
    s.ids.push_back(std::atoi(v.c_str() + from));
    from = comma + 1;
  }
  return s;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string list_ids(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) {
    if (!out.empty()) out += ", ";
    out += std::to_string(id);
  }
  return out.empty() ? "none" : out;
}

}  // namespace

Status NodeRendezvous::form_elastic_round(bool first) {
  const std::vector<int> previous = members_;  // for the error naming who did not come back
  const Deadline deadline = Deadline::after_seconds(rdzv_timeout_s_);
  if (node_rank_ == 0 && !etcd_) {
    ranks_job_id_ = (auth_.job_id.empty() ? run_id_ : auth_.job_id) + "/round" + std::to_string(round_);
    RETURN_IF_ERROR(start_round_store());
    // The round's store first: whoever sees the round open may read it.
    RETURN_IF_ERROR(ask<bool>("opening round " + std::to_string(round_),
                              "the job's store at " + store_->address() + " to open round " + std::to_string(round_),
                              [store = round_key("store"), port = std::to_string(round_server_->port()),
                               restarts = round_key("restarts"), count = std::to_string(restart_count_),
                               state = round_key("state"), at = key("round_at"), round = std::to_string(round_)](Store& s) {
                                s.set(store, port);
                                s.set(restarts, count);
                                s.compare_set(state, "", "open:0");
                                s.set(at, round);
                                return true;
                              })
                        .status());
  } else if (first) {
    // Arriving late: the newest round node 0 opened (or round 0, not opened yet).
    ASSIGN_OR_RETURN(int at, ask<int>("finding the current round", "the job's store at " + store_->address() +
                                                                        " to say which round is current",
                                      [k = key("round_at")](Store& s) {
                                        return s.check({k}) ? std::atoi(s.get(k).c_str()) : 0;
                                      }));
    round_ = at;
  }
  std::optional<std::pair<int, RoundState>> passed_over;  // the last round that started without this node
  // When this node first saw MIN members in the round (max: not yet).
  Clock::time_point min_seen = Clock::time_point::max();
  ProgressLine progress;
  for (;;) {
    if (auto sig = take_stop_signal(signal_fd_)) return aborted_by(*sig);
    const std::string r = std::to_string(round_);
    const std::string waiting_for = "nodes to join round " + r + " of job '" + run_id_ + "' (--nnodes " +
                                    std::to_string(min_nnodes_) + ":" + std::to_string(nnodes_) + ") at the store " +
                                    store_->address();
    progress.tick(waiting_for);
    const bool beat_now = beat_due();
    struct Look {
      std::string ended;               // node id that ended the job, or ""
      std::optional<std::string> state;
    };
    ASSIGN_OR_RETURN(Look look, ask<Look>("forming round " + r, waiting_for,
                                          [beat_now, mine = key("heartbeat/" + std::to_string(node_rank_)),
                                           ended = key("ended"), state = round_key("state")](Store& s) {
                                            Look l;
                                            if (beat_now) s.add(mine, 1);
                                            if (s.check({ended})) l.ended = s.get(ended);
                                            if (s.check({state})) l.state = s.get(state);
                                            return l;
                                          }));
    if (!look.ended.empty()) {
      return Status(ErrorCode::aborted, "round " + r + " of job '" + run_id_ + "' cannot start: node " + look.ended +
                                            " ended the job (see its output)");
    }
    if (!look.state && etcd_) {
      // etcd: no node serves the job, so the first node to look opens the round, once the
      // previous one ended (a node waiting for a running round must not open the next alone).
      const std::string previous_failed =
          round_ == 0 ? "" : key("round/" + std::to_string(round_ - 1) + "/failed");
      ASSIGN_OR_RETURN(bool opened, ask<bool>("opening round " + r, waiting_for,
                                              [state = round_key("state"), at = key("round_at"), round = r,
                                               previous_failed, v = "open:" + std::to_string(node_rank_)](Store& s) {
                                                if (!previous_failed.empty() && !s.check({previous_failed})) return false;
                                                if (s.compare_set(state, "", v) == v) s.set(at, round);
                                                return true;
                                              }));
      if (opened) continue;  // look again at once: this node's opening or another's won
    }
    if (look.state) {
      RoundState st = parse_state(*look.state);
      const bool in = st.has(node_rank_);
      if (st.closed && in) {
        members_ = st.ids;
        break;
      }
      std::optional<RoundState> next;  // the change this node asks for
      if (st.closed) {
        // Started without this node. While it has room, the running members end it for us.
        // Left out, this node is no member any more: giving up would end nothing (leave()).
        passed_over = std::make_pair(round_, st);
        members_.clear();
        if (static_cast<int>(st.ids.size()) < nnodes_) {
          RETURN_IF_ERROR(ask<bool>("waiting for round " + std::to_string(round_ + 1), waiting_for,
                                    [k = round_key("waiting")](Store& s) {
                                      s.add(k, 1);
                                      return true;
                                    })
                              .status());
          say("round " + r + " runs with node(s) " + list_ids(st.ids) + "; node " + std::to_string(node_rank_) +
              " joins the next round");
        }
        min_seen = Clock::time_point::max();
        ++round_;
        continue;
      } else if (!in && static_cast<int>(st.ids.size()) < nnodes_) {
        next = st;
        next->ids.push_back(node_rank_);
      } else if (in && static_cast<int>(st.ids.size()) >= min_nnodes_) {
        if (min_seen == Clock::time_point::max()) min_seen = Clock::now();
        const bool last_call_over = Clock::now() - min_seen >= std::chrono::duration<double>(last_call_s_);
        if (static_cast<int>(st.ids.size()) >= nnodes_ || last_call_over) {
          next = st;
          next->closed = true;
        }
      }
      if (next) {
        RETURN_IF_ERROR(ask<bool>("joining round " + r, waiting_for,
                                  [k = round_key("state"), old = *look.state, v = format_state(*next)](Store& s) {
                                    s.compare_set(k, old, v);
                                    return true;
                                  })
                            .status());
        continue;  // look again at once: this change or another won
      }
    }
    if (deadline.expired()) {
      const std::vector<int> joined = look.state ? parse_state(*look.state).ids : std::vector<int>{};
      std::vector<int> missing;
      for (int id : previous) {
        if (std::find(joined.begin(), joined.end(), id) == joined.end()) missing.push_back(id);
      }
      if (passed_over) {
        return timeout_error("node " + std::to_string(node_rank_) + " found no place in job '" + run_id_ + "' within " +
                             seconds_text(rdzv_timeout_s_) + " s: round " + std::to_string(passed_over->first) +
                             " has node(s) " + list_ids(passed_over->second.ids) + " (--nnodes MAX " +
                             std::to_string(nnodes_) + "); a node joins at the next round when a round has room");
      }
      const std::string gone = missing.empty() ? "" : "; nodes of the previous round missing: " + describe_nodes(missing);
      return timeout_error("round " + r + " of job '" + run_id_ + "' at " + store_->address() + " did not start within " +
                           seconds_text(rdzv_timeout_s_) + " s: " + std::to_string(joined.size()) +
                           " node(s) joined (" + list_ids(joined) + "), fewer than --nnodes MIN " +
                           std::to_string(min_nnodes_) + gone + ". Start more nodes, lower MIN, or raise --rdzv-timeout-s");
    }
    std::this_thread::sleep_for(kLookEvery);
  }
  std::sort(members_.begin(), members_.end());
  group_rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), node_rank_) - members_.begin());
  peer_beats_ = std::make_shared<std::map<int, PeerBeat>>();
  for (int id : members_) {
    if (id != node_rank_) (*peer_beats_)[id] = PeerBeat{.beats = -1, .changed = Clock::now()};
  }
  ranks_job_id_ = (auth_.job_id.empty() ? run_id_ : auth_.job_id) + "/round" + std::to_string(round_);
  if (etcd_) {
    ASSIGN_OR_RETURN(RoundLead lead, settle_round_leader());
    if (lead == RoundLead::started) return Status::ok();
    // The leader was lost before it opened the round's store: the round failed before its ranks
    // started, and the next one forms without it (counted as a restart, as a lost node is).
    if (lead == RoundLead::failed) {
      if (restart_count_ >= max_restarts_) {
        return Status(ErrorCode::aborted, "round " + std::to_string(round_) + " of job '" + run_id_ +
                                              "' failed before its ranks started, and no restarts are left (--max-restarts " +
                                              std::to_string(max_restarts_) + ")");
      }
      ++restart_count_;
    }
    say("round " + std::to_string(round_) +
        (lead == RoundLead::failed ? " failed" : " ended for a membership change") + " before its ranks started; node " +
        std::to_string(node_rank_) + " meets the others in the next round");
    ++round_;
    return form_elastic_round(false);
  }
  if (serving()) {
    ranks_port_ = round_server_->port();
  } else {
    // The round's store, and the job's count of restarts so far as node 0 (in every round, so it
    // saw every failure) counts them: a node that joined late takes it up.
    ASSIGN_OR_RETURN(std::string v, ask<std::string>("reading the store of round " + std::to_string(round_),
                                                     "the job's store at " + store_->address(),
                                                     [port = round_key("store"), restarts = round_key("restarts")](Store& s) {
                                                       return s.get(port) + "\n" + s.get(restarts);
                                                     }));
    ranks_port_ = static_cast<uint16_t>(std::atoi(v.c_str()));
    restart_count_ = std::atoi(v.c_str() + v.find('\n') + 1);
  }
  return Status::ok();
}

Result<NodeRendezvous::RoundLead> NodeRendezvous::settle_round_leader() {
  const int leader = members_.front();
  const std::string r = std::to_string(round_);
  const std::string lead_key = round_key("leader");
  if (leader == node_rank_) {
    RETURN_IF_ERROR(start_round_store());
    torch_port_hold_.reset();  // the previous round's rank 0 is gone: its port goes back
    ASSIGN_OR_RETURN(torch_port_hold_, PortReservation::any_free());
    torch_port_ = torch_port_hold_->port();
    ranks_port_ = round_server_->port();
    master_addr_ = serve_host_;
    RETURN_IF_ERROR(ask<bool>("leading round " + r, "the job's store at " + store_->address() + " to record round " + r +
                                                        "'s leader",
                              [lead_key, v = serve_host_ + "\n" + std::to_string(ranks_port_) + "\n" +
                                             std::to_string(torch_port_) + "\n" + std::to_string(restart_count_)](Store& s) {
                                s.set(lead_key, v);
                                return true;
                              })
                        .status());
    return RoundLead::started;
  }
  round_server_.reset();
  torch_port_hold_.reset();
  const std::string waiting_for = "node " + std::to_string(leader) + ", the leader of round " + r +
                                  ", to open the round's store (store " + store_->address() + ")";
  const Deadline deadline = Deadline::after_seconds(rdzv_timeout_s_);
  int64_t leader_beats = -1;
  Clock::time_point changed = Clock::now();
  ProgressLine progress;
  for (;;) {
    if (auto sig = take_stop_signal(signal_fd_)) return aborted_by(*sig);
    progress.tick(waiting_for);
    const bool beat_now = beat_due();
    struct Look {
      std::optional<std::string> lead, failed;
      int64_t beats = 0;
    };
    ASSIGN_OR_RETURN(Look look, ask<Look>("waiting for round " + r + "'s leader", waiting_for,
                                          [beat_now, mine = key("heartbeat/" + std::to_string(node_rank_)), lead_key,
                                           failed = round_key("failed"),
                                           theirs = key("heartbeat/" + std::to_string(leader))](Store& s) {
                                            Look l;
                                            if (beat_now) s.add(mine, 1);
                                            if (s.check({lead_key})) l.lead = s.get(lead_key);
                                            if (!l.lead && s.check({failed})) l.failed = s.get(failed);
                                            l.beats = s.add(theirs, 0);
                                            return l;
                                          }));
    if (look.lead) {
      const std::string& v = *look.lead;  // "<address>\n<store port>\n<MASTER_PORT>\n<restarts>"
      const size_t a = v.find('\n'), b = v.find('\n', a + 1), c = v.find('\n', b + 1);
      if (a == std::string::npos || b == std::string::npos || c == std::string::npos) {
        return Status(ErrorCode::internal, "round " + r + "'s leader record is malformed: '" + v + "'");
      }
      master_addr_ = v.substr(0, a);
      ranks_port_ = static_cast<uint16_t>(std::atoi(v.c_str() + a + 1));
      torch_port_ = static_cast<uint16_t>(std::atoi(v.c_str() + b + 1));
      restart_count_ = std::atoi(v.c_str() + c + 1);  // a node that joined late takes it up
      return RoundLead::started;
    }
    if (look.failed) return is_rejoin_record(*look.failed) ? RoundLead::rejoin : RoundLead::failed;
    if (look.beats != leader_beats) leader_beats = look.beats, changed = Clock::now();
    if (Clock::now() - changed > lost_after_) {
      Status reported = report_lost(leader, std::chrono::duration<double>(Clock::now() - changed).count());
      if (!reported.is_ok()) return reported;
      continue;  // the next look finds the round failed (this report or another's)
    }
    if (deadline.expired()) {
      return timeout_error("round " + r + " of job '" + run_id_ + "': its leader, " + describe_nodes({leader}) +
                           ", did not open the round's store within " + seconds_text(rdzv_timeout_s_) +
                           " s while still beating (store " + store_->address() + "); raise --rdzv-timeout-s");
    }
    std::this_thread::sleep_for(kLookEvery);
  }
}

}  // namespace braid::braidrun
