// common/env.h - every BRAID_* variable, read and checked once.
//
// Nobody else calls getenv for BRAID_* settings: they take an `Env`. A bad value is an error
// naming the variable, its value and what is allowed, never silently ignored. common/env_vars.cc
// lists every variable with its bounds, default and meaning (docs/configuration.md is printed from
// it); a BRAID_* name that is not on that list gets one warning at the first global_env().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace braid {

// Looks a variable up; nullptr when unset. Tests inject their own.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup process_env();

enum class LogLevel : uint8_t { warn = 0, info = 1, trace = 2 };

struct Env {
  // BRAID_TRANSPORT: auto, or a preference list of tcp | tcp-poll | ib | shm | inproc ("shm,tcp").
  // Each peer gets the first transport of the list that both ends brought up and that reaches
  // it (runtime/links/transport_choice.h). auto = shm, ib, tcp; tcp over io_uring falls back to epoll
  // under auto. Default auto.
  std::string transport = "auto";
  // BRAID_SHM_DISABLE: 1 leaves the shm transport out of BRAID_TRANSPORT's list. Default 0.
  bool shm_disable = false;
  // BRAID_SOCKET_IFNAME: interfaces to use, like NCCL_SOCKET_IFNAME: "eth0,ib" prefixes,
  // "^docker" excludes, "=eth0" exact. Default: the interface that routes to MASTER_ADDR.
  std::string socket_ifname;
  // BRAID_NSOCKS: sockets per peer a message is striped across, 1..64. 0 = from link speed.
  int nsocks = 0;
  // BRAID_CHUNK_BYTES: pipelining segment size of collectives, 4 KiB..64 MiB; 0 = automatic.
  size_t chunk_bytes = 0;
  // BRAID_RING_DEPTH: segments each hop of a ring keeps moving, 1..16; 0 = automatic: 1 when
  // every rank's transport address is host-local (all on loopback), else 2. Like
  // BRAID_CHUNK_BYTES it must be the same on every rank (operation headers check both).
  int ring_depth = 0;
  // BRAID_RING_ORDER: host (default): rings and trees put the ranks of one host side by side
  // (collectives/ring_order.h); rank: as numbered. Same on every rank (on the settings card).
  std::string ring_order = "host";
  // BRAID_ALGO: auto | ring | tree | rd (recursive doubling) | chain | pairwise. Default auto.
  std::string algo = "auto";
  // BRAID_TIMEOUT_S: bound on every collective, seconds (> 0). Default 600.
  double timeout_s = 600;
  // BRAID_RENDEZVOUS_TIMEOUT_S: bound on rendezvous and every store wait. Default 300.
  double rendezvous_timeout_s = 300;
  // Whether BRAID_RENDEZVOUS_TIMEOUT_S was set: then it wins over a timeout the program gives
  // (Communicator::from_store's, which torch's init_process_group(timeout=) becomes).
  bool rendezvous_timeout_set = false;
  // BRAID_PEER_TIMEOUT_S: a silent peer (no FIN, no RST) is declared lost after this. Default 30.
  double peer_timeout_s = 30;
  // BRAID_SHRINK_TIMEOUT_S: how long Communicator::shrink() waits for the other survivors to
  // call it (runtime/bootstrap/shrink.h). Default 5.
  double shrink_timeout_s = 5;
  // BRAID_PORT_RANGE: "lo-hi" ports the transport listens on; empty = any (port 0).
  uint16_t port_lo = 0, port_hi = 0;
  // BRAID_DEBUG: WARN | INFO | TRACE. Default WARN.
  LogLevel debug = LogLevel::warn;
  // BRAID_ZCOPY_BYTES: sends at least this large use MSG_ZEROCOPY/SEND_ZC; 0 = never. Default 1 MiB.
  size_t zcopy_bytes = size_t{1} << 20;
  // BRAID_SPIN_US: how long a waiter spins before sleeping, microseconds (0..100000). Unset: 50,
  // which the runtime lowers to 0 where ranks of one host share CPUs (runtime/links/spin_policy.h).
  int spin_us = 50;
  // Whether BRAID_SPIN_US was set (then it is used as it is, 50 included).
  bool spin_us_set = false;
  // BRAID_SHM_CMA: 1: the shm transport moves messages of 64 KiB and up in one copy with
  // cross-memory attach where ptrace rules allow (shm_cma); auto (default, shm_cma_auto): only
  // those larger than its ring whose buffer lies in huge pages, where process_vm_readv copies
  // as fast as memcpy; 0: neither, everything through the pipelined two-copy ring (docs/shm.md).
  bool shm_cma = false;
  bool shm_cma_auto = true;
  // BRAID_SHM_RING_BYTES: bytes of each direction's shm ring per pair of ranks, 64 KiB..1 GiB,
  // a multiple of 4 KiB; 0 = the default, 4 MiB.
  size_t shm_ring_bytes = size_t{512} << 10;
  // BRAID_CALLER_PROGRESS: 0 | 1. A blocking call (or wait()) whose communicator has nothing
  // else queued or running runs the operation on the calling thread instead of waking the
  // progress thread. Default 1.
  bool caller_progress = true;
  // BRAID_CUDA_STAGING_BYTES: pinned host memory a communicator stages CUDA buffers through,
  // at least 64 KiB (runtime/device/staging_pipeline.h). Same on every rank. Default 64 MiB.
  size_t cuda_staging_bytes = size_t{64} << 20;
  // BRAID_CUDA_REDUCE: auto | device | host - where reductions into CUDA buffers run
  // (runtime/device/staging_pipeline.h). Same on every rank. Default auto.
  std::string cuda_reduce = "auto";
  // BRAID_LOOPBACK_CC: TCP congestion control of data sockets whose peer is at a loopback
  // address (reno, cubic, ... as the kernel allows; "system": the kernel's default). Default reno.
  std::string loopback_cc = "reno";
  // BRAID_NETWORK_CC: the same for data sockets whose peer is at any other address. Default
  // "system": a network is there, and the host's choice is its administrator's.
  std::string network_cc = "system";
  // BRAID_IB_HCA: HCA names for the ib transport (like NCCL_IB_HCA). Default: all.
  std::string ib_hca;
  // BRAID_GDR: 0 | 1 | auto - GPUDirect RDMA for CUDA buffers. Default auto.
  std::string gdr = "auto";
  // BRAID_IB_GID_INDEX: the RoCE GID index to use, 0..65535; -1 (unset) = chosen from the
  // bootstrap address (transport/ib/port_choice.h).
  int ib_gid_index = -1;
  // BRAID_IB_TIMEOUT: verbs ack timeout exponent (4.096 us * 2^N), 1..31. Default 18.
  int ib_timeout = 18;
  // BRAID_IB_RETRY_CNT: retries of an unacknowledged packet, 0..7. Default 7.
  int ib_retry_cnt = 7;
  // BRAID_IB_QPS_PER_CONNECTION: queue pairs a connection stripes across, 1..64. Default 1.
  int ib_qps_per_connection = 1;
  // BRAID_IB_SL: InfiniBand service level, 0..15. Default 0.
  int ib_sl = 0;
  // BRAID_IB_TC: traffic class, 0..255. Default 0.
  int ib_tc = 0;
  // BRAID_SECRET: the job's secret (at least 16 characters). Every store and transport connection
  // proves it knows it (common/job_secret.h). braidrun makes one per job and hands it to its
  // ranks through BRAID_SECRET_FILE. Default: none (the job is unauthenticated, and says so once).
  std::string secret;
  // BRAID_SECRET_FILE: a file holding the secret, readable by its owner only (mode 0600 or
  // stricter). Set at most one of BRAID_SECRET and BRAID_SECRET_FILE. Default: none.
  std::string secret_file;
  // BRAID_JOB_ID: a name for the job, shown when a second job meets this one's store. Default:
  // the launcher's (braidrun's, TORCHELASTIC_RUN_ID, SLURM_JOB_ID), else none.
  std::string job_id;
  // BRAID_STORE_BIND: the address the rendezvous store listens on. Default: the address
  // MASTER_ADDR resolves to (loopback stays loopback); "0.0.0.0" or "::" for every interface.
  std::string store_bind;
  // BRAID_STORE_MAX_FRAME_BYTES: largest request the store accepts (a key and value together),
  // 4 KiB..64 MiB; a longer one is refused before any of it is buffered. Default 4 MiB.
  size_t store_max_frame_bytes = size_t{4} << 20;
  // BRAID_STORE_MAX_CLIENTS: connections the store serves at once, 16..1000000. Default 65536.
  size_t store_max_clients = 65536;
  // BRAID_STORE_MAX_PENDING: connections that have not yet proved the job's secret, 1..100000;
  // past it the oldest is dropped, so strangers cannot crowd out the job's ranks. Default 256.
  size_t store_max_pending = 256;

  // Parses every variable; the first bad one is an invalid_argument error naming it.
  static Result<Env> parse(const EnvLookup& lookup);
  bool operator==(const Env&) const = default;
};

// The process's Env, parsed on first use (thread-safe) and never changed after: the reference
// stays valid for the life of the process. A bad value fails every call. The first call also
// warns, once per unknown name, about BRAID_* variables that braid does not know.
const Result<Env>& global_env();

// Helpers for other layers that read their own variables through an EnvLookup
// (rendezvous reads RANK, WORLD_SIZE, ...). Errors name the variable and its value.
Result<int64_t> parse_env_int(const char* name, const char* value, int64_t min, int64_t max);
Result<double> parse_env_seconds(const char* name, const char* value);

}  // namespace braid
