// tools/braidrun/supervisor.h - runs this node's ranks to the end, and stops them all on failure.
//
// One thread (braidrun's main) polls the ranks' pipes and a signalfd carrying SIGCHLD, SIGINT
// and SIGTERM (blocked in every thread before any thread starts). The first rank to exit
// non-zero or be killed fails the job: every rank still running gets SIGTERM to its process
// group, then SIGKILL once the grace period is over. SIGINT/SIGTERM to braidrun do the same
// (a second one skips the grace period). Every wait is bounded.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "tools/braidrun/output_relay.h"
#include "tools/braidrun/rank_process.h"

namespace braid::braidrun {

struct RankSpec {
  int rank = 0;
  int local_rank = 0;
  SpawnRequest request;
};

struct SupervisorOptions {
  double grace_s = 5;
  bool prefix_output = true;
  std::string log_dir;  // non-empty: rank<N><log_suffix>.log files there
  std::string log_suffix;  // ".round<R>" after a restart, so no round overwrites another's logs
  int node_rank = 0;
  // How long ranks get to die after SIGKILL, and how long their pipes are drained after the
  // last rank exited (a grandchild may hold them open).
  std::chrono::milliseconds kill_wait{10000};
  std::chrono::milliseconds drain_wait{2000};
  // How often on_tick runs while ranks run (also while they are being stopped).
  std::chrono::milliseconds tick{250};
};

// Why the job ended.
struct JobOutcome {
  int exit_code = 0;
  enum class Cause { all_succeeded, rank_failed, signaled, external } cause = Cause::all_succeeded;
  int failed_rank = -1;           // rank_failed
  int failed_local_rank = -1;     // rank_failed
  std::string failure;            // "exit code 3", "killed by SIGKILL (signal 9)", or the external reason
  std::vector<std::string> tail;  // the failed rank's last lines
};

// Asked every tick while ranks run: a reason and exit code to stop them (another node failed).
struct ExternalStop {
  std::string reason;
  int exit_code = 1;
};
using TickFn = std::function<std::optional<ExternalStop>()>;

class Supervisor {
 public:
  // `signal_fd`: a signalfd for SIGCHLD, SIGINT and SIGTERM, owned by the caller.
  Supervisor(SupervisorOptions options, int signal_fd);
  ~Supervisor();  // SIGKILLs any rank still running (only on an error path), closes pipes
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts every rank; when one cannot start, the ones already started are stopped.
  Status start(std::vector<RankSpec> specs);
  // Relays output until every rank ended; returns why the job ended.
  JobOutcome run(const TickFn& on_tick);

  // True once the ranks are being stopped (a failure, a signal, or an external stop).
  bool stopping() const { return stopping_; }
  // Pids of the ranks started (for diagnostics).
  std::vector<pid_t> pids() const;

 private:
  struct Rank;
  void handle_signals(JobOutcome& outcome);
  void reap(JobOutcome& outcome);
  void read_pipe(Rank& r, int which);
  void begin_stop();
  void signal_running(int sig);
  bool any_running() const;
  bool any_pipe_open() const;

  SupervisorOptions options_;
  int signal_fd_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  bool stopping_ = false;
  bool killed_ = false;
  std::chrono::steady_clock::time_point kill_at_{};
};

// Blocks SIGCHLD, SIGINT, SIGTERM in the calling thread (call before starting any thread, so
// every thread inherits the mask), ignores SIGPIPE, and returns a signalfd for the three.
Result<int> make_signal_fd();

}  // namespace braid::braidrun
