"""The init methods of torch.distributed's documentation, each as its example writes it:
TCP initialization (init_method="tcp://host:port" with rank and world_size) and shared-file
initialization (init_method="file:///path"), then a collective whose result every rank checks.
Changed: `import braid.torch` and backend "braid"; the address or path comes from argv.

    init_methods.py URL RANK WORLD_SIZE
"""
import sys

import torch
import torch.distributed as dist

import braid.torch  # noqa: F401


def main(url, rank, world_size):
    dist.init_process_group(backend="braid", init_method=url, rank=rank, world_size=world_size)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    b = torch.tensor([float(rank)])
    dist.broadcast(b, src=world_size - 1)
    ok = t.item() == world_size * (world_size + 1) / 2 and b.item() == world_size - 1
    dist.destroy_process_group()
    print(f"rank {rank} of {world_size} via {url.split(':')[0]}: {'ok' if ok else 'WRONG RESULT'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
