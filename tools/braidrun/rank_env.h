// tools/braidrun/rank_env.h - the environment each rank starts with, torchrun's variables.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace braid::braidrun {

struct RankIdentity {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr;
  // MASTER_PORT: kept free for rank 0's torch store (torch's env:// serves one there, as under
  // torchrun's c10d rendezvous); braid's own store is on store_port (BRAID_STORE_PORT), at the
  // same address.
  uint16_t master_port = 0;
  uint16_t store_port = 0;
  std::string run_id;
  int restart_count = 0;  // the round: 0 for the first start, then one more per restart
  int max_restarts = 0;
  // BRAID_JOB_ID for the rank; empty: left as braidrun found it.
  std::string job_id{};
  // BRAID_SECRET_FILE for the rank (any BRAID_SECRET of `base` is dropped); empty: left as
  // braidrun found them.
  std::string secret_file{};
};

// `base` ("NAME=value" strings, usually braidrun's own environ) with torchrun's variables for
// this rank set over it (TORCHELASTIC_USE_AGENT_STORE=False, as torchrun's c10d rendezvous says:
// torch's rank 0 serves torch's store on MASTER_PORT), plus BRAID_AGENT_STORE=1 and
// BRAID_STORE_PORT: braidrun serves braid's store at MASTER_ADDR:BRAID_STORE_PORT, so no rank
// may serve it itself. The secret travels only as a file's name, never on a command line.
std::vector<std::string> build_rank_env(const std::vector<std::string>& base, const RankIdentity& id);

// The job's secret in a file (mode 0600) inside a directory of its own (mode 0700) that only
// this user can enter, in $TMPDIR (or /tmp); both are removed when this object goes, at braidrun's
// exit. A SIGKILLed braidrun leaves them behind (readable by this user only); the next braidrun of
// this user that makes its own removes them, once the braidrun they belonged to is gone.
class SecretFile {
 public:
  static Result<std::unique_ptr<SecretFile>> create(const std::string& secret);
  ~SecretFile();
  SecretFile(const SecretFile&) = delete;
  SecretFile& operator=(const SecretFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  SecretFile() = default;
  std::string dir_;
  std::string path_;
};

// The process's environ as strings.
std::vector<std::string> current_environ();

}  // namespace braid::braidrun
