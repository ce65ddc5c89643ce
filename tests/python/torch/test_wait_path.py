"""Where a torch operation that is waited for at once runs, and how its waiters wait.

torch hands every operation to the backend as an asynchronous call and then waits on its Work.
Such an operation must run on the caller's own thread (braid's hand-off, docs/performance.md),
not on braid's progress thread: a thread hand-off each way costs more than a small all_reduce.
braid counts both and prints the counts at TRACE level when a communicator closes; the check
reads them. Also: how long the waiters of torch's braid groups spin, given the CPUs the ranks may use.
"""
import os
import re

import pytest

from torch_helpers import HERE, assert_all_ok, free_port, run_ranks

WORKER = os.path.join(HERE, "wait_path_worker.py")
CLOSING = re.compile(r"rank (\d+) closing: (\d+) operations ran on callers' threads, (\d+) on the progress thread")


def test_small_ops_waited_at_once_run_on_the_callers_thread():
    url = f"tcp://127.0.0.1:{free_port()}"
    ops = 200
    results = run_ranks(lambda r: [WORKER, "--init", url, "--rank", str(r), "--world", "2", "--ops", str(ops)], 2,
                        env_for_rank=lambda r: {"BRAID_DEBUG": "TRACE"})
    assert_all_ok(results)
    for rank, (_, out) in enumerate(results):
        counts = CLOSING.findall(out)
        assert len(counts) == 1, f"rank {rank}: no single TRACE closing line in\n{out[-3000:]}"
        _, on_caller, on_progress = (int(x) for x in counts[0])
        assert on_caller + on_progress >= ops, f"rank {rank}: {counts[0]}"
        # A caller descheduled between issuing and waiting (a busy machine) may leave one to the
        # progress thread now and then; most must run on the caller's thread.
        assert on_caller >= 0.9 * (on_caller + on_progress), (
            f"rank {rank}: {on_caller} operations on the caller's thread, {on_progress} on braid's progress "
            f"thread; torch waits for each at once, so they should run on the caller's")


def run_policy(cpus_for_rank, spin=None, ops=20):
    """2 ranks through torch.distributed; rank r confined to cpus_for_rank(r) ("" = free)."""
    url = f"tcp://127.0.0.1:{free_port()}"

    def argv(r):
        cpus = cpus_for_rank(r)
        return [WORKER, "--init", url, "--rank", str(r), "--world", "2", "--ops", str(ops)] + (
            ["--cpus", cpus] if cpus else [])

    def env(r):
        e = {"BRAID_DEBUG": "INFO"}
        if spin is not None:
            e["BRAID_SPIN_US"] = spin
        return e

    saved = os.environ.pop("BRAID_SPIN_US", None)  # the children inherit the test's environment
    try:
        results = run_ranks(argv, 2, env_for_rank=env)
    finally:
        if saved is not None:
            os.environ["BRAID_SPIN_US"] = saved
    assert_all_ok(results)
    return [out for _, out in results]


def usable_cpus():
    if (os.cpu_count() or 1) < 2:
        pytest.skip("the host has one CPU: 2 ranks outnumber it, and braid keeps a yielding spin")
    return sorted(os.sched_getaffinity(0))


# The rule itself lives in the library (runtime/links/spin_policy.h, tested there as a table and in
# C++ jobs); these check that torch's groups get it: braid.torch sets nothing itself.
# Ranks that may share CPUs keep spinning over shm, whose waits stop while the peer is queued on
# the waiter's CPU; over tcp they sleep at once.
OVER_SHM = "every other rank on this host is reached over shm"


def test_ranks_on_one_cpu_spin_over_shm():
    cpu = str(usable_cpus()[0])
    for rank, out in enumerate(run_policy(lambda r: cpu)):
        assert "spin 50 us: 2 ranks on this host share 1 CPU; " + OVER_SHM in out, f"rank {rank}:\n{out[-3000:]}"


def test_ranks_free_on_every_cpu_spin_over_shm():
    usable_cpus()
    for rank, out in enumerate(run_policy(lambda r: "")):
        assert "spin 50 us: 2 ranks on this host share " in out and OVER_SHM in out, f"rank {rank}:\n{out[-3000:]}"


def test_ranks_bound_to_their_own_cpus_keep_spinning():
    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.skip("this process may use one CPU only")
    for rank, out in enumerate(run_policy(lambda r: str(cpus[r]))):
        assert "spin 50 us: no other rank on this host may run on this rank's 1 CPU" in out, \
            f"rank {rank}:\n{out[-3000:]}"


def test_the_users_choice_stands():
    cpu = str(usable_cpus()[0])
    for rank, out in enumerate(run_policy(lambda r: cpu, spin="50")):
        assert "spin 50 us: BRAID_SPIN_US is set" in out, f"rank {rank}:\n{out[-3000:]}"
        assert "spin 0 us" not in out, f"rank {rank}:\n{out[-3000:]}"
