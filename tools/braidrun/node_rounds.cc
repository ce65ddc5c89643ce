// NodeRendezvous, round by round: meeting for a round, watching it while the ranks run, ending
// it (a restart, or the end of the job) and the summary of every failure. The keys are listed
// in node_rendezvous.h.
//
// A round ends on every node once its ranks ended. It failed when a node wrote round/<R>/failed
// (the first failure wins the compare_set; with --nnodes MIN:MAX a lost node and a node
// waiting to join write it too, the latter as "rejoin"); it succeeded when every node wrote
// done/<n> and no failure is recorded. A node reads done/* before failed, and a failing node
// writes failed before its done, so a node that finds every done set also finds any failure.
// With restarts left and a failure that allows one (or a rejoin), every node meets again in
// round R+1; otherwise every node says it leaves (left/<n>; with MIN:MAX also `ended`) and
// exits, the serving one once the others have left. A node waiting to meet in the next round
// gives up at once when another node left.
#include <unistd.h>

#include <cstdio>
#include <set>
#include <thread>

#include "tools/braidrun/node_rendezvous.h"
#include "tools/braidrun/output_relay.h"
#include "tools/braidrun/rank_exit.h"

namespace braid::braidrun {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLookEvery{100};

// round/<R>/failed: "<exit code>\n<restart|stop|rejoin>\n<what failed>". rejoin: the round
// ended for a membership change, which restarts every rank without counting as a restart.
struct FailedValue {
  int exit_code = 1;
  bool restart = false;
  bool rejoin = false;
  std::string what;
};

std::string format_failed(int exit_code, bool restart, const std::string& what) {
  return std::to_string(exit_code) + "\n" + (restart ? "restart" : "stop") + "\n" + what;
}

std::string format_rejoin(const std::string& what) { return "0\nrejoin\n" + what; }

FailedValue parse_failed(const std::string& v) {
  FailedValue f;
  size_t a = v.find('\n');
  size_t b = a == std::string::npos ? a : v.find('\n', a + 1);
  f.exit_code = std::atoi(v.c_str());
  if (f.exit_code == 0) f.exit_code = 1;
  if (b == std::string::npos) {
    f.what = a == std::string::npos ? v : v.substr(a + 1);
    return f;
  }
  f.rejoin = v.compare(a + 1, b - a - 1, "rejoin") == 0;
  f.restart = f.rejoin || v.compare(a + 1, b - a - 1, "restart") == 0;
  f.what = v.substr(b + 1);
  return f;
}

// "node 2 (host h, braidrun pid 77) lost in round 1: no heartbeat for 1.5 s", for the failure
// records; `node_key` is the node's node/<n> key.
std::string lost_node_text(Store& s, const std::string& node_key, int n, int round, double silent_s) {
  std::string who = "node " + std::to_string(n);
  if (s.check({node_key})) {
    const std::string info = s.get(node_key);  // "<host>\n<pid>\n..."
    const size_t nl = info.find('\n');
    const size_t nl2 = nl == std::string::npos ? nl : info.find('\n', nl + 1);
    who += " (host " + info.substr(0, nl) +
           (nl == std::string::npos ? "" : ", braidrun pid " + info.substr(nl + 1, nl2 - nl - 1)) + ")";
  }
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", silent_s);
  return who + " lost in round " + std::to_string(round) + ": no heartbeat for " + secs + " s";
}

std::string local_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

}  // namespace

bool is_rejoin_record(const std::string& failed_value) { return parse_failed(failed_value).rejoin; }

bool NodeRendezvous::beat_due() {
  if (Clock::now() - last_beat_ < beat_every_) return false;
  last_beat_ = Clock::now();
  return true;
}

void NodeRendezvous::beat(Store& store) {
  if (beat_due()) store.add(key("heartbeat/" + std::to_string(node_rank_)), 1);
}

Status NodeRendezvous::start_round_store() {
  round_server_.reset();  // the previous round's: nothing of that round may use a store any more
  try {
    round_server_ = TcpStoreServer::start(serve_host_, 0, {.secret = auth_.secret, .job_id = ranks_job_id_});
  } catch (const Error& e) {
    return Status(e.code(), "cannot serve the store of round " + std::to_string(round_) + " on " + serve_host_ +
                                ": " + e.what());
  }
  return Status::ok();
}

Status NodeRendezvous::share_torch_port() {
  torch_port_hold_.reset();  // the previous round's rank 0 is gone: its port goes back
  if (node_rank_ == 0) {
    auto held = PortReservation::any_free();
    if (!held.is_ok()) return held.status();
    torch_port_hold_ = std::move(*held);
    torch_port_ = torch_port_hold_->port();
  }
  if (nnodes_ == 1) return Status::ok();
  const std::string k = round_key("torch_port");
  if (node_rank_ == 0) {
    return ask<bool>("publishing MASTER_PORT", "the job's store at " + store_->address() + " to record MASTER_PORT",
                     [k, v = std::to_string(torch_port_)](Store& s) {
                       s.set(k, v);
                       return true;
                     })
        .status();
  }
  ASSIGN_OR_RETURN(std::string port,
                   ask<std::string>("reading MASTER_PORT", "node 0 to pick MASTER_PORT of round " + std::to_string(round_) +
                                                               " (store " + store_->address() + ")",
                                    [k](Store& s) { return s.get(k); }));
  torch_port_ = static_cast<uint16_t>(std::atoi(port.c_str()));
  return Status::ok();
}

Status NodeRendezvous::meet_round() {
  const bool first = !met_once_;
  if (met_once_) ++round_;
  met_once_ = true;
  poll_.reset();  // a question of the previous round still in flight answers nobody
  if (elastic()) {
    RETURN_IF_ERROR(form_elastic_round(first));
    RETURN_IF_ERROR(check_members_agree());
    return etcd_ ? Status::ok() : share_torch_port();  // etcd: the round's leader keeps it
  }
  return meet_fixed_round();
}

Status NodeRendezvous::meet_fixed_round() {
  const int round = round_;
  if (max_restarts_ == 0 && !etcd_) {
    ranks_port_ = master_port_;
    ranks_job_id_ = auth_.job_id;
    return share_torch_port();
  }
  const std::string r = std::to_string(round);
  ranks_job_id_ = (auth_.job_id.empty() ? run_id_ : auth_.job_id) + "/round" + r;
  std::string port_text;
  if (serving()) {
    RETURN_IF_ERROR(start_round_store());
    port_text = std::to_string(round_server_->port());
  }
  const std::string waiting_for = "the other nodes of job '" + run_id_ + "' to reach round " + r + " at the store " +
                                  store_->address();
  RETURN_IF_ERROR(ask<bool>("joining round " + r, waiting_for,
                            [node = round_key("node/" + std::to_string(node_rank_)), store = round_key("store"),
                             port_text](Store& s) {
                              if (!port_text.empty()) s.set(store, port_text);
                              s.set(node, "1");
                              return true;
                            })
                      .status());
  std::vector<std::string> keys = {round_key("store")}, left;
  for (int n = 0; n < nnodes_; ++n) {
    keys.push_back(round_key("node/" + std::to_string(n)));
    left.push_back(key("left/" + std::to_string(n)));
  }
  Deadline deadline = Deadline::after_seconds(rdzv_timeout_s_);
  ProgressLine progress;
  for (;;) {
    if (auto sig = take_stop_signal(signal_fd_)) return aborted_by(*sig);
    progress.tick(waiting_for);
    const bool beat_now = beat_due();
    // -1: every node is here; a node rank: that node left the job (it ended it, e.g. on SIGTERM,
    // while this one saw a failure that allows a restart), so it will not come; else -2.
    ASSIGN_OR_RETURN(int look, ask<int>("waiting for round " + r, waiting_for,
                                        [keys, left, beat_now, mine = key("heartbeat/" + std::to_string(node_rank_))](
                                            Store& s) {
                                          if (beat_now) s.add(mine, 1);
                                          if (s.check(keys)) return -1;
                                          for (size_t n = 0; n < left.size(); ++n) {
                                            if (s.check({left[n]})) return static_cast<int>(n);
                                          }
                                          return -2;
                                        }));
    if (look == -1) break;
    if (look >= 0) {
      return Status(ErrorCode::aborted, "round " + r + " of job '" + run_id_ + "' cannot start: node " +
                                            std::to_string(look) + " ended the job (see its output)");
    }
    if (deadline.expired()) {
      ASSIGN_OR_RETURN(std::string missing, ask<std::string>("waiting for round " + r, waiting_for, [keys](Store& s) {
                         std::string m;
                         for (size_t i = 1; i < keys.size(); ++i) {
                           if (!s.check({keys[i]})) m += (m.empty() ? "" : ", ") + std::to_string(i - 1);
                         }
                         return m.empty() ? std::string("none (the store of the round was not opened)") : m;
                       }));
      return timeout_error("round " + r + " of job '" + run_id_ + "' at " + store_->address() + ": not every node " +
                           "came back within " + std::to_string(rdzv_timeout_s_) + " s; missing node rank(s) " +
                           missing + ". A node whose braidrun ended cannot rejoin (--nnodes is fixed)");
    }
    std::this_thread::sleep_for(kLookEvery);
  }
  if (serving()) {
    ranks_port_ = round_server_->port();
  } else {
    ASSIGN_OR_RETURN(std::string port, ask<std::string>("reading the store of round " + r, waiting_for,
                                                        [k = round_key("store")](Store& s) { return s.get(k); }));
    ranks_port_ = static_cast<uint16_t>(std::atoi(port.c_str()));
  }
  return share_torch_port();
}

// The store is asked on a helper thread, one question at a time: a store that stopped
// answering must not stop braidrun from relaying its ranks' output and obeying SIGINT/SIGTERM
// (the call itself ends with the store's timeout, which then stops the job).
std::optional<ExternalStop> NodeRendezvous::poll_job(bool beat_only) {
  if (nnodes_ == 1) return std::nullopt;
  if (poll_ && !poll_->done.load(std::memory_order_acquire)) return std::nullopt;
  if (poll_) {
    std::shared_ptr<PendingPoll> p = std::move(poll_);
    if (!p->status.is_ok()) return ExternalStop{"lost the job's store (" + explain_store_loss(p->status).message() + ")", 1};
    if (p->stop) {
      if (p->stop->exit_code != 0) seen_failures_[round_].push_back(p->stop->reason);
      return p->stop;
    }
  }
  auto p = std::make_shared<PendingPoll>();
  poll_ = p;
  const bool beat = Clock::now() - last_beat_ >= beat_every_;
  if (beat) last_beat_ = Clock::now();
  // Elastic: the other members' heartbeats (a node lost ends the round, as a failure) and nodes
  // waiting to join (they end it too, while the round has room for them).
  std::shared_ptr<std::map<int, PeerBeat>> peers = elastic() && !beat_only ? peer_beats_ : nullptr;
  const bool room = group_world_size() < nnodes_;
  std::thread([p, store = store_, beat, heartbeat = key("heartbeat/" + std::to_string(node_rank_)),
               failed = round_key("failed"), peers, room, waiting = round_key("waiting"), beats_prefix = key("heartbeat/"),
               failure_prefix = round_key("failure/"), node_prefix = key("node/"), lost_after = lost_after_, round = round_,
               gone_prefix = etcd_ ? key("gone/") : std::string()] {
    p->status = store_call("checking the job", [&] {
      if (beat) store->add(heartbeat, 1);
      if (peers && !store->check({failed})) {
        for (auto& [n, b] : *peers) {
          const int64_t now_beats = store->add(beats_prefix + std::to_string(n), 0);
          if (now_beats != b.beats) b.beats = now_beats, b.changed = Clock::now();
          if (Clock::now() - b.changed <= lost_after) continue;
          const std::string why = lost_node_text(*store, node_prefix + std::to_string(n), n, round,
                                                 std::chrono::duration<double>(Clock::now() - b.changed).count());
          if (store->compare_set(failed, "", format_failed(1, true, why)) == format_failed(1, true, why)) {
            store->set(failure_prefix + std::to_string(n), why);
          }
          if (!gone_prefix.empty()) store->set(gone_prefix + std::to_string(n), "lost");  // see report_lost
          break;
        }
        if (room && !store->check({failed}) && store->add(waiting, 0) > 0) {
          store->compare_set(failed, "", format_rejoin("a node is waiting to join round " + std::to_string(round + 1)));
        }
      }
      if (!store->check({failed})) return;
      FailedValue f = parse_failed(store->get(failed));
      p->stop = ExternalStop{f.what, f.rejoin ? 0 : f.exit_code};
    });
    p->done.store(true, std::memory_order_release);
  }).detach();
  return std::nullopt;
}

Status NodeRendezvous::report_lost(int n, double silent_s) {
  return ask<bool>("reporting a lost node", "the job's store at " + store_->address() + " to record that node " +
                                                std::to_string(n) + " is lost",
                   [failed = round_key("failed"), failure = round_key("failure/" + std::to_string(n)),
                    node = key("node/" + std::to_string(n)), n, round = round_, silent_s,
                    gone = etcd_ ? key("gone/" + std::to_string(n)) : std::string()](Store& s) {
                     const std::string why = lost_node_text(s, node, n, round, silent_s);
                     const std::string v = format_failed(1, true, why);
                     if (s.compare_set(failed, "", v) == v) s.set(failure, why);
                     // etcd: a lost node will not say it is gone; the last node to go removes the
                     // job's keys once every other node is gone or was found lost.
                     if (!gone.empty()) s.set(gone, "lost");
                     return true;
                   })
      .status();
}

Status NodeRendezvous::report_stop(int code, const std::string& why) {
  seen_failures_[round_].push_back(why);
  return ask<bool>("reporting that the job stops", "the job's store at " + store_->address() + " to record: " + why,
                   [k = round_key("failed"), v = format_failed(code, false, why)](Store& s) {
                     s.compare_set(k, "", v);
                     return true;
                   })
      .status();
}

NodeRendezvous::RoundEnd NodeRendezvous::end_round(const JobOutcome& outcome) {
  int code = outcome.exit_code;
  const std::string me = "node " + std::to_string(node_rank_);
  const bool rank_failed = outcome.cause == JobOutcome::Cause::rank_failed;
  const bool stopped = outcome.cause == JobOutcome::Cause::signaled;  // no restart after that
  std::string failed, failure;
  if (rank_failed) {
    failed = format_failed(code, true, me + ": rank " + std::to_string(outcome.failed_rank) + " failed: " + outcome.failure);
    failure = "rank " + std::to_string(outcome.failed_rank) + " (local rank " + std::to_string(outcome.failed_local_rank) +
              " on node " + std::to_string(node_rank_) + ", host " + local_hostname() + "): " + outcome.failure;
    seen_failures_[round_].push_back(failure);
  } else if (stopped) {
    failed = format_failed(code, false, me + ": " + outcome.failure);
    seen_failures_[round_].push_back(me + ": " + outcome.failure);
  }
  if (nnodes_ == 1 && max_restarts_ == 0) return {.restart = false, .exit_code = code};

  auto reported = ask<bool>("reporting the end of round " + std::to_string(round_) + " on " + me,
                            "the job's store at " + store_->address() + " to record the end of " + me,
                            [failed, failure, failed_key = round_key("failed"),
                             failure_key = round_key("failure/" + std::to_string(node_rank_)),
                             done_key = round_key("done/" + std::to_string(node_rank_)), code](Store& s) {
                              if (!failed.empty()) s.compare_set(failed_key, "", failed);
                              if (!failure.empty()) s.set(failure_key, failure);
                              s.set(done_key, std::to_string(code));
                              return true;
                            });
  if (!reported.is_ok()) {
    say(reported.status().message());
    if (!serving()) {
      if (code == 0 && reported.status().code() == ErrorCode::aborted && stop_signal_ && *stop_signal_) {
        code = 128 + *stop_signal_;
      }
      return {.restart = false, .exit_code = code};
    }
  }
  const bool restarts_left = restart_count_ < max_restarts_;
  if (nnodes_ == 1) {
    if (rank_failed && restarts_left) ++restart_count_;
    return {.restart = rank_failed && restarts_left, .exit_code = code};
  }
  // With restarts (or elastic rounds), every node learns how the round ended, even in the last
  // round: a node whose ranks all succeeded then exits with the code of a failure elsewhere, as
  // the serving node does.
  if ((max_restarts_ > 0 || elastic()) && !stopped && reported.is_ok()) {
    RoundEnd e = wait_round_outcome(code);
    if (e.rejoin || (e.restart && restarts_left)) {
      if (!e.rejoin) ++restart_count_;
      round_server_.reset();  // the round's ranks are gone or going: their store goes now
      return e;
    }
    code = e.exit_code;
  }
  leave();
  if (!serving()) return {.restart = false, .exit_code = code};
  return {.restart = false, .exit_code = wait_for_others_to_leave(code)};
}

void NodeRendezvous::leave() {
  if (nnodes_ == 1) return;
  Status left = ask<bool>("leaving the job", "the job's store at " + store_->address() + " to record that node " +
                                                 std::to_string(node_rank_) + " leaves",
                          // A node never let into a round (it found none with room) ends nothing.
                          [k = key("left/" + std::to_string(node_rank_)), ended = key("ended"),
                           elastic = elastic() && group_world_size() > 0, node = std::to_string(node_rank_)](Store& s) {
                            s.set(k, "1");
                            if (elastic) s.compare_set(ended, "", node);
                            return true;
                          })
                    .status();
  if (!left.is_ok() && !serving()) say(left.message());
}

NodeRendezvous::RoundEnd NodeRendezvous::wait_round_outcome(int code) {
  const std::string me = "node " + std::to_string(node_rank_);
  // Elastic: a peer lost ends the round like a failed rank; otherwise the job ends.
  const auto stale_after = elastic() ? lost_after_
                                     : std::chrono::duration_cast<milliseconds>(
                                           std::chrono::duration<double>(grace_s_ + 30 + 3 * monitor_interval_s_));
  struct Look {
    std::optional<std::string> failed;
    std::map<int, int64_t> beats;  // nodes not done yet: their heartbeat
  };
  struct Peer {
    int64_t beats = -1;
    Clock::time_point changed = Clock::now();
  };
  std::map<int, Peer> peers;
  for (int n : members_) {
    if (n != node_rank_) peers[n] = Peer{};
  }
  const std::string waiting_for = "the other nodes to end round " + std::to_string(round_) + " (store " +
                                  store_->address() + ")";
  ProgressLine progress;
  for (;;) {
    const bool beat_now = beat_due();
    std::vector<std::pair<int, std::string>> done_keys, beat_keys;
    for (const auto& [n, p] : peers) {
      done_keys.emplace_back(n, round_key("done/" + std::to_string(n)));
      beat_keys.emplace_back(n, key("heartbeat/" + std::to_string(n)));
    }
    auto look = ask<Look>("waiting for the end of round " + std::to_string(round_), waiting_for,
                          [done_keys, beat_keys, beat_now, failed_key = round_key("failed"),
                           mine = key("heartbeat/" + std::to_string(node_rank_))](Store& s) {
                            Look l;
                            if (beat_now) s.add(mine, 1);
                            std::set<int> done;  // read before failed: see the top of this file
                            for (const auto& [n, k] : done_keys) {
                              if (s.check({k})) done.insert(n);
                            }
                            if (s.check({failed_key})) l.failed = s.get(failed_key);
                            for (const auto& [n, k] : beat_keys) {
                              if (!done.count(n)) l.beats[n] = s.add(k, 0);
                            }
                            return l;
                          });
    if (!look.is_ok()) {
      say(look.status().message());
      if (code == 0) code = look.status().code() == ErrorCode::aborted && stop_signal_ && *stop_signal_ ? 128 + *stop_signal_ : 1;
      if (look.status().code() == ErrorCode::aborted) (void)report_stop(code, me + ": braidrun was stopped by a signal");
      return {.restart = false, .exit_code = code};
    }
    if (look->failed) {
      FailedValue f = parse_failed(*look->failed);
      if (f.rejoin) return {.restart = true, .rejoin = true, .exit_code = 0};
      seen_failures_[round_].push_back(f.what);
      return {.restart = f.restart, .exit_code = code != 0 ? code : f.exit_code};
    }
    if (look->beats.empty()) return {.restart = false, .exit_code = code};  // every node ended well
    for (const auto& [n, beats] : look->beats) {
      Peer& p = peers[n];
      if (beats != p.beats) p.beats = beats, p.changed = Clock::now();
      if (Clock::now() - p.changed > stale_after && elastic()) {
        const double silent_s = std::chrono::duration<double>(Clock::now() - p.changed).count();
        Status reported_lost = report_lost(n, silent_s);
        if (!reported_lost.is_ok()) say(reported_lost.message());
        break;  // the next look finds the failure (this one's or another's)
      }
      if (Clock::now() - p.changed > stale_after) {
        const std::string why = "node " + std::to_string(n) + " stopped reporting during round " +
                                std::to_string(round_) + " (its braidrun is gone?)";
        say(why + "; ending the job");
        (void)report_stop(1, why);
        return {.restart = false, .exit_code = code != 0 ? code : 1};
      }
    }
    if (auto sig = take_stop_signal(signal_fd_)) {
      const std::string why = me + ": braidrun received " + signal_name(*sig);
      say("received " + signal_name(*sig) + " while waiting for the other nodes; ending the job");
      (void)report_stop(128 + *sig, why);
      return {.restart = false, .exit_code = code != 0 ? code : 128 + *sig};
    }
    progress.tick(waiting_for);
    std::this_thread::sleep_for(kLookEvery);
  }
}

int NodeRendezvous::wait_for_others_to_leave(int code) {
  // Wait for the others while they show signs of life; a node that stopped beating (its
  // braidrun was killed) is given up on after grace + 30 s.
  const auto stale_after = std::chrono::duration_cast<milliseconds>(
      std::chrono::duration<double>(grace_s_ + 30 + 3 * monitor_interval_s_));
  struct Peer {
    int64_t beats = -1;
    Clock::time_point changed = Clock::now();
    bool left = false;
  };
  std::map<int, Peer> peers;
  for (int r : members_) {
    if (r != node_rank_) peers[r] = Peer{};
  }
  bool announced = false;
  auto started = Clock::now();
  for (;;) {
    bool pending = false;
    for (auto& [r, p] : peers) {
      if (p.left) continue;
      const std::string done_key = round_key("done/" + std::to_string(r));
      Status st = store_call("waiting for node " + std::to_string(r), [&] {
        beat(*store_);
        if (store_->check({key("left/" + std::to_string(r))})) {
          p.left = true;
          if (store_->check({done_key})) {
            int c = std::atoi(store_->get(done_key).c_str());
            if (code == 0 && c != 0) code = c;
          }
          return;
        }
        int64_t beats = store_->add(key("heartbeat/" + std::to_string(r)), 0);
        if (beats != p.beats) p.beats = beats, p.changed = Clock::now();
      });
      if (!st.is_ok()) return code == 0 ? 1 : code;
      if (!p.left && Clock::now() - p.changed > stale_after) {
        say("node " + std::to_string(r) + " stopped reporting; not waiting for it any longer");
        p.left = true;
        if (code == 0) code = 1;
      }
      pending = pending || !p.left;
    }
    if (!pending) return code;
    if (auto sig = take_stop_signal(signal_fd_)) {
      say("received " + signal_name(*sig) + " while waiting for the other nodes; closing the store");
      return code == 0 ? 128 + *sig : code;
    }
    if (!announced && Clock::now() - started > std::chrono::seconds(2)) {
      say("this node's ranks are done; keeping the job's store up until the other nodes finish");
      announced = true;
    }
    std::this_thread::sleep_for(kLookEvery);
  }
}

std::vector<std::string> NodeRendezvous::failure_summary() {
  const int rounds = round_ + 1;
  auto read = ask<std::vector<std::string>>(
      "reading the job's failures", "the job's store at " + store_->address() + " to list the job's failures",
      [rounds, nnodes = nnodes_, elastic = elastic(), prefix = key("round/"), next_node = key("next_node")](Store& s) {
        // Elastic node ids are handed out without bound: every one handed out so far.
        const int ids = elastic ? static_cast<int>(s.add(next_node, 0)) + 1 : nnodes;
        std::vector<std::string> lines;
        for (int r = 0; r < rounds; ++r) {
          const std::string round = prefix + std::to_string(r) + "/";
          size_t before = lines.size();
          for (int n = 0; n < ids; ++n) {
            const std::string k = round + "failure/" + std::to_string(n);
            if (s.check({k})) lines.push_back("round " + std::to_string(r) + ": " + s.get(k));
          }
          if (lines.size() == before && s.check({round + "failed"})) {
            const FailedValue f = parse_failed(s.get(round + "failed"));
            if (!f.rejoin) lines.push_back("round " + std::to_string(r) + ": " + f.what);  // not a failure
          }
        }
        return lines;
      });
  if (read.is_ok()) return *read;
  std::vector<std::string> lines;
  for (const auto& [r, seen] : seen_failures_) {
    std::set<std::string> once;
    for (const std::string& what : seen) {
      if (once.insert(what).second) lines.push_back("round " + std::to_string(r) + ": " + what);
    }
  }
  return lines;
}

}  // namespace braid::braidrun
