"""The "Writing Distributed Applications with PyTorch" tutorial's program, as it writes it:
torch.multiprocessing Processes started with the "spawn" method, env:// rendezvous from
MASTER_ADDR/MASTER_PORT, blocking and non-blocking point-to-point, all_reduce over a group.
Changed: `import braid.torch`, backend "braid", and MASTER_PORT taken from the environment
when set (the tests pick a free port; the tutorial writes '29500')."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import braid.torch  # noqa: F401


def run_blocking(rank, size):
    tensor = torch.zeros(1)
    if rank == 0:
        tensor += 1
        dist.send(tensor=tensor, dst=1)
    elif rank == 1:
        dist.recv(tensor=tensor, src=0)
    print(f"Rank {rank} has data {tensor[0]} (blocking)", flush=True)
    return tensor[0].item() == (1.0 if rank in (0, 1) else 0.0)


def run_nonblocking(rank, size):
    tensor = torch.zeros(1)
    req = None
    if rank == 0:
        tensor += 1
        req = dist.isend(tensor=tensor, dst=1)
    elif rank == 1:
        req = dist.irecv(tensor=tensor, src=0)
    if req is not None:
        req.wait()
    print(f"Rank {rank} has data {tensor[0]} (non-blocking)", flush=True)
    return tensor[0].item() == (1.0 if rank in (0, 1) else 0.0)


def run_all_reduce(rank, size):
    group = dist.new_group(list(range(size)))
    tensor = torch.ones(1)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    print(f"Rank {rank} has data {tensor[0]} (all_reduce)", flush=True)
    return tensor[0].item() == float(size)


def run(rank, size):
    ok = run_blocking(rank, size) and run_nonblocking(rank, size) and run_all_reduce(rank, size)
    print(f"Rank {rank}: {'tutorial ok' if ok else 'WRONG RESULT'}", flush=True)
    if not ok:
        raise SystemExit(1)


def init_process(rank, size, fn, backend="braid"):
    """Initialize the distributed environment."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "29500")
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)
    dist.destroy_process_group()


if __name__ == "__main__":
    size = 3
    processes = []
    mp.set_start_method("spawn")
    for rank in range(size):
        p = mp.Process(target=init_process, args=(rank, size, run))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
    raise SystemExit(max(p.exitcode for p in processes))
