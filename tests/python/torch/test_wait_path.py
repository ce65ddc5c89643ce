"""Where a torch operation that is waited for at once runs, and how its waiters wait.

torch hands every operation to the backend as an asynchronous call and then waits on its Work.
Such an operation must run on the caller's own thread (braid's hand-off, docs/performance.md),
not on braid's progress thread: a thread hand-off each way costs more than a small all_reduce.
braid counts both and prints the counts at TRACE level when a communicator closes; the check
reads them. Also: the wait policy braid.torch picks from the CPUs a rank may use.
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


@pytest.fixture
def policy(monkeypatch):
    import braid.torch as bt
    monkeypatch.delenv("BRAID_SPIN_US", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    return bt, monkeypatch


def test_ranks_free_to_share_cpus_sleep_at_once(policy):
    bt, mp = policy
    mp.setenv("LOCAL_WORLD_SIZE", "2")
    mp.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})  # torchrun, mp.spawn
    bt._choose_wait_policy(2)
    assert os.environ.get("BRAID_SPIN_US") == "0"


def test_ranks_bound_to_their_own_cpus_keep_spinning(policy):
    bt, mp = policy
    mp.setenv("LOCAL_WORLD_SIZE", "2")
    mp.setattr(os, "sched_getaffinity", lambda pid: {2, 3})  # braidrun --cpu-bind auto
    bt._choose_wait_policy(2)
    assert "BRAID_SPIN_US" not in os.environ


def test_one_rank_per_host_keeps_spinning(policy):
    bt, mp = policy
    mp.setenv("LOCAL_WORLD_SIZE", "1")
    mp.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    bt._choose_wait_policy(8)
    assert "BRAID_SPIN_US" not in os.environ


def test_without_local_world_size_the_group_size_stands_in(policy):
    bt, mp = policy
    mp.delenv("LOCAL_WORLD_SIZE", raising=False)
    mp.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    bt._choose_wait_policy(2)
    assert os.environ.get("BRAID_SPIN_US") == "0"


def test_the_users_choice_stands(policy):
    bt, mp = policy
    mp.setenv("LOCAL_WORLD_SIZE", "2")
    mp.setenv("BRAID_SPIN_US", "50")
    mp.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    bt._choose_wait_policy(2)
    assert os.environ.get("BRAID_SPIN_US") == "50"
