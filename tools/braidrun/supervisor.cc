#include "tools/braidrun/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "tools/braidrun/rank_exit.h"

namespace braid::braidrun {

using std::chrono::steady_clock;

struct Supervisor::Rank {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int fds[2] = {-1, -1};  // stdout, stderr read ends
  bool running = false;
  bool ended_ok = false;  // exited with status 0 before any stop
  std::unique_ptr<RankOutput> output;
};

namespace {

int ms_until(steady_clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - steady_clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
}

}  // namespace

Result<int> make_signal_fd() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr); rc != 0) return system_error("pthread_sigmask", rc);
  // A closed stdout must not kill braidrun (and with it the job's store).
  signal(SIGPIPE, SIG_IGN);
  int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) return system_error("signalfd", errno);
  return fd;
}

Supervisor::Supervisor(SupervisorOptions options, int signal_fd) : options_(std::move(options)), signal_fd_(signal_fd) {}

Supervisor::~Supervisor() {
  if (any_running()) {
    signal_running(SIGKILL);
    auto give_up = steady_clock::now() + options_.kill_wait;
    for (auto& r : ranks_) {
      while (r->running && steady_clock::now() < give_up) {
        if (waitpid(r->pid, nullptr, WNOHANG) == r->pid) r->running = false;
        else std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  for (auto& r : ranks_) {
    for (int& fd : r->fds) {
      if (fd >= 0) close(fd);
    }
  }
}

std::vector<pid_t> Supervisor::pids() const {
  std::vector<pid_t> out;
  for (const auto& r : ranks_) out.push_back(r->pid);
  return out;
}

Status Supervisor::start(std::vector<RankSpec> specs) {
  if (!options_.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.log_dir, ec);
    if (ec) return invalid_argument("--log-dir " + options_.log_dir + ": cannot create it: " + ec.message());
  }
  for (RankSpec& spec : specs) {
    int log_fd = -1;
    if (!options_.log_dir.empty()) {
      std::string path = options_.log_dir + "/rank" + std::to_string(spec.rank) + options_.log_suffix + ".log";
      log_fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (log_fd < 0) return system_error("--log-dir: cannot open " + path, errno);
    }
    auto r = std::make_unique<Rank>();
    r->rank = spec.rank;
    r->local_rank = spec.local_rank;
    r->output = std::make_unique<RankOutput>(spec.rank, options_.prefix_output, RelayTargets{}, log_fd);
    Result<SpawnedRank> spawned = spawn_rank(spec.request);
    // On failure the destructor SIGKILLs the ranks already started.
    if (!spawned.is_ok()) return spawned.status().with_context("rank " + std::to_string(spec.rank) + ": ");
    r->pid = spawned->pid;
    r->fds[0] = spawned->out_fd;
    r->fds[1] = spawned->err_fd;
    r->running = true;
    ranks_.push_back(std::move(r));
  }
  return Status::ok();
}

bool Supervisor::any_running() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const auto& r) { return r->running; });
}

bool Supervisor::any_pipe_open() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const auto& r) { return r->fds[0] >= 0 || r->fds[1] >= 0; });
}

void Supervisor::signal_running(int sig) {
  for (auto& r : ranks_) {
    if (!r->running) continue;
    // The whole group, so whatever the rank started goes too; the pid alone if the group
    // is already gone.
    if (kill(-r->pid, sig) != 0) kill(r->pid, sig);
  }
}

void Supervisor::begin_stop() {
  if (stopping_) return;
  stopping_ = true;
  signal_running(SIGTERM);
  kill_at_ = steady_clock::now() + std::chrono::duration_cast<steady_clock::duration>(
                                       std::chrono::duration<double>(options_.grace_s));
}

void Supervisor::read_pipe(Rank& r, int which) {
  char buf[65536];
  ssize_t n = read(r.fds[which], buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  StreamKind kind = which == 0 ? StreamKind::out : StreamKind::err;
  if (n > 0) {
    r.output->feed(kind, buf, static_cast<size_t>(n));
    return;
  }
  r.output->finish(kind);
  close(r.fds[which]);
  r.fds[which] = -1;
}

void Supervisor::reap(JobOutcome& outcome) {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = *ranks_[i];
    if (!r.running) continue;
    int ws = 0;
    pid_t got = waitpid(r.pid, &ws, WNOHANG);
    if (got != r.pid) continue;
    r.running = false;
    bool ok = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
    if (ok && !stopping_) r.ended_ok = true;
    if (ok || stopping_) continue;
    outcome.cause = JobOutcome::Cause::rank_failed;
    outcome.exit_code = exit_code_of(ws);
    outcome.failed_rank = static_cast<int>(i);  // index for now; turned into the rank at the end
    outcome.failure = describe_wait_status(ws);
    size_t others = static_cast<size_t>(std::count_if(ranks_.begin(), ranks_.end(), [](const auto& x) { return x->running; }));
    // Ranks that finished before this one failed: a peer that "closed its connection normally"
    // in this rank's error is then one that had ended, not one still running into trouble.
    std::string ended;
    for (const auto& x : ranks_) {
      if (x->ended_ok) ended += (ended.empty() ? "" : ", ") + std::to_string(x->rank);
    }
    say("rank " + std::to_string(r.rank) + " (local rank " + std::to_string(r.local_rank) + " on node " +
        std::to_string(options_.node_rank) + ", pid " + std::to_string(r.pid) + ") failed: " + outcome.failure +
        (others ? "; stopping the other " + std::to_string(others) + " running rank(s)" : "") +
        (ended.empty() ? "" : "; rank(s) " + ended + " had already ended with exit code 0"));
    begin_stop();
  }
}

void Supervisor::handle_signals(JobOutcome& outcome) {
  signalfd_siginfo info;
  while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reap() runs after every wake-up
    if (!stopping_) {
      outcome.cause = JobOutcome::Cause::signaled;
      outcome.exit_code = 128 + sig;
      outcome.failure = "braidrun received " + signal_name(sig);
      say("received " + signal_name(sig) + "; stopping all ranks (SIGTERM, SIGKILL after " +
          std::to_string(options_.grace_s) + " s; send it again to kill them now)");
      begin_stop();
    } else if (!killed_) {
      say("received " + signal_name(sig) + " again; killing all ranks now");
      kill_at_ = steady_clock::now();
    }
  }
}

JobOutcome Supervisor::run(const TickFn& on_tick) {
  JobOutcome outcome;
  auto next_tick = steady_clock::now() + options_.tick;
  std::optional<steady_clock::time_point> drain_until, give_up_at;
  std::vector<pollfd> pfds;
  std::vector<std::pair<Rank*, int>> owners;
  for (;;) {
    reap(outcome);
    auto now = steady_clock::now();
    if (!any_running()) {
      if (!any_pipe_open()) break;
      if (!drain_until) drain_until = now + options_.drain_wait;
      if (now >= *drain_until) break;  // a grandchild holds a pipe open: stop relaying it
    }
    if (stopping_ && !killed_ && now >= kill_at_ && any_running()) {
      for (auto& r : ranks_) {
        if (r->running) say("rank " + std::to_string(r->rank) + " (pid " + std::to_string(r->pid) + ") still running after the grace period; sending SIGKILL");
      }
      signal_running(SIGKILL);
      killed_ = true;
      give_up_at = now + options_.kill_wait;
    }
    if (give_up_at && now >= *give_up_at && any_running()) {
      for (auto& r : ranks_) {
        if (r->running) say("rank " + std::to_string(r->rank) + " (pid " + std::to_string(r->pid) + ") did not die after SIGKILL; giving up on it");
        r->running = false;
      }
      continue;
    }
    // Ticks go on while ranks are being stopped (braidrun's heartbeat rides on them); a stop
    // asked for then changes nothing.
    if (any_running() && on_tick && now >= next_tick) {
      std::optional<ExternalStop> stop = on_tick();
      if (stop && !stopping_) {
        outcome.cause = JobOutcome::Cause::external;
        outcome.exit_code = stop->exit_code;
        outcome.failure = stop->reason;
        say(stop->reason + "; stopping all ranks");
        begin_stop();
      }
      next_tick = steady_clock::now() + options_.tick;
    }

    int timeout = 1000;
    if (any_running()) timeout = std::min(timeout, ms_until(next_tick));
    if (stopping_ && !killed_) timeout = std::min(timeout, ms_until(kill_at_));
    if (give_up_at) timeout = std::min(timeout, ms_until(*give_up_at));
    if (drain_until) timeout = std::min(timeout, ms_until(*drain_until));
    pfds.clear();
    owners.clear();
    pfds.push_back({signal_fd_, POLLIN, 0});
    owners.emplace_back(nullptr, 0);
    for (auto& r : ranks_) {
      for (int w = 0; w < 2; ++w) {
        if (r->fds[w] < 0) continue;
        pfds.push_back({r->fds[w], POLLIN, 0});
        owners.emplace_back(r.get(), w);
      }
    }
    int n = poll(pfds.data(), pfds.size(), timeout);
    if (n <= 0) continue;
    if (pfds[0].revents) handle_signals(outcome);
    for (size_t i = 1; i < pfds.size(); ++i) {
      if (pfds[i].revents) read_pipe(*owners[i].first, owners[i].second);
    }
  }
  for (auto& r : ranks_) {
    for (int w = 0; w < 2; ++w) {
      if (r->fds[w] < 0) continue;
      r->output->finish(w == 0 ? StreamKind::out : StreamKind::err);
      close(r->fds[w]);
      r->fds[w] = -1;
    }
  }
  if (outcome.cause == JobOutcome::Cause::rank_failed) {
    Rank& failed = *ranks_[static_cast<size_t>(outcome.failed_rank)];
    outcome.failed_rank = failed.rank;
    outcome.failed_local_rank = failed.local_rank;
    outcome.tail = failed.output->tail();
  }
  return outcome;
}

}  // namespace braid::braidrun
