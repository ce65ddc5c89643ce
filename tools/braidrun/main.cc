// braidrun: torchrun's job for any program. Starts --nproc-per-node ranks on this node with
// torchrun's environment (MASTER_PORT free for torch's own store, braid's at BRAID_STORE_PORT),
// serves (or joins) the job's store, relays the ranks' output line by
// line, and stops every rank as soon as one fails; with --max-restarts, every node then starts
// its ranks again in a new round. See launch_options.cc for the flags.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/job_secret.h"
#include "common/version.h"
#include "tools/braidrun/launch_options.h"
#include "tools/braidrun/node_rendezvous.h"
#include "tools/braidrun/output_relay.h"
#include "tools/braidrun/rank_env.h"
#include "tools/braidrun/supervisor.h"

namespace braid::braidrun {
namespace {

int fail(const Status& s) {
  say("error: " + s.message());
  return 1;
}

// The failed rank's last lines; `ends_job`: also the line saying the job failed because of it.
void report_failure(const JobOutcome& outcome, bool ends_job) {
  if (outcome.cause != JobOutcome::Cause::rank_failed) return;
  std::string r = std::to_string(outcome.failed_rank);
  std::string text = outcome.tail.empty()
                         ? "braidrun: rank " + r + " printed nothing\n"
                         : "braidrun: last " + std::to_string(outcome.tail.size()) + " line(s) of rank " + r + ":\n";
  for (const std::string& line : outcome.tail) text += "braidrun:   | " + line + "\n";
  if (ends_job) {
    text += "braidrun: job failed: rank " + r + " " +
            (outcome.failure.rfind("exit", 0) == 0 ? "ended with " : "was ") + outcome.failure + "\n";
  }
  write_all(STDERR_FILENO, text);
}

// With --max-restarts (or --nnodes MIN:MAX), how the job went: every failure of every round,
// one line each. `restarts`: failures restarted from (membership changes are not counted).
void report_rounds(const LaunchOptions& o, int round, int restarts_done, int exit_code,
                   const std::vector<std::string>& failures) {
  const std::string restarts =
      std::to_string(restarts_done) + " restart(s) (--max-restarts " + std::to_string(o.max_restarts) + ")";
  std::string text;
  if (exit_code == 0) {
    if (restarts_done == 0) return;
    text = "braidrun: every rank succeeded in round " + std::to_string(round) + ", after " + restarts + "; earlier failures:\n";
  } else {
    text = "braidrun: job failed after " + restarts + "; every failure:\n";
  }
  for (const std::string& line : failures) text += "braidrun:   " + line + "\n";
  if (failures.empty()) text += "braidrun:   (none recorded)\n";
  write_all(STDERR_FILENO, text);
}

// The job's secret and id. braidrun invents a secret only when it launches every rank itself
// (one node): braidruns on several nodes cannot agree on a random one, so there the user's
// BRAID_SECRET / BRAID_SECRET_FILE is used (and reaches the ranks through the environment), or
// the job runs unauthenticated and says so. The secret reaches the ranks as a file's name.
struct JobTrust {
  StoreAuth auth;
  std::unique_ptr<SecretFile> file;  // braidrun's own secret; removed when braidrun exits
};

Result<JobTrust> make_job_trust(const Env& env, const LaunchOptions& o) {
  JobTrust t;
  t.auth.job_id = !env.job_id.empty() ? env.job_id : o.run_id == "none" ? "" : o.run_id;
  if (!env.secret.empty() || !env.secret_file.empty()) {
    const Result<auth::JobSecret>& own = auth::process_secret();
    if (!own.is_ok()) return own.status();
    return t;
  }
  if (o.nnodes > 1) {
    auth::warn_unauthenticated_once("braidrun (--nnodes " + std::to_string(o.nnodes) +
                                    ": braidrun cannot invent a secret every node shares)");
    return t;
  }
  std::string secret = auth::random_hex(32);
  ASSIGN_OR_RETURN(t.file, SecretFile::create(secret));
  t.auth.secret = secret;
  return t;
}

int run(int argc, char** argv) {
  // --help and --version answer even when a BRAID_* variable is bad: that error comes after.
  Result<Env> env = global_env();
  Result<LaunchOptions> parsed = parse_launch_options(std::vector<std::string>(argv + 1, argv + argc),
                                                      env.is_ok() ? env->rendezvous_timeout_s : 300);
  if (!parsed.is_ok()) return fail(parsed.status());
  const LaunchOptions& o = *parsed;
  if (o.help) {
    write_all(STDOUT_FILENO, launch_usage());
    return 0;
  }
  if (o.version) {
    write_all(STDOUT_FILENO, version_text("braidrun"));
    return 0;
  }
  if (!env.is_ok()) return fail(env.status());
  Result<std::string> program = resolve_program(o.program[0], std::getenv("PATH"));
  if (!program.is_ok()) return fail(program.status());

  Result<JobTrust> trust = make_job_trust(*env, o);
  if (!trust.is_ok()) return fail(trust.status());

  // Before the store's thread exists, so it inherits the blocked signals.
  Result<int> signal_fd = make_signal_fd();
  if (!signal_fd.is_ok()) return fail(signal_fd.status());

  int stop_signal = 0;
  auto joined = NodeRendezvous::join(o, trust->auth, *signal_fd, &stop_signal);
  if (!joined.is_ok()) {
    fail(joined.status());
    return stop_signal ? 128 + stop_signal : 1;
  }
  NodeRendezvous& rdzv = **joined;
  std::vector<std::string> base_env = current_environ();
  const std::vector<int> cpus = o.cpu_bind ? allowed_cpus() : std::vector<int>{};
  const bool rounds_reported = o.max_restarts > 0 || rdzv.elastic();

  for (;;) {
    Status met = rdzv.meet_round();
    const int round = rdzv.round();
    if (!met.is_ok()) {
      fail(met);
      rdzv.leave();
      int code = stop_signal ? 128 + stop_signal : 1;
      // A node never let into a round (elastic) has no rounds to tell of.
      if (round > 0 && rdzv.group_world_size() > 0) report_rounds(o, round, rdzv.restart_count(), code, rdzv.failure_summary());
      return code;
    }
    // Node and global ranks of this round: with --nnodes MIN:MAX they change with the members.
    const int first_rank = rdzv.group_rank() * o.nproc_per_node;
    const int world = rdzv.group_world_size() * o.nproc_per_node;
    if (rdzv.elastic()) {
      say("round " + std::to_string(round) + ": node " + std::to_string(rdzv.node_rank()) + " is node " +
          std::to_string(rdzv.group_rank()) + " of " + std::to_string(rdzv.group_world_size()) + " (--nnodes " +
          std::to_string(o.min_nnodes) + ":" + std::to_string(o.nnodes) + "): starting ranks " +
          std::to_string(first_rank) + ".." + std::to_string(first_rank + o.nproc_per_node - 1) + " of " +
          std::to_string(world) + " (" +
          (o.rdzv_backend == LaunchOptions::RdzvBackend::etcd
               ? "round leader node " + std::to_string(rdzv.round_leader()) +
                     (rdzv.round_leader() == rdzv.node_rank() ? " (here)" : "") + " at " + rdzv.master_addr() + ": "
               : "") +
          "the ranks' store on port " + std::to_string(rdzv.ranks_port()) + ", MASTER_PORT " +
          std::to_string(rdzv.torch_port()) + ")");
    } else if (o.nnodes > 1 && round == 0) {
      say("node " + std::to_string(rdzv.node_rank()) + " of " + std::to_string(o.nnodes) + ": starting ranks " +
          std::to_string(first_rank) + ".." + std::to_string(first_rank + o.nproc_per_node - 1) + " of " +
          std::to_string(world) +
          (o.rdzv_backend == LaunchOptions::RdzvBackend::etcd
               ? " (rendezvous in etcd " + o.etcd_endpoints + "; node 0 at " + rdzv.master_addr() +
                     (rdzv.serving() ? ", here" : "")
               : " (store at " + rdzv.master_addr() + ":" + std::to_string(rdzv.master_port()) +
                     (rdzv.serving() ? ", served here" : "")) +
          (o.max_restarts > 0 || o.rdzv_backend == LaunchOptions::RdzvBackend::etcd
               ? "; the ranks' store of round 0 is on port " + std::to_string(rdzv.ranks_port())
               : "") +
          "; MASTER_PORT " + std::to_string(rdzv.torch_port()) + " is kept free for rank 0's torch store)");
    } else if (round > 0) {
      say("round " + std::to_string(round) + ": starting ranks " + std::to_string(first_rank) + ".." +
          std::to_string(first_rank + o.nproc_per_node - 1) + " of " + std::to_string(world) +
          " (the ranks' store on port " + std::to_string(rdzv.ranks_port()) + ")");
    }
    std::vector<RankSpec> specs;
    for (int local = 0; local < o.nproc_per_node; ++local) {
      RankIdentity id{.rank = first_rank + local,
                      .local_rank = local,
                      .world_size = world,
                      .local_world_size = o.nproc_per_node,
                      .node_rank = rdzv.group_rank(),
                      .nnodes = rdzv.group_world_size(),
                      .master_addr = rdzv.master_addr(),
                      .master_port = rdzv.torch_port(),
                      .store_port = rdzv.ranks_port(),
                      .run_id = o.run_id,
                      .restart_count = rdzv.restart_count(),
                      .max_restarts = o.max_restarts,
                      .job_id = rdzv.ranks_job_id(),
                      .secret_file = trust->file ? trust->file->path() : ""};
      SpawnRequest req{.path = *program,
                       .argv = o.program,
                       .env = build_rank_env(base_env, id),
                       .cpus = cpu_share(cpus, local, o.nproc_per_node)};
      specs.push_back(RankSpec{.rank = id.rank, .local_rank = local, .request = std::move(req)});
    }

    JobOutcome outcome;
    {
      Supervisor supervisor(SupervisorOptions{.grace_s = o.grace_s,
                                              .prefix_output = o.prefix_output,
                                              .log_dir = o.log_dir,
                                              .log_suffix = round == 0 ? "" : ".round" + std::to_string(round),
                                              .node_rank = rdzv.node_rank(),
                                              // At least 10 ms: a tick of 0 would spin.
                                              .tick = std::chrono::milliseconds(std::max<int64_t>(
                                                  10, static_cast<int64_t>(o.monitor_interval_s * 1000 + 0.5)))},
                            *signal_fd);
      Status started = supervisor.start(std::move(specs));
      if (!started.is_ok()) {
        outcome.cause = JobOutcome::Cause::signaled;  // tells the other nodes to stop, without a restart
        outcome.exit_code = 1;
        outcome.failure = "cannot start ranks: " + started.message();
        say("error: " + started.message());
      } else {
        outcome = supervisor.run([&] { return rdzv.poll_job(/*beat_only=*/supervisor.stopping()); });
      }
    }
    report_failure(outcome, /*ends_job=*/!rounds_reported);
    NodeRendezvous::RoundEnd end = rdzv.end_round(outcome);
    if (end.rejoin) {
      say("round " + std::to_string(round) + " ended for a membership change (a node is waiting to join); starting " +
          "every rank again in the next round (not counted as a restart)");
      continue;
    }
    if (end.restart) {
      say("round " + std::to_string(round) + " failed; starting every rank again (restart " +
          std::to_string(rdzv.restart_count()) + " of " + std::to_string(o.max_restarts) + ")");
      continue;
    }
    if (rounds_reported) report_rounds(o, round, rdzv.restart_count(), end.exit_code, rdzv.failure_summary());
    return end.exit_code;
  }
}

}  // namespace
}  // namespace braid::braidrun

int main(int argc, char** argv) { return braid::braidrun::run(argc, argv); }
