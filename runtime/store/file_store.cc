// FileStore: a Store kept in one file that every process opens (file_store_format.h has the
// bytes).
//
// Each call runs as one transaction on the file:
//   1. take this instance's mutex (threads sharing the instance take turns), then an exclusive
//      fcntl lock on the whole file. Open-file-description (OFD) locks, not classic POSIX ones:
//      POSIX locks belong to the process, so two FileStores in one process would not exclude
//      each other, and closing either's fd would drop the other's lock. OFD locks belong to the
//      open file, behave like flock between processes, and are also honoured over NFS, where
//      flock is not reliably shared between clients;
//   2. read what was appended since this instance last looked (`offset`) and apply it to the
//      in-memory copy of the keys, so a call costs the bytes that changed, not the whole file;
//   3. decide, and append the change (if any) as one record;
//   4. unlock.
// The lock is taken with non-blocking tries and a capped backoff rather than F_OFD_SETLKW, so
// a process stopped while holding it fails the others after the store's timeout instead of
// hanging them. Waits are polls of step 2 with backoff from 1 to 10 ms: a new key shows up within
// ~10 ms, and an idle waiter costs one lock and one fstat per 10 ms.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "braid/store.h"
#include "common/deadline.h"
#include "common/log.h"
#include "common/status.h"
#include "runtime/store/file_store_format.h"
#include "runtime/store/socket_util.h"

namespace braid {

using store::FileOp;
using store::FileRecord;
using store::ParseResult;
using store::printable_key;
using store::printable_keys;

namespace {

constexpr auto kFirstPoll = std::chrono::milliseconds(1);
constexpr auto kMaxPoll = std::chrono::milliseconds(10);
constexpr auto kFirstLockRetry = std::chrono::microseconds(20);
constexpr auto kMaxLockRetry = std::chrono::milliseconds(1);
// Longer bounds are taken as "a day": deadline arithmetic on milliseconds::max() would overflow.
constexpr std::chrono::milliseconds kMaxTimeout = std::chrono::hours(24);
constexpr char kTimeoutHint[] = "BRAID_RENDEZVOUS_TIMEOUT_S raises the bound.";

std::string ms_text(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

}  // namespace

struct FileStore::Impl {
  std::string path;
  std::string address;
  std::atomic<int64_t> timeout_ms{0};

  std::mutex mu;  // guards everything below: one transaction of this instance at a time
  UniqueFd fd;
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t offset = 0;  // bytes of the file already applied to `data`
  std::unordered_map<std::string, std::string> data;

  std::chrono::milliseconds timeout() const {
    return std::min(std::chrono::milliseconds(timeout_ms.load()), kMaxTimeout);
  }
  std::string at(const std::string& what) const { return "store " + what + " at " + address + ": "; }

  Status open_file();
  Status lock_file(const std::string& what);
  void unlock_file();
  Status init_header(const std::string& what);
  Status refresh(const std::string& what);
  Status append(const std::string& what, FileOp op, const std::string& key, const std::string& value);
  // Runs `body` as one transaction: locked, and with `data` up to date.
  Status transact(const std::string& what, const std::function<Status()>& body);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  // Polls until every key exists; with `value`, also returns the first key's value.
  Status wait_for(const std::string& what, const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                  std::string* value);
};

Status FileStore::Impl::open_file() {
  int raw = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (raw < 0) {
    int err = errno;
    std::string hint;
    if (err == ENOENT) hint = " Its directory does not exist: create it (on a filesystem every rank sees) first.";
    if (err == EACCES || err == EROFS) hint = " This process cannot write there: pick a writable shared path.";
    if (err == EISDIR) hint = " That is a directory: name a file inside it.";
    Status s = system_error("FileStore: cannot open the store file " + path, err);
    return Status(s.code(), s.message() + "." + hint);
  }
  fd = UniqueFd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return system_error("FileStore: fstat " + path, errno);
  if (!S_ISREG(st.st_mode)) {
    return invalid_argument("FileStore: " + path + " is not a regular file; name a file for the store to keep.");
  }
  dev = st.st_dev;
  ino = st.st_ino;
  return transact("open", [] { return Status::ok(); });
}

Status FileStore::Impl::lock_file(const std::string& what) {
  auto deadline = Deadline::after(timeout());
  auto backoff = std::chrono::duration_cast<std::chrono::nanoseconds>(kFirstLockRetry);
  for (;;) {
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file, however long it grows
    if (::fcntl(fd.get(), F_OFD_SETLK, &fl) == 0) return Status::ok();
    int err = errno;
    if (err == EINVAL || err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP) {
      return system_error(at(what) + "the filesystem holding " + path +
                              " does not support file locks, which the store needs to keep processes from "
                              "overwriting each other (on Lustre, mount with -o flock; or use tcp:// rendezvous). "
                              "Error",
                          err);
    }
    if (err != EINTR && err != EAGAIN && err != EACCES) return system_error(at(what) + "locking " + path, err);
    if (deadline.expired()) {
      return timeout_error(at(what) + "could not lock the store file within " + ms_text(timeout()) +
                           ": another process has held it all that time. Is one stopped or hung mid-call? " +
                           kTimeoutHint);
    }
    std::this_thread::sleep_for(std::min(backoff, deadline.remaining()));
    backoff = std::min<std::chrono::nanoseconds>(backoff * 2, kMaxLockRetry);
  }
}

void FileStore::Impl::unlock_file() {
  struct flock fl {};
  fl.l_type = F_UNLCK;
  fl.l_whence = SEEK_SET;
  // Cannot fail for a lock we hold; if it somehow did, closing the fd would release it.
  (void)::fcntl(fd.get(), F_OFD_SETLK, &fl);
}

Status FileStore::Impl::transact(const std::string& what, const std::function<Status()>& body) {
  std::lock_guard<std::mutex> guard(mu);
  RETURN_IF_ERROR(lock_file(what));
  Status s = refresh(what);
  if (s.is_ok()) s = body();
  unlock_file();
  return s;
}

Status FileStore::Impl::init_header(const std::string& what) {
  std::string head(store::kFileStoreMagic.size(), '\0');
  ssize_t n = ::pread(fd.get(), head.data(), head.size(), 0);
  if (n < 0) return system_error(at(what) + "reading " + path, errno);
  head.resize(static_cast<size_t>(n));
  if (head == store::kFileStoreMagic) {
    offset = head.size();
    return Status::ok();
  }
  // An empty file is new; a prefix of the magic is a creator killed mid-write. Both are ours to
  // (re)start. Anything else belongs to someone else and must not be touched.
  if (head.size() < store::kFileStoreMagic.size() && store::kFileStoreMagic.starts_with(head)) {
    if (::ftruncate(fd.get(), 0) != 0) return system_error(at(what) + "truncating " + path, errno);
    if (::pwrite(fd.get(), store::kFileStoreMagic.data(), store::kFileStoreMagic.size(), 0) !=
        static_cast<ssize_t>(store::kFileStoreMagic.size())) {
      return system_error(at(what) + "writing the header of " + path, errno);
    }
    offset = store::kFileStoreMagic.size();
    return Status::ok();
  }
  return invalid_argument(at(what) + path +
                          " exists and is not a braid store file; refusing to overwrite it. Name a new path.");
}

Status FileStore::Impl::refresh(const std::string& what) {
  // A job that deletes and recreates the path while we use it has split the store in two: this
  // fd would go on reading a file nobody else sees.
  struct stat by_path {};
  if (::stat(path.c_str(), &by_path) != 0 || by_path.st_dev != dev || by_path.st_ino != ino) {
    return invalid_argument(at(what) + "the store file " + path +
                            " was removed or replaced while this process used it. Is another job using the "
                            "same path? Give each job its own file.");
  }
  if (offset == 0) RETURN_IF_ERROR(init_header(what));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return system_error(at(what) + "fstat " + path, errno);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < offset) {
    return invalid_argument(at(what) + "the store file " + path + " shrank from " + std::to_string(offset) +
                            " to " + std::to_string(size) + " bytes: something other than braid truncated it.");
  }
  if (size == offset) return Status::ok();
  std::string buf(size - offset, '\0');
  size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = ::pread(fd.get(), buf.data() + got, buf.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_error(at(what) + "reading " + path, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  std::string_view rest(buf.data(), got);
  for (;;) {
    FileRecord rec{};
    size_t used = 0;
    ParseResult r = store::parse_record(rest, &rec, &used);
    if (r == ParseResult::corrupt) {
      return protocol_error(at(what) + "corrupt record at byte " + std::to_string(offset) + " of " + path +
                            ". Is a program other than braid writing to it?");
    }
    if (r == ParseResult::incomplete) break;
    if (rec.op == FileOp::set) {
      data[std::string(rec.key)] = std::string(rec.value);
    } else {
      data.erase(std::string(rec.key));
    }
    offset += used;
    rest.remove_prefix(used);
  }
  if (!rest.empty()) {
    // We hold the lock and every writer appends only while holding it: nobody is still writing
    // these bytes. They are the remains of a process killed mid-append.
    BRAID_LOG(warn) << "FileStore " << path << ": dropping " << rest.size()
                    << " bytes of a record cut short at byte " << offset << " (a process died while writing it)";
    if (::ftruncate(fd.get(), static_cast<off_t>(offset)) != 0) {
      return system_error(at(what) + "truncating a torn record in " + path, errno);
    }
  }
  return Status::ok();
}

Status FileStore::Impl::append(const std::string& what, FileOp op, const std::string& key, const std::string& value) {
  if (key.size() > store::kMaxFileStoreField || value.size() > store::kMaxFileStoreField) {
    return invalid_argument(at(what) + "keys and values are limited to 4 GiB each");
  }
  std::string rec = store::encode_record(op, key, value);
  size_t put = 0;
  while (put < rec.size()) {
    ssize_t n = ::pwrite(fd.get(), rec.data() + put, rec.size() - put, static_cast<off_t>(offset + put));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      // Leave no half record behind: the next reader would have to guess what it was.
      (void)::ftruncate(fd.get(), static_cast<off_t>(offset));
      return system_error(at(what) + "appending to " + path + " (is its filesystem full?)", err);
    }
    put += static_cast<size_t>(n);
  }
  offset += rec.size();
  if (op == FileOp::set) {
    data[key] = value;
  } else {
    data.erase(key);
  }
  return Status::ok();
}

std::vector<std::string> FileStore::Impl::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (data.find(k) == data.end()) out.push_back(k);
  }
  return out;
}

Status FileStore::Impl::wait_for(const std::string& what, const std::vector<std::string>& keys,
                                 std::chrono::milliseconds timeout, std::string* value) {
  if (timeout.count() < 0) return invalid_argument(at(what) + "negative timeout " + ms_text(timeout));
  timeout = std::min(timeout, kMaxTimeout);
  auto deadline = Deadline::after(timeout);
  auto backoff = std::chrono::duration_cast<std::chrono::nanoseconds>(kFirstPoll);
  for (;;) {
    std::vector<std::string> still;
    RETURN_IF_ERROR(transact(what, [&] {
      still = missing(keys);
      if (still.empty() && value != nullptr && !keys.empty()) *value = data.at(keys.front());
      return Status::ok();
    }));
    if (still.empty()) return Status::ok();
    if (deadline.expired()) {
      return timeout_error("store " + what + " timed out after " + ms_text(timeout) + " at " + address +
                           "; still missing: " + printable_keys(still) +
                           ". Did every rank reach this point (a crashed or slow rank), and do all of them name "
                           "the same file? " +
                           kTimeoutHint);
    }
    std::this_thread::sleep_for(std::min(backoff, deadline.remaining()));
    backoff = std::min<std::chrono::nanoseconds>(backoff * 2, kMaxPoll);
  }
}

// ---- public API ----

FileStore::FileStore(std::string path, std::chrono::milliseconds timeout) : impl_(std::make_unique<Impl>()) {
  if (path.empty()) throw Error(ErrorCode::invalid_argument, "FileStore: the path is empty");
  if (timeout.count() <= 0) {
    throw Error(ErrorCode::invalid_argument, "FileStore " + path + ": timeout must be positive, got " + ms_text(timeout));
  }
  impl_->address = "file://" + path;
  impl_->path = std::move(path);
  impl_->timeout_ms = timeout.count();
  raise_if_error(impl_->open_file());
}

FileStore::~FileStore() = default;

void FileStore::set(const std::string& key, const std::string& value) {
  std::string what = "set(" + printable_key(key) + ")";
  raise_if_error(impl_->transact(what, [&] { return impl_->append(what, FileOp::set, key, value); }));
}

std::string FileStore::get(const std::string& key) {
  std::string value;
  raise_if_error(impl_->wait_for("get(" + printable_key(key) + ")", {key}, timeout(), &value));
  return value;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  std::string what = "add(" + printable_key(key) + ")";
  int64_t next = 0;
  raise_if_error(impl_->transact(what, [&] {
    int64_t current = 0;
    auto it = impl_->data.find(key);
    if (it != impl_->data.end()) {
      const std::string& s = it->second;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), current);
      if (ec != std::errc() || end != s.data() + s.size()) {
        return invalid_argument(impl_->at(what) + "its value " + printable_key(s) +
                                " is not a decimal integer (it was written by set, not add)");
      }
    }
    if (__builtin_add_overflow(current, delta, &next)) {
      return invalid_argument(impl_->at(what) + std::to_string(current) + " + " + std::to_string(delta) +
                              " overflows int64");
    }
    return impl_->append(what, FileOp::set, key, std::to_string(next));
  }));
  return next;
}

std::string FileStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  std::string what = "compare_set(" + printable_key(key) + ")";
  std::string after;
  raise_if_error(impl_->transact(what, [&] {
    auto it = impl_->data.find(key);
    bool matches = it == impl_->data.end() ? expected.empty() : it->second == expected;
    if (!matches) {
      // The value after the call: unchanged, or none (empty) for an absent key.
      if (it != impl_->data.end()) after = it->second;
      return Status::ok();
    }
    after = desired;
    return impl_->append(what, FileOp::set, key, desired);
  }));
  return after;
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  raise_if_error(impl_->wait_for("wait(" + printable_keys(keys, 4) + ")", keys, timeout, nullptr));
}

bool FileStore::check(const std::vector<std::string>& keys) {
  bool all = false;
  raise_if_error(impl_->transact("check(" + printable_keys(keys, 4) + ")", [&] {
    all = impl_->missing(keys).empty();
    return Status::ok();
  }));
  return all;
}

bool FileStore::delete_key(const std::string& key) {
  std::string what = "delete_key(" + printable_key(key) + ")";
  bool existed = false;
  raise_if_error(impl_->transact(what, [&] {
    existed = impl_->data.count(key) != 0;
    return existed ? impl_->append(what, FileOp::del, key, "") : Status::ok();
  }));
  return existed;
}

int64_t FileStore::num_keys() {
  int64_t n = 0;
  raise_if_error(impl_->transact("num_keys()", [&] {
    n = static_cast<int64_t>(impl_->data.size());
    return Status::ok();
  }));
  return n;
}

std::chrono::milliseconds FileStore::timeout() const { return impl_->timeout(); }

void FileStore::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) {
    throw Error(ErrorCode::invalid_argument, "FileStore::set_timeout: must be positive, got " + ms_text(timeout));
  }
  impl_->timeout_ms = timeout.count();
}

std::string FileStore::address() const { return impl_->address; }

}  // namespace braid
