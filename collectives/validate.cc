#include "collectives/validate.h"

#include <numeric>
#include <string>

namespace braid::collectives {

namespace {

bool reduces(Kind k) { return k == Kind::all_reduce || k == Kind::reduce || k == Kind::reduce_scatter; }
bool rooted(Kind k) { return k == Kind::broadcast || k == Kind::reduce || k == Kind::gather || k == Kind::scatter; }
bool blocked(Kind k) {
  return k == Kind::all_gather || k == Kind::reduce_scatter || k == Kind::gather || k == Kind::scatter;
}

// Elements of the whole blocked buffer, or false on overflow.
bool sum_counts(const std::vector<size_t>& counts, size_t count, int size, size_t* out) {
  if (counts.empty()) return !__builtin_mul_overflow(count, static_cast<size_t>(size), out);
  size_t t = 0;
  for (size_t c : counts) {
    if (__builtin_add_overflow(t, c, &t)) return false;
  }
  *out = t;
  return true;
}

}  // namespace

// The common call, checked without building anything: a collective of one count per rank (no
// counts vectors) of the kinds small operations are. True only where every check of
// validate_collective_in_full passes; false sends the call through those, which say what is
// wrong (or find nothing: this one does not judge the rarer shapes). Each kind tests only what
// the full checks would look at for it.
bool plainly_valid(const CollectiveArgs& a, int rank, int size) {
  if (!a.counts.empty() || !a.send_counts.empty() || !a.recv_counts.empty()) return false;
  if (size < 1 || rank < 0 || rank >= size) return false;
  if (static_cast<int>(a.dtype) >= kNumDTypes || static_cast<int>(a.op) >= kNumOps) return false;
  size_t whole = 0, bytes = 0;
  if (__builtin_mul_overflow(a.count, static_cast<size_t>(size), &whole) ||
      __builtin_mul_overflow(whole, dtype_size(a.dtype), &bytes)) {
    return false;
  }
  const bool none = a.count == 0;
  switch (a.kind) {
    case Kind::send:
      return a.peer >= 0 && a.peer < size && a.peer != rank && (none || a.send != nullptr);
    case Kind::recv:
      return a.peer >= 0 && a.peer < size && a.peer != rank && (none || a.recv != nullptr);
    case Kind::all_reduce:
      return !(is_bitwise(a.op) && is_floating(a.dtype)) && (none || (a.send != nullptr && a.recv != nullptr));
    case Kind::broadcast: return a.root >= 0 && a.root < size && (none || a.recv != nullptr);
    case Kind::reduce:
      return !(is_bitwise(a.op) && is_floating(a.dtype)) && a.root >= 0 && a.root < size &&
             (none || (a.send != nullptr && (a.root != rank || a.recv != nullptr)));
    case Kind::barrier: return true;
    default: return false;
  }
}

Status validate_collective(const CollectiveArgs& a, int rank, int size) {
  if (plainly_valid(a, rank, size)) return Status::ok();
  return validate_collective_in_full(a, rank, size);
}

Status validate_collective_in_full(const CollectiveArgs& a, int rank, int size) {
  // The prefix is built only for an error.
  auto bad = [&](const std::string& what) {
    return invalid_argument(std::string(to_string(a.kind)) + " on rank " + std::to_string(rank) + ": " + what);
  };
  if (size < 1) return bad("world size " + std::to_string(size) + " must be at least 1");
  if (rank < 0 || rank >= size) return bad("rank is out of range for a world of " + std::to_string(size) + " ranks");
  if (static_cast<int>(a.dtype) >= kNumDTypes) return bad("unknown dtype " + std::to_string(static_cast<int>(a.dtype)));
  if (static_cast<int>(a.op) >= kNumOps) return bad("unknown op " + std::to_string(static_cast<int>(a.op)));
  if (reduces(a.kind) && is_bitwise(a.op) && is_floating(a.dtype)) {
    return bad(std::string("op ") + to_string(a.op) + " is bitwise and dtype " + to_string(a.dtype) +
               " is floating point; bitwise ops take integer dtypes (i8, u8, i32, i64)");
  }
  if (rooted(a.kind) && (a.root < 0 || a.root >= size)) {
    return bad("root " + std::to_string(a.root) + " is out of range for a world of " + std::to_string(size) +
               " ranks (0.." + std::to_string(size - 1) + ")");
  }
  if ((a.kind == Kind::send || a.kind == Kind::recv) && (a.peer < 0 || a.peer >= size || a.peer == rank)) {
    return bad("peer " + std::to_string(a.peer) + " must be another rank in 0.." + std::to_string(size - 1));
  }
  const size_t n = static_cast<size_t>(size);
  if (blocked(a.kind) && !a.counts.empty() && a.counts.size() != n) {
    return bad("counts has " + std::to_string(a.counts.size()) + " entries; it needs one per rank (" +
               std::to_string(size) + ")");
  }
  if (a.kind == Kind::all_to_all) {
    if (a.send_counts.empty() != a.recv_counts.empty()) {
      return bad("send_counts and recv_counts must be given together (split sizes) or both left empty");
    }
    if (!a.send_counts.empty() && (a.send_counts.size() != n || a.recv_counts.size() != n)) {
      return bad("send_counts has " + std::to_string(a.send_counts.size()) + " and recv_counts " +
                 std::to_string(a.recv_counts.size()) + " entries; each needs one per rank (" +
                 std::to_string(size) + ")");
    }
  }
  // Bytes each buffer must hold on this rank; a null buffer is fine only when it is 0.
  const size_t e = dtype_size(a.dtype);
  size_t whole = 0, send_total = 0, recv_total = 0;
  bool ok = sum_counts(a.counts, a.count, size, &whole);
  if (a.kind == Kind::all_to_all) {
    ok = ok && sum_counts(a.send_counts, a.count, size, &send_total) &&
         sum_counts(a.recv_counts, a.count, size, &recv_total);
  }
  size_t ignored;
  if (!ok || __builtin_mul_overflow(whole, e, &ignored) || __builtin_mul_overflow(send_total, e, &ignored) ||
      __builtin_mul_overflow(recv_total, e, &ignored)) {
    return bad("the buffer size overflows (count " + std::to_string(a.count) + " of " + to_string(a.dtype) + ")");
  }
  const BufferExtents x = buffer_extents(a, rank, size);
  if (x.send != 0 && a.send == nullptr) {
    return bad("send buffer is null but " + std::to_string(x.send) + " elements are to be read from it");
  }
  if (x.recv != 0 && a.recv == nullptr) {
    return bad("recv buffer is null but " + std::to_string(x.recv) + " elements are to be written to it");
  }
  return Status::ok();
}

BufferExtents buffer_extents(const CollectiveArgs& a, int rank, int size) {
  const auto total = [](const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); };
  const size_t mine = a.counts.empty() ? a.count : a.counts[static_cast<size_t>(rank)];
  const size_t whole = a.counts.empty() ? a.count * static_cast<size_t>(size) : total(a.counts);
  const bool is_root = a.root == rank;
  switch (a.kind) {
    case Kind::all_reduce: return {a.count, a.count};
    case Kind::broadcast: return {is_root && a.send != nullptr ? a.count : 0, a.count};
    case Kind::reduce: return {a.count, is_root ? a.count : 0};
    case Kind::all_gather: return {mine, whole};
    case Kind::reduce_scatter: return {whole, mine};
    case Kind::gather: return {mine, is_root ? whole : 0};
    case Kind::scatter: return {is_root ? whole : 0, mine};
    case Kind::all_to_all:
      return a.send_counts.empty() ? BufferExtents{whole, whole} : BufferExtents{total(a.send_counts), total(a.recv_counts)};
    case Kind::barrier: return {};
    case Kind::send: return {a.count, 0};
    case Kind::recv: return {0, a.count};
  }
  return {};
}

}  // namespace braid::collectives
