"""A world of one that hands the backend tensors that are not on the CPU (test_faults.py).

This build of torch has no CUDA (torch.cuda.is_available() is False and a CUDA tensor cannot
be made, not even under FakeTensorMode), so a "meta" tensor stands in: the backend refuses
every non-CPU device with the same check. torch 1.13 routes some operations through its
dispatcher, which has no meta kernel for them and refuses first (NotImplementedError naming
c10d's operator); the others reach braid. Prints one line per operation:
"braid <op>: <message>", "torch <op>: <message>" or "returned <op>".

    device_worker.py URL
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import braid.torch  # noqa: F401


def ops():
    def m(n=4):
        return torch.ones(n, device="meta")
    return {
        "allreduce": lambda: dist.all_reduce(m()),
        "broadcast": lambda: dist.broadcast(m(), 0),
        "allgather": lambda: dist.all_gather([m()], m()),
        "_allgather_base": lambda: dist._all_gather_base(m(), m()),
        "reduce": lambda: dist.reduce(m(), 0),
        "gather": lambda: dist.gather(m(), [m()], dst=0),
        "scatter": lambda: dist.scatter(m(), [m()], src=0),
        "reduce_scatter": lambda: dist.reduce_scatter(m(), [m()]),
        "_reduce_scatter_base": lambda: dist._reduce_scatter_base(m(), m()),
        "alltoall_base": lambda: dist.all_to_all_single(m(), m()),
        "alltoall": lambda: dist.all_to_all([m()], [m()]),
        "allreduce_coalesced": lambda: dist.all_reduce_coalesced([m(), m()]),
    }


def main(url):
    dist.init_process_group("braid", init_method=url, rank=0, world_size=1, timeout=timedelta(seconds=30))
    for name, fn in ops().items():
        try:
            fn()
            print(f"returned {name}", flush=True)
        except NotImplementedError as e:  # a RuntimeError too: first
            print(f"torch {name}: " + str(e).splitlines()[0][:200], flush=True)
        except RuntimeError as e:
            print(f"braid {name}: " + str(e).replace("\n", " | "), flush=True)
    t = torch.ones(3)
    dist.all_reduce(t)  # the group still works for CPU tensors afterwards
    print(f"cpu after: {t.tolist()}", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
