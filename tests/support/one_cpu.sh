#!/bin/sh
# Runs a command confined to one CPU (the first this process may use), as `taskset -c N` would
# run a rank: a test binary run so makes every tcp peer it talks to share its only CPU, and the
# engines then drive the socket with blocking calls (transport/tcp/shared_cpu_path.h).
set -e
cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[-,].*//')
exec taskset -c "$cpu" "$@"
