"""torch scripts under braidrun, unchanged, and torch's timeout bounding braid's rendezvous.

braidrun gives the ranks torchrun's variables with MASTER_PORT free for the torch store rank 0
serves under env:// (any backend), and braid's own store at BRAID_STORE_PORT. A script written
for torchrun therefore runs as it is, with "braid" and with "gloo", restarts included.
"""
import os
import re
import subprocess

import pytest

from torch_helpers import BUILD_PYTHON, HERE, PYTHON, child_env, finish, free_port

BRAIDRUN = os.path.join(os.path.dirname(BUILD_PYTHON), "tools", "braidrun", "braidrun")


def braidrun(args, env, timeout=240):
    if not os.access(BRAIDRUN, os.X_OK):
        pytest.skip(f"braidrun is not built ({BRAIDRUN})")
    proc = subprocess.Popen([BRAIDRUN] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return finish(proc, timeout)


@pytest.mark.parametrize("backend", ["braid", "gloo"])
def test_env_script_runs_unchanged_and_resumes_after_a_kill(backend, tmp_path):
    """braidrun --standalone --max-restarts 1 runs an env:// script for torchrun: its all_reduces
    add up, rank 1 is SIGKILLed after step 2 of 5 in round 0, and round 1 resumes from the
    checkpoint to the same parameters as an uninterrupted run."""
    world, steps, kill_at = 2, 5, 2
    rc, out = braidrun(["--standalone", "--nproc-per-node", str(world), "--max-restarts", "1", "--cpu-bind", "none",
                        "--grace-s", "2", PYTHON, os.path.join(HERE, "env_script.py"), backend, str(tmp_path),
                        str(steps), str(kill_at)], child_env())
    assert rc == 0, out[-6000:]
    assert re.search(r"rank 1 .*killed by SIGKILL", out), out[-6000:]
    assert "round 0 failed; starting every rank again (restart 1 of 1)" in out, out[-6000:]
    expected = [steps * world * i + sum(range(1, steps + 1)) * sum(range(1, world + 1)) for i in range(4)]
    for rank in range(world):
        assert re.search(rf"round 1 rank {rank} starts at step [1-9]", out), out[-6000:]
        assert f"round 1 rank {rank} final {' '.join(f'{x:g}' for x in expected)}" in out, out[-6000:]
    assert "Address already in use" not in out and "bad_alloc" not in out, out[-6000:]


def test_a_torch_client_at_braids_store_is_named():
    """A script that gives torch's TCPStore braid's store port by mistake: braidrun's store
    refuses it and says it looks like torch's TCPStore, and where torch's store belongs."""
    rc, out = braidrun(["--standalone", "--nproc-per-node", "1", "--cpu-bind", "none", PYTHON,
                        os.path.join(HERE, "foreign_client.py")], child_env(), timeout=120)
    assert "connecting" in out, out[-3000:]
    assert "where a braid store handshake (at most 512) was due" in out, out[-3000:]
    assert "look like torch.distributed's TCPStore" in out and "MASTER_PORT" in out, out[-3000:]


def test_torch_timeout_bounds_the_rendezvous():
    """A rank whose peer never comes fails within about init_process_group's timeout, as with
    gloo, not after BRAID_RENDEZVOUS_TIMEOUT_S's 300 s default; that variable, when set, still
    wins. torch's own TCPStore on rank 0 first waits up to the timeout for the others to
    connect, before any backend is called (gloo pays that too): hence three timeouts as the
    bound, and the 2 s rank 0 stays so that others may read why."""
    cases = [  # (torch's timeout, BRAID_RENDEZVOUS_TIMEOUT_S, what the message names)
        (10, None, "waited 10 s", "torch's timeout= (BRAID_RENDEZVOUS_TIMEOUT_S overrides it) sets the limit"),
        (3, "8", "waited 8 s", "BRAID_RENDEZVOUS_TIMEOUT_S sets the limit"),
    ]
    procs = []
    for timeout_s, variable, _, _ in cases:
        env = child_env()
        env.pop("BRAID_RENDEZVOUS_TIMEOUT_S")  # child_env's default for the other tests
        if variable:
            env["BRAID_RENDEZVOUS_TIMEOUT_S"] = variable
        url = f"tcp://127.0.0.1:{free_port()}"  # world size 2: rank 1 never comes
        procs.append(subprocess.Popen([PYTHON, os.path.join(HERE, "init_worker.py"), "0", "2", url, str(timeout_s)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for (timeout_s, variable, waited, limit), proc in zip(cases, procs):
        rc, out = finish(proc, 120)
        line = next((l for l in out.splitlines() if l.startswith(("raised ", "ok "))), None)
        assert rc == 0 and line, out[-3000:]
        m = re.match(r"raised ([0-9.]+) (\w+): (.*)", line)
        assert m, line
        seconds, kind, message = float(m.group(1)), m.group(2), m.group(3)
        assert kind == "TimeoutError" and "rendezvous: rank 0 " in message and "for rank 1" in message, line
        assert waited in message and limit in message, line
        assert seconds < 3 * max(timeout_s, float(variable or 0)), line
