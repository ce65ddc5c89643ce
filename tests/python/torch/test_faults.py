"""Faults a training job meets, through backend "braid": a rank killed mid-training, ranks that
disagree on the world size, shapes that differ between ranks, tensors not on the CPU. Each
ends in a RuntimeError that says what happened, on every rank still running, never a hang."""
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from torch_helpers import HERE, PYTHON, RUN_TIMEOUT_S, child_env, finish_ranks, free_port, run_ranks, start_ranks


def worker(name):
    return os.path.join(HERE, name)


class Lines:
    """Reads a process's output on a thread (so it never blocks on a full pipe) and lets the
    test wait, bounded, for a line."""

    def __init__(self, proc):
        self.proc, self.lines, self.cv = proc, [], threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()

    def wait_for(self, text, timeout):
        with self.cv:
            return self.cv.wait_for(lambda: text in self.lines or self.proc.poll() is not None, timeout) \
                and text in self.lines

    def finish(self, timeout):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.thread.join(10)
        return self.lines

    def text(self):
        return "\n".join(self.lines[-40:])


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_rank_killed_mid_training_names_it(transport):
    """SIGKILL one rank of a 3-rank DDP loop: the two others raise, within the group's timeout,
    naming the dead rank and where braid reached it (its pid over shm, its address over tcp)."""
    world, victim, timeout_s = 3, 1, 30
    url = f"tcp://127.0.0.1:{free_port()}"
    env = child_env(BRAID_TRANSPORT=transport)
    procs = [subprocess.Popen([PYTHON, worker("train_worker.py"), str(r), str(world), url, str(timeout_s)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    readers = [Lines(p) for p in procs]
    try:
        assert readers[victim].wait_for("step 5", RUN_TIMEOUT_S), readers[victim].text()
        killed_at = time.time()
        procs[victim].send_signal(signal.SIGKILL)
        outs = {r: readers[r].finish(RUN_TIMEOUT_S) for r in range(world) if r != victim}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r, lines in outs.items():
        raised = [l for l in lines if l.startswith("raised ")]
        assert raised, f"rank {r} did not raise:\n" + "\n".join(lines[-20:])
        m = re.match(r"raised ([0-9.]+): (.*)", raised[0])
        at, msg = float(m.group(1)), m.group(2)
        assert at - killed_at < timeout_s, f"rank {r} raised {at - killed_at:.1f} s after the kill: {msg}"
        assert f"on rank {r}" in msg and "rank 1" in msg, msg
        where = rf"rank 1 \(pid {procs[victim].pid}," if transport == "shm" else r"rank 1 \([^ ()]+:\d+\)"
        assert re.search(where, msg), f"rank {r}'s message lacks {where!r}: {msg}"
        assert "finished" not in lines, lines[-5:]


def test_survivors_rebuild_the_group_after_shrink():
    """The recipe of docs/fault_tolerance.md: rank 2 of 3 dies mid-loop; ranks 0 and 1 destroy
    the group, shrink a braid.Communicator of the job, and go on in a new group of 2 built in a
    fresh prefix of the job's store (served here by the test, as a launcher's agent would)."""
    import torch.distributed as dist
    world, victim = 3, 2
    store_port = free_port()
    store = dist.TCPStore("127.0.0.1", store_port, world, is_master=True, wait_for_workers=False)
    url = f"tcp://127.0.0.1:{free_port()}"
    results = run_ranks(lambda r: [worker("shrink_worker.py"), str(r), str(world), str(store_port), url, str(victim)],
                        world, env_for_rank=lambda r: dict(BRAID_TIMEOUT_S=30))
    del store
    rc, out = results[victim]
    assert rc == 1, out
    for r in range(world - 1):
        rc, out = results[r]
        assert rc == 0, out
        assert any(l.startswith("raised: ") and "rank 2" in l for l in out.splitlines()), out
        assert f"after rank={r} size=2 sum=3 olds=[0, 1]" in out.splitlines(), out


def start_init(sizes, url, env_for_rank=None, timeout_s=5):
    """Starts init_worker.py as len(sizes) ranks, rank r saying world size sizes[r]."""
    return start_ranks(lambda r: [worker("init_worker.py"), str(r), str(sizes[r]), url, str(timeout_s)],
                       len(sizes), env_for_rank)


def init_lines(procs):
    """Each rank's "ok ..." or "raised ..." line, once all have ended."""
    lines = []
    for r, (rc, out) in enumerate(finish_ranks(procs, timeout=120)):
        assert rc == 0, out
        found = [l for l in out.splitlines() if l.startswith(("raised ", "ok "))]
        assert found, f"rank {r}:\n{out[-3000:]}"
        lines.append(found[0])
    return lines


DISAGREEING_SIZES = [(2, 3), (3, 2), (3, 2, 3)]


@pytest.fixture(scope="module")
def waiting():
    """The jobs of the tests below that wait out rendezvous timeouts on purpose (10 to 18 s
    each, idle but for importing torch), started together when the first of those tests runs:
    each test then checks its own job, and the module waits for the longest once, not for each
    in turn. Every timeout and bound is the one the test states."""
    ports = []  # one each, all different: the jobs run at the same time
    while len(ports) < len(DISAGREEING_SIZES) + 2:
        port = free_port()
        if port not in ports:
            ports.append(port)
    url = [f"tcp://127.0.0.1:{port}" for port in ports]
    jobs = {sizes: start_init(sizes, url[i], env_for_rank=lambda r: dict(BRAID_RENDEZVOUS_TIMEOUT_S=30))
            for i, sizes in enumerate(DISAGREEING_SIZES)}
    jobs["world size larger"] = start_init((3, 3), url="env://", env_for_rank=lambda r: dict(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=ports[-2], RANK=r, WORLD_SIZE=3, BRAID_RENDEZVOUS_TIMEOUT_S=8))
    jobs["rank 1 waits longer"] = start_init((3, 3), url[-1], timeout_s=10, env_for_rank=lambda r: dict(
        BRAID_RENDEZVOUS_TIMEOUT_S=3 if r == 0 else 2))
    yield jobs
    for procs in jobs.values():
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("sizes", DISAGREEING_SIZES)
def test_ranks_that_disagree_on_world_size_are_told(waiting, sizes):
    """One rank says 3 and another 2 (rank 0 or rank 1; of two or three processes): every rank
    raises, naming the two sizes."""
    for line in init_lines(waiting[sizes]):
        assert line.startswith("raised ") and "InvalidArgumentError" in line, line
        assert "disagree on WORLD_SIZE" in line and "has 3" in line and "has 2" in line, line


def test_world_size_larger_than_the_ranks_started(waiting):
    """WORLD_SIZE=3 with only 2 ranks started (env://): both raise within torch's timeout plus
    BRAID_RENDEZVOUS_TIMEOUT_S, naming the missing rank 2 and the expected size."""
    lines = init_lines(waiting["world size larger"])
    for r, line in enumerate(lines):
        assert line.startswith("raised ") and "TimeoutError" in line, line
        assert f"rank {r} waited" in line and "for rank 2 (3 expected)" in line, line
        # torch's wait (5 s), braid's (8 s) and slack for a loaded machine: far below the
        # 300 s default, and no hang
        assert float(line.split()[1]) < 5 + 8 + 30, line


def test_rank_that_waits_longer_than_its_rendezvous_timeout_for_rank_0_says_so(waiting):
    """WORLD_SIZE=3, two ranks started: rank 0 sits in torch's TCPStore waiting for a third
    process for the whole group timeout (10 s), longer than rank 1's BRAID_RENDEZVOUS_TIMEOUT_S
    (2 s): rank 1 raises braid's TimeoutError saying what it waited for, not torch's bare
    'Socket Timeout'; rank 0 then names the ranks it misses."""
    lines = init_lines(waiting["rank 1 waits longer"])
    assert "TimeoutError" in lines[1] and "rank 1 of world size 3 waited 2 s" in lines[1], lines[1]
    assert "for rank 0 to start the braid group" in lines[1] and "same world size (3)" in lines[1], lines[1]
    assert "TimeoutError" in lines[0] and "for ranks 1, 2 (3 expected)" in lines[0], lines[0]


def test_mismatched_shapes_name_both_ranks():
    """Rank 0 all_reduces 5 elements and rank 1 7, over tcp: each rank's error names itself,
    the other rank with its host:port, and both counts."""
    url = f"tcp://127.0.0.1:{free_port()}"
    results = run_ranks(lambda r: [worker("error_worker.py"), "mismatch", str(r), "2", url], 2,
                        lambda r: dict(BRAID_TRANSPORT="tcp"), timeout=120)
    for r, (rc, out) in enumerate(results):
        assert rc == 0, out
        msg = next((l for l in out.splitlines() if l.startswith("raised: ")), None)
        assert msg is not None, out
        other = 1 - r
        assert "mismatch" in msg and f"rank {r}" in msg and f"rank {other}" in msg, msg
        assert "count 5" in msg and "count 7" in msg, msg
        assert re.search(rf"rank {other} \([^ ()]+:\d+\)", msg), f"no address for rank {other}: {msg}"


def test_tensors_off_the_cpu_are_refused_naming_the_op():
    """No GPU and a CPU-only torch here: a meta tensor stands in for a CUDA one (the backend's
    check refuses every device but the CPU). Operations torch dispatches itself refuse it first,
    in torch's words; every other one reaches braid, which names the operation and .cpu()."""
    url = f"tcp://127.0.0.1:{free_port()}"
    (rc, out), = run_ranks(lambda r: [worker("device_worker.py"), url], 1, timeout=120)
    assert rc == 0, out
    lines = out.splitlines()
    assert not [l for l in lines if l.startswith("returned ")], out
    by_braid = [l for l in lines if l.startswith("braid ")]
    for line in by_braid:
        op = line.split()[1].rstrip(":")
        assert f"braid backend: {op}: tensor on meta" in line and ".cpu()" in line, line
    for line in (l for l in lines if l.startswith("torch ")):
        assert "c10d::" in line, line  # torch's dispatcher, before any backend
    assert len(by_braid) >= 8, out  # allgather, gather, scatter, reduce_scatter, alltoall_base, ...
    assert "cpu after: [1.0, 1.0, 1.0]" in out, out
