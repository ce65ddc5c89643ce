// braid/ddp.h - data-parallel training on a Communicator: the Reducer (bucketed, overlapped
// gradient averaging), its communication hooks, bucket planning, DistributedSampler, and
// broadcasting the initial model.
#pragma once

#include "braid/ddp/bucket_plan.h"          // IWYU pragma: export
#include "braid/ddp/comm_hook.h"            // IWYU pragma: export
#include "braid/ddp/distributed_sampler.h"  // IWYU pragma: export
#include "braid/ddp/model_sync.h"           // IWYU pragma: export
#include "braid/ddp/reducer.h"              // IWYU pragma: export
