#!/usr/bin/python3
"""all_reduce and a DDP step through torch.distributed: backend "braid" against "gloo", same run.

Starts WORLD ranks on loopback (tcp:// init, torch.multiprocessing.spawn: every rank free to run
on every CPU, as under torchrun). In each rank the default group is braid and a second group
over the same ranks is gloo; every measurement alternates between the two in rounds, so both
see the same machine. Prints, on rank 0, the median time per all_reduce (float32, SUM, in
place, back to back) at each size, the bus bandwidth (nccl-tests' definition, 2(n-1)/n x bytes /
time), the ratio gloo/braid (above 1: braid is faster), and the median step time of DDP on a
small MLP.

    /usr/bin/python3 bench/torch/torch_vs_gloo.py [--world 2] [--build build] [--sizes 4K,64K,1M,16M,64M]
        [--rounds 3] [--iters N] [--steps 20] [--pin] [--backends braid,gloo] [--no-ddp] [--json PATH]

One rank of a job started elsewhere (bench/torch/netns.sh: one rank per network namespace):

    torch_vs_gloo.py --init tcp://HOST:PORT --rank R --world N ...
"""
import argparse
import json
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


def time_op(fn, iters, group):
    fn()  # warm-up: connections, buffers
    dist.barrier(group=group)
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def bench_all_reduce(groups, sizes, rounds, max_iters, fixed_iters):
    rows = []
    for nbytes in sizes:
        t = torch.ones(nbytes // 4)
        iters = fixed_iters or max(3, min(max_iters, (64 << 20) // max(nbytes, 1) // 4))
        per = {name: [] for name in groups}
        for _ in range(rounds):  # alternate, so drifts of the machine hit both
            for name, g in groups.items():
                per[name] += time_op(lambda: dist.all_reduce(t, group=g), iters, g)
        rows.append({"bytes": nbytes, **{name: statistics.median(v) for name, v in per.items()}})
    return rows


def bench_ddp(groups, steps):
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                              torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    x, y = torch.randn(32, 512), torch.randint(0, 10, (32,))
    out = {}
    models = {name: DDP(net, process_group=g) for name, g in groups.items()}
    for _ in range(2):
        for name, ddp in models.items():
            opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

            def step():
                opt.zero_grad()
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
                opt.step()
            out.setdefault(name, []).extend(time_op(step, steps, groups[name]))
    params = sum(p.numel() for p in net.parameters())
    return params, {k: statistics.median(v) for k, v in out.items()}


def rank_main(rank, a, url):
    if a.pin:  # one CPU per rank, as braidrun places ranks
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    import braid.torch  # noqa: F401
    dist.init_process_group("braid", init_method=url, rank=rank, world_size=a.world, timeout=timedelta(seconds=600))
    groups = {}
    for name in a.backends.split(","):
        groups[name] = dist.group.WORLD if name == "braid" else dist.new_group(backend=name)
    rows = bench_all_reduce(groups, [parse_size(s) for s in a.sizes.split(",")], a.rounds, a.max_iters, a.iters)
    params, ddp = bench_ddp(groups, a.steps) if not a.no_ddp else (0, {})
    if rank == 0:
        report(a, rows, params, ddp)
    dist.barrier()
    dist.destroy_process_group()


def report(a, rows, params, ddp):
    names = a.backends.split(",")
    bus = 2 * (a.world - 1) / a.world
    print(f"all_reduce float32 SUM, {a.world} ranks, median of each; ratio = gloo time / braid time")
    print(f"{'size':>9} " + " ".join(f"{n + ' us':>10} {n + ' GB/s':>11}" for n in names) +
          (f" {'ratio':>6}" if len(names) == 2 else ""))
    for r in rows:
        cells = " ".join(f"{r[n] * 1e6:10.1f} {bus * r['bytes'] / r[n] / 1e9:11.3f}" for n in names)
        ratio = f" {r[names[1]] / r[names[0]]:6.2f}" if len(names) == 2 else ""
        print(f"{label(r['bytes']):>9} {cells}{ratio}")
    if ddp:
        print(f"DDP step (MLP, {params} parameters, batch 32): " +
              ", ".join(f"{n} {ddp[n] * 1e3:.2f} ms" for n in names) +
              (f", ratio {ddp[names[1]] / ddp[names[0]]:.2f}" if len(names) == 2 else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"world": a.world, "pin": a.pin, "rows": rows, "ddp": ddp, "ddp_params": params,
                       "spin_us": os.environ.get("BRAID_SPIN_US", "unset")}, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build"))
    ap.add_argument("--sizes", default="4K,64K,1M,16M,64M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-iters", type=int, default=200, help="timed all_reduces per size and round, at most")
    ap.add_argument("--iters", type=int, default=0, help="timed all_reduces per size and round (default: by size)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--pin", action="store_true", help="pin each rank to one CPU, as braidrun does")
    ap.add_argument("--backends", default="braid,gloo", help="braid first; the others as new_group backends")
    ap.add_argument("--no-ddp", action="store_true")
    ap.add_argument("--json", help="rank 0 writes the rows here")
    ap.add_argument("--init", help="join a job started elsewhere (with --rank)")
    ap.add_argument("--rank", type=int)
    a = ap.parse_args()
    if not a.backends.startswith("braid"):
        ap.error("--backends must start with braid (the default group)")
    python_dir = os.path.join(os.path.abspath(a.build), "python")
    sys.path.insert(0, python_dir)
    os.environ["PYTHONPATH"] = os.pathsep.join([python_dir, os.environ.get("PYTHONPATH", "")])
    if a.init:
        rank_main(a.rank, a, a.init)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    mp.spawn(rank_main, args=(a, url), nprocs=a.world)


if __name__ == "__main__":
    main()
