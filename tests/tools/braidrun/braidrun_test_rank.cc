// braidrun_test_rank: the program braidrun's tests launch as ranks. Runs its arguments as a
// script of actions, in order; "action@R" runs only on RANK R, "action#N" only in round N
// (TORCHELASTIC_RESTART_COUNT=N), "action@R#N" only on rank R in round N, "action~W" only when
// WORLD_SIZE is W (with --nnodes MIN:MAX, membership changes leave the restart count alone):
//   env                print the torchrun variables braidrun set, on one line
//   print TEXT         print TEXT on stdout        eprint TEXT   the same on stderr
//   halves TEXT        print TEXT as two writes 50 ms apart, then '\n'
//   exit CODE          exit with CODE              kill SIG      raise signal SIG
//   sleep SECONDS      sleep                       ignore-term   ignore SIGTERM from now on
//   pidfile DIR        write this pid to DIR/rank<RANK>.pid
//   await-pidfiles DIR N  wait (up to 30 s) until DIR holds N ranks' pidfiles: every rank got
//                      as far as its "pidfile" (whatever a loaded machine makes of their start)
//   store-set KEY VAL  set KEY in braid's store at MASTER_ADDR:BRAID_STORE_PORT
//   store-get KEY      get KEY (waits) and print "got KEY=VALUE"
//   stale-check DIR    in round 0 (BRAID_JOB_ID's /round<R>, else the restart count), keep
//                      this rank's store address and job id in DIR; in a later round, try
//                      them as a process left over from round 0 would, and print
//                      "stale old-store=gone|reached new-store=refused|joined|error"
//   secret             print where the job's secret came from: "secret_file=PATH file_mode=600
//                      dir_mode=700 secret_env=unset job_id=ID cmdline_has_secret=no"
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>

#include "braid/error.h"
#include "braid/store.h"

namespace {

const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

std::unique_ptr<braid::TcpStore>& store() {
  static std::unique_ptr<braid::TcpStore> s;
  if (!s) {
    s = braid::TcpStore::connect(env_or("MASTER_ADDR", "127.0.0.1"),
                                 static_cast<uint16_t>(std::atoi(env_or("BRAID_STORE_PORT", "0"))),
                                 braid::TcpStoreOptions{.timeout = std::chrono::seconds(20)});
  }
  return s;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

unsigned mode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 0777) : 0;
}

void print_secret() {
  std::string file = env_or("BRAID_SECRET_FILE", "");
  std::string dir = file.substr(0, file.rfind('/'));
  std::string secret = file.empty() ? "" : slurp(file);
  // Neither this rank's command line nor braidrun's holds it.
  bool on_cmdline = !secret.empty() && (slurp("/proc/self/cmdline").find(secret) != std::string::npos ||
                                        slurp("/proc/" + std::to_string(getppid()) + "/cmdline").find(secret) !=
                                            std::string::npos);
  std::printf("secret_file=%s file_mode=%o dir_mode=%o secret_env=%s job_id=%s secret_bytes=%zu cmdline_has_secret=%s\n",
              file.c_str(), mode_of(file), mode_of(dir), std::getenv("BRAID_SECRET") ? "set" : "unset",
              env_or("BRAID_JOB_ID", ""), secret.size(), on_cmdline ? "yes" : "no");
}

// A process of round 0 that outlived it: its store (BRAID_STORE_PORT of round 0) and its job id,
// against the store of this round.
void stale_check(const std::string& dir, int rank, const std::string& round) {
  const std::string path = dir + "/round0.rank" + std::to_string(rank);
  if (round == "0") {
    std::ofstream(path) << env_or("BRAID_STORE_PORT", "0") << "\n" << env_or("BRAID_JOB_ID", "") << "\n";
    return;
  }
  std::ifstream in(path);
  std::string old_port, old_job;
  std::getline(in, old_port);
  std::getline(in, old_job);
  const std::string host = env_or("MASTER_ADDR", "127.0.0.1");
  auto try_store = [&](const std::string& port) -> std::string {
    try {
      braid::TcpStore::connect(host, static_cast<uint16_t>(std::atoi(port.c_str())),
                               braid::TcpStoreOptions{.timeout = std::chrono::seconds(1), .job_id = old_job})
          ->set("stale-was-here", "1");
      return "joined";
    } catch (const braid::Error& e) {
      return e.code() == braid::ErrorCode::invalid_argument ? "refused" : "error";
    }
  };
  std::string old_store = try_store(old_port) == "joined" ? "reached" : "gone";
  std::printf("stale old-port-differs=%s old-store=%s new-store=%s\n", old_port != env_or("BRAID_STORE_PORT", "") ? "yes" : "no",
              old_store.c_str(), try_store(env_or("BRAID_STORE_PORT", "0")).c_str());
}

int arity(const std::string& action) {
  if (action == "env" || action == "ignore-term" || action == "secret") return 0;
  if (action == "store-set" || action == "await-pidfiles") return 2;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = std::atoi(env_or("RANK", "-1"));
  const std::string round = env_or("TORCHELASTIC_RESTART_COUNT", "0");
  for (int i = 1; i < argc; ++i) {
    std::string action = argv[i];
    int only = -1;
    std::string only_round, only_world;
    if (auto tilde = action.find('~'); tilde != std::string::npos) {
      only_world = action.substr(tilde + 1);
      action.resize(tilde);
    }
    if (auto hash = action.find('#'); hash != std::string::npos) {
      only_round = action.substr(hash + 1);
      action.resize(hash);
    }
    if (auto at = action.find('@'); at != std::string::npos) {
      only = std::atoi(action.c_str() + at + 1);
      action.resize(at);
    }
    int n = arity(action);
    if (i + n >= argc) {
      std::fprintf(stderr, "braidrun_test_rank: '%s' needs %d argument(s)\n", argv[i], n);
      return 2;
    }
    const char* a1 = n >= 1 ? argv[i + 1] : "";
    const char* a2 = n >= 2 ? argv[i + 2] : "";
    i += n;
    if (only >= 0 && only != rank) continue;
    if (!only_round.empty() && only_round != round) continue;
    if (!only_world.empty() && only_world != env_or("WORLD_SIZE", "")) continue;
    if (action == "env") {
      std::printf("RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s GROUP_WORLD_SIZE=%s "
                  "ROLE_RANK=%s ROLE_WORLD_SIZE=%s MASTER_ADDR=%s MASTER_PORT=%s TORCHELASTIC_RUN_ID=%s "
                  "BRAID_AGENT_STORE=%s TORCHELASTIC_RESTART_COUNT=%s TORCHELASTIC_MAX_RESTARTS=%s ROLE_NAME=%s "
                  "BRAID_STORE_PORT=%s TORCHELASTIC_USE_AGENT_STORE=%s BRAID_JOB_ID=%s\n",
                  env_or("RANK", "?"), env_or("LOCAL_RANK", "?"), env_or("WORLD_SIZE", "?"),
                  env_or("LOCAL_WORLD_SIZE", "?"), env_or("GROUP_RANK", "?"), env_or("GROUP_WORLD_SIZE", "?"),
                  env_or("ROLE_RANK", "?"), env_or("ROLE_WORLD_SIZE", "?"), env_or("MASTER_ADDR", "?"),
                  env_or("MASTER_PORT", "?"), env_or("TORCHELASTIC_RUN_ID", "?"), env_or("BRAID_AGENT_STORE", "?"),
                  env_or("TORCHELASTIC_RESTART_COUNT", "?"), env_or("TORCHELASTIC_MAX_RESTARTS", "?"),
                  env_or("ROLE_NAME", "?"), env_or("BRAID_STORE_PORT", "?"), env_or("TORCHELASTIC_USE_AGENT_STORE", "?"),
                  env_or("BRAID_JOB_ID", ""));
    } else if (action == "print") {
      std::printf("%s\n", a1);
    } else if (action == "eprint") {
      std::fprintf(stderr, "%s\n", a1);
    } else if (action == "halves") {
      std::string s = a1;
      std::string first = s.substr(0, s.size() / 2), second = s.substr(s.size() / 2) + "\n";
      ssize_t ignored = write(1, first.data(), first.size());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ignored = write(1, second.data(), second.size());
      (void)ignored;
    } else if (action == "exit") {
      std::fflush(nullptr);
      std::_Exit(std::atoi(a1));
    } else if (action == "kill") {
      std::fflush(nullptr);
      raise(std::atoi(a1));
    } else if (action == "sleep") {
      std::fflush(nullptr);
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(a1)));
    } else if (action == "ignore-term") {
      signal(SIGTERM, SIG_IGN);
    } else if (action == "pidfile") {
      std::ofstream(std::string(a1) + "/rank" + std::to_string(rank) + ".pid") << getpid() << "\n";
    } else if (action == "await-pidfiles") {
      const int want = std::atoi(a2);
      for (int waited_ms = 0; waited_ms < 30000; waited_ms += 10) {
        int have = 0;
        for (int r = 0; r < 1024 && have < want; ++r) {
          have += ::access((std::string(a1) + "/rank" + std::to_string(r) + ".pid").c_str(), F_OK) == 0;
        }
        if (have >= want) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } else if (action == "store-set") {
      store()->set(a1, a2);
    } else if (action == "stale-check") {
      // The round: BRAID_JOB_ID's "/round<R>" when braidrun gives one (a membership change
      // starts a round without a restart), else the restart count.
      const std::string job = env_or("BRAID_JOB_ID", "");
      const size_t at = job.rfind("/round");
      stale_check(a1, rank, at == std::string::npos ? round : job.substr(at + 6));
    } else if (action == "secret") {
      print_secret();
    } else if (action == "store-get") {
      std::printf("got %s=%s\n", a1, store()->get(a1).c_str());
    } else {
      std::fprintf(stderr, "braidrun_test_rank: unknown action '%s'\n", argv[i - n]);
      return 2;
    }
    std::fflush(nullptr);
  }
  return 0;
}
