// braid/braid.h - the one header a program includes.
//
//   braid::Communicator comm = braid::Communicator::from_env();
//   comm.all_reduce(grad, n, braid::DType::f32, braid::Op::sum);
#pragma once

#include "braid/communicator.h"  // IWYU pragma: export
#include "braid/error.h"         // IWYU pragma: export
#include "braid/store.h"         // IWYU pragma: export
#include "braid/types.h"         // IWYU pragma: export
#include "braid/work.h"          // IWYU pragma: export
#include "braid/ddp.h"           // IWYU pragma: export
#include "braid/version.h"       // IWYU pragma: export
