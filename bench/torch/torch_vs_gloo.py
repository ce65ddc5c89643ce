#!/usr/bin/python3
"""all_reduce and a DDP step through torch.distributed: backend "braid" against "gloo", same run.

Starts WORLD ranks on loopback (tcp:// init). In each rank the default group is braid and a
second group over the same ranks is gloo; every measurement alternates between the two, so
both see the same machine. Prints, on rank 0, the median time per all_reduce (float32, SUM)
at each size, the bus bandwidth (nccl-tests' definition, 2(n-1)/n x bytes / time), the ratio
gloo/braid (above 1: braid is faster), and the median step time of DDP on a small MLP.

    /usr/bin/python3 bench/torch_vs_gloo.py [--world 2] [--build build] [--sizes 4K,64K,1M,16M,64M]
"""
import argparse
import os
import socket
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def label(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def time_op(fn, iters):
    fn()  # warm-up: connections, buffers
    dist.barrier()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def bench_all_reduce(rank, world, gloo, sizes, rounds):
    rows = []
    for nbytes in sizes:
        t = torch.ones(nbytes // 4)
        iters = max(3, min(200, (64 << 20) // max(nbytes, 1) // 4))
        per = {"braid": [], "gloo": []}
        for _ in range(rounds):  # alternate, so drifts of the machine hit both
            per["braid"] += time_op(lambda: dist.all_reduce(t), iters)
            per["gloo"] += time_op(lambda: dist.all_reduce(t, group=gloo), iters)
        med = {k: statistics.median(v) for k, v in per.items()}
        rows.append((nbytes, med["braid"], med["gloo"]))
    return rows


def bench_ddp(rank, world, gloo, steps):
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                              torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    x, y = torch.randn(32, 512), torch.randint(0, 10, (32,))
    out = {}
    models = {"braid": DDP(net), "gloo": DDP(net, process_group=gloo)}
    for _ in range(2):
        for name, ddp in models.items():
            opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

            def step():
                opt.zero_grad()
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
                opt.step()
            out.setdefault(name, []).extend(time_op(step, steps))
    params = sum(p.numel() for p in net.parameters())
    return params, {k: statistics.median(v) for k, v in out.items()}


def rank_main(rank, world, url, sizes, rounds, steps, pin):
    if pin:  # one CPU per rank, as braidrun places ranks
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    import braid.torch  # noqa: F401
    dist.init_process_group("braid", init_method=url, rank=rank, world_size=world, timeout=timedelta(seconds=300))
    gloo = dist.new_group(backend="gloo")
    rows = bench_all_reduce(rank, world, gloo, sizes, rounds)
    params, ddp = bench_ddp(rank, world, gloo, steps)
    if rank == 0:
        bus = 2 * (world - 1) / world
        print(f"all_reduce float32 SUM, {world} ranks on loopback, median of each; ratio = gloo time / braid time")
        print(f"{'size':>9} {'braid us':>10} {'gloo us':>10} {'braid GB/s':>11} {'gloo GB/s':>10} {'ratio':>6}")
        for nbytes, b, g in rows:
            print(f"{label(nbytes):>9} {b * 1e6:10.1f} {g * 1e6:10.1f} {bus * nbytes / b / 1e9:11.3f} "
                  f"{bus * nbytes / g / 1e9:10.3f} {g / b:6.2f}")
        print(f"DDP step (MLP, {params} parameters, batch 32): braid {ddp['braid'] * 1e3:.2f} ms, "
              f"gloo {ddp['gloo'] * 1e3:.2f} ms, ratio {ddp['gloo'] / ddp['braid']:.2f}")
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build"))
    ap.add_argument("--sizes", default="4K,64K,1M,16M,64M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--pin", action="store_true", help="pin each rank to one CPU, as braidrun does")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(a.build), "python"))
    os.environ["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.abspath(a.build), "python"),
                                                os.environ.get("PYTHONPATH", "")])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    mp.spawn(rank_main, args=(a.world, url, sizes, a.rounds, a.steps, a.pin), nprocs=a.world)


if __name__ == "__main__":
    main()
