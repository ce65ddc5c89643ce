"""The "Getting Started with Distributed Data Parallel" tutorial's program, on CPU: setup()
with MASTER_ADDR/MASTER_PORT, mp.spawn, a ToyModel wrapped in DDP, a training step, and the
checkpoint demo (rank 0 saves, barrier, every rank loads with map_location). Changed: `import
braid.torch`, backend "braid", no device_ids (CPU), MASTER_PORT from the environment when set,
a check at the end that every rank holds the same parameters, and the training step the two
demos share written once (train_step)."""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

import braid.torch  # noqa: F401


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "12355")
    dist.init_process_group("braid", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


class ToyModel(nn.Module):
    def __init__(self):
        super(ToyModel, self).__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def same_everywhere(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return all(torch.equal(g, gathered[0]) for g in gathered)


def train_step(ddp_model):
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5)
    loss_fn(outputs, labels).backward()
    optimizer.step()


def report(rank, demo, ok):
    print(f"rank {rank}: {demo} {'ok' if ok else 'PARAMETERS DIFFER'}", flush=True)
    if not ok:
        raise SystemExit(1)


def demo_basic(rank, world_size):
    print(f"Running basic DDP example on rank {rank}.", flush=True)
    setup(rank, world_size)
    torch.manual_seed(rank)  # different initial weights: DDP's broadcast must make them equal
    model = ToyModel()
    ddp_model = DDP(model)
    train_step(ddp_model)
    ok = same_everywhere(model)
    cleanup()
    report(rank, "basic", ok)


def demo_checkpoint(rank, world_size, checkpoint_path):
    print(f"Running DDP checkpoint example on rank {rank}.", flush=True)
    setup(rank, world_size)
    torch.manual_seed(rank)
    model = ToyModel()
    ddp_model = DDP(model)
    if rank == 0:
        torch.save(ddp_model.state_dict(), checkpoint_path)
    dist.barrier()
    ddp_model.load_state_dict(torch.load(checkpoint_path, map_location="cpu"))
    train_step(ddp_model)
    ok = same_everywhere(model)
    dist.barrier()
    if rank == 0:
        os.remove(checkpoint_path)
    cleanup()
    report(rank, "checkpoint", ok)


def run_demo(demo_fn, world_size, *args):
    mp.spawn(demo_fn, args=(world_size,) + args, nprocs=world_size, join=True)


if __name__ == "__main__":
    world_size = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    run_demo(demo_basic, world_size)
    run_demo(demo_checkpoint, world_size, os.path.join(tempfile.mkdtemp(), "model.checkpoint"))
