#!/usr/bin/env python3
"""Restart soak: faults at random moments across braidrun --max-restarts rounds.

The job is the C++ DDP example (tools/examples/train_fashion_mnist) with --checkpoint: rank 0
saves the run after every step, and a restarted round resumes from the last step saved. Each
trial starts the job, then, one after the other, injects --faults faults: once the checkpoint
has reached a random step, a random rank (any node) gets kill -9 or SIGSTOP (a stopped rank
makes the others' operations time out after BRAID_TIMEOUT_S; braidrun's SIGKILL after --grace-s
ends it). A trial passes when the job exits 0 within --bound-s, its final checkpoint holds the
parameters of a clean run of the same topology (every one within --tolerance; with 4 ranks a
resumed run is not bit-exact: the DDP Reducer's first step after a start buckets the
gradients in another order than its later steps, so sums are rounded in another order), and
every recovery (the fault to the next step saved after the restart, i.e. the first correct
all_reduce after it) ends within --recovery-bound-s.

Topologies: hostN (one braidrun with N ranks: host4, host8, ...) and netns2x2 (two network
namespaces joined by a veth pair, a braidrun with 2 ranks in each; needs root, skipped
otherwise).

Each recovery is split into parts, from the lines braidrun and rank 0 print (timestamped as
they arrive here):
  detect    the fault -> the first braidrun reports a failed rank ("failed:" / "stopping all
               ranks")
  stop      -> the last node decided to restart ("starting every rank again"): every other
               rank stopped (SIGTERM, SIGKILL after the grace) and the round's end agreed
  rdzv      -> the last node met the others in the next round ("round R: starting ranks")
  start     -> rank 0 printed the dataset's line: exec, communicator rendezvous (env:// through
               the round's store), dataset load
  resume    -> rank 0 resumed from the checkpoint (read, broadcast to every rank)
  step      -> the first step after it saved: its all_reduces ran and were right
Exit status: 0 when every trial passed, 1 otherwise, 77 when the example cannot run here.
Prints one line per fault and a table at the end; --json PATH also writes every measurement.
"""
import argparse
import json
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time


def now():
    return time.monotonic()


class Lines:
    """Reads a process's stdout/stderr, timestamping each line as it arrives."""

    def __init__(self, proc, name):
        self.lines = []  # (time, stream, text)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._read, args=(proc.stdout, "out"), daemon=True),
                        threading.Thread(target=self._read, args=(proc.stderr, "err"), daemon=True)]
        self.name = name
        for t in self.threads:
            t.start()

    def _read(self, stream, which):
        for raw in iter(stream.readline, b""):
            with self.lock:
                self.lines.append((now(), which, raw.decode(errors="replace").rstrip("\n")))

    def join(self):
        for t in self.threads:
            t.join(timeout=5)

    def first_after(self, t0, needles, stream=None):
        with self.lock:
            for t, which, text in self.lines:
                if t >= t0 and (stream is None or which == stream) and any(n in text for n in needles):
                    return t
        return None

    def text(self):
        with self.lock:
            return "\n".join(f"{self.name} {w}: {x}" for _, w, x in self.lines)


def steps_done(path):
    try:
        with open(path, "rb") as f:
            head = f.read(16)
        return struct.unpack("<Q", head[8:16])[0] if len(head) == 16 else 0
    except OSError:
        return 0


class StepWatch:
    """Polls the checkpoint's step counter every 2 ms; keeps when each new step was saved."""

    def __init__(self, path):
        self.path = path
        self.changes = []  # (time, steps_done)
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        last = 0
        while not self.stopped:
            n = steps_done(self.path)
            if n != last:
                self.changes.append((now(), n))
                last = n
            time.sleep(0.002)

    def first_after(self, t0):
        for t, _ in list(self.changes):
            if t > t0:
                return t
        return None

    def stop(self):
        self.stopped = True
        self.thread.join()


def load_parameters(path):
    """The parameters in a checkpoint (tools/examples/train_checkpoint.cc's layout): magic,
    steps done, epoch, step (u64 each), 3 f64 sums, the number of tensors, then per tensor its
    element count (u64) and its f32 values."""
    with open(path, "rb") as f:
        b = f.read()
    off = 8 + 3 * 8 + 3 * 8
    (n,) = struct.unpack_from("<Q", b, off)
    off += 8
    out = []
    for _ in range(n):
        (count,) = struct.unpack_from("<Q", b, off)
        off += 8
        out.extend(struct.unpack_from(f"<{count}f", b, off))
        off += 4 * count
    return out


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rfind(")") + 2] != "Z"
    except OSError:
        return False


class Netns:
    """Two namespaces joined by a veth pair: 10.78.<n>.1 and .2."""

    def __init__(self, tag):
        self.ns = [f"brsoak{os.getpid()}{tag}a", f"brsoak{os.getpid()}{tag}b"]
        self.addr = ["10.78.9.1", "10.78.9.2"]
        self.made = []
        try:
            for n in self.ns:
                self._ip("netns", "add", n)
                self.made.append(n)
            a, b = self.ns
            self._ip("-n", a, "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", b)
            self._ip("-n", a, "addr", "add", self.addr[0] + "/24", "dev", "v0")
            self._ip("-n", b, "addr", "add", self.addr[1] + "/24", "dev", "v1")
            for n, dev in ((a, "v0"), (b, "v1")):
                self._ip("-n", n, "link", "set", "lo", "up")
                self._ip("-n", n, "link", "set", dev, "up")
        except (OSError, subprocess.CalledProcessError):
            self.close()
            raise

    @staticmethod
    def _ip(*args):
        subprocess.run(["ip", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def prefix(self, host):
        return ["ip", "netns", "exec", self.ns[host]]

    def close(self):
        for n in self.made:
            subprocess.run(["ip", "netns", "del", n], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.made = []


class Job:
    """One run of the example under braidrun, on `topology`."""

    def __init__(self, args, topology, checkpoint, max_restarts, netns):
        train = [args.example, "--epochs", str(args.epochs), "--limit", str(args.limit), "--batch", "64",
                 "--checkpoint", checkpoint]
        common = ["--max-restarts", str(max_restarts), "--grace-s", "1", "--monitor-interval", "0.1",
                  "--rdzv-timeout-s", "30", "--cpu-bind", "none"]
        env = dict(os.environ, BRAID_TIMEOUT_S=str(args.braid_timeout_s), BRAID_RENDEZVOUS_TIMEOUT_S="30")
        self.procs = []
        if topology != "netns2x2":
            cmds = [[args.braidrun, "--standalone", "--nproc-per-node", str(ranks_of(topology)), *common, *train]]
        else:
            port = random.randint(20000, 30000)
            flags = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", f"{netns.addr[0]}:{port}"]
            cmds = [netns.prefix(h) + [args.braidrun, *flags, "--node-rank", str(h), *common, *train] for h in (0, 1)]
        for i, cmd in enumerate(cmds):
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
            self.procs.append((p, Lines(p, f"node{i}")))

    def braidrun_pids(self):
        # `ip netns exec` execs braidrun: the pid is braidrun's either way.
        return [p.pid for p, _ in self.procs]

    def ranks(self):
        out = []
        for pid in self.braidrun_pids():
            out += children(pid)
        return out

    def done(self):
        return all(p.poll() is not None for p, _ in self.procs)

    def wait(self, until):
        while not self.done() and now() < until:
            time.sleep(0.05)
        hung = not self.done()
        if hung:
            for p, _ in self.procs:
                for r in children(p.pid):
                    os.kill(r, signal.SIGKILL)
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for _, lines in self.procs:
            lines.join()
        return hung, [p.returncode for p, _ in self.procs]

    def first_after(self, t0, needles, stream=None, last_node=False):
        """When the first node (`last_node`: the last one) printed one of `needles` after t0."""
        ts = [lines.first_after(t0, needles, stream) for _, lines in self.procs]
        ts = [t for t in ts if t is not None]
        return (max(ts) if last_node else min(ts)) if ts else None

    def text(self):
        return "\n".join(lines.text() for _, lines in self.procs)


def ranks_of(topology):
    """The job's rank count: 4 for netns2x2 (2 x 2), N for hostN."""
    return 4 if topology == "netns2x2" else int(topology[len("host"):])


def digest(text):
    for line in text.splitlines():
        at = line.find("parameters fnv1a64 ")
        if at >= 0:
            return line[at + len("parameters fnv1a64 "):].strip()
    return ""


def clean_digest(args, topology, netns, tmp):
    job = Job(args, topology, os.path.join(tmp, f"clean-{topology}"), 0, netns)
    hung, codes = job.wait(now() + args.bound_s)
    if hung or any(codes):
        if any(c == 77 for c in codes):
            print(f"restart_soak: the example cannot run here (exit 77): {job.text()[-400:]}")
            sys.exit(77)
        sys.exit(f"restart_soak: the clean {topology} run failed ({'hung' if hung else codes}):\n{job.text()}")
    d = digest(job.text())
    if not d:
        sys.exit(f"restart_soak: no digest in the clean {topology} run:\n{job.text()}")
    return {"digest": d, "parameters": load_parameters(os.path.join(tmp, f"clean-{topology}"))}


def trial(args, topology, netns, tmp, want, rng, n):
    checkpoint = os.path.join(tmp, f"t{n}-{topology}")
    job = Job(args, topology, checkpoint, args.faults, netns)
    watch = StepWatch(checkpoint)
    start = now()
    faults = []
    total_steps = args.epochs * args.limit // 64
    for k in range(args.faults):
        # A random step still ahead.
        target = min(total_steps - 2, steps_done(checkpoint) + rng.randint(2, max(3, total_steps // (args.faults + 1))))
        while steps_done(checkpoint) < target and not job.done() and now() - start < args.bound_s:
            time.sleep(0.002)
        ranks = job.ranks()
        if job.done() or len(ranks) != ranks_of(topology):
            break
        victim = rng.randrange(ranks_of(topology))
        kind = rng.choice(args.kinds)
        at_step = steps_done(checkpoint)
        t_fault = now()
        os.kill(ranks[victim], signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        # Recovered: rank 0 of the next round resumed, and then saved a step (every rank's
        # all_reduces of that step completed).
        until = t_fault + args.recovery_bound_s
        t_step = None
        while now() < until and not job.done():
            t_resumed = job.first_after(t_fault, ["resuming from"], "out")
            t_step = watch.first_after(t_resumed) if t_resumed is not None else None
            if t_step is not None:
                break
            time.sleep(0.01)
        f = {"kind": kind, "rank_slot": victim, "at_step": at_step, "recovered": t_step is not None}
        marks = {
            "detect": job.first_after(t_fault, ["failed:", "stopping all ranks"], "err"),
            "stop": job.first_after(t_fault, ["starting every rank again"], "err", last_node=True),
            "rdzv": job.first_after(t_fault, [": starting ranks"], "err", last_node=True),
            "start": job.first_after(t_fault, ["] fashion-mnist: "], "out"),
            "resume": job.first_after(t_fault, ["resuming from"], "out"),
            "step": t_step,
        }
        prev, parts = t_fault, {}
        for name in ("detect", "stop", "rdzv", "start", "resume", "step"):
            t = marks[name]
            parts[name] = None if t is None else round(t - prev, 3)
            prev = t if t is not None else prev
        f["parts"] = parts
        f["total"] = None if t_step is None else round(t_step - t_fault, 3)
        faults.append(f)
        print(f"  {topology} trial {n} fault {k + 1}: {kind} of rank slot {victim} at step {at_step}: "
              + ("recovered in %.2f s" % f["total"] if t_step else "NOT recovered within the bound")
              + " (" + ", ".join(f"{p} {'-' if v is None else '%.2f' % v}" for p, v in parts.items()) + ")",
              flush=True)
    hung, codes = job.wait(start + args.bound_s)
    watch.stop()
    got = digest(job.text())
    diff = None
    if not hung and not any(codes) and steps_done(checkpoint) == total_steps:
        diff = max(abs(a - b) for a, b in zip(load_parameters(checkpoint), want["parameters"]))
    wrong = not hung and (diff is None or diff > args.tolerance)
    leftover = [r for r in job.ranks() if alive(r)]
    ok = not hung and not wrong and not any(codes) and all(f["recovered"] for f in faults) and not leftover
    result = {"topology": topology, "trial": n, "hung": hung, "exit_codes": codes, "digest": got,
              "bit_exact": got == want["digest"], "max_diff": diff, "wrong": wrong, "faults": faults, "ok": ok}
    print(f"  {topology} trial {n}: {'ok' if ok else 'FAILED'}: exit {codes}, parameters "
          + ("identical to the clean run's" if got == want["digest"] else
             "differ from the clean run's by at most " + ("-" if diff is None else "%.3g" % diff)), flush=True)
    if not ok:
        print(f"  hung={hung} leftover ranks={leftover}\n" + job.text()[-4000:], flush=True)
    return result


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(here, "..", "build"), help="the meson build directory")
    ap.add_argument("--trials", type=int, default=2, help="trials per topology (default 2)")
    ap.add_argument("--faults", type=int, default=2, help="faults per trial, one per round (default 2)")
    ap.add_argument("--kinds", default="kill,stop", help="kill, stop or both (default kill,stop)")
    ap.add_argument("--topology", default="host4,netns2x2", help="comma-separated: hostN (one host, N ranks: host4, host8) and/or netns2x2")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=3072, help="images per epoch (64 per step)")
    ap.add_argument("--braid-timeout-s", type=float, default=3, help="BRAID_TIMEOUT_S of the ranks (default 3)")
    ap.add_argument("--bound-s", type=float, default=240, help="a trial running longer is a hang (default 240)")
    ap.add_argument("--recovery-bound-s", type=float, default=60, help="bound on each recovery (default 60)")
    ap.add_argument("--tolerance", type=float, default=1e-5,
                    help="largest difference from the clean run's parameters that is right (default 1e-5)")
    ap.add_argument("--json", default=None, help="also write every measurement there")
    args = ap.parse_args()
    args.kinds = args.kinds.split(",")
    for topology in args.topology.split(","):
        if topology != "netns2x2" and not (topology.startswith("host") and topology[4:].isdigit() and int(topology[4:]) > 0):
            ap.error(f"unknown topology {topology!r}: hostN (N ranks on one host) or netns2x2")
    args.braidrun = os.path.join(args.build, "tools", "braidrun", "braidrun")
    args.example = os.path.join(args.build, "tools", "examples", "train_fashion_mnist")
    for exe in (args.braidrun, args.example):
        if not os.access(exe, os.X_OK):
            print(f"restart_soak: {exe} is not built")
            return 77
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    print(f"restart_soak: seed {seed}; {args.trials} trial(s) x {args.faults} fault(s) ({','.join(args.kinds)}) per "
          f"topology; BRAID_TIMEOUT_S={args.braid_timeout_s:g}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="restart_soak.") as tmp:
        for topology in args.topology.split(","):
            netns = None
            if topology == "netns2x2":
                if os.geteuid() != 0:
                    print("restart_soak: netns2x2 skipped: needs root for ip netns")
                    continue
                try:
                    netns = Netns(len(results))
                except (OSError, subprocess.CalledProcessError) as e:
                    print(f"restart_soak: netns2x2 skipped: namespace setup failed ({e})")
                    continue
            try:
                want = clean_digest(args, topology, netns, tmp)
                print(f"restart_soak: {topology}: clean run's parameters fnv1a64 {want['digest']}", flush=True)
                for n in range(args.trials):
                    results.append(trial(args, topology, netns, tmp, want, rng, n))
            finally:
                if netns:
                    netns.close()
    print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": seed, "results": results}, f, indent=1)
    return 0 if results and all(r["ok"] for r in results) else 1


def print_table(results):
    print("\n| topology | fault | recoveries | detect | stop | rdzv | start | resume | first step | total (median / max) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    groups = {}
    for r in results:
        for f in r["faults"]:
            groups.setdefault((r["topology"], f["kind"]), []).append(f)
    for (topology, kind), fs in sorted(groups.items()):
        def med(name):
            v = [f["parts"][name] for f in fs if f["parts"][name] is not None]
            return "%.2f" % statistics.median(v) if v else "-"
        totals = [f["total"] for f in fs if f["total"] is not None]
        tot = "%.2f / %.2f" % (statistics.median(totals), max(totals)) if totals else "-"
        print(f"| {topology} | {'kill -9' if kind == 'kill' else 'SIGSTOP'} | {len(fs)} | {med('detect')} | "
              f"{med('stop')} | {med('rdzv')} | {med('start')} | {med('resume')} | {med('step')} | {tot} |")
    hangs = sum(r["hung"] for r in results)
    wrong = sum(1 for r in results if r["wrong"])
    exact = sum(1 for r in results if r["bit_exact"])
    unbounded = sum(1 for r in results for f in r["faults"] if not f["recovered"])
    diffs = [r["max_diff"] for r in results if r["max_diff"] is not None]
    print(f"\n{len(results)} trial(s): {hangs} hang(s), {wrong} wrong result(s), {unbounded} recovery(ies) past the "
          f"bound, {sum(not r['ok'] for r in results)} failed trial(s); {exact} bit-exact, largest parameter "
          f"difference {max(diffs) if diffs else 0:.3g}")


if __name__ == "__main__":
    sys.exit(main())
