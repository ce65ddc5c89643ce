"""braid's failures arrive as the braid.Error subclass of their code, with braid's message."""

import os
import subprocess
import sys

from conftest import import_braid, run_ranks

braid = import_braid()


def test_mismatch_raises_mismatch_error_on_both_ranks():
    ranks = run_ranks(2, "mismatch").check_ok()
    for r in range(2):
        res = ranks.result(r)
        err = res["error"]
        assert err["type"] == "MismatchError" and err["code"] == "mismatch", err
        assert "count 4" in err["message"] and "count 5" in err["message"], err
        assert f"on rank {r}" in err["message"], err
        # Later calls fail at once with the original reason.
        assert res["later"]["type"] == "MismatchError" and res["state"] == "failed", res


def test_peer_that_exits_raises_peer_lost_error():
    ranks = run_ranks(2, "peer_exits", env={"BRAID_TIMEOUT_S": "30"})
    assert ranks.codes == [0, 0], ranks.describe()
    err = ranks.result(0)["error"]
    assert err is not None and err["type"] == "PeerLostError", err
    assert "rank 1" in err["message"] and "ConnectionError" in err["mro"], err


def test_timeout_raises_timeout_error(tmp_path):
    ranks = run_ranks(2, "timeout", tmp_path / "gate", env={"BRAID_TIMEOUT_S": "2"})
    assert ranks.codes == [0, 0], ranks.describe()
    err = ranks.result(0)["error"]
    assert err is not None and err["type"] == "TimeoutError" and err["code"] == "timeout", err
    assert "BRAID_TIMEOUT_S" in err["message"] and "rank 1" in err["message"], err
    assert "OSError" in err["mro"], err  # also the built-in TimeoutError


def test_abort_ends_the_peer_operation_with_aborted_error(tmp_path):
    ranks = run_ranks(2, "abort", tmp_path / "gate", env={"BRAID_TIMEOUT_S": "30"})
    assert ranks.codes == [0, 0], ranks.describe()
    r0, r1 = ranks.result(0), ranks.result(1)
    assert r0["error"]["type"] == "AbortedError" and "rank 1 aborts on purpose" in r0["error"]["message"], r0
    assert r0["exception"].startswith("AbortedError("), r0
    assert r1["error"]["type"] == "AbortedError", r1


def test_error_classes_and_codes():
    assert issubclass(braid.TimeoutError, TimeoutError) and issubclass(braid.TimeoutError, braid.Error)
    assert issubclass(braid.PeerLostError, ConnectionError)
    assert issubclass(braid.InvalidArgumentError, ValueError)
    assert braid.errors.class_for("mismatch") is braid.MismatchError
    assert braid.errors.class_for("no such code") is braid.Error


def test_bad_environment_raises_invalid_argument():
    # In a process of its own: braid reads the environment once per process.
    code = ("import braid\n"
            "try:\n"
            "    braid.init(url='tcp://127.0.0.1:1', rank=0, size=1)\n"
            "except braid.InvalidArgumentError as e:\n"
            "    print('InvalidArgumentError', e)\n")
    env = dict(os.environ, BRAID_TIMEOUT_S="soon")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("InvalidArgumentError") and "BRAID_TIMEOUT_S" in out.stdout, out.stdout


def run_init(env_changes):
    code = ("import braid\n"
            "try:\n"
            "    braid.init()\n"
            "except braid.Error as e:\n"
            "    print(type(e).__name__, e)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(env_changes)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_init_without_launcher_variables_says_which_are_missing():
    out = run_init({})
    assert out.startswith("InvalidArgumentError") and "MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE" in out, out


def test_init_whose_peer_never_comes_times_out():
    from conftest import free_port
    out = run_init({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                    "BRAID_RENDEZVOUS_TIMEOUT_S": "2", "BRAID_SECRET": "0123456789abcdef0123"})
    assert out.startswith("TimeoutError rendezvous: rank 0 waited 2 s") and "for rank 1" in out, out


def test_shrink_after_a_rank_died_renumbers_the_others():
    # Rank 2 of 3 exits: ranks 0 and 1 see the error, shrink, and go on as ranks 0 and 1 of 2.
    ranks = run_ranks(3, "shrink", "dies", env={"BRAID_TIMEOUT_S": "30"})
    assert ranks.codes[:2] == [0, 0], ranks.describe()
    for r in range(2):
        res = ranks.result(r)
        assert res["failed"]["type"] == "PeerLostError" and "rank 2" in res["failed"]["message"], res
        assert (res["rank"], res["size"], res["sum"], res["olds"]) == (r, 2, 3, [0, 1]), res
        assert res["old_state"] == "aborted" or res["old_state"] == "failed", res


def test_shrink_with_exclude_leaves_the_listed_rank_out():
    ranks = run_ranks(4, "shrink", "exclude", env={"BRAID_TIMEOUT_S": "30"}).check_ok()
    for r in range(3):
        res = ranks.result(r)
        assert (res["rank"], res["size"], res["sum"], res["olds"]) == (r, 3, 6, [0, 1, 2]), res
    assert ranks.result(3) == {"member": False, "state": "aborted"}, ranks.describe()
