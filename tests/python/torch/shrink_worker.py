"""One rank of the torch recipe for going on without a failed rank (docs/fault_tolerance.md,
"With torch"), which test_faults.py runs with one rank killed.

The job's torch store is served outside the ranks (here by the test; in a real job by the
launcher's agent), so it outlives any of them. Beside its torch group each rank keeps a
braid.Communicator of the whole job, used only to agree on who is alive. When an operation of
the torch group fails, the survivors destroy the group, shrink the braid communicator, and build
a new group of the shrunk size, ranked as shrink() says, in a fresh prefix of the same store.

    shrink_worker.py RANK WORLD STORE_PORT BRAID_URL VICTIM
Prints "raised: <message>", then "after rank=R size=S sum=X olds=[...]" and exits 0; the victim
exits 1 after its third all_reduce.
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import braid
import braid.torch  # noqa: F401


def main(rank, world, store_port, braid_url, victim):
    store = dist.TCPStore("127.0.0.1", store_port, world, is_master=False, timeout=timedelta(seconds=60))
    survivors = braid.init(braid_url, rank, world)
    timeout = timedelta(seconds=30)
    dist.init_process_group("braid", store=dist.PrefixStore("round0", store), rank=rank, world_size=world,
                            timeout=timeout)
    try:
        for step in range(1 << 20):
            t = torch.ones(1024)
            dist.all_reduce(t)
            assert t[0].item() == world, t[0].item()
            if rank == victim and step == 2:
                os._exit(1)
    except RuntimeError as e:
        print("raised: " + str(e).replace("\n", " | "), flush=True)
    dist.destroy_process_group()
    # The recipe: optional probe first, so that the dead rank is named and shrink() does not wait
    # BRAID_SHRINK_TIMEOUT_S for it; then shrink, and a new group of the ranks that go on.
    try:
        survivors.barrier()
    except braid.Error:
        pass
    new = survivors.shrink()
    dist.init_process_group("braid", store=dist.PrefixStore("round1", store), rank=new.rank, world_size=new.size,
                            timeout=timeout)
    t = torch.full((4,), float(new.rank + 1))
    dist.all_reduce(t)
    olds = [torch.zeros(1, dtype=torch.int64) for _ in range(new.size)]
    dist.all_gather(olds, torch.tensor([rank]))
    print(f"after rank={dist.get_rank()} size={dist.get_world_size()} sum={t[0].item():g} "
          f"olds={[int(o.item()) for o in olds]}", flush=True)
    dist.destroy_process_group()
    new.close()
    survivors.close()


if __name__ == "__main__":
    r, w, p, u, v = sys.argv[1:6]
    main(int(r), int(w), int(p), u, int(v))
