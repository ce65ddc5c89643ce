"""A training script as users write it for torchrun, which test_braidrun.py runs under braidrun
unchanged: env:// rendezvous (init_process_group with the backend alone), a checkpoint after
every step, resumed from after a restart.

Each step all_reduces a tensor every rank derives from its rank and the step, and adds the sum
to the parameters `w`; after STEPS steps every rank prints "final <w>", which the test compares
with the sum it computes itself. With KILL_AT >= 0, rank 1 kills itself (SIGKILL) after that
step in the first round (TORCHELASTIC_RESTART_COUNT=0), as a crashed node would.

    env_script.py BACKEND CHECKPOINT_DIR STEPS KILL_AT
"""
import os
import signal
import sys

import torch
import torch.distributed as dist

backend, ckpt_dir, steps, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if backend == "braid":
    import braid.torch  # noqa: F401

dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
round_ = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
ckpt = os.path.join(ckpt_dir, "checkpoint.pt")

w, first = torch.zeros(4, dtype=torch.float64), 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    w, first = state["w"], state["step"]
print(f"round {round_} rank {rank} starts at step {first}", flush=True)

for step in range(first, steps):
    g = torch.arange(4, dtype=torch.float64) + (rank + 1) * (step + 1)
    dist.all_reduce(g)
    w += g
    if rank == 0:  # every rank holds the same w: one writes it, whole or not at all
        torch.save({"w": w, "step": step + 1}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    if step == kill_at and rank == 1 and round_ == 0:
        os.kill(os.getpid(), signal.SIGKILL)

print(f"round {round_} rank {rank} final {' '.join(f'{x:g}' for x in w.tolist())}", flush=True)
dist.destroy_process_group()
