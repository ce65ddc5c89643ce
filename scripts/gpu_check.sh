#!/usr/bin/env bash
# scripts/gpu_check.sh - build braid's CUDA code and run it on this machine's NVIDIA GPU, in
# about 8 minutes (each step has its own time limit):
#   1. the device reduction kernels against the host ones (reduce_cuda_test);
#   2. collectives on device buffers ordered on CUDA streams, and every collective on device
#      buffers against host buffers for 2 and 4 ranks, reduced on the host and on the GPU
#      (cuda_comm_test);
#   3. the kernels' throughput next to a device-to-device copy (reduce_cuda_bench, short);
#   4. 64 MiB / 1 GiB all_reduce on device buffers next to the same on host buffers, with
#      BRAID_CUDA_REDUCE=host and =device, printing the pinned memory braid held (now and at its
#      peak) after each size (cuda_staging_bench; docs/cuda.md: device >= 0.9x host);
#   5. compute-sanitizer (memcheck, then racecheck) on a subset of 2, where it is installed (last:
#      it is the slowest step).
#
#   scripts/gpu_check.sh [BUILD_DIR [extra meson setup arguments...]]
#
# BUILD_DIR defaults to build-gpu. Kernels are compiled for the GPU that nvidia-smi reports
# (GPU_ARCHS=90 or GPU_ARCHS=80,90 overrides). Needs the CUDA toolkit in /usr/local/cuda (where
# meson.build looks), a GPU with its driver, meson, ninja, GoogleTest and Google Benchmark (where
# their packages cannot be installed: scripts/pack_build_deps.sh here, then . .build-deps/env.sh).
# Exits 0 when every test ran and passed; 1 when a build or a test failed; 2 when no nvcc or no
# GPU is found, or the test was skipped anyway - never a silent pass without a GPU.
set -euo pipefail

cd "$(dirname "$0")/.."
build=${1:-build-gpu}
shift || true
nvcc=/usr/local/cuda/bin/nvcc

fail() { echo "gpu_check: $1" >&2; exit "${2:-1}"; }

[[ -x $nvcc ]] || fail "no nvcc at $nvcc: install the CUDA toolkit there (meson.build looks for CUDA in /usr/local/cuda only)" 2
command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: no NVIDIA driver on this machine, so no GPU to run on" 2
gpus=$(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1) ||
  fail "nvidia-smi found no usable GPU: $gpus" 2
[[ -n $gpus ]] || fail "nvidia-smi lists no GPU" 2
echo "gpu_check: GPU(s): $gpus"
echo "gpu_check: $($nvcc --version | tail -1)"

# "9.0" -> "90"; one architecture per distinct GPU model.
archs=${GPU_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | tr -d '. ' | sort -u | paste -sd, -)}
setup=(-Dcuda=enabled -Dtests=true -Dbenchmarks=true -Dbuildtype=release "-Dgpu_archs=$archs" "$@")
if [[ -f $build/build.ninja ]]; then
  meson configure "$build" "${setup[@]}" >/dev/null
else
  meson setup "$build" "${setup[@]}" >/dev/null || fail "meson setup $build failed (see $build/meson-logs/meson-log.txt)"
fi
grep -q "BRAID_HAVE_CUDA 1" "$build/braid_config.h" || fail "meson did not find CUDA (cudart) in /usr/local/cuda" 2
ninja -C "$build" tests/collectives/kernels/reduce_cuda_test tests/runtime/device/cuda_comm_test \
  bench/collectives/reduce_cuda_bench tests/runtime/device/cuda_staging_bench || fail "build failed"

# run_test NAME PATH WHAT: runs a GoogleTest program; a skip counts as a failure here.
run_test() {
  local name=$1 path=$2 log=$build/$1.log status=0
  echo "gpu_check: $name ($3)"
  timeout 240 "$path" 2>&1 | tee "$log" || status=$?  # a hang is a failure, not a stuck check
  if grep -q '^\[  SKIPPED \]' "$log"; then
    fail "$name skipped its tests although a GPU is present (the reason is in $log)" 2
  fi
  ((status == 0)) || fail "$name failed (exit $status); the log is $log"
}
echo "gpu_check: built after ${SECONDS}s"
run_test reduce_cuda_test "$build/tests/collectives/kernels/reduce_cuda_test" "the device kernels against the host kernels"
run_test cuda_comm_test "$build/tests/runtime/device/cuda_comm_test" \
  "collectives on device buffers; every collective vs host buffers, 2 and 4 ranks on one GPU"
echo "gpu_check: tests done after ${SECONDS}s"

echo "gpu_check: benchmarks from ${SECONDS}s"
echo "gpu_check: reduce_cuda_bench (output bytes/s, CUDA events)"
timeout 90 "$build/bench/collectives/reduce_cuda_bench" --benchmark_min_time=0.1 || fail "reduce_cuda_bench failed"
for reduce in host device; do
  echo "gpu_check: cuda_staging_bench, BRAID_CUDA_REDUCE=$reduce (all_reduce busbw, device vs host buffers, 2 ranks, same run)"
  BRAID_CUDA_REDUCE=$reduce timeout 150 "$build/tests/runtime/device/cuda_staging_bench" 64 1024 |
    tee "$build/cuda_staging_bench_$reduce.log" || fail "cuda_staging_bench (BRAID_CUDA_REDUCE=$reduce) failed"
done
# compute-sanitizer slows every CUDA call: 2 ranks, first with reductions on the host (copies
# and host functions only), then on the GPU (kernels launched while the callers' streams are
# held), so that a hang under one tool says which of the two it is (docs/cuda.md).
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
subsets=('CudaComm/EveryCollective.OnDeviceBuffersGivesTheHostResult/2ranks_host'
         'CudaComm.AllReduceOnTheCallersStream:CudaComm/EveryCollective.OnDeviceBuffersGivesTheHostResult/2ranks_device')
if [[ -x $sanitizer ]]; then
  for tool in memcheck racecheck; do
    for k in 0 1; do
      log=$build/sanitizer_${tool}_$k.log
      echo "gpu_check: compute-sanitizer --tool $tool on ${subsets[k]}"
      status=0
      timeout 100 "$sanitizer" --tool "$tool" --error-exitcode 3 \
        "$build/tests/runtime/device/cuda_comm_test" --gtest_filter="${subsets[k]}" >"$log" 2>&1 || status=$?
      tail -5 "$log"
      ((status != 124)) || fail "compute-sanitizer $tool ran past 100 s; the log is $log"
      ((status == 0)) || fail "compute-sanitizer $tool reported errors (exit $status); the log is $log"
    done
  done
else
  echo "gpu_check: no compute-sanitizer (looked in PATH and /usr/local/cuda/bin): that step is left out"
fi

echo "gpu_check: all passed on: $gpus (${SECONDS}s)"
