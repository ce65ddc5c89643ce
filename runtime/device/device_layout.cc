// StagingPipeline's chunk layout (staging_pipeline.h): for each collective, what a slot holds
// for one chunk, the host collective run on it, and which bytes the input and result copies move.
//
// Words: C is the caller's count (elements per rank's block), R the world size, n the chunk's
// count (elements of each block that this chunk covers: [off, off + n) of every block), E the
// element size. A chunk of a blocked collective is the same collective with count n on the slot:
// rank r's block of the chunk lies at r*n in the slot, and comes from (r*C + off) in the caller's
// buffer. Where the host collective's output would overlap its input other than in a form every
// algorithm takes in place (all_reduce, broadcast, reduce on one buffer; all_gather and gather
// with the input as this rank's block), the output gets its own part of the slot after the input.
// Units (how many n-element parts a slot holds) decide chunk_elems = slot_bytes / (units * E),
// the same on every rank because it depends only on R and the collective.
#include <algorithm>

#include "collectives/validate.h"
#include "runtime/device/staging_pipeline.h"

namespace braid {

using collectives::CollectiveArgs;
using collectives::Kind;

size_t StagingPipeline::slot_units(const CollectiveArgs& a, int size, bool device_reduce) {
  const auto r = static_cast<size_t>(size);
  if (device_reduce) return r;  // every rank's part, gathered
  switch (a.kind) {
    case Kind::all_gather:
    case Kind::gather: return r;                      // the output, the input being its own block
    case Kind::reduce_scatter:
    case Kind::scatter: return r + 1;                 // R blocks in, this rank's block out
    case Kind::all_to_all: return 2 * r;              // R blocks in, R blocks out
    default: return 1;                                // all_reduce, reduce, broadcast: in place
  }
}

CollectiveArgs StagingPipeline::chunk_args(size_t i) const {
  const size_t off = i * chunk_elems_;
  CollectiveArgs a = args_;
  a.count = std::min(chunk_elems_, args_.count - off);
  char* s = slot(i).data;
  char* own_block = s + static_cast<size_t>(rank_) * a.count * esize_;
  char* after_blocks = s + static_cast<size_t>(size_) * a.count * esize_;
  const bool has_input = collectives::buffer_extents(args_, rank_, size_).send > 0;
  if (device_reduce_) {  // every rank's part gathered into the slot, in rank order
    a.kind = args_.kind == Kind::all_reduce ? Kind::all_gather : Kind::gather;
    a.send = own_block;
    a.recv = out_bytes_ > 0 ? s : nullptr;  // reduce: only the root gathers
    return a;
  }
  switch (args_.kind) {
    case Kind::all_gather:
    case Kind::gather:
      a.send = own_block;  // in place
      a.recv = out_bytes_ > 0 ? s : nullptr;
      break;
    case Kind::reduce_scatter:
    case Kind::scatter:
      a.send = has_input ? s : nullptr;
      a.recv = after_blocks;
      break;
    case Kind::all_to_all:
      a.send = s;
      a.recv = after_blocks;
      break;
    case Kind::broadcast:
      a.send = args_.send != nullptr ? s : nullptr;
      a.recv = s;
      break;
    case Kind::reduce:  // in place on the slot; only the root has a result
      a.send = s;
      a.recv = args_.recv != nullptr ? s : nullptr;
      break;
    default:  // all_reduce, in place on the slot
      a.send = s;
      a.recv = s;
  }
  return a;
}

std::vector<StagingPipeline::Piece> StagingPipeline::pieces(size_t i, bool input) const {
  const size_t off = i * chunk_elems_;
  const size_t n = std::min(chunk_elems_, args_.count - off);
  const size_t e = esize_, part = n * esize_, c = args_.count;
  const auto r = static_cast<size_t>(size_), me = static_cast<size_t>(rank_);
  const collectives::BufferExtents x = collectives::buffer_extents(args_, rank_, size_);
  std::vector<Piece> out;
  if ((input ? x.send : x.recv) == 0) return out;
  // Every block of the caller's buffer, each to (or from) its place in the slot from `at` on.
  auto blocks = [&](size_t at) {
    for (size_t q = 0; q < r; ++q) out.push_back(Piece{(q * c + off) * e, at + q * part, part});
  };
  const bool gathered = device_reduce_ || args_.kind == Kind::all_gather || args_.kind == Kind::gather;
  if (input) {
    const bool blocked_in = args_.kind == Kind::reduce_scatter || args_.kind == Kind::scatter ||
                            args_.kind == Kind::all_to_all;
    if (blocked_in && !device_reduce_) {
      blocks(0);
    } else {
      out.push_back(Piece{off * e, gathered ? me * part : 0, part});
    }
    return out;
  }
  switch (args_.kind) {
    case Kind::all_gather:
    case Kind::gather: blocks(0); break;
    case Kind::reduce_scatter:
    case Kind::scatter: out.push_back(Piece{off * e, r * part, part}); break;
    case Kind::all_to_all: blocks(r * part); break;
    default: out.push_back(Piece{off * e, 0, part});
  }
  return out;
}

}  // namespace braid
