"""One rank that joins a group, all_reduces once and says how it went (test_faults.py).

Prints "ok <sum>" or "raised <seconds since start> <class>: <message>". With URL "env://" the
rank and world size come from RANK and WORLD_SIZE, as torchrun sets them.

    init_worker.py RANK WORLD URL TIMEOUT_S
"""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import braid.torch  # noqa: F401


def main(rank, world, url, timeout_s):
    start = time.monotonic()
    kw = {} if url == "env://" else {"rank": rank, "world_size": world}
    try:
        dist.init_process_group("braid", init_method=url, timeout=timedelta(seconds=timeout_s), **kw)
        t = torch.ones(3)
        dist.all_reduce(t)
        print(f"ok {t.sum().item():g}", flush=True)
    except Exception as e:  # noqa: BLE001 - the test reads whatever it was
        msg = str(e).replace("\n", " | ")
        print(f"raised {time.monotonic() - start:.1f} {type(e).__name__}: {msg}", flush=True)
    os._exit(0)


if __name__ == "__main__":
    r, w, u, t = sys.argv[1:5]
    main(int(r), int(w), u, float(t))
