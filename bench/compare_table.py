#!/usr/bin/env python3
"""Median-of-rounds table from compare_loopback.sh's TSV: busbw per (library, algorithm) and size,
braid's best against Gloo's best algorithm, Open MPI's better TCP path and the iperf3 ceiling."""
import collections
import statistics
import sys


def human(b):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def main():
    path, n = sys.argv[1], int(sys.argv[2])
    busbw = collections.defaultdict(list)   # (lib, algo, bytes) -> [busbw per round]
    time_us = collections.defaultdict(list)
    ceiling = []
    for line in open(path):
        r = line.rstrip("\n").split("\t")
        if len(r) >= 3 and r[1] == "CEILING" and r[2]:
            ceiling.append(float(r[2]) / 8 / 1000)  # Mbit/s -> GB/s
        if len(r) < 13 or r[1] != "RESULT" or int(r[4]) != n:
            continue
        lib, algo, size = r[2], r[3], int(r[5])
        if lib.startswith("braid"):
            algo = "auto"  # braid picks per size; one series (braid-syscc: BRAID_LOOPBACK_CC=system)
        busbw[(lib, algo, size)].append(float(r[11]))
        time_us[(lib, algo, size)].append(float(r[7]))
    series = sorted({(l, a) for l, a, _ in busbw})
    sizes = sorted({s for _, _, s in busbw})
    med = {k: statistics.median(v) for k, v in busbw.items()}
    tmed = {k: statistics.median(v) for k, v in time_us.items()}
    print(f"all_reduce f32 sum, {n} ranks on loopback; median over {len(ceiling) or '?'} rounds of each "
          f"run's median; busbw GB/s (time us)\n")
    print("| size | " + " | ".join(f"{l} {a}" for l, a in series) + " |")
    print("|---|" + "---|" * len(series))
    for s in sizes:
        cells = []
        for l, a in series:
            k = (l, a, s)
            cells.append(f"{med[k]:.3f} ({tmed[k]:.0f})" if k in med else "-")
        print(f"| {human(s)} | " + " | ".join(cells) + " |")
    if ceiling:
        c = statistics.median(ceiling)
        print(f"\nloopback ceiling (iperf3 with braid's congestion control, two flows at once one each way, "
              f"per-flow): {c:.3f} GB/s")
    print("\n| size | braid / best gloo | braid / better mpi tcp | braid / ceiling | braid time / best other time |")
    print("|---|---|---|---|---|")
    for s in sizes:
        b = med.get(("braid", "auto", s))
        if b is None:
            continue
        g = max((med[(l, a, s)] for l, a in series if l == "gloo" and (l, a, s) in med), default=None)
        m = max((med[(l, a, s)] for l, a in series if l == "mpi" and (l, a, s) in med), default=None)
        t_other = min((tmed[(l, a, s)] for l, a in series if not l.startswith("braid") and (l, a, s) in tmed),
                      default=None)
        fmt = lambda x: f"{b / x:.2f}x" if x else "-"
        cei = f"{b / statistics.median(ceiling):.2f}x" if ceiling else "-"
        tr = f"{tmed[('braid', 'auto', s)] / t_other:.2f}" if t_other else "-"
        print(f"| {human(s)} | {fmt(g)} | {fmt(m)} | {cei} | {tr} |")


if __name__ == "__main__":
    main()
