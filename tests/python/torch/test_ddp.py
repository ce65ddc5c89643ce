"""torch's own DistributedDataParallel on backend "braid" ends with gloo's parameters."""
import os

import pytest
torch = pytest.importorskip("torch")

from torch_helpers import HERE, assert_all_ok, free_port, run_ranks

WORKER = os.path.join(HERE, "ddp_worker.py")


def run_backend(backend, world, outdir):
    url1, url2 = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    results = run_ranks(lambda r: [WORKER, backend, str(r), str(world), url1, url2, str(outdir)], world)
    assert_all_ok(results)


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_matches_gloo(tmp_path, world):
    run_backend("braid", world, tmp_path)
    run_backend("gloo", world, tmp_path)
    for phase in ("phase1", "phase2"):
        ours = torch.load(tmp_path / f"braid_{phase}.pt")
        theirs = torch.load(tmp_path / f"gloo_{phase}.pt")
        assert ours.keys() == theirs.keys()
        for k in ours:
            assert torch.allclose(ours[k], theirs[k], rtol=1e-5, atol=1e-6), f"{phase} {k}: {ours[k]} vs {theirs[k]}"
        # training moved the parameters at all (a no-op backend would also "match")
        torch.manual_seed(0)  # ddp_worker.model()'s first layer, before training
        init = torch.nn.Linear(10, 32)
        assert not torch.allclose(ours["0.weight"], init.weight)
