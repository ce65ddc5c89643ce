#!/usr/bin/env python3
"""Time from losing a node to the next round's first collective, braidrun --nnodes 1:2.

Two braidruns (2 ranks each) on 127.0.0.1 form round 0; the ranks of round 0 wait. One node is
killed with its ranks (kill -9). The survivor finds it lost (its heartbeat stands still for
keep_alive_interval x keep_alive_max_attempt), ends round 0, forms round 1 alone after the last
call, and its ranks run braid-perf's all_reduce (one checked 1 KiB iteration, no warm-up).

Cases, interleaved round by round so that the shared machine's load hits both alike:
  etcd   --rdzv-backend etcd (a 3-member etcd cluster this script starts on 127.0.0.1); node 0
         is killed: the one that led round 0; node 1 leads round 1.
  c10d   the default backend; node 1 is killed (losing node 0 would end the job: it serves the
         store). The same path on the survivor, for comparison.
Parts, from the survivor's lines as they arrive here:
  detect  the kill -> "lost in round 0" (the heartbeat timeout, then the report)
  rdzv    -> "round 1: node ... starting ranks" (round 0's ranks stopped, round 1 formed; the
             last call is part of it)
  first   -> braid-perf's first result row: ranks started, communicator built through the round's
             store, one all_reduce done and checked
Usage: bench/etcd_node_loss.py --build build [--rounds 5]
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lines:
    """A process's stdout and stderr lines, each with the moment it arrived."""

    def __init__(self, proc):
        self.lines = []
        self.lock = threading.Lock()
        for stream in (proc.stdout, proc.stderr):
            threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for raw in stream:
            with self.lock:
                self.lines.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))

    def first(self, pred, after=0.0):
        with self.lock:
            for t, text in self.lines:
                if t >= after and pred(text):
                    return t
        return None

    def text(self):
        with self.lock:
            return "\n".join(text for _, text in self.lines)


def start_etcd(etcd, workdir):
    clients = [free_port() for _ in range(3)]
    peers = [free_port() for _ in range(3)]
    initial = ",".join(f"m{i}=http://127.0.0.1:{peers[i]}" for i in range(3))
    members = []
    for i in range(3):
        c, p = f"http://127.0.0.1:{clients[i]}", f"http://127.0.0.1:{peers[i]}"
        members.append(subprocess.Popen(
            [etcd, "--name", f"m{i}", "--data-dir", f"{workdir}/m{i}", "--listen-client-urls", c,
             "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
             "--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token",
             f"bench{os.getpid()}", "--log-level", "warn", "--logger", "zap", "--heartbeat-interval", "200",
             "--election-timeout", "2000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    until = time.monotonic() + 30
    for port in clients:
        while True:
            try:
                if b"true" in urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read():
                    break
            except OSError:
                pass
            if time.monotonic() > until:
                sys.exit("etcd did not come up")
            time.sleep(0.2)
    return members, ",".join(f"127.0.0.1:{p}" for p in clients)


def trial(args, case, endpoints, n):
    pids = tempfile.mkdtemp(prefix="braid-loss-")
    script = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then echo $$ > ' + pids + '/rank$RANK.pid; exec sleep 60; fi; '
              'exec "' + args.perf + '" --op all_reduce -b 1K -e 1K -n 1 -w 0')
    flags = [args.braidrun, "--nnodes", "1:2", "--nproc-per-node", "2", "--rdzv-timeout-s", "30", "--max-restarts",
             "1", "--monitor-interval", "0.1", "--grace-s", "1", "--rdzv-conf",
             f"last_call_timeout={args.last_call},keep_alive_interval=0.5,keep_alive_max_attempt=4"]
    if case == "etcd":
        flags += ["--rdzv-backend", "etcd", "--rdzv-endpoint", endpoints, "--rdzv-id", f"loss{os.getpid()}-{n}"]
    else:
        flags += ["--rdzv-endpoint", f"127.0.0.1:{free_port()}"]
    flags += ["--", "sh", "-c", script]
    spawn = lambda: subprocess.Popen(flags, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    a = spawn()
    time.sleep(0.3)  # a is node 0
    b = spawn()
    la, lb = Lines(a), Lines(b)
    until = time.monotonic() + 30
    while len(os.listdir(pids)) < 4:
        if time.monotonic() > until:
            sys.exit(f"{case}: round 0 did not start:\n{la.text()}\n{lb.text()}")
        time.sleep(0.02)
    time.sleep(0.3)
    lost, survivor, lines = (a, b, lb) if case == "etcd" else (b, a, la)
    lost_ranks = (0, 1) if case == "etcd" else (2, 3)
    killed = time.monotonic()
    lost.kill()
    for r in lost_ranks:
        with open(f"{pids}/rank{r}.pid") as f:
            try:
                os.kill(int(f.read()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    code = survivor.wait(60)
    lost.wait()
    time.sleep(0.1)  # the readers take the last lines
    shutil.rmtree(pids, ignore_errors=True)
    detect = lines.first(lambda t: "lost in round 0" in t, killed)
    rdzv = lines.first(lambda t: t.startswith("braidrun: round 1: node "), killed)
    first = lines.first(lambda t: t.startswith("[rank 0] ") and not t.startswith("[rank 0] #"), killed)
    if code != 0 or None in (detect, rdzv, first):
        sys.exit(f"{case}: the survivor exited {code} or a line is missing:\n{lines.text()}")
    return detect - killed, rdzv - detect, first - rdzv, first - killed


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--last-call", default="1")
    args = p.parse_args()
    args.braidrun = os.path.abspath(f"{args.build}/tools/braidrun/braidrun")
    args.perf = os.path.abspath(f"{args.build}/tools/braid_perf/braid-perf")
    etcd = shutil.which("etcd")
    if not etcd or not os.access(args.perf, os.X_OK):
        print("needs etcd (Debian's etcd-server) and braid-perf")
        return 77
    workdir = tempfile.mkdtemp(prefix="braid-etcd-")
    members, endpoints = start_etcd(etcd, workdir)
    results = {"etcd": [], "c10d": []}
    try:
        for n in range(args.rounds):
            for case in ("etcd", "c10d"):
                r = trial(args, case, endpoints, n)
                results[case].append(r)
                print(f"{case} {n}: detect {r[0]:.2f} s  rdzv {r[1]:.2f} s  first collective {r[2]:.2f} s  "
                      f"total {r[3]:.2f} s", flush=True)
    finally:
        for m in members:
            m.kill()
            m.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    print("\ncase  node lost  detect  rdzv  first  total (median of %d; min-max of total)" % args.rounds)
    for case, rows in results.items():
        med = [statistics.median(col) for col in zip(*rows)]
        totals = [r[3] for r in rows]
        print(f"{case:5} {'node 0' if case == 'etcd' else 'node 1':9}  {med[0]:5.2f}  {med[1]:4.2f}  {med[2]:5.2f}  "
              f"{med[3]:5.2f} ({min(totals):.2f}-{max(totals):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
