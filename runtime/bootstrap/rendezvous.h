// runtime/bootstrap/rendezvous.h - who am I, how many are we, and where do we meet.
//
// Launchers describe a job in different variables: torchrun (and braidrun) set MASTER_ADDR,
// MASTER_PORT, RANK, WORLD_SIZE and optionally LOCAL_RANK, LOCAL_WORLD_SIZE; Slurm sets
// SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and SLURM_JOB_NODELIST; Open MPI sets
// OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE. resolve_env() reads them (torchrun's
// first, then Slurm's, then Open MPI's) into one JobInfo, or explains everything that is wrong.
#pragma once

#include <cstdint>
#include <string>

#include "common/env.h"
#include "common/status.h"

namespace braid {

struct JobInfo {
  std::string master_addr;
  uint16_t master_port = 0;
  int rank = -1;
  int size = -1;
  int local_rank = 0;
  int local_size = 1;
  // The launcher (braidrun) serves the store at master_addr:master_port; ranks only connect.
  bool agent_store = false;
  // The program handed its own store in (Communicator::from_store): braid serves none.
  bool foreign_store = false;
  // torchrun's agent serves torch's own store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE),
  // which speaks another protocol: braid's store then lives on store_port (rank 0 serves it).
  uint16_t store_port = 0;
  // Where the numbers came from ("torchrun-style environment", "Slurm", "Open MPI").
  std::string source;
  // Which job this is, so that a rank of another job given the same port is refused by the
  // store (store_protocol.h) instead of joining: BRAID_JOB_ID, else the launcher's run id
  // (braidrun and torchrun set TORCHELASTIC_RUN_ID; torchrun's default "none" does not count),
  // else SLURM_JOB_ID. Empty: unknown, nothing is compared.
  std::string job_id;
};

// Reads the job from environment variables. All missing variables are listed in one error.
Result<JobInfo> resolve_env(const EnvLookup& lookup);

// The job id as JobInfo::job_id describes it ("" when unknown).
std::string resolve_job_id(const EnvLookup& lookup);

// Parses "tcp://host:port" (with optional "?rank=R&world_size=N") into master_addr/port.
// rank/size passed explicitly win over the URL's; -1 means "not given".
Result<JobInfo> resolve_tcp_url(const std::string& url, int rank, int size);

// The first host of a Slurm hostlist: "node[01-04,07],gpu5" -> "node01".
Result<std::string> first_host_of_nodelist(const std::string& nodelist);

}  // namespace braid
