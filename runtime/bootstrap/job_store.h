// runtime/bootstrap/job_store.h - a top-level communicator's store and configuration, from the
// job a rendezvous found (rendezvous.h).
//
// open_job_store connects to the job's store, served by the launcher (braidrun) or, without
// one, by rank 0, which starts it here. job_config then joins through that store
// (store_join.h: every rank of this generation meets, and the communicator gets its own
// namespace and id), gives the failure board a bounded connection of its own, and returns what
// the communicator is made from. Both throw braid::Error saying what went wrong and what to do.
#pragma once

#include <memory>

#include "braid/store.h"
#include "common/env.h"
#include "runtime/bootstrap/rendezvous.h"
#include "runtime/communicator_config.h"

namespace braid {

// Connects to (or, on rank 0 without a launcher, serves in *server) the job's store at
// job.master_addr and job.store_port.
std::shared_ptr<Store> open_job_store(const JobInfo& job, const Env& env, std::unique_ptr<TcpStoreServer>* server);

// Joins the communicator's ranks through `store` and returns its configuration; `server` (when
// this rank serves the store) goes into it, so the store lives as long as the communicator.
// `limit` names what set env.rendezvous_timeout_s, for the join's messages.
CommunicatorConfig job_config(std::shared_ptr<Store> store, std::unique_ptr<TcpStoreServer> server, const JobInfo& job,
                              const Env& env, const std::string& limit = "BRAID_RENDEZVOUS_TIMEOUT_S");

}  // namespace braid
