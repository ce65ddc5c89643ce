#!/usr/bin/env bash
# scripts/rdma_guest/perftest_pair.sh TOOL PORT [ARGS...] - inside the guest, one perftest run
# between the two Soft-RoCE devices: TOOL's server on rxe1 (10.99.0.2), its client on rxe0,
# both on GID index 1 (RoCE v2), exchanging their QP numbers over TCP port PORT. Prints the
# client's output; the server's goes to stderr when the run fails. Exits 0 when both ends did.
# Every wait is bounded by PERFTEST_TIMEOUT_S (default 120). PERFTEST_WRAP, when set, is a
# command prefix for both ends (e.g. tests/ib/low_memlock.sh 64).
set -uo pipefail
tool=$1 port=$2
shift 2
limit=${PERFTEST_TIMEOUT_S:-120}
read -r -a wrap <<< "${PERFTEST_WRAP:-}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

timeout -k 5 "$limit" "${wrap[@]}" "$tool" -d rxe1 -x 1 -p "$port" "$@" > "$log" 2>&1 &
server=$!
# The client fails at once when nobody listens yet: wait for the server's socket (or its end).
for _ in $(seq $((limit * 10))); do
  ss -Hltn "sport = :$port" | grep -q . && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
timeout -k 5 "$limit" "${wrap[@]}" "$tool" -d rxe0 -x 1 -p "$port" "$@" 10.99.0.2
client_status=$?
wait "$server"
server_status=$?
if [ "$client_status" != 0 ] || [ "$server_status" != 0 ]; then
  echo "perftest_pair: $tool: client status $client_status, server status $server_status (124: timed out after $limit s); the server said:" >&2
  sed 's/^/  server: /' "$log" >&2
  exit 1
fi
