"""Shared by the torch backend tests: where braid.torch was built, and how to start ranks.

The tests run real processes over loopback: each rank is a /usr/bin/python3 child with the
build tree's python/ on PYTHONPATH (<BRAID_BUILD_ROOT>/python, set by meson test; else
build/python next to the source tree). Without torch or a built backend every test is skipped
(conftest.py), saying why. Not named conftest: tests/python/ has its own.
"""
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
BUILD_PYTHON = os.path.join(os.environ.get("BRAID_BUILD_ROOT", os.path.join(SOURCE_ROOT, "build")), "python")
PYTHON = "/usr/bin/python3"
RUN_TIMEOUT_S = 240  # bounds every group of rank processes


def _why_not_available():
    try:
        import torch.distributed  # noqa: F401
    except ImportError as e:
        return f"torch is not importable by {sys.executable} ({e}): run with /usr/bin/python3"
    if BUILD_PYTHON not in sys.path:
        sys.path.insert(0, BUILD_PYTHON)
    try:
        import braid.torch  # noqa: F401
    except ImportError as e:
        return f"braid.torch is not built in {BUILD_PYTHON} ({e}): configure with -Dtorch=enabled"
    return None


SKIP_REASON = _why_not_available()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([BUILD_PYTHON, HERE] + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("BRAID_RENDEZVOUS_TIMEOUT_S", "60")
    env["PYTHONWARNINGS"] = "ignore"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start_ranks(argv_for_rank, world, env_for_rank=None):
    """Starts one process per rank and returns them, running; finish_ranks waits for them."""
    procs = []
    for r in range(world):
        env = child_env(**(env_for_rank(r) if env_for_rank else {}))
        procs.append(subprocess.Popen([PYTHON] + argv_for_rank(r), env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return procs


def finish_ranks(procs, timeout=RUN_TIMEOUT_S):
    """Waits for each process (bounded), returns [(rc, output)]."""
    return [finish(p, timeout) for p in procs]


def run_ranks(argv_for_rank, world, env_for_rank=None, timeout=RUN_TIMEOUT_S):
    """Starts one process per rank, waits for all (bounded), returns [(rc, output)]."""
    return finish_ranks(start_ranks(argv_for_rank, world, env_for_rank), timeout)


def finish(proc, timeout):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return -9, out + f"\n[killed after {timeout} s]"
    return proc.returncode, out


def assert_all_ok(results):
    report = "\n".join(f"--- rank {r} rc={rc}\n{out[-4000:]}" for r, (rc, out) in enumerate(results))
    assert all(rc == 0 for rc, _ in results), report
