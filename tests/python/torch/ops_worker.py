"""One rank of the op-by-op check: every collective through backend "braid", against gloo.

Run by test_ops.py (as subprocesses, under torchrun, or through mp.spawn). The default group is
braid; a second group over the same ranks uses gloo. Each rank's inputs are a function of its
rank, so every rank can also compute each result locally: that reference decides where gloo
has no such operation or dtype (AVG, bool, reduce_scatter, ...), and gloo's answer must agree
with braid wherever gloo gives one. Failures are printed one per line; the exit status is the
number of them (capped), so the parent can show what went wrong.

    ops_worker.py --init env://|tcp://host:port|file:///path [--rank R --world N] [--quick]
"""
import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.bool]
QUICK_DTYPES = [torch.float32, torch.int64, torch.bool]
N = 7  # odd, not divisible by any world size tested


def make(rank, dtype, n=N):
    base = (torch.arange(n) % 3 + 1 + rank) % 4 + 1  # 1..4: products stay inside int8
    if dtype == torch.bool:
        return (torch.arange(n) + rank) % 2 == 0
    if dtype.is_floating_point:
        return (base.double() + 0.5).to(dtype)
    return base.to(dtype)


def local_reduce(op, dtype, world, n=N):
    xs = [make(r, dtype, n) for r in range(world)]
    if dtype == torch.bool:
        s = torch.stack(xs)
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.BOR):
            return s.any(0)
        if op in (dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.BAND):
            return s.all(0)
        return (s.sum(0) % 2) == 1  # BXOR
    wide = torch.stack([x.double() if dtype.is_floating_point else x.long() for x in xs])
    if op == dist.ReduceOp.SUM:
        out = wide.sum(0)
    elif op == dist.ReduceOp.PRODUCT:
        out = wide.prod(0)
    elif op == dist.ReduceOp.MIN:
        out = wide.min(0).values
    elif op == dist.ReduceOp.MAX:
        out = wide.max(0).values
    elif op == dist.ReduceOp.AVG:
        out = wide.sum(0) / world if dtype.is_floating_point else torch.div(wide.sum(0), world, rounding_mode="trunc")
    else:
        out = wide[0].clone()
        for x in wide[1:]:
            out = {dist.ReduceOp.BAND: out & x, dist.ReduceOp.BOR: out | x, dist.ReduceOp.BXOR: out ^ x}[op]
    return out.to(dtype)


class Checker:
    def __init__(self, rank, world):
        self.rank, self.world, self.failures, self.checked = rank, world, [], 0

    def same(self, what, got, want):
        self.checked += 1
        got, want = [got] if torch.is_tensor(got) else got, [want] if torch.is_tensor(want) else want
        for g, w in zip(got, want):
            if g.dtype != w.dtype or g.shape != w.shape:
                ok = False
            elif g.dtype.is_floating_point:
                ok = torch.allclose(g.double(), w.double(), rtol=1e-2, atol=1e-2)
            else:
                ok = torch.equal(g, w)
            if not ok or len(got) != len(want):
                self.failures.append(f"rank {self.rank}: {what}: got {got} want {want}")
                return

    def raises(self, what, fn, words):
        self.checked += 1
        try:
            fn()
        except RuntimeError as e:
            if not all(w.lower() in str(e).lower() for w in words):
                self.failures.append(f"rank {self.rank}: {what}: message {str(e)!r} lacks {words}")
            return
        self.failures.append(f"rank {self.rank}: {what}: no RuntimeError")


def try_gloo(fn):
    """gloo's result, or None where gloo has no such operation or dtype."""
    try:
        return fn()
    except RuntimeError:
        return None


def run_ops(c, gloo, dtypes):
    rank, world = c.rank, c.world
    for dt in dtypes:
        name = str(dt).replace("torch.", "")
        # broadcast
        def bcast(group):
            t = make(rank, dt)
            dist.broadcast(t, src=world - 1, group=group)
            return t
        c.same(f"broadcast {name}", bcast(None), make(world - 1, dt))
        g = try_gloo(lambda: bcast(gloo))
        if g is not None:
            c.same(f"broadcast {name} vs gloo", bcast(None), g)
        # all_reduce, every op that applies
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
        if not dt.is_floating_point:
            ops += [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
        if dt != torch.bool:
            ops += [dist.ReduceOp.AVG]
        for op in ops:
            def ar(group):
                t = make(rank, dt)
                dist.all_reduce(t, op=op, group=group)
                return t
            got = ar(None)
            c.same(f"all_reduce {op} {name}", got, local_reduce(op, dt, world))
            g = try_gloo(lambda: ar(gloo))
            if g is not None:
                c.same(f"all_reduce {op} {name} vs gloo", got, g)
        if dt == torch.bool:
            continue  # the rest moves bytes only: bool is covered by the u8 path
        # all_reduce_coalesced
        ts = [make(rank, dt), make(rank, dt, 3)]
        dist.all_reduce_coalesced(ts)
        c.same(f"all_reduce_coalesced {name}", ts,
               [local_reduce(dist.ReduceOp.SUM, dt, world), local_reduce(dist.ReduceOp.SUM, dt, world, 3)])
        # reduce to rank 0; other ranks keep their input
        t = make(rank, dt)
        dist.reduce(t, dst=0)
        c.same(f"reduce {name}", t, local_reduce(dist.ReduceOp.SUM, dt, world) if rank == 0 else make(rank, dt))
        # all_gather, all_gather_into_tensor
        def ag(group):
            out = [torch.zeros(N, dtype=dt) for _ in range(world)]
            dist.all_gather(out, make(rank, dt), group=group)
            return out
        everyone = [make(r, dt) for r in range(world)]
        c.same(f"all_gather {name}", ag(None), everyone)
        g = try_gloo(lambda: ag(gloo))
        if g is not None:
            c.same(f"all_gather {name} vs gloo", ag(None), g)
        flat = torch.zeros(N * world, dtype=dt)
        dist._all_gather_base(flat, make(rank, dt))
        c.same(f"_allgather_base {name}", flat, torch.cat(everyone))
        # gather to rank 1 % world, scatter from rank 0
        root = 1 % world
        out = [torch.zeros(N, dtype=dt) for _ in range(world)] if rank == root else None
        dist.gather(make(rank, dt), gather_list=out, dst=root)
        if rank == root:
            c.same(f"gather {name}", out, everyone)
        t = torch.zeros(N, dtype=dt)
        dist.scatter(t, scatter_list=[make(r, dt) for r in range(world)] if rank == 0 else None, src=0)
        c.same(f"scatter {name}", t, make(rank, dt))
        # reduce_scatter (list), reduce_scatter of one tensor
        t = torch.zeros(N, dtype=dt)
        dist.reduce_scatter(t, [make(rank + r, dt) for r in range(world)])
        want = sum((make(q + rank, dt).long() if not dt.is_floating_point else make(q + rank, dt).double())
                   for q in range(world)).to(dt)
        c.same(f"reduce_scatter {name}", t, want)
        t = torch.zeros(N, dtype=dt)
        dist._reduce_scatter_base(t, torch.cat([make(rank + r, dt) for r in range(world)]))
        c.same(f"_reduce_scatter_base {name}", t, want)
        # all_to_all (lists), all_to_all_single with uneven split sizes
        ins = [make(rank * world + r, dt, r + 1) for r in range(world)]
        outs = [torch.zeros(rank + 1, dtype=dt) for _ in range(world)]
        dist.all_to_all(outs, ins)
        c.same(f"all_to_all {name}", outs, [make(q * world + rank, dt, rank + 1) for q in range(world)])
        in_splits = [r + 1 for r in range(world)]           # to rank r: r + 1 rows
        out_splits = [rank + 1] * world                      # from each: rank + 1 rows
        def a2a(group):
            src = torch.cat([make(rank * world + r, dt, 2 * (r + 1)).view(r + 1, 2) for r in range(world)])
            dst = torch.zeros(sum(out_splits), 2, dtype=dt)
            dist.all_to_all_single(dst, src, out_splits, in_splits, group=group)
            return dst
        got = a2a(None)
        c.same(f"all_to_all_single {name}", got,
               torch.cat([make(q * world + rank, dt, 2 * (rank + 1)).view(rank + 1, 2) for q in range(world)]))
        g = try_gloo(lambda: a2a(gloo))
        if g is not None:
            c.same(f"all_to_all_single {name} vs gloo", got, g)


def run_p2p_and_more(c):
    rank, world = c.rank, c.world
    # send/recv: even ranks send first, odd ranks receive first, along a chain
    if world > 1:
        t = torch.zeros(N)
        if rank % 2 == 0:
            if rank + 1 < world:
                dist.send(make(rank, torch.float32), dst=rank + 1)
            if rank > 0:
                dist.recv(t, src=rank - 1)
        else:
            dist.recv(t, src=rank - 1)
            if rank + 1 < world:
                dist.send(make(rank, torch.float32), dst=rank + 1)
        if rank > 0:
            c.same("send/recv", t, make(rank - 1, torch.float32))
        # a ring in one batch: everyone sends right and receives from the left at once
        t = torch.zeros(N, dtype=torch.int64)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, make(rank, torch.int64), (rank + 1) % world),
                                       dist.P2POp(dist.irecv, t, (rank - 1) % world)])
        for r in reqs:
            r.wait()
        c.same("batch_isend_irecv ring", t, make((rank - 1) % world, torch.int64))
    dist.barrier()
    # async op: Work.wait, is_completed, exception, get_future's value
    t = make(rank, torch.float32)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    work.wait()
    c.same("async all_reduce", t, local_reduce(dist.ReduceOp.SUM, torch.float32, world))
    c.same("Work.is_completed", torch.tensor(work.is_completed()), torch.tensor(True))
    c.same("future value", fut.wait(), [t])
    work = dist.barrier(async_op=True)
    c.same("Work.wait(timeout)", torch.tensor(work.wait(timeout=timedelta(seconds=30))), torch.tensor(True))
    # a Future's callback runs when the operation ends (DDP's comm hooks chain these)
    t = make(rank, torch.float32)
    chained = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    c.same("future then", chained.wait(), local_reduce(dist.ReduceOp.SUM, torch.float32, world) * 2)
    # non-contiguous tensor: a transposed view, reduced and written back through the view
    base = torch.stack([make(rank, torch.float32) for _ in range(3)])  # 3 x N
    view = base.t()
    dist.all_reduce(view)
    c.same("non-contiguous all_reduce", base,
           torch.stack([local_reduce(dist.ReduceOp.SUM, torch.float32, world)] * 3))
    # a subgroup: the first and the last rank
    members = sorted({0, world - 1})
    sub = dist.new_group(members)
    if rank in members:
        t = make(rank, torch.float32)
        dist.all_reduce(t, group=sub)
        c.same("subgroup all_reduce", t, sum(make(r, torch.float32) for r in members))
    # what braid cannot do says so
    c.raises("int16 all_reduce", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)), ["int16", "braid"])
    z = torch.full((3,), 1 + 2j, dtype=torch.complex64)
    dist.all_reduce(z)  # torch hands complex tensors over as their float view
    c.same("complex all_reduce", z, torch.full((3,), world * (1 + 2j), dtype=torch.complex64))
    c.raises("BAND on float", lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND), ["BAND", "float"])
    c.raises("recv from any source", lambda: dist.recv(torch.zeros(3)), ["src"])
    dist.barrier()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", default="env://")
    ap.add_argument("--rank", type=int, default=-1)
    ap.add_argument("--world", type=int, default=-1)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    return run(a.init, a.rank, a.world, a.quick)


def run(init, rank=-1, world=-1, quick=False):
    import braid.torch  # noqa: F401  registers the backend
    kw = {} if rank < 0 else {"rank": rank, "world_size": world}
    dist.init_process_group("braid", init_method=init, timeout=timedelta(seconds=60), **kw)
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    c = Checker(rank, world)
    run_ops(c, gloo, QUICK_DTYPES if quick else DTYPES)
    run_p2p_and_more(c)
    dist.destroy_process_group()
    for f in c.failures:
        print(f, flush=True)
    print(f"rank {rank}: {c.checked} checks, {len(c.failures)} failed", flush=True)
    return min(len(c.failures), 100)


def spawn_entry(rank, world, init):
    """mp.spawn's target: fails the spawn when a check failed."""
    if run(init, rank, world, quick=True):
        raise SystemExit(1)


if __name__ == "__main__":
    sys.exit(main())
