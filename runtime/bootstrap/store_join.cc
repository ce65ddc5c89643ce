#include "runtime/bootstrap/store_join.h"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <vector>

#include "braid/error.h"
#include "common/log.h"

namespace braid {
namespace {

std::string process_identity() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + std::to_string(getpid());
}

uint64_t random_id() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
}

// Store calls throw braid::Error; inside the runtime failures are Status values.
template <typename F>
Status store_call(F&& f) {
  try {
    f();
    return Status::ok();
  } catch (const Error& e) {
    return Status(e.code(), e.what());
  }
}

Status fail_everyone(Store& ns, const std::string& reason) {
  (void)store_call([&] { ns.set("ready", "error: " + reason); });
  return invalid_argument(reason);
}

struct Missing {
  std::string list;  // "2, 3", the first 16 only
  int count = 0;
  bool unreachable = false;  // the store did not answer: which ranks are missing is unknown
  std::string ranks() const {
    if (unreachable) return "the other ranks (which are missing is unknown: the store stopped answering)";
    return (count == 1 ? "rank " : "ranks ") + list;
  }
};

// The ranks other than `self` that have not set `<kind>/<r>`.
Missing missing_ranks(Store& ns, const std::string& kind, int size, int self = -1) {
  Missing m;
  for (int r = 0; r < size; ++r) {
    bool present = true;
    if (r != self && !store_call([&] { present = ns.check({kind + "/" + std::to_string(r)}); }).is_ok()) {
      m.unreachable = true;
      return m;
    }
    if (present) continue;
    if (++m.count <= 16) m.list += (m.list.empty() ? "" : ", ") + std::to_string(r);
  }
  if (m.count > 16) m.list += ", ... (" + std::to_string(m.count) + " in all)";
  return m;
}

// A rank waiting for the others says so this often, so that a mistake (a rank not started, a
// wrong MASTER_PORT) shows long before the timeout. A short timeout shortens it: a few lines
// before giving up whatever the timeout.
constexpr std::chrono::milliseconds kProgressPeriod = std::chrono::seconds(10);
constexpr std::chrono::milliseconds kMinProgressPeriod = std::chrono::milliseconds(100);

// Waits up to `timeout` for `keys` in slices, calling still_waiting(time left) between them.
// Returns the last wait's status: ok, a timeout, or another store failure.
template <typename F>
Status wait_in_slices(Store& ns, const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                      F&& still_waiting) {
  using Clock = std::chrono::steady_clock;
  using std::chrono::milliseconds;
  const auto give_up = Clock::now() + timeout;
  const auto period = std::clamp(timeout / 4, kMinProgressPeriod, kProgressPeriod);
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(give_up - Clock::now());
    Status waited = store_call([&] { ns.wait(keys, std::clamp(left, milliseconds(0), period)); });
    if (waited.code() != ErrorCode::timeout || Clock::now() >= give_up) return waited;
    still_waiting(std::chrono::duration_cast<milliseconds>(give_up - Clock::now()));
  }
}

std::string seconds_left(std::chrono::milliseconds left) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(left + std::chrono::milliseconds(999)).count()) +
         " s";
}

}  // namespace

Result<JoinResult> join_through_store(std::shared_ptr<Store> store, int rank, int size, int generation,
                                      std::chrono::milliseconds timeout, const std::string& limit) {
  // Each process may own one rank of the job: the first claim of a rank wins for good, so a
  // second process started with the same RANK fails here instead of corrupting the job.
  const std::string me = process_identity();
  std::string owner;
  RETURN_IF_ERROR(store_call([&] { owner = store->compare_set("braid/owner/" + std::to_string(rank), "", me); }));
  auto ns = std::make_shared<PrefixStore>("braid/c" + std::to_string(generation), store);
  if (owner != me) {
    return fail_everyone(*ns, "two processes claim RANK=" + std::to_string(rank) + ": " + owner + " and " + me +
                                  " (this one). Each process needs its own RANK; check the launcher's settings");
  }
  RETURN_IF_ERROR(store_call([&] { ns->set("rank/" + std::to_string(rank), me); }));
  const std::string size_text = std::to_string(size);
  std::string agreed;
  RETURN_IF_ERROR(store_call([&] { agreed = ns->compare_set("world_size", "", size_text); }));
  if (agreed != size_text) {
    return fail_everyone(*ns, "ranks disagree on WORLD_SIZE: rank " + std::to_string(rank) + " (" + me + ") has " +
                                  size_text + ", an earlier rank has " + agreed);
  }
  uint64_t proposed = random_id();
  std::string comm_id;
  RETURN_IF_ERROR(store_call([&] { comm_id = ns->compare_set("comm_id", "", std::to_string(proposed)); }));

  int64_t joined = 0;
  RETURN_IF_ERROR(store_call([&] { joined = ns->add("joined", 1); }));
  if (joined == size) RETURN_IF_ERROR(store_call([&] { ns->set("ready", "ok"); }));

  // Waits in slices, saying between them who is missing: a rendezvous mistake otherwise waits
  // the whole timeout without a word.
  Status waited = wait_in_slices(*ns, {"ready"}, timeout, [&](std::chrono::milliseconds left) {
    int64_t now_joined = 0;
    (void)store_call([&] { now_joined = ns->add("joined", 0); });
    log_line(LogLevel::warn, "rendezvous: rank " + std::to_string(rank) + " waiting for " +
                                 missing_ranks(*ns, "rank", size).ranks() + " at " + store->address() + " - " +
                                 std::to_string(now_joined) + "/" + std::to_string(size) + " joined, giving up in " +
                                 seconds_left(left) + " (" + limit + ")");
  });
  if (waited.code() == ErrorCode::timeout) {
    return timeout_error("rendezvous: rank " + std::to_string(rank) + " waited " +
                         std::to_string(timeout.count() / 1000) + " s at the store " + store->address() +
                         " for " + missing_ranks(*ns, "rank", size).ranks() + " (" + std::to_string(size) +
                         " expected). Are they started, with the same MASTER_ADDR/MASTER_PORT? " + limit +
                         " sets the limit");
  }
  RETURN_IF_ERROR(waited);
  std::string ready;
  RETURN_IF_ERROR(store_call([&] { ready = ns->get("ready"); }));
  if (ready != "ok") return invalid_argument(ready.substr(ready.find(' ') + 1));

  JoinResult result;
  result.store = ns;
  result.comm_id = std::stoull(comm_id);
  return result;
}

Status wait_for_ranks(Store& ns, const std::string& kind, const std::string& what, int rank, int size) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) {
    if (r != rank) keys.push_back(kind + "/" + std::to_string(r));
  }
  const std::chrono::milliseconds timeout = ns.timeout();
  Status waited = wait_in_slices(ns, keys, timeout, [&](std::chrono::milliseconds left) {
    const Missing m = missing_ranks(ns, kind, size, rank);
    log_line(LogLevel::warn, "rendezvous: rank " + std::to_string(rank) + " waiting for the " + what + " of " +
                                 m.ranks() + " at " + ns.address() + " - " + std::to_string(size - m.count) + "/" +
                                 std::to_string(size) + " published, giving up in " + seconds_left(left) +
                                 " (BRAID_RENDEZVOUS_TIMEOUT_S)");
  });
  if (waited.code() == ErrorCode::timeout) {
    return timeout_error("rendezvous: rank " + std::to_string(rank) + " waited " +
                         std::to_string(timeout.count() / 1000) + " s at the store " + ns.address() + " for the " +
                         what + " of " + missing_ranks(ns, kind, size, rank).ranks() +
                         ", which joined but published none: did they exit or crash after joining? "
                         "BRAID_RENDEZVOUS_TIMEOUT_S sets the limit");
  }
  return waited;
}

namespace {

// A lingering rank counts itself in `finished` with this mark added, so the rank that leaves
// last learns from its own count, without another store call, that the store is about to end.
constexpr int64_t kLingerMark = int64_t{1} << 32;

void delete_rank_keys(Store& ns, int r) {
  for (const char* k : {"rank/", "settings/", "addr/"}) ns.delete_key(k + std::to_string(r));
}

}  // namespace

int64_t leave_store(Store& ns, int rank, int size, bool lingering) {
  if (ns.add("read", 0) >= size) {
    delete_rank_keys(ns, rank);
  } else {  // a rank may still need them (one that failed early leaves before the others read)
    ns.add("kept", 1);
  }
  const int64_t finished = ns.add("finished", lingering ? 1 + kLingerMark : 1);
  const int64_t count = finished % kLingerMark;
  // Not last; or last, but the lingering rank's store ends with it (it serves it) and it polls
  // `finished` until then.
  if (count != size || finished >= kLingerMark) return count;
  // Every rank has left: nobody reads this namespace again.
  if (ns.check({"kept"})) {
    for (int r = 0; r < size; ++r) delete_rank_keys(ns, r);
  }
  for (const char* k : {"world_size", "comm_id", "joined", "ready", "read", "kept", "finished"}) ns.delete_key(k);
  return count;
}

bool everyone_left(Store& ns, int size) { return ns.add("finished", 0) % kLingerMark >= size; }

}  // namespace braid
