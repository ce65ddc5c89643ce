#include "tools/braid_perf/perf_check.h"

#include <algorithm>
#include <cstring>

#include "tools/braid_perf/perf_data.h"

namespace braid::perf {

Expected expected_for(const std::string& op, int n, int r, int root, size_t count, DType dt, Op redop) {
  const size_t es = dtype_size(dt), nn = static_cast<size_t>(n);
  const bool reducing = op == "all_reduce" || op == "reduce" || op == "reduce_scatter";
  const Op vop = reducing ? redop : Op::sum;
  Expected e;
  // Inputs: what fill() used to write each iteration.
  e.input_in_recv = op == "all_reduce" || op == "broadcast";
  const bool split_in = op == "reduce_scatter" || op == "all_to_all" || op == "scatter";
  const size_t in_count = split_in ? count * nn : count;
  const int in_rank = op == "broadcast" && r != root ? r + 1000 : r;
  e.input.resize(in_count * es);
  fill_input(e.input.data(), in_count, dt, in_rank, 0, vop);

  // Results: a reduction over ranks 0..n-1 at each element, or elements moved from a rank,
  // compared in the dtype's own rounding.
  auto reduced = [&](size_t items, size_t offset) {
    e.reduced = true;
    e.result.resize(items * es);
    for (size_t i = 0; i < items; ++i) store_value(e.result.data(), i, dt, expected_reduction(n, offset + i, dt, redop));
  };
  auto moved = [&](size_t at, int from, size_t offset, size_t items) {
    e.result.resize(std::max(e.result.size(), (at + items) * es));
    for (size_t i = 0; i < items; ++i) store_value(e.result.data(), at + i, dt, input_value(from, offset + i, Op::sum));
  };
  const size_t rr = static_cast<size_t>(r);
  if (op == "all_reduce" || (op == "reduce" && r == root)) {
    reduced(count, 0);
  } else if (op == "reduce_scatter") {
    reduced(count, rr * count);
  } else if (op == "broadcast") {
    moved(0, root, 0, count);
  } else if (op == "all_gather" || (op == "gather" && r == root)) {
    for (size_t q = 0; q < nn; ++q) moved(q * count, static_cast<int>(q), 0, count);
  } else if (op == "scatter") {
    moved(0, root, rr * count, count);
  } else if (op == "all_to_all") {
    for (size_t q = 0; q < nn; ++q) moved(q * count, static_cast<int>(q), rr * count, count);
  } else if (op == "sendrecv") {
    moved(0, (r + n - 1) % n, 0, count);
  }
  return e;
}

int64_t count_wrong(const void* got, const Expected& e, DType dt, Op redop) {
  const size_t es = dtype_size(dt), items = e.result.size() / es;
  const Op cmp = e.reduced ? redop : Op::sum;  // sum: exact comparison
  const auto* g = static_cast<const char*>(got);
  const char* w = e.result.data();
  constexpr size_t kBlock = 4096;  // elements compared with one memcmp
  int64_t wrong = 0;
  for (size_t b = 0; b < items; b += kBlock) {
    const size_t end = std::min(items, b + kBlock);
    if (std::memcmp(g + b * es, w + b * es, (end - b) * es) == 0) continue;
    for (size_t i = b; i < end; ++i) {
      if (std::memcmp(g + i * es, w + i * es, es) == 0) continue;
      wrong += !close_enough(load_value(g, i, dt), load_value(w, i, dt), dt, cmp);
    }
  }
  return wrong;
}

}  // namespace braid::perf
