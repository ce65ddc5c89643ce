"""What each rank process of the tests runs: `rank_programs.py SCENARIO [ARGS]`.

Every scenario joins the job from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
set by conftest.run_ranks or braidrun), checks what it can itself (an AssertionError exits
non-zero), and prints one line `RESULT <json>` for the test to judge what only it can.
"""

import gc
import os
import sys
import threading
import time
import weakref

import numpy as np

import braid
from rank_collectives import collectives, torch_tensors
from rank_common import report, wait_for_file


def async_ops(gate):
    """A Work that cannot finish before the peer joins: wait(timeout) says False, then True;
    the buffers of an operation whose Work and array were dropped stay alive until it ends."""
    comm = braid.init()
    r = comm.rank
    if r == 0:
        x = np.ones(1000, np.float32)
        w = comm.all_reduce_async(x)
        early = (w.is_completed(), w.wait(timeout=0.2))
        dropped = np.ones(16, np.int32)
        alive = weakref.ref(dropped)
        comm.all_reduce_async(dropped)  # Work dropped at once
        del dropped
        gc.collect()
        held_while_pending = alive() is not None
        open(gate, "w").close()  # now rank 1 may join
        done = w.wait(timeout=60)
        comm.barrier()  # the dropped operation is complete once this returns
        assert comm.rank == 0  # any call lets the communicator let go of completed operations
        gc.collect()
        report(early=list(early), done=done, completed=w.is_completed(), exception=repr(w.exception()),
               sum=float(x[0]), held_while_pending=held_while_pending, released_after=alive() is None)
    else:
        wait_for_file(gate)
        x = np.ones(1000, np.float32)
        y = np.ones(16, np.int32)
        works = [comm.all_reduce_async(x), comm.all_reduce_async(y), comm.barrier_async()]
        for w in works:
            assert w.wait() is True
        report(sum=float(x[0]), int_sum=int(y[0]))
    comm.close()


def interrupt(gate):
    """Ctrl-C (SIGINT) interrupts rank 0's Work.wait() on an operation rank 1 has not joined;
    the operation goes on and completes once rank 1 joins."""
    import signal
    comm = braid.init()
    x = np.ones(8, np.float32)
    if comm.rank == 0:
        w = comm.all_reduce_async(x)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            w.wait()
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        open(gate, "w").close()
        report(interrupted=interrupted, done=w.wait(timeout=60), sum=float(x[0]))
    else:
        wait_for_file(gate)
        comm.all_reduce(x)
        report(sum=float(x[0]))
    comm.close()


def gil(gate):
    """Rank 1 enters the all_reduce only after rank 0's Python thread ran while rank 0 was waiting
    in it: with the GIL held during the wait, rank 0 would time out instead."""
    comm = braid.init()
    x = np.ones(4, np.float32)
    if comm.rank == 0:
        entering = threading.Event()
        counts = [0]

        def counter():
            entering.wait()
            time.sleep(0.5)  # by now the main thread is inside all_reduce
            for _ in range(10000):
                counts[0] += 1
            open(gate, "w").close()

        t = threading.Thread(target=counter)
        t.start()
        entering.set()
        comm.all_reduce(x)
        t.join()
        report(counted=counts[0], sum=float(x[0]))
    else:
        wait_for_file(gate)
        comm.all_reduce(x)
        report(sum=float(x[0]))
    comm.close()


def error_of(fn):
    try:
        fn()
    except braid.Error as e:
        return {"type": type(e).__name__, "code": e.code, "message": str(e),
                "mro": [c.__name__ for c in type(e).__mro__]}
    return None


def mismatch():
    """Rank 0 reduces 4 elements, rank 1 reduces 5."""
    comm = braid.init()
    err = error_of(lambda: comm.all_reduce(np.ones(4 + comm.rank, np.float32)))
    later = error_of(comm.barrier)
    report(error=err, later=later, state=comm.state)


def peer_exits():
    """Rank 1 leaves right after joining; rank 0's all_reduce must end with an error."""
    comm = braid.init()
    if comm.rank == 1:
        os._exit(0)
    err = error_of(lambda: comm.all_reduce(np.ones(1 << 16, np.float32)))
    report(error=err)


def timeout(gate):
    """Rank 1 never calls the all_reduce (BRAID_TIMEOUT_S is small): rank 0 times out."""
    comm = braid.init()
    if comm.rank == 0:
        err = error_of(lambda: comm.all_reduce(np.ones(8, np.float32)))
        open(gate, "w").close()
        report(error=err)
    else:
        wait_for_file(gate)
        report(error=None)
    sys.stdout.flush()
    os._exit(0)  # the communicator failed; no goodbye needed


def abort(gate):
    """Rank 1 aborts while rank 0 waits in an all_reduce rank 1 never joins."""
    comm = braid.init()
    if comm.rank == 0:
        w = comm.all_reduce_async(np.ones(8, np.float32))
        open(gate, "w").close()
        err = error_of(w.wait)
        report(error=err, exception=repr(w.exception()))
    else:
        wait_for_file(gate)
        comm.abort("rank 1 aborts on purpose")
        err = error_of(comm.barrier)
        report(error=err)
    sys.stdout.flush()
    os._exit(0)


def subgroups():
    """split() by parity and new_group() of the ranks but the last, with collectives in each."""
    comm = braid.init()
    r, size = comm.rank, comm.size
    sub = comm.split(r % 2, key=-r)
    members = [q for q in range(size) if q % 2 == r % 2]
    assert sub.size == len(members) and sub.rank == len(members) - 1 - members.index(r), (sub.rank, sub.size)
    x = np.array([r], np.int64)
    sub.all_reduce(x)
    assert x[0] == sum(members), x
    none = comm.split(-1 if r == 0 else 0)
    assert (none is None) == (r == 0), none
    group = comm.new_group(list(range(size - 1)))
    if r == size - 1:
        assert group is None
    else:
        y = np.array([1.0], np.float64)
        group.all_reduce(y)
        assert y[0] == size - 1
        group.close()
    if none is not None:
        none.close()
    sub.close()
    comm.close()
    report(ok=True)


def shrink(mode):
    """mode "dies": the last rank exits after the first all_reduce; the others shrink() once
    theirs fail. mode "exclude": after three all_reduces every rank calls shrink([last]), the
    last one included (it gets None). Each member checks an all_reduce on the new communicator
    and reports its new rank, size and the old ranks gathered over it."""
    comm = braid.init()
    r, size = comm.rank, comm.size
    last = size - 1
    x = np.ones(1 << 12, np.float32)
    comm.all_reduce(x)
    if mode == "dies" and r == last:
        os._exit(0)
    failed = None
    if mode == "dies":
        failed = error_of(lambda: [comm.all_reduce(x) for _ in range(1 << 20)])
    else:
        for _ in range(3):
            comm.all_reduce(x)
    new = comm.shrink([last] if mode == "exclude" else [])
    if new is None:
        report(member=False, state=comm.state)
        return
    y = np.full(5, new.rank + 1, np.int64)
    new.all_reduce(y)
    olds = np.zeros(new.size, np.int64)
    new.all_gather(np.array([r], np.int64), olds)
    report(member=True, failed=failed, rank=new.rank, size=new.size, sum=int(y[0]), olds=olds.tolist(),
           old_state=comm.state)
    new.close()
    comm.close()


def groups():
    """Every rank sends to every other and receives from each in one group (batch_isend_irecv),
    then two all_reduce calls coalesced in a group; blocking calls are refused inside one."""
    comm = braid.init()
    r, size = comm.rank, comm.size
    inbox = {p: np.zeros(5, np.int64) for p in range(size) if p != r}
    comm.group_start()
    works = [comm.send_async(np.full(5, r * 10 + p, np.int64), p, tag=1) for p in range(size) if p != r]
    works += [comm.recv_async(inbox[p], p, tag=1) for p in inbox]
    done = comm.group_end()
    assert done.wait(timeout=60) is True
    assert all(w.is_completed() for w in works)
    for p, got in inbox.items():
        assert got.tolist() == [p * 10 + r] * 5, (p, got)
    a, b = np.full(3, r, np.float32), np.full(7, 1, np.float32)
    comm.group_start()
    wa, wb = comm.all_reduce_async(a), comm.all_reduce_async(b)
    try:
        comm.barrier()
        refused = None
    except ValueError as e:
        refused = str(e)
    comm.group_end().wait()
    wa.wait(), wb.wait()
    assert a.tolist() == [sum(range(size))] * 3 and b.tolist() == [size] * 7, (a, b)
    comm.close()
    report(refused=refused)


def url(address):
    """braid.init(url=...) with rank and size given, not from the environment."""
    rank, size = int(os.environ.pop("RANK")), int(os.environ.pop("WORLD_SIZE"))
    with braid.init(url=address, rank=rank, size=size) as comm:
        x = np.full(3, rank + 1, np.int32)
        comm.all_reduce(x, op=braid.Op.max)
        report(rank=comm.rank, size=comm.size, max=int(x[0]))


SCENARIOS = {f.__name__: f for f in [collectives, torch_tensors, async_ops, interrupt, gil, mismatch, peer_exits,
                                      timeout, abort, subgroups, shrink, groups, url]}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](*sys.argv[2:])
