"""What every rank program shares: its one RESULT line, and waiting on a gate file."""

import json
import os
import time


def report(**result):
    print("RESULT " + json.dumps(result), flush=True)


def wait_for_file(path, limit_s=60):
    deadline = time.monotonic() + limit_s
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} did not appear within {limit_s} s"
        time.sleep(0.01)
