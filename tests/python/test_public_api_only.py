"""python/ builds on braid's public API (include/braid/) only, as DESIGN.md's layers require."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_extension_includes_only_public_headers():
    src = os.path.join(ROOT, "python", "braid", "src")
    local = set(os.listdir(src))
    bad = []
    for name in sorted(local):
        with open(os.path.join(src, name)) as f:
            for line in f:
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if m and not (m.group(1).startswith("braid/") or m.group(1) in local):
                    bad.append(f"{name}: {m.group(1)}")
    assert not bad, "python/ includes non-public headers: " + ", ".join(bad)
