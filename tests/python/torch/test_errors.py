"""Failures surface as RuntimeErrors that say what happened, never as hangs."""
import os

from torch_helpers import HERE, free_port, run_ranks

WORKER = os.path.join(HERE, "error_worker.py")


def run(scenario, world):
    url = f"tcp://127.0.0.1:{free_port()}"
    results = run_ranks(lambda r: [WORKER, scenario, str(r), str(world), url], world, timeout=120)
    outs = [out for _, out in results]
    assert all(rc == 0 for rc, _ in results), "\n".join(outs)
    return outs


def raised(out):
    lines = [l for l in out.splitlines() if l.startswith("raised: ")]
    return lines[0] if lines else None


def test_timeout_shorter_than_peer_delay_raises():
    outs = run("slow_peer", 2)
    msg = raised(outs[0])
    assert msg is not None, outs[0]
    assert "allreduce" in msg and "timeout" in msg, msg


def test_mismatched_shapes_raise_on_every_rank():
    outs = run("mismatch", 3)
    msgs = [raised(out) for out in outs]
    assert all(msgs), outs
    # the ranks involved say what differed and who; every rank names a rank
    assert any("mismatch" in m and "rank 0" in m and "count 5" in m and "count 7" in m for m in msgs), msgs
    assert all("rank" in m for m in msgs), msgs


def test_dead_peer_raises_naming_it():
    outs = run("dead_peer", 3)
    for r in (0, 2):
        msg = raised(outs[r])
        assert msg is not None, outs[r]
        assert "rank 1" in msg, msg
