"""Shared helpers for the `import braid` tests: the package from the build tree, and real rank
processes started with torchrun's environment (or braidrun), each run bounded by a timeout."""

import json
import os
import secrets
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
RANK_PROGRAMS = os.path.join(HERE, "rank_programs.py")


def import_braid():
    """braid from the build tree, or a skip saying why it is missing."""
    return pytest.importorskip("braid", reason="import braid failed: build it with meson (Debian's "
                               "python3-dev and pybind11-dev) and run with PYTHONPATH=<build>/python")


def free_port():
    # The store binds it a moment later; tests that start ranks run one at a time (is_parallel false).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ranks:
    """The outcome of one job: each rank's exit code, output, and its RESULT line as a dict."""

    def __init__(self, procs):
        self.codes = [p.returncode for p in procs]
        self.outs = [p.stdout for p in procs]
        self.errs = [p.stderr for p in procs]

    def result(self, rank):
        for line in self.outs[rank].splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        raise AssertionError(f"rank {rank} printed no RESULT line\n{self.describe()}")

    def describe(self):
        return "\n".join(f"--- rank {r}: exit {c}\nstdout:\n{o}\nstderr:\n{e}"
                         for r, (c, o, e) in enumerate(zip(self.codes, self.outs, self.errs)))

    def check_ok(self):
        assert self.codes == [0] * len(self.codes), self.describe()
        return self


def rank_env(extra=None):
    env = dict(os.environ)
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                "BRAID_SECRET": secrets.token_hex(16), "BRAID_TIMEOUT_S": "60",
                "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


def run_ranks(n, scenario, *args, env=None, timeout=120):
    """Start n processes of rank_programs.py SCENARIO ARGS with RANK/WORLD_SIZE/MASTER_* set,
    as torchrun would, and wait for all of them (killing every one past `timeout`)."""
    base = rank_env(env)
    procs = []
    for r in range(n):
        e = dict(base, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n))
        procs.append(subprocess.Popen([sys.executable, RANK_PROGRAMS, scenario, *map(str, args)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    finished = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            finished.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return Ranks(finished)


@pytest.fixture
def solo():
    """A one-rank communicator (file:// rendezvous in a temporary directory), for argument checks."""
    import tempfile

    b = import_braid()
    with tempfile.TemporaryDirectory() as d:
        comm = b.init(url=f"file://{d}/rendezvous", rank=0, size=1)
        yield comm
        comm.close()
