#include "tools/braidrun/node_rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "tools/braidrun/etcd_store.h"
#include "tools/braidrun/output_relay.h"
#include "tools/braidrun/rank_exit.h"
#include "tools/braidrun/store_wait.h"

namespace braid::braidrun {
namespace {

using std::chrono::milliseconds;

std::string endpoint(const std::string& host, uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

// True when `host` resolves to an address of this machine: binding it (port 0) works.
bool is_local_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool local = false;
  for (addrinfo* a = res; a && !local; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    local = bind(fd, a->ai_addr, a->ai_addrlen) == 0;  // the address's port is 0 here
    close(fd);
  }
  freeaddrinfo(res);
  return local;
}

struct NodeInfo {
  std::string host;
  std::string pid;
  int nproc = 0;
  int max_restarts = 0;
};

NodeInfo parse_node_info(const std::string& v) {
  NodeInfo n;
  std::vector<std::string> fields;
  for (size_t from = 0;;) {
    size_t nl = v.find('\n', from);
    fields.push_back(v.substr(from, nl == std::string::npos ? std::string::npos : nl - from));
    if (nl == std::string::npos) break;
    from = nl + 1;
  }
  n.host = fields[0];
  if (fields.size() > 1) n.pid = fields[1];
  if (fields.size() > 2) n.nproc = std::atoi(fields[2].c_str());
  if (fields.size() > 3) n.max_restarts = std::atoi(fields[3].c_str());
  return n;
}

std::string describe_node(int r, const NodeInfo& n) {
  return "node " + std::to_string(r) + " (host " + n.host + ", braidrun pid " + n.pid + ")";
}

// " (connect: Connection refused)" from TcpStore's long message, for progress lines.
std::string brief_error(const std::string& e) {
  if (e.empty()) return "";
  const size_t at = e.rfind("last error: ");
  if (at == std::string::npos) return " (" + e + ")";
  const size_t from = at + 12;
  return " (" + e.substr(from, e.find(')', from) - from) + ")";
}

}  // namespace

std::optional<int> take_stop_signal(int signal_fd) {
  std::optional<int> got;
  signalfd_siginfo info;
  while (read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGINT || sig == SIGTERM) got = sig;
  }
  return got;
}

NodeRendezvous::~NodeRendezvous() { forget_job(); }

Status NodeRendezvous::aborted_by(int sig) {
  if (stop_signal_) *stop_signal_ = sig;
  return Status(ErrorCode::aborted, "interrupted by " + signal_name(sig) + " during rendezvous");
}

Result<std::unique_ptr<NodeRendezvous>> NodeRendezvous::join(const LaunchOptions& o, const StoreAuth& auth,
                                                              int signal_fd, int* stop_signal) {
  std::unique_ptr<NodeRendezvous> r(new NodeRendezvous());
  r->stop_signal_ = stop_signal;
  r->signal_fd_ = signal_fd;
  r->prefix_ = "braidrun/" + o.run_id + "/";
  r->nnodes_ = o.nnodes;
  r->min_nnodes_ = o.min_nnodes;
  r->nproc_per_node_ = o.nproc_per_node;
  r->last_call_s_ = o.last_call_s;
  const auto seconds = [](double s) {
    return std::chrono::duration_cast<milliseconds>(std::chrono::duration<double>(s));
  };
  // Beats at least once a second, and at least once per keep-alive interval.
  r->beat_every_ = std::min(milliseconds(1000), seconds(o.keep_alive_interval_s));
  r->lost_after_ = seconds(o.keep_alive_interval_s * o.keep_alive_max_attempt);
  r->grace_s_ = o.grace_s;
  r->monitor_interval_s_ = o.monitor_interval_s;
  r->rdzv_timeout_s_ = o.rdzv_timeout_s;
  r->max_restarts_ = o.max_restarts;
  r->run_id_ = o.run_id;
  r->auth_ = auth;
  r->etcd_ = o.rdzv_backend == LaunchOptions::RdzvBackend::etcd;
  r->formed_rounds_ = o.elastic() || (r->etcd_ && o.nnodes > 1 && !o.node_rank);
  RETURN_IF_ERROR(r->etcd_ ? r->connect_etcd(o) : r->serve_or_connect(o, auth, signal_fd));
  RETURN_IF_ERROR(r->take_node_rank(o));
  if (r->elastic()) return r;  // each round forms itself (elastic_rounds.cc)
  RETURN_IF_ERROR(r->wait_for_nodes(o, signal_fd));
  for (int n = 0; n < o.nnodes; ++n) r->members_.push_back(n);
  r->group_rank_ = r->node_rank_;
  return r;
}

Status NodeRendezvous::serve_or_connect(const LaunchOptions& o, const StoreAuth& auth, int signal_fd) {
  const std::string ep = endpoint(o.endpoint_host, o.endpoint_port);
  bool must_serve = o.standalone || (o.node_rank && *o.node_rank == 0) || (!o.node_rank && o.nnodes == 1);
  bool may_serve = must_serve || (!o.node_rank && is_local_address(o.endpoint_host));
  std::string connect_host = o.endpoint_host;
  master_addr_ = o.endpoint_host;
  master_port_ = o.endpoint_port;
  std::string first_error;  // why this node could not serve the store, when it tried
  if (may_serve) {
    // Node 0 named by --node-rank may sit behind an address it cannot bind (NAT, a name for
    // a load balancer): then it serves on every interface, as torchrun's agent does.
    std::vector<std::string> hosts = {o.endpoint_host};
    if (must_serve && !o.standalone) hosts.push_back("0.0.0.0");
    for (const std::string& h : hosts) {
      try {
        server_ = TcpStoreServer::start(h, o.endpoint_port, {.secret = auth.secret, .job_id = auth.job_id});
        master_port_ = server_->port();
        serving_ = true;
        serve_host_ = h;
        connect_host = h == "0.0.0.0" ? "127.0.0.1" : h;
        break;
      } catch (const std::exception& e) {
        if (first_error.empty()) first_error = e.what();
      }
    }
    if (!server_ && must_serve) {
      return invalid_argument("cannot serve the job's store on " + ep + " (--master-port / --rdzv-endpoint; " +
                              "--standalone picks a free port): " + first_error);
    }
  }
  const std::string addr = endpoint(connect_host, master_port_);
  Deadline deadline = Deadline::after_seconds(o.rdzv_timeout_s);
  std::string last_error;
  ProgressLine progress;
  // Short connect attempts, so SIGINT is noticed while the serving node is not up yet.
  while (!store_) {
    if (auto sig = take_stop_signal(signal_fd)) return aborted_by(*sig);
    progress.tick("the job's store at " + addr + " to accept a connection" + brief_error(last_error));
    if (deadline.expired()) {
      // A node that tried to serve and could not says why: the port may be taken by something
      // that does not serve a store, in which case no node of the job will.
      const std::string not_served = may_serve && !server_ ? "; this node could not serve it either: " + first_error : "";
      return timeout_error("cannot reach the job's store at " + addr + " within " + std::to_string(o.rdzv_timeout_s) +
                           " s (" + last_error + ")" + not_served + "; start braidrun with --node-rank 0 (or on the " +
                           "endpoint's host) first, pick another port, or raise --rdzv-timeout-s");
    }
    auto attempt = std::min<milliseconds>(milliseconds(1000), std::chrono::duration_cast<milliseconds>(deadline.remaining()) + milliseconds(1));
    try {
      store_ = TcpStore::connect(connect_host, master_port_,
                                 TcpStoreOptions{.timeout = attempt, .secret = auth.secret, .job_id = auth.job_id});
    } catch (const Error& e) {
      // Refused (another job's store, or another secret): waiting longer cannot help.
      if (e.code() == ErrorCode::unauthenticated || e.code() == ErrorCode::invalid_argument) {
        return Status(e.code(), std::string("cannot join the job's store: ") + e.what());
      }
      last_error = e.what();
    } catch (const std::exception& e) {
      last_error = e.what();
    }
  }
  store_->set_timeout(std::chrono::duration_cast<milliseconds>(std::chrono::duration<double>(o.rdzv_timeout_s)));
  return Status::ok();
}

Status NodeRendezvous::connect_etcd(const LaunchOptions& o) {
  ASSIGN_OR_RETURN(std::vector<etcd::Endpoint> members, etcd::parse_endpoints(o.etcd_endpoints));
  const auto rdzv = std::chrono::duration_cast<milliseconds>(std::chrono::duration<double>(o.rdzv_timeout_s));
  // One call may spend up to 30 s finding a member that answers (a leader election takes a
  // few); etcd gone for longer than that ends the job.
  etcd_members_ = members;
  store_ = std::make_shared<EtcdStore>(
      members, EtcdStoreOptions{.timeout = rdzv, .request_timeout = std::min<milliseconds>(rdzv, std::chrono::seconds(30))});
  master_port_ = 0;
  if (o.run_id == "none") {
    say("with --rdzv-backend etcd, give each job its own --rdzv-id: a job that does not end cleanly leaves its "
        "keys in etcd, and a later job with the same id is refused");
  }
  Deadline deadline = Deadline::after_seconds(o.rdzv_timeout_s);
  for (;;) {
    auto reached = ask<bool>("reaching etcd", "a member of " + store_->address() + " to answer",
                             [k = key("node/0")](Store& s) { return s.check({k}); });
    if (reached.is_ok()) return Status::ok();
    if (reached.status().code() == ErrorCode::aborted || deadline.expired()) {
      return Status(reached.status().code(), "cannot use the job's rendezvous in " + store_->address() + ": " +
                                                 reached.status().message());
    }
  }
}

Status NodeRendezvous::explain_store_loss(const Status& s) {
  const ErrorCode c = s.code();
  // Before every node arrived nobody knows whose store it was; the message then says the rest.
  if (etcd_ || serving_ || store_node_.empty()) return s;
  if (c != ErrorCode::peer_lost && c != ErrorCode::timeout && c != ErrorCode::system) return s;
  if (told_store_lost_) return Status(c, s.message() + " (the job's store is gone with " + store_node_ + ", see above)");
  told_store_lost_ = true;
  const std::string& m = s.message();
  const bool ends_sentence = !m.empty() && (m.back() == '.' || m.back() == '?' || m.back() == '!');
  return Status(c, m + (ends_sentence ? " " : ". ") + "The job's store at " + store_->address() + " was served by " +
                       store_node_ +
                       ", which is gone or not answering: with --rdzv-backend c10d the job's rendezvous ends with " +
                       "that node. To let a job outlive any node, keep the rendezvous in etcd: start every braidrun " +
                       "with --rdzv-backend etcd --rdzv-endpoint h1:2379,h2:2379,h3:2379 (a 3-member etcd cluster)");
}

void NodeRendezvous::forget_job() {
  if (!etcd_ || !store_ || !registered_) return;
  // A client of its own with a short bound: an etcd gone by now must not hold up braidrun's exit.
  auto etcd = std::make_unique<EtcdStore>(etcd_members_, EtcdStoreOptions{.timeout = std::chrono::seconds(3),
                                                                          .request_timeout = std::chrono::seconds(3),
                                                                          .member_timeout = std::chrono::seconds(1)});
  // Whichever node goes last removes them: this node reads nothing more, and every other node id
  // the job handed out is gone too (or was found lost). gone/<n> comes after everything node n
  // reads (its failure summary included), so no node still running loses the job's keys.
  (void)store_call("removing the job's keys", [&] {
    etcd->set(key("gone/" + std::to_string(node_rank_)), "1");
    const int ids = elastic() ? static_cast<int>(etcd->add(key("next_node"), 0)) : nnodes_;
    std::vector<std::string> gone;
    for (int n = 0; n < ids; ++n) {
      if (n != node_rank_) gone.push_back(key("gone/" + std::to_string(n)));
    }
    if (etcd->check(gone)) etcd->delete_prefix(prefix_);
  });
}

Status NodeRendezvous::announce_node0_address() {
  serving_ = true;
  ASSIGN_OR_RETURN(serve_host_, dynamic_cast<EtcdStore&>(*store_).local_address());
  master_addr_ = serve_host_;
  return ask<bool>("recording node 0's address", "etcd (" + store_->address() + ") to record node 0's address",
                   [k = key("master_addr"), v = serve_host_](Store& s) {
                     s.set(k, v);
                     return true;
                   })
      .status();
}

Status NodeRendezvous::take_node_rank(const LaunchOptions& o) {
  if (o.node_rank) {
    node_rank_ = *o.node_rank;
  } else if (serving()) {
    node_rank_ = 0;
  } else {
    ASSIGN_OR_RETURN(int64_t n, ask<int64_t>("taking a node rank",
                                             "the job's store at " + store_->address() + " to hand out a node rank",
                                             [k = key("next_node")](Store& s) { return s.add(k, 1); }));
    if (etcd_) --n;  // no serving node took 0: the first to come gets it
    if (n >= o.nnodes && !elastic()) {
      return invalid_argument("more braidruns joined job '" + o.run_id + "' at " + store_->address() + " than --nnodes " +
                              std::to_string(o.nnodes) + " (this one would be node " + std::to_string(n) + ")");
    }
    node_rank_ = static_cast<int>(n);
  }
  if (etcd_ && elastic()) {
    // Any node may lead a round: each knows the address its round's store would be served on.
    ASSIGN_OR_RETURN(serve_host_, dynamic_cast<EtcdStore&>(*store_).local_address());
  } else if (etcd_ && node_rank_ == 0) {
    RETURN_IF_ERROR(announce_node0_address());
  }
  std::string info = hostname() + "\n" + std::to_string(getpid()) + "\n" + std::to_string(o.nproc_per_node) + "\n" +
                     std::to_string(o.max_restarts);
  ASSIGN_OR_RETURN(std::string now,
                   ask<std::string>("registering this node",
                                    "the job's store at " + store_->address() + " to register node " +
                                        std::to_string(node_rank_),
                                    [k = key("node/" + std::to_string(node_rank_)), info](Store& s) {
                                      return s.compare_set(k, "", info);
                                    }));
  registered_ = now == info;
  if (now != info) {
    return invalid_argument(
        "--node-rank " + std::to_string(node_rank_) + " is already taken by " +
        describe_node(node_rank_, parse_node_info(now)) + "; give each node its own --node-rank" +
        (etcd_ ? ". etcd keeps a job's keys when it did not end cleanly: give each job its own --rdzv-id, or remove "
                 "them (etcdctl del --prefix " + prefix_ + ")"
               : ""));
  }
  return Status::ok();
}

Status NodeRendezvous::wait_for_nodes(const LaunchOptions& o, int signal_fd) {
  std::vector<std::string> keys;
  for (int r = 0; r < o.nnodes; ++r) keys.push_back(key("node/" + std::to_string(r)));
  Deadline deadline = Deadline::after_seconds(o.rdzv_timeout_s);
  bool all = false;
  ProgressLine progress;
  const std::string waiting_for = "the other nodes of job '" + o.run_id + "' (--nnodes " + std::to_string(o.nnodes) +
                                  ") at the store " + store_->address();
  while (!all) {
    if (auto sig = take_stop_signal(signal_fd)) return aborted_by(*sig);
    progress.tick(waiting_for);
    ASSIGN_OR_RETURN(all, ask<bool>("waiting for the other nodes", waiting_for,
                                    [keys](Store& s) { return s.check(keys); }));
    if (all) break;
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::min<milliseconds>(milliseconds(100), std::chrono::duration_cast<milliseconds>(deadline.remaining())));
  }
  std::map<int, NodeInfo> arrived;
  std::vector<int> missing;
  for (int r = 0; r < o.nnodes; ++r) {
    ASSIGN_OR_RETURN(std::string v, ask<std::string>("reading node " + std::to_string(r), waiting_for,
                                                     [k = keys[static_cast<size_t>(r)]](Store& s) {
                                                       return s.check({k}) ? "+" + s.get(k) : std::string();
                                                     }));
    if (v.empty()) {
      missing.push_back(r);
    } else {
      arrived[r] = parse_node_info(v.substr(1));
    }
  }
  if (!missing.empty()) {
    std::string who, gaps;
    for (const auto& [r, n] : arrived) who += (who.empty() ? "" : ", ") + describe_node(r, n);
    for (int r : missing) gaps += (gaps.empty() ? "" : ", ") + std::to_string(r);
    return timeout_error("rendezvous of job '" + o.run_id + "' at " + store_->address() + " timed out after " +
                         std::to_string(o.rdzv_timeout_s) + " s: " + std::to_string(arrived.size()) + " of " +
                         std::to_string(o.nnodes) + " nodes arrived (" + who + "); " + std::to_string(missing.size()) +
                         " missing (node rank(s) " + gaps + "). Start braidrun on every node with the same --nnodes and " +
                         "--rdzv-endpoint, or raise --rdzv-timeout-s");
  }
  if (!etcd_) {
    store_node_ = describe_node(0, arrived[0]);
  } else if (node_rank_ != 0) {
    ASSIGN_OR_RETURN(master_addr_, ask<std::string>("reading node 0's address", waiting_for,
                                                    [k = key("master_addr")](Store& s) { return s.get(k); }));
  }
  for (const auto& [r, n] : arrived) {
    if (n.nproc != o.nproc_per_node) {
      return invalid_argument("nodes disagree on --nproc-per-node: " + describe_node(r, n) + " has " +
                              std::to_string(n.nproc) + " but node " + std::to_string(node_rank_) + " (this one) has " +
                              std::to_string(o.nproc_per_node) + "; every node must start the same number of ranks");
    }
    if (n.max_restarts != o.max_restarts) {
      return invalid_argument("nodes disagree on --max-restarts: " + describe_node(r, n) + " has " +
                              std::to_string(n.max_restarts) + " but node " + std::to_string(node_rank_) +
                              " (this one) has " + std::to_string(o.max_restarts) + "; give every node the same");
    }
  }
  return Status::ok();
}

std::string NodeRendezvous::describe_nodes(const std::vector<int>& ids) {
  std::vector<std::string> keys;
  for (int id : ids) keys.push_back(key("node/" + std::to_string(id)));
  auto infos = ask<std::vector<std::string>>("reading nodes", "the job's store at " + store_->address() + " to describe nodes",
                                             [keys](Store& s) {
                                               std::vector<std::string> v;
                                               for (const std::string& k : keys) v.push_back(s.check({k}) ? s.get(k) : "");
                                               return v;
                                             });
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string info = infos.is_ok() ? (*infos)[i] : "";
    out += (out.empty() ? "" : ", ") + (info.empty() ? "node " + std::to_string(ids[i])
                                                     : describe_node(ids[i], parse_node_info(info)));
  }
  return out;
}

Status NodeRendezvous::check_members_agree() {
  std::vector<std::string> keys;
  for (int id : members_) keys.push_back(key("node/" + std::to_string(id)));
  ASSIGN_OR_RETURN(std::vector<std::string> infos,
                   ask<std::vector<std::string>>("reading the round's nodes", "the job's store at " + store_->address(),
                                                 [keys](Store& s) {
                                                   std::vector<std::string> v;
                                                   for (const std::string& k : keys) v.push_back(s.get(k));
                                                   return v;
                                                 }));
  for (size_t i = 0; i < members_.size(); ++i) {
    const NodeInfo n = parse_node_info(infos[i]);
    if (n.nproc != nproc_per_node_) {
      return invalid_argument("nodes disagree on --nproc-per-node: " + describe_node(members_[i], n) + " has " +
                              std::to_string(n.nproc) + " but node " + std::to_string(node_rank_) + " (this one) has " +
                              std::to_string(nproc_per_node_) + "; every node must start the same number of ranks");
    }
    if (n.max_restarts != max_restarts_) {
      return invalid_argument("nodes disagree on --max-restarts: " + describe_node(members_[i], n) + " has " +
                              std::to_string(n.max_restarts) + " but node " + std::to_string(node_rank_) +
                              " (this one) has " + std::to_string(max_restarts_) + "; give every node the same");
    }
  }
  return Status::ok();
}

}  // namespace braid::braidrun
