"""One rank of a DDP training loop that test_faults.py disturbs (a rank killed mid-training).

Trains a small MLP with DistributedDataParallel on backend "braid", printing "step N" after
each step, until an operation raises: then prints "raised <unix time>: <message>" and leaves.
Steps are bounded (MAX_STEPS), so a loop that never fails ends on its own and the test sees
"finished" instead of "raised".

    train_worker.py RANK WORLD URL TIMEOUT_S
"""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import braid.torch  # noqa: F401

MAX_STEPS = 20000


def main(rank, world, url, timeout_s):
    dist.init_process_group("braid", init_method=url, rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))
    torch.manual_seed(0)
    net = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    try:
        for step in range(MAX_STEPS):
            x = torch.randn(16, 64, generator=g)
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()
            print(f"step {step}", flush=True)
        print("finished", flush=True)
    except RuntimeError as e:
        print(f"raised {time.time():.3f}: " + str(e).replace("\n", " | "), flush=True)
    # Leave without destroy, as a crashed training script would; rank 0 stays a moment so that
    # the others can still read failure reports from the store it serves.
    time.sleep(3 if rank == 0 else 0)
    os._exit(0)


if __name__ == "__main__":
    r, w, u, t = sys.argv[1:5]
    main(int(r), int(w), u, float(t))
