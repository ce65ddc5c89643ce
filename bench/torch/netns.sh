#!/usr/bin/env bash
# torch.distributed all_reduce between 2 emulated hosts: two network namespaces on a bridge,
# each host's egress shaped with tbf to RATE (../shared/bench/run-netns.sh builds the topology),
# one rank per host (LOCAL_WORLD_SIZE=1, as torchrun on two nodes sets it). Interleaved in
# rounds, in one run:
#   - the link's goodput G for the traffic of a 2-rank all_reduce (both ranks send and receive
#     at once): iperf3 --bidir, per-direction mean;
#   - all_reduce of BYTES (f32 sum, in place) through torch.distributed, backend "braid" and
#     "gloo" in the same processes, alternating (bench/torch/torch_vs_gloo.py --init).
# Prints the median busbw over rounds and the ratios to G and to gloo.
#
#   bench/torch/netns.sh                          # 1gbit, 64 MiB, 5 rounds of 5 each, ~3 min
#   RATE=200mbit BYTES=16M ROUNDS=2 bench/torch/netns.sh
# Needs root (ip netns, tc). Namespaces are named bt<pid>0, bt<pid>1 and bt<pid>sw, deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-$ROOT/build}
ANCHORS=${ANCHORS:-$ROOT/../shared/bench}
[ -f "$ANCHORS/run-netns.sh" ] || ANCHORS=/work/shared/bench
RATE=${RATE:-1gbit}
BYTES=${BYTES:-64M}
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-5}
OUT=${OUT:-/tmp/braid-torch-netns}
PY=/usr/bin/python3
export ANC_NS_PREFIX=bt$$
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
host() { echo "10.213.0.$(($1 + 1))"; }

mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/goodput.txt
netns=$ANCHORS/run-netns.sh
trap 'bash "$netns" teardown 2 >/dev/null 2>&1 || true' EXIT
bash "$netns" setup 2 "$RATE"

iperf_bidir() {  # per-direction mean, GB/s
  timeout 30 ip netns exec "${ANC_NS_PREFIX}0" iperf3 -s -1 -B "$(host 0)" -p 5202 >/dev/null 2>&1 &
  sleep 0.5
  timeout 30 ip netns exec "${ANC_NS_PREFIX}1" iperf3 -c "$(host 0)" -p 5202 -t 4 -f m --bidir 2>&1 |
    awk '/receiver/{s+=$(NF-2); k++} END{if (k) printf "%.4f\n", s/k/8/1000}'
  wait
}

torch_round() {  # $1: round
  local r pids=() port=$((29500 + $1))
  for r in 1 0; do
    timeout 900 ip netns exec "${ANC_NS_PREFIX}$r" env LOCAL_WORLD_SIZE=1 BRAID_SOCKET_IFNAME=aeth0 \
      GLOO_SOCKET_IFNAME=aeth0 $PY bench/torch/torch_vs_gloo.py --build "$BUILD" --init "tcp://$(host 0):$port" \
      --rank "$r" --world 2 --sizes "$BYTES" --rounds 1 --iters "$ITERS" --no-ddp \
      --json "$OUT/torch.r$1.json" > "$OUT/rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { log "a torch rank failed"; tail -20 "$OUT"/rank*.log >&2; exit 1; }; done
}

log "load before: $(cat /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  iperf_bidir >> "$OUT/goodput.txt"
  torch_round "$round"
  log "round $round of $ROUNDS done"
done
log "load after: $(cat /proc/loadavg)"

$PY - "$OUT" "$RATE" "$BYTES" <<'PY' | tee "$OUT/table.md"
import glob, json, os, statistics, sys
out, rate, nbytes = sys.argv[1:4]
good = [float(x) for x in open(os.path.join(out, "goodput.txt")).read().split()]
bus = {"braid": [], "gloo": []}
for path in glob.glob(os.path.join(out, "torch.*.json")):
    for row in json.load(open(path))["rows"]:
        for name in bus:  # 2 ranks: busbw = algbw
            bus[name].append(row["bytes"] / row[name] / 1e9)
g = statistics.median(good)
print(f"2 hosts (network namespaces), egress shaped to {rate} (tbf), all_reduce {nbytes} f32 sum through "
      f"torch.distributed; median over {len(good)} rounds\n")
print("| what | busbw GB/s | ratio to iperf3 | ratio to gloo |")
print("|---|---:|---:|---:|")
gl = statistics.median(bus["gloo"])
for name, vals in bus.items():
    m = statistics.median(vals)
    print(f"| torch.distributed {name} | {m:.4f} | {m / g:.2f} | {m / gl:.2f} |")
print(f"| iperf3 --bidir (per direction) | {g:.4f} | 1.00 | - |")
PY
