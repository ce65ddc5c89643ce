#!/usr/bin/env python3
"""Time to recover with Communicator::shrink: N ranks of tests/runtime/shrink/shrink_rank on this
host (env://, rank 0 serving the store), kill -9 (or, with --fault stop, SIGSTOP) of the last
rank mid-loop, and for each trial, measured on CLOCK_MONOTONIC (the ranks print it; this script
takes it at the fault):

  detect  fault -> the last survivor's failed operation returned its error (a stopped rank is
          found by BRAID_TIMEOUT_S, --timeout-s here, and the timeout report that names it)
  shrink  the longest survivor's shrink() call: agreement through the store plus the new
          communicator's connections (from that survivor's error to its shrink() returning)
  total   fault -> the last survivor's first all_reduce on the new communicator checked right

Medians over --trials, and each trial's line. With --hosts 2 the ranks run on two network
namespace "hosts" joined by a veth pair (needs root and iproute2), placed round-robin as
launchers number them (host 0: ranks 0, 2, ...; host 1: ranks 1, 3, ...), rank 0 serving the
store on host 0; --victims host then kills (or stops) every rank of host 1 at once instead of the
last rank alone. Usage (from the repository root, after ninja):

  python3 bench/runtime/shrink_recovery.py --ranks 4 8 --trials 5 [--transport tcp] [--fault stop]
  python3 bench/runtime/shrink_recovery.py --hosts 2 --ranks 4 --trials 5 --victims host
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_RANK = os.path.join(HERE, "..", "..", "build", "tests", "runtime", "shrink", "shrink_rank")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_lines(paths, tag, ranks, timeout):
    """{rank: the line of `tag` in rank's output} once every rank in `ranks` has one."""
    deadline = time.monotonic() + timeout
    while True:
        found = {}
        for r in ranks:
            with open(paths[r]) as f:
                for line in f:
                    if line.startswith(f"{tag} rank={r} ") or line.strip() == f"{tag} rank={r}":
                        found[r] = line.strip()
                        break
        if len(found) == len(ranks):
            return found
        if time.monotonic() > deadline:
            missing = sorted(set(ranks) - set(found))
            raise RuntimeError(f"no {tag} line from ranks {missing}: " + open(paths[missing[0]]).read()[-2000:])
        time.sleep(0.01)


def t_of(line):
    return int(re.search(r" t=(\d+)", line).group(1))


class TwoHosts:
    """Namespaces <prefix><pid>a and b, veth v0 (<subnet>.1) - v1 (<subnet>.2), deleted on exit."""

    def __init__(self, prefix="bsr", subnet="10.82.0"):
        self.ns = [f"{prefix}{os.getpid()}a", f"{prefix}{os.getpid()}b"]
        self.addr = [f"{subnet}.1", f"{subnet}.2"]
        self.made = []
        for ns in self.ns:
            self.sh("ip", "netns", "add", ns)
            self.made.append(ns)
        a, b = self.ns
        self.sh("ip", "-n", a, "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", b)
        for ns, dev, addr in ((a, "v0", self.addr[0]), (b, "v1", self.addr[1])):
            self.sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            self.sh("ip", "-n", ns, "link", "set", "lo", "up")
            self.sh("ip", "-n", ns, "link", "set", dev, "up")

    @staticmethod
    def sh(*cmd):
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def close(self):
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def trial(binary, n, env_extra, out_dir, fault, hosts=None, victims="last"):
    port = free_port()
    paths, procs = [], []
    for r in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(n),
                   BRAID_RENDEZVOUS_TIMEOUT_S="120", **env_extra)
        argv = [binary, "--after-ms", "200"]
        if hosts:
            env.update(MASTER_ADDR=hosts.addr[0], LOCAL_RANK=str(r // 2), LOCAL_WORLD_SIZE=str((n + 1 - r % 2) // 2))
            argv = ["ip", "netns", "exec", hosts.ns[r % 2]] + argv
        path = os.path.join(out_dir, f"rank{r}.out")
        paths.append(path)
        with open(path, "w") as f:
            procs.append(subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT))
    victim_list = [r for r in range(n) if r % 2 == 1] if victims == "host" else [n - 1]
    survivors = [r for r in range(n) if r not in victim_list]
    try:
        wait_lines(paths, "READY", range(n), 120)
        time.sleep(0.3)
        killed_at = time.monotonic_ns()
        for victim in victim_list:
            procs[victim].send_signal(signal.SIGSTOP if fault == "stop" else signal.SIGKILL)
        failed = wait_lines(paths, "FAILED", survivors, 120)
        shrunk = wait_lines(paths, "SHRUNK", survivors, 120)
        first = wait_lines(paths, "FIRST", survivors, 120)
        for r in survivors:
            if procs[r].wait(120) != 0:
                raise RuntimeError(f"rank {r} exited {procs[r].returncode}: " + open(paths[r]).read()[-2000:])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    detect = max(t_of(failed[r]) for r in survivors) - killed_at
    shrink = max(t_of(shrunk[r]) - t_of(failed[r]) for r in survivors)
    total = max(t_of(first[r]) for r in survivors) - killed_at
    return detect / 1e6, shrink / 1e6, total / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--transport", default="", help="BRAID_TRANSPORT for the ranks (default: braid's choice)")
    ap.add_argument("--binary", default=DEFAULT_RANK)
    ap.add_argument("--fault", choices=["kill", "stop"], default="kill")
    ap.add_argument("--hosts", type=int, choices=[1, 2], default=1, help="2: two network namespace hosts")
    ap.add_argument("--victims", choices=["last", "host"], default="last",
                    help="last: the last rank; host: every rank of host 1 (with --hosts 2)")
    ap.add_argument("--timeout-s", type=float, default=None, help="BRAID_TIMEOUT_S (default 30; 3 with --fault stop)")
    args = ap.parse_args()
    timeout_s = args.timeout_s if args.timeout_s is not None else 3 if args.fault == "stop" else 30
    env_extra = {"BRAID_TIMEOUT_S": f"{timeout_s:g}"}
    if args.transport:
        env_extra["BRAID_TRANSPORT"] = args.transport
    if args.victims == "host" and args.hosts != 2:
        ap.error("--victims host needs --hosts 2")
    import tempfile
    hosts = TwoHosts() if args.hosts == 2 else None
    print(f"{'ranks':>5} {'detect ms':>10} {'shrink ms':>10} {'total ms':>10}   (medians of {args.trials}; "
          f"transport {args.transport or 'auto'}; {args.fault} of {args.victims}, {args.hosts} host(s), "
          f"BRAID_TIMEOUT_S={timeout_s:g})")
    try:
        for n in args.ranks:
            rows = []
            for i in range(args.trials):
                with tempfile.TemporaryDirectory() as d:
                    rows.append(trial(args.binary, n, env_extra, d, args.fault, hosts, args.victims))
                print(f"      trial {i}: detect {rows[-1][0]:.1f} shrink {rows[-1][1]:.1f} total {rows[-1][2]:.1f}",
                      file=sys.stderr)
            med = [statistics.median(c) for c in zip(*rows)]
            print(f"{n:>5} {med[0]:>10.1f} {med[1]:>10.1f} {med[2]:>10.1f}")
    finally:
        if hosts:
            hosts.close()


if __name__ == "__main__":
    main()
