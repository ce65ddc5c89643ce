"""The collectives scenarios of rank_programs.py: every collective, in place and out of place,
blocking and *_async, on every dtype, against numpy's answers (and torch tensors)."""

import numpy as np

import braid
from rank_common import report

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64]
FLOAT_OPS = ["sum", "prod", "min", "max", "avg"]
INT_OPS = ["sum", "prod", "min", "max", "band", "bor", "bxor"]


def data(rank, n, dtype, salt=0):
    # Small values: sums and products of up to four ranks stay exact in every dtype (int8 too).
    return ((np.arange(n) * 3 + rank * 5 + salt) % 4 + 1).astype(dtype)


def reference(stack, op, dtype):
    if op == "sum":
        return np.sum(stack, axis=0, dtype=dtype)
    if op == "prod":
        return np.prod(stack, axis=0, dtype=dtype)
    if op == "min":
        return np.min(stack, axis=0)
    if op == "max":
        return np.max(stack, axis=0)
    if op == "avg":
        return (np.sum(stack.astype(np.float64), axis=0) / len(stack)).astype(dtype)
    fn = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op]
    return fn.reduce(stack, axis=0)


def same(got, want, what):
    tol = 1e-2 if got.dtype == np.float16 else 1e-6
    if np.issubdtype(got.dtype, np.floating):
        ok = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    else:
        ok = np.array_equal(got, want)
    assert ok, f"{what}: got {got!r}, want {want!r}"


def collectives():
    """Every collective, in place and out of place, on every dtype, against numpy's answer."""
    comm = braid.init()
    r, size = comm.rank, comm.size
    assert (comm.local_rank, comm.local_size) == (r, size)
    n = 7  # odd and not a multiple of the world size
    checked = 0
    for dt in DTYPES:
        name = np.dtype(dt).name
        everyone = np.stack([data(q, n, dt) for q in range(size)])
        for op in FLOAT_OPS if np.issubdtype(dt, np.floating) else INT_OPS:
            want = reference(everyone, op, dt)
            buf = data(r, n, dt)
            comm.all_reduce(buf, op=op)
            same(buf, want, f"all_reduce in place {name} {op}")
            out = np.zeros(n, dt)
            comm.all_reduce(data(r, n, dt), out, op)
            same(out, want, f"all_reduce {name} {op}")
            root = 1 % size
            buf = data(r, n, dt)
            comm.reduce(buf, op=op, root=root)
            if r == root:
                same(buf, want, f"reduce in place {name} {op}")
            out = np.zeros(n, dt)
            comm.reduce(data(r, n, dt), out, op, root)
            if r == root:
                same(out, want, f"reduce {name} {op}")
            blocks = np.stack([data(q, n * size, dt) for q in range(size)])
            out = np.zeros(n, dt)
            comm.reduce_scatter(data(r, n * size, dt), out, op)
            same(out, reference(blocks, op, dt)[r * n:(r + 1) * n], f"reduce_scatter {name} {op}")
            counts = [q + 1 for q in range(size)]
            vblocks = np.stack([data(q, sum(counts), dt) for q in range(size)])
            out = np.zeros(counts[r], dt)
            comm.reduce_scatterv(data(r, sum(counts), dt), out, counts, op)
            start = sum(counts[:r])
            same(out, reference(vblocks, op, dt)[start:start + counts[r]], f"reduce_scatterv {name} {op}")
            checked += 7

        root = size - 1
        buf = data(r, n, dt) if r == root else np.zeros(n, dt)
        comm.broadcast(buf, root=root)
        same(buf, data(root, n, dt), f"broadcast in place {name}")
        out = np.zeros(n, dt)
        comm.broadcast(data(r, n, dt), out, root=root)
        same(out, data(root, n, dt), f"broadcast {name}")

        out = np.zeros(n * size, dt)
        comm.all_gather(data(r, n, dt), out)
        same(out, np.concatenate([data(q, n, dt) for q in range(size)]), f"all_gather {name}")
        counts = [2 * q + 1 for q in range(size)]
        out = np.zeros(sum(counts), dt)
        comm.all_gatherv(data(r, counts[r], dt), out, counts)
        same(out, np.concatenate([data(q, counts[q], dt) for q in range(size)]), f"all_gatherv {name}")

        out = np.zeros(n * size, dt) if r == 0 else None
        comm.gather(data(r, n, dt), out, root=0)
        if r == 0:
            same(out, np.concatenate([data(q, n, dt) for q in range(size)]), f"gather {name}")
        out = np.zeros(n, dt)
        comm.scatter(data(r, n * size, dt) if r == root else None, out, root=root)
        same(out, data(root, n * size, dt)[r * n:(r + 1) * n], f"scatter {name}")

        # all_to_all: block p of rank q's send is data(q, n*size)[p*n:(p+1)*n].
        out = np.zeros(n * size, dt)
        comm.all_to_all(data(r, n * size, dt), out)
        want = np.concatenate([data(q, n * size, dt)[r * n:(r + 1) * n] for q in range(size)])
        same(out, want, f"all_to_all {name}")
        buf = data(r, n * size, dt)
        comm.all_to_all(buf)
        same(buf, want, f"all_to_all in place {name}")

        # all_to_allv: rank q sends k(q, p) elements to rank p.
        def k(q, p):
            return (q + 2 * p) % 3 + 1

        def block(q, p):
            return data(q * 10 + p, k(q, p), dt)

        send = np.concatenate([block(r, p) for p in range(size)])
        out = np.zeros(sum(k(q, r) for q in range(size)), dt)
        comm.all_to_allv(send, [k(r, p) for p in range(size)], out, [k(q, r) for q in range(size)])
        same(out, np.concatenate([block(q, r) for q in range(size)]), f"all_to_allv {name}")

        # send/recv around the ring: the send runs in the background while this rank receives.
        right, left = (r + 1) % size, (r - 1) % size
        w = comm.send_async(data(r, n, dt), right, tag=5)
        out = np.zeros(n, dt)
        comm.recv(out, left, tag=5)
        w.wait()
        same(out, data(left, n, dt), f"send/recv {name}")
        checked += 10

    comm.barrier()
    empty = np.zeros(0, np.float32)
    comm.all_reduce(empty)
    checked += 2 + every_async_form(comm)
    comm.close()
    report(checked=checked)


def every_async_form(comm):
    """Each *_async call started at once, then waited for in reverse order: each result must
    equal its blocking form's."""
    r, size, n, dt = comm.rank, comm.size, 5, np.int32
    full = data(r, n * size, dt)
    vcounts = [q + 1 for q in range(size)]
    k = [(r + p) % 2 + 1 for p in range(size)]          # to rank p
    kin = [(q + r) % 2 + 1 for q in range(size)]        # from rank q
    calls = {  # name: (args, the output to compare)
        "all_reduce": lambda o: ((data(r, n, dt), o(n), "max"), 1),
        "broadcast": lambda o: ((data(r, n, dt), o(n), 0), 1),
        "reduce": lambda o: ((data(r, n, dt), o(n), "sum", 0), 1),
        "all_gather": lambda o: ((data(r, n, dt), o(n * size)), 1),
        "all_gatherv": lambda o: ((data(r, vcounts[r], dt), o(sum(vcounts)), vcounts), 1),
        "reduce_scatter": lambda o: ((full, o(n), "sum"), 1),
        "reduce_scatterv": lambda o: ((data(r, sum(vcounts), dt), o(vcounts[r]), vcounts, "min"), 1),
        "gather": lambda o: ((data(r, n, dt), o(n * size) if r == 0 else None, 0), 1),
        "scatter": lambda o: ((full if r == 0 else None, o(n), 0), 1),
        "all_to_all": lambda o: ((full, o(n * size)), 1),
        "all_to_allv": lambda o: ((data(r, sum(k), dt), k, o(sum(kin)), kin), 2),
    }
    results = {}
    for mode in ("blocking", "async"):
        outs, works = {}, []
        for name, make in calls.items():
            args, out_index = make(lambda count: np.zeros(count, dt))
            outs[name] = args[out_index]
            if mode == "blocking":
                getattr(comm, name)(*args)
            else:
                works.append(getattr(comm, name + "_async")(*args))
        for w in reversed(works):
            assert w.wait(timeout=60) is True and w.exception() is None
        results[mode] = outs
    for name in calls:
        b, a = results["blocking"][name], results["async"][name]
        if b is not None:
            assert np.array_equal(a, b), (name, a, b)
    return len(calls)


def torch_tensors():
    """torch CPU tensors, bfloat16 included, reduced in place (zero-copy) and gathered."""
    import torch
    comm = braid.init()
    r, size = comm.rank, comm.size
    for dt in [torch.bfloat16, torch.float16, torch.float32, torch.int64]:
        t = torch.arange(6, dtype=dt) + r
        ptr = t.data_ptr()
        comm.all_reduce(t, op="sum")
        want = sum(torch.arange(6, dtype=torch.float64) + q for q in range(size))
        assert t.data_ptr() == ptr and torch.equal(t.double(), want), (dt, t)
        out = torch.zeros(6 * size, dtype=dt)
        comm.all_gather(torch.full((6,), r, dtype=dt), out)
        assert torch.equal(out.double(), torch.arange(size, dtype=torch.float64).repeat_interleave(6)), (dt, out)
    comm.close()
    report(ok=True)
