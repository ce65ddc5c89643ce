"""Every collective from Python on real rank processes over TCP, against numpy's answers."""

import os
import subprocess
import sys

import pytest

from conftest import RANK_PROGRAMS, import_braid, run_ranks

braid = import_braid()


@pytest.mark.parametrize("world", [2, 3])
def test_every_collective_every_dtype(world):
    # Each rank checks its own results (rank_programs.collectives); all must exit 0.
    ranks = run_ranks(world, "collectives").check_ok()
    assert {ranks.result(r)["checked"] for r in range(world)} == {384}


def test_torch_cpu_tensors_bfloat16_included():
    pytest.importorskip("torch", reason="torch (python3-torch) is not installed")
    run_ranks(2, "torch_tensors").check_ok()


@pytest.mark.parametrize("world", [3, 4])
def test_split_and_new_group(world):
    run_ranks(world, "subgroups").check_ok()


@pytest.mark.parametrize("scheme", ["tcp", "file"])
def test_init_from_url(scheme, tmp_path):
    from conftest import free_port
    address = f"tcp://127.0.0.1:{free_port()}" if scheme == "tcp" else f"file://{tmp_path}/rendezvous"
    ranks = run_ranks(2, "url", address).check_ok()
    assert [ranks.result(r) for r in range(2)] == [{"rank": r, "size": 2, "max": 2} for r in range(2)]


def test_under_braidrun():
    # braidrun serves the store and sets torchrun's variables; braid.init() finds them.
    build = os.environ.get("BRAID_BUILD_ROOT", "")
    braidrun = os.path.join(build, "tools", "braidrun", "braidrun")
    if not os.access(braidrun, os.X_OK):
        pytest.skip("braidrun is not built (BRAID_BUILD_ROOT/tools/braidrun/braidrun)")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    out = subprocess.run([braidrun, "--standalone", "--nproc-per-node", "3", "--no-prefix", "--cpu-bind", "none",
                          sys.executable, RANK_PROGRAMS, "collectives"],
                         env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count('RESULT {"checked": 384}') == 3, out.stdout


def test_group_calls_run_as_one():
    # Each rank's sends and receives to every other in one group (they would deadlock one by one
    # if sends waited for their receives), then two all_reduce calls coalesced.
    ranks = run_ranks(3, "groups").check_ok()
    for r in range(3):
        assert "inside group_start() before group_end()" in ranks.result(r)["refused"]
