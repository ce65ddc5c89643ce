#!/usr/bin/env python3
"""Where a meson test run's time went: each suite's tests added up, and the slowest tests.

Usage: scripts/test_times.py BUILD_DIR/meson-logs/testlog.json [LABEL] [--slowest N]

Reads the JSON lines meson test writes (one object per test: name, suite, duration, result) and
prints, under LABEL, one line per suite (its tests' durations added up, how many tests, how many
did not pass) from the longest down, then the N slowest tests (default 5). A suite's time is the
sum of its tests' run times; tests of different suites may have run side by side, so the sums
can add up to more than the run's wall time.
"""
import json
import sys
from collections import defaultdict


def load(path):
    tests = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            t = json.loads(line)
            # meson names a test "project:suite / name" (newer versions also give "suite": a
            # list of "project:suite"); the project's name says nothing here.
            qualified, _, name = t["name"].rpartition(" / ")
            suites = t.get("suite") or [qualified or "(none)"]
            suite = suites[0].split(":", 1)[-1]
            tests.append((suite, name, float(t.get("duration", 0.0)), t.get("result", "?")))
    return tests


def report(tests, label, slowest):
    per_suite = defaultdict(lambda: [0.0, 0, 0])
    for suite, _, duration, result in tests:
        s = per_suite[suite]
        s[0] += duration
        s[1] += 1
        s[2] += result not in ("OK", "SKIP", "EXPECTEDFAIL")
    lines = [f"== {label}: {len(tests)} tests, {sum(t[2] for t in tests):.0f} s of test time by suite"]
    for suite, (total, count, bad) in sorted(per_suite.items(), key=lambda kv: -kv[1][0]):
        note = f", {bad} not passed" if bad else ""
        lines.append(f"   {suite:<22} {total:8.1f} s  {count:3d} tests{note}")
    lines.append(f"== {label}: the {min(slowest, len(tests))} slowest tests")
    for suite, name, duration, result in sorted(tests, key=lambda t: -t[2])[:slowest]:
        lines.append(f"   {suite + ' / ' + name:<48} {duration:8.1f} s  {result}")
    return "\n".join(lines)


def main(argv):
    args = [a for a in argv[1:]]
    slowest = 5
    if "--slowest" in args:
        i = args.index("--slowest")
        slowest = int(args[i + 1])
        del args[i:i + 2]
    if not args or len(args) > 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    label = args[1] if len(args) == 2 else args[0]
    try:
        tests = load(args[0])
    except (OSError, ValueError, KeyError) as e:
        print(f"test_times: cannot read {args[0]}: {e}", file=sys.stderr)
        return 1
    print(report(tests, label, slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
