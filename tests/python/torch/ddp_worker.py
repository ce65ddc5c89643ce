"""One rank of a DistributedDataParallel run, written as the PyTorch tutorials write it.

Phase 1: init_process_group(backend), DDP over a small MLP, DistributedSampler with set_epoch,
two epochs of SGD; rank 0 saves a checkpoint; destroy_process_group. Phase 2, in the same
process: a second init_process_group (a new store), the checkpoint loaded, one more epoch with
DDP's allreduce comm hook (a Python hook on the group's futures); rank 0 saves again. test_ddp.py
runs it with "braid" and with "gloo" and compares the checkpoints.

    ddp_worker.py BACKEND RANK WORLD URL1 URL2 OUTDIR
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(96, 10, generator=g)
    y = (x[:, :3].sum(1, keepdim=True) > 0).float()
    return TensorDataset(x, y)


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def train(ddp, loader, sampler, epochs, first_epoch):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for epoch in range(first_epoch, first_epoch + epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            loss_fn(ddp(x), y).backward()
            opt.step()


def main(backend, rank, world, url1, url2, outdir):
    if backend == "braid":
        import braid.torch  # noqa: F401
    ds = data()
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=3)
    loader = DataLoader(ds, batch_size=8, sampler=sampler)

    dist.init_process_group(backend, init_method=url1, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    net = model()
    ddp = DDP(net)
    train(ddp, loader, sampler, epochs=2, first_epoch=0)
    ckpt = os.path.join(outdir, f"{backend}_phase1.pt")
    if rank == 0:
        torch.save(ddp.module.state_dict(), ckpt)
    dist.barrier()
    # every rank holds the same parameters
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    mine = flat.clone()
    dist.broadcast(flat, src=0)
    assert torch.equal(flat, mine), f"rank {rank}: parameters differ from rank 0's after phase 1"
    dist.destroy_process_group()
    # torch 1.13's ProcessGroupGloo can hang when its last reference goes: its destructor joins,
    # with the GIL held, worker threads that wait for the GIL to free a tensor. So phase 1's DDP
    # (which holds its group) is kept, and the process ends with os._exit.
    kept = [ddp]

    dist.init_process_group(backend, init_method=url2, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    net = model()
    net.load_state_dict(torch.load(ckpt))
    ddp = DDP(net)
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    train(ddp, loader, sampler, epochs=1, first_epoch=2)
    if rank == 0:
        torch.save(ddp.module.state_dict(), os.path.join(outdir, f"{backend}_phase2.pt"))
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: ddp {backend} done", flush=True)
    kept.append(ddp)
    os._exit(0)  # everything is saved; see `kept`


if __name__ == "__main__":
    b, r, w, u1, u2, out = sys.argv[1:7]
    main(b, int(r), int(w), u1, u2, out)
