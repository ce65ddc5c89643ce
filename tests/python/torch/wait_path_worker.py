"""One rank of test_wait_path.py: small all_reduces back to back, each waited for at once.

    wait_path_worker.py --init tcp://host:port --rank R --world N [--ops 200] [--cpus 0,1]

--cpus confines the rank to those CPUs before the group is made (os.sched_setaffinity, as a
program pinning its ranks would). The parent reads braid's INFO line saying how long its waiters
spin, and from the TRACE line at the communicator's close, how many operations ran on this (the
caller's) thread.
"""
import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist

import braid.torch  # noqa: F401


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument("--cpus", default="")
    a = ap.parse_args()
    if a.cpus:
        os.sched_setaffinity(0, {int(c) for c in a.cpus.split(",")})
    dist.init_process_group("braid", init_method=a.init, rank=a.rank, world_size=a.world,
                            timeout=timedelta(seconds=60))
    t = torch.ones(1024)  # 4 KiB
    for i in range(a.ops):
        t.fill_(a.rank + i)
        dist.all_reduce(t)
        want = sum(r + i for r in range(a.world))
        if not torch.all(t == want):
            raise SystemExit(f"all_reduce {i} on rank {a.rank}: got {t[0].item()}, want {want}")
    dist.destroy_process_group()  # closes the communicator, which logs its TRACE counts


if __name__ == "__main__":
    main()
