"""Programs written as the PyTorch tutorials write them (tutorials/), run unchanged but for
`import braid.torch` and backend "braid" (and a port or path from the test): each is started
the way its tutorial starts it, bounded by a timeout, and checks its own results."""
import os
import subprocess

from torch_helpers import HERE, PYTHON, RUN_TIMEOUT_S, assert_all_ok, child_env, finish, free_port, run_ranks

TUTORIALS = os.path.join(HERE, "tutorials")


def run_one(argv, **env):
    proc = subprocess.Popen([PYTHON] + argv, env=child_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    rc, out = finish(proc, RUN_TIMEOUT_S)
    assert rc == 0, out[-6000:]
    return out


def test_processes_with_spawn_start_method_and_env_init():
    out = run_one([os.path.join(TUTORIALS, "processes_env.py")], MASTER_PORT=free_port())
    for r in range(3):
        assert f"Rank {r}: tutorial ok" in out, out[-4000:]


def test_ddp_with_mp_spawn_and_checkpoint():
    out = run_one([os.path.join(TUTORIALS, "ddp_spawn.py"), "2"], MASTER_PORT=free_port())
    for r in range(2):
        assert f"rank {r}: basic ok" in out and f"rank {r}: checkpoint ok" in out, out[-4000:]


def test_torchrun_trainer_with_local_rank_and_distributed_sampler(tmp_path):
    # Debian's torchrun: underscore flags, and --redirects/--tee naming a rank that does not
    # exist (test_ops.py's _torchrun says why).
    out = run_one(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "--redirects", "9:1",
                   "--tee", "9:1", "--max_restarts", "0", os.path.join(TUTORIALS, "torchrun_trainer.py"), "2",
                   str(tmp_path / "snapshot.pt")])
    for r in range(2):
        assert f"[RANK{r}] LOCAL_RANK {r}: trainer ok" in out, out[-4000:]
        assert f"[RANK{r}] Epoch 1 |" in out, out[-4000:]
    assert (tmp_path / "snapshot.pt").exists()


def test_tcp_init_method():
    url = f"tcp://127.0.0.1:{free_port()}"
    results = run_ranks(lambda r: [os.path.join(TUTORIALS, "init_methods.py"), url, str(r), "3"], 3)
    assert_all_ok(results)
    assert all(f"rank {r} of 3 via tcp: ok" in out for r, (_, out) in enumerate(results))


def test_file_init_method(tmp_path):
    url = f"file://{tmp_path}/sharedfile"
    results = run_ranks(lambda r: [os.path.join(TUTORIALS, "init_methods.py"), url, str(r), "2"], 2)
    assert_all_ok(results)
    assert all(f"rank {r} of 2 via file: ok" in out for r, (_, out) in enumerate(results))
