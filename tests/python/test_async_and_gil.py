"""Work handles (wait with a timeout, completion, buffers kept alive) and the GIL released
while braid waits."""

from conftest import import_braid, run_ranks

braid = import_braid()


def test_async_wait_timeout_and_buffers_kept_alive(tmp_path):
    ranks = run_ranks(2, "async_ops", tmp_path / "gate").check_ok()
    r0 = ranks.result(0)
    # Rank 1 joins only after rank 0 saw the Work unfinished and its wait(0.2) give up.
    assert r0["early"] == [False, False]
    assert r0["done"] is True and r0["completed"] is True and r0["exception"] == "None"
    assert r0["sum"] == 2.0 and ranks.result(1) == {"sum": 2.0, "int_sum": 2}
    # An array whose Work was dropped stays alive while the operation runs, and is let go after.
    assert r0["held_while_pending"] is True and r0["released_after"] is True


def test_python_threads_run_while_a_rank_waits(tmp_path):
    # With the GIL held through the wait, rank 0's thread could not open the gate for rank 1,
    # and rank 0's all_reduce would end in its 60 s timeout instead.
    ranks = run_ranks(2, "gil", tmp_path / "gate").check_ok()
    assert ranks.result(0) == {"counted": 10000, "sum": 2.0}
    assert ranks.result(1) == {"sum": 2.0}


def test_ctrl_c_interrupts_work_wait(tmp_path):
    ranks = run_ranks(2, "interrupt", tmp_path / "gate").check_ok()
    assert ranks.result(0) == {"interrupted": True, "done": True, "sum": 2.0}
    assert ranks.result(1) == {"sum": 2.0}
