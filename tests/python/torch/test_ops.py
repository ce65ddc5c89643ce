"""Every op of backend "braid" against gloo and local references (ops_worker.py), started the
ways PyTorch programs start: env://, tcp://, file://, mp.spawn, torchrun."""
import os
import subprocess

import pytest

from torch_helpers import HERE, PYTHON, RUN_TIMEOUT_S, assert_all_ok, child_env, finish, free_port, run_ranks

WORKER = os.path.join(HERE, "ops_worker.py")


# World size 4 too: one spawn of 4 ranks runs the whole matrix (every op x dtype, against gloo).
@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_op_and_dtype_env_init(world):
    port = free_port()
    results = run_ranks(lambda r: [WORKER, "--init", "env://"], world,
                        lambda r: dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=r, WORLD_SIZE=world))
    assert_all_ok(results)
    assert all("0 failed" in out for _, out in results)


def test_tcp_init():
    url = f"tcp://127.0.0.1:{free_port()}"
    assert_all_ok(run_ranks(lambda r: [WORKER, "--init", url, "--rank", str(r), "--world", "2", "--quick"], 2))


def test_file_init(tmp_path):
    url = f"file://{tmp_path}/store"
    assert_all_ok(run_ranks(lambda r: [WORKER, "--init", url, "--rank", str(r), "--world", "3", "--quick"], 3))


def test_world_of_one():
    port = free_port()
    assert_all_ok(run_ranks(lambda r: [WORKER, "--init", "env://", "--quick"], 1,
                            lambda r: dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=0, WORLD_SIZE=1)))


def test_mp_spawn():
    code = ("import torch.multiprocessing as mp, ops_worker, sys\n"
            f"mp.spawn(ops_worker.spawn_entry, args=(2, 'tcp://127.0.0.1:{free_port()}'), nprocs=2)\n")
    assert_all_ok(run_ranks(lambda r: ["-c", code], 1))


def _torchrun(extra):
    # Debian's torch 1.13 launcher takes underscore flags only. Under Python 3.11 its parser of
    # --redirects/--tee turns 0 and 3 into None (Flag iteration skips them) and the agent fails
    # before starting workers; a map naming a local rank that does not exist ("9:1") leaves every
    # real rank at the default, no redirection.
    argv = [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--redirects", "9:1",
            "--tee", "9:1", "--max_restarts", "0"] + extra + [WORKER, "--quick"]
    proc = subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rc, out = finish(proc, RUN_TIMEOUT_S)
    assert rc == 0, out[-6000:]
    assert out.count("0 failed") >= 2, out[-6000:]


def test_torchrun_standalone():
    _torchrun(["--standalone"])


def test_torchrun_rdzv_endpoint():
    _torchrun(["--nnodes", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}",
               "--rdzv_id", "braid-test"])
