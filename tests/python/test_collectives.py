"""Every collective from Python on real rank processes over TCP, against numpy's answers."""

import pytest

from conftest import import_braid, run_ranks

braid = import_braid()


@pytest.mark.parametrize("world", [2, 3])
def test_every_collective_every_dtype(world):
    # Each rank checks its own results (rank_programs.collectives); all must exit 0.
    ranks = run_ranks(world, "collectives").check_ok()
    assert {ranks.result(r)["checked"] for r in range(world)} == {373}


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
