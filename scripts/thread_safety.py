#!/usr/bin/env python3
"""Checks the lock contracts written with common/thread_annotations.h: runs clang++
-fsyntax-only -Wthread-safety -Werror over the units that use braid::Mutex (common/mutex.h), with
each unit's own include flags and defines from the build's compile_commands.json. No object is
written, so it costs seconds, not a build.

  scripts/thread_safety.py BUILD_DIR [UNIT...]

UNITs are repository paths (runtime/engine/op_queue.cc); without any, every unit of
compile_commands.json whose source includes common/mutex.h directly or through a runtime/
header. Exit 0 when clean (or, with a message, when no clang++ is installed), 1 on a violation.
"""
import concurrent.futures
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys


def uses_mutex(path, repo, seen):
    """Whether `path` includes common/mutex.h, directly or through headers of this repository."""
    if path in seen:
        return False
    seen.add(path)
    try:
        text = path.read_text(errors='replace')
    except OSError:
        return False
    for inc in re.findall(r'#include\s+"([^"]+)"', text):
        if inc == 'common/mutex.h':
            return True
        h = repo / inc
        if h.is_file() and uses_mutex(h, repo, seen):
            return True
    return False


def flags_of(command):
    """The include and define flags of one compile command (the rest is gcc's or the build's)."""
    args = shlex.split(command)
    keep, i = [], 0
    while i < len(args):
        a = args[i]
        if a in ('-I', '-D', '-isystem'):
            keep += [a, args[i + 1]]
            i += 2
            continue
        if a.startswith(('-I', '-D', '-isystem', '-std=')):
            keep.append(a)
        i += 1
    return keep


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    build = pathlib.Path(sys.argv[1]).resolve()
    repo = pathlib.Path(__file__).resolve().parent.parent
    clang = shutil.which('clang++') or shutil.which('clang++-14')
    if clang is None:
        print('thread_safety: no clang++ here; lock contracts not checked')
        return 0
    entries = json.load(open(build / 'compile_commands.json'))
    wanted = set(sys.argv[2:])
    units = []
    for e in entries:
        src = (pathlib.Path(e['directory']) / e['file']).resolve()
        try:
            rel = str(src.relative_to(repo))
        except ValueError:
            continue
        if wanted and rel not in wanted:
            continue
        if not wanted and not (rel.startswith(('runtime/', 'common/')) and uses_mutex(src, repo, set())):
            continue
        units.append((rel, src, e))
    units = sorted({u[0]: u for u in units}.values())
    def check(unit):
        rel, src, e = unit
        cmd = [clang, '-fsyntax-only', '-Wthread-safety', '-Werror=thread-safety', '-Wno-unknown-warning-option'] + \
            flags_of(e['command']) + [str(src)]
        return subprocess.run(cmd, cwd=e['directory'], capture_output=True, text=True)

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for r in pool.map(check, units):
            if r.returncode != 0:
                failed += 1
                sys.stdout.write(r.stdout + r.stderr)
    print(f'thread_safety: {len(units)} units checked with {os.path.basename(clang)}, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
