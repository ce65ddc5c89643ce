#!/usr/bin/env bash
# DDP per-step time on emulated hosts: bench/ddp/ddp_step_bench at 1 rank (one namespace) and at
# 2 ranks (namespaces ovl0 and ovl1 on a bridge, each host's egress shaped with tbf to $RATE by
# ../shared/bench/run-netns.sh). Prints both runs and, for the 2-rank run, the share of the
# gradient all_reduce hidden behind backward, per configuration:
#   hidden = (T_allreduce_alone + T_local - T_ddp) / T_allreduce_alone
# with T_local the same rank's step without communication and T_allreduce_alone the blocking
# all_reduce of the whole gradient (f32; f16 or bf16 for the compression rows), both reported
# by ddp_step_bench. 1 = fully hidden, 0 = fully exposed, < 0 = DDP costs more than its
# all_reduce.
#
#   bench/ddp_netns.sh                                 # 1gbit, hidden 512, global batch 64, 20 steps
#   RATE=200mbit HIDDEN=1024 STEPS=10 bench/ddp_netns.sh
# Needs root (ip netns, tc). The namespaces are deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RATE=${RATE:-1gbit}
HIDDEN=${HIDDEN:-512}
BATCH=${BATCH:-64}
STEPS=${STEPS:-20}
PORT=${PORT:-29743}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
BUILD_DIR=${BUILD_DIR:-build-ovl}
K=2
export ANC_NS_PREFIX=ovl ANCHOR_BUILD=$ROOT/$BUILD_DIR/anchors ANCHOR_RESULTS=$ROOT/$BUILD_DIR/netns
[ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" >/dev/null
ninja -C "$BUILD_DIR" -j 2 tools/braidrun/braidrun bench/ddp/ddp_step_bench >/dev/null

netns=$ROOT/../shared/bench/run-netns.sh
bash "$netns" teardown "$K" >/dev/null 2>&1 || true
trap 'bash "$netns" teardown "$K" >/dev/null 2>&1 || true' EXIT
bash "$netns" setup "$K" "$RATE"
tmp=$(mktemp -d)

run_ranks() {  # nodes port -> rank 0's output in $tmp/0
  local n=$1 port=$2 i pids=() rc=0
  for ((i = n - 1; i >= 0; i--)); do
    timeout "$RUN_TIMEOUT" ip netns exec "${ANC_NS_PREFIX}$i" "$BUILD_DIR"/tools/braidrun/braidrun --nnodes "$n" \
      --node-rank "$i" --nproc-per-node 1 --rdzv-endpoint "10.213.0.1:$port" --no-prefix \
      "$BUILD_DIR"/bench/ddp/ddp_step_bench --hidden "$HIDDEN" --batch "$BATCH" --steps "$STEPS" \
      > "$tmp/$i" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ "$rc" != 0 ]; then echo "a rank failed:"; cat "$tmp"/*; return 1; fi
}

echo "== 1 rank (host ${ANC_NS_PREFIX}0), global batch $BATCH"
run_ranks 1 "$PORT"
grep -v '^braidrun:' "$tmp/0"
echo
echo "== 2 ranks (${ANC_NS_PREFIX}0, ${ANC_NS_PREFIX}1), egress tbf $RATE, $(nproc) CPUs shared by both; global batch $BATCH"
run_ranks 2 $((PORT + 1))
grep -v '^braidrun:' "$tmp/0"
echo
python3 - "$tmp/0" "$HIDDEN" <<'PY'
import re, sys
ar, rows, local = {}, [], None
for line in open(sys.argv[1]):
    m = re.match(r"\s+all_reduce\(avg\) of the gradient, (\w+)\s+([\d.]+) ms", line)
    if m:
        ar[m.group(1)] = float(m.group(2))
        continue
    m = re.match(r"\s+(.+?)\s+([\d.]+) ms\s+\(", line)
    if m:
        if m.group(1).startswith("local step"):
            local = float(m.group(2))
        else:
            rows.append((m.group(1), float(m.group(2))))
if local is None or "f32" not in ar:
    sys.exit("ddp_netns.sh: could not read ddp_step_bench's output")
print("share of the gradient all_reduce hidden behind backward, 2 ranks:")
print(f"| configuration | T_ddp ms | T_local ms | T_allreduce_alone ms | hidden |")
print("|---|---|---|---|---|")
for name, t in rows:
    a = ar["bf16"] if "bf16" in name else ar["f16"] if "f16" in name else ar["f32"]
    print(f"| {name} | {t:.2f} | {local:.2f} | {a:.2f} | {(a + local - t) / a:.2f} |")
h = int(sys.argv[2])
late = 784 * h + h  # W1 and b1: backward makes them last, when nothing is left to overlap with
print(f"\nupper bound for this model: W1+b1 are {late / (late + 10 * h + 10):.1%} of the gradient and become ready"
      " only when backward ends, so at most the W2+b2 share can overlap it.")
PY
rm -rf "$tmp"
