// collectives/validate.h - argument checks made before anything is sent.
//
// The runtime calls this too, on the caller's thread, so a bad call fails at once with
// invalid_argument instead of surfacing from Work::wait(). Count 0 is valid (the operation
// completes without moving data); so is a null buffer that will not be touched.
#pragma once

#include "collectives/collective.h"
#include "common/status.h"

namespace braid::collectives {

// invalid_argument naming the operation, this rank and what is wrong: rank or root out of
// range, peer out of range or this rank, unknown dtype/op, bitwise op on a floating dtype,
// counts vectors of the wrong length, null buffers that would be read or written, sizes that
// overflow size_t.
Status validate_collective(const CollectiveArgs& args, int rank, int size);
// The same answer through every check in turn. validate_collective, which runs before every
// operation, first tries a shorter test that accepts only the common shapes and comes here for
// the rest (tests compare the two).
Status validate_collective_in_full(const CollectiveArgs& args, int rank, int size);
// validate_collective's short test alone, for a caller that builds no Status when it passes:
// true only where validate_collective_in_full accepts too; false decides nothing.
bool plainly_valid(const CollectiveArgs& args, int rank, int size);

// The elements of this rank's send and recv buffers that `args` reads and writes (0: the buffer
// is not touched here). Broadcast reads `send` only at the root and only when one is given (the
// root may broadcast from recv). Assumes the counts passed validate_collective.
struct BufferExtents {
  size_t send = 0;
  size_t recv = 0;
};
BufferExtents buffer_extents(const CollectiveArgs& args, int rank, int size);

}  // namespace braid::collectives
