"""all_reduce through `import braid`, timed like braid-perf's default (-z 1 -a 3): each
iteration alone after a barrier, the median per rank, the slowest rank's median reported.

    braidrun --nproc-per-node 2 python3 bench/python/all_reduce.py 4K 64M

Run braid-perf in the same session for the comparison (same sizes, `-d f32 -n N`): only
ratios from one run count on these machines.
"""

import statistics
import sys
import time

import numpy as np

import braid

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_of(text):
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def main(args):
    iters = 20
    with braid.init() as comm:
        for text in args or ["4K", "64M"]:
            nbytes = size_of(text)
            buf = np.ones(nbytes // 4, np.float32)
            for _ in range(5):
                comm.all_reduce(buf)
            times = []
            for _ in range(iters):
                comm.barrier()
                t0 = time.perf_counter()
                comm.all_reduce(buf)
                times.append(time.perf_counter() - t0)
            worst = np.array([statistics.median(times)], np.float64)
            comm.all_reduce(worst, op="max")
            n = comm.size
            busbw = nbytes / worst[0] * 2 * (n - 1) / n / 1e9
            if comm.rank == 0:
                print(f"{nbytes:>12} bytes  {worst[0] * 1e6:10.1f} us  busbw {busbw:7.3f} GB/s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
