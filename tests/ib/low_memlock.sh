#!/bin/sh
# tests/ib/low_memlock.sh KIB CMD [ARGS...] - runs CMD with a locked-memory limit (ulimit -l) of
# KIB KiB, as a job without the right to lock more would. The guest runs everything as root, and
# root's CAP_IPC_LOCK lets verbs pin memory past any limit, so the capability is dropped from
# the bounding set too (CMD and its children cannot regain it). Used inside the guest to check
# the error a registration gets when the limit is too low.
set -e
kib=$1
shift
exec setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock -- sh -c 'ulimit -l "$0" && exec "$@"' "$kib" "$@"
