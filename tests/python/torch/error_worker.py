"""One rank of a failure scenario (test_errors.py). Prints "raised: <message>" when the
operation under test raised, "returned" when it did not.

    error_worker.py SCENARIO RANK WORLD URL
      slow_peer  init timeout 3 s; rank 1 joins the all_reduce 8 s late
      mismatch   rank 0 all_reduces 5 elements, the others 7
      dead_peer  rank 1 exits after the first all_reduce; the others run a second
"""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import braid.torch  # noqa: F401


def main(scenario, rank, world, url):
    timeout = timedelta(seconds=3 if scenario == "slow_peer" else 30)
    dist.init_process_group("braid", init_method=url, rank=rank, world_size=world, timeout=timeout)
    t = torch.ones(5 if (scenario == "mismatch" and rank == 0) else 7)
    if scenario == "slow_peer" and rank == 1:
        time.sleep(8)
    if scenario == "dead_peer":
        dist.all_reduce(t)
        if rank == 1:
            os._exit(0)
    try:
        dist.all_reduce(t)
        print(f"returned {t.tolist()}", flush=True)
    except RuntimeError as e:
        print("raised: " + str(e).replace("\n", " | "), flush=True)
    # Stay a moment so that the others can still read the failure's reason from the store that
    # rank 0 serves; then leave without destroy, as a training script's crash would.
    time.sleep(3)
    os._exit(0)


if __name__ == "__main__":
    s, r, w, u = sys.argv[1:5]
    main(s, int(r), int(w), u)
