#!/usr/bin/env bash
# scripts/rdma_guest.sh CMD [ARGS...] - runs CMD inside a small emulated guest that boots Debian
# 12's kernel, where two Soft-RoCE devices are up: rxe0 on veth0 (10.99.0.1) and rxe1 on veth1
# (10.99.0.2), GID index 1 their RoCE v2 GIDs. The guest sees the host's files at the same paths,
# read-only (writes land in a throwaway tmpfs), except the current directory and the directories
# in BRAID_GUEST_SHARE (colon-separated), which are shared read-write. CMD runs through the host's
# bash in the current directory with the caller's environment; its stdout and stderr come back on
# ours, and we exit with its status. docs/ib_guest.md has the details and timings.
#
# Exit status: CMD's; 77 when the guest cannot be had (no qemu, no kernel and no network to fetch
# it, ...), with one line saying why; 124 when CMD did not end within BRAID_GUEST_TIMEOUT_S
# (default 900) and the guest was killed; 125 when the guest failed before CMD could run.
# Environment: BRAID_GUEST_TIMEOUT_S, BRAID_GUEST_SHARE, BRAID_GUEST_MEM (default 2G),
# BRAID_GUEST_SMP (default 2), BRAID_GUEST_ACCEL (tcg, the default, or kvm), BRAID_GUEST_CPU
# (qemu's -cpu; max under tcg, host under kvm), BRAID_GUEST_VERBOSE=1 (the guest's console and
# timings on stderr), BRAID_GUEST_CACHE (where prepare.sh keeps the kernel and initramfs),
# BRAID_GUEST_KERNEL_PKG (default: the package linux-image-amd64 depends on), BRAID_GUEST_QEMU.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)/rdma_guest

say() { echo "rdma_guest: $*" >&2; }
skip() { say "skipped: $*"; exit 77; }

if [ $# -eq 0 ] || [ "$1" = --help ] || [ "$1" = -h ]; then
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
  [ $# -eq 0 ] && exit 2 || exit 0
fi

timeout_s=${BRAID_GUEST_TIMEOUT_S:-900}
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || { say "BRAID_GUEST_TIMEOUT_S must be a positive number of seconds, not '$timeout_s'"; exit 2; }

qemu=$(command -v "${BRAID_GUEST_QEMU:-qemu-system-x86_64}") || skip "${BRAID_GUEST_QEMU:-qemu-system-x86_64} not found (apt-get install qemu-system-x86, or scripts/setup.sh)"
for tool in busybox depmod modprobe cpio xz rdma ip; do
  command -v "$tool" >/dev/null || skip "$tool not found (scripts/setup.sh installs what the guest needs)"
done
[ -e /etc/libibverbs.d/rxe.driver ] || skip "no rxe verbs provider on the host (apt-get install ibverbs-providers)"

images=$("$here/prepare.sh") || exit $?
kernel=$(sed -n 1p <<< "$images")
initramfs=$(sed -n 2p <<< "$images")

# The run directory: read by the guest through its read-only view of the host, so its path
# goes on the kernel command line and must not hold spaces.
tmp_base=${TMPDIR:-/tmp}
[[ $tmp_base =~ ^[A-Za-z0-9/._-]+$ ]] || tmp_base=/tmp
run=$(mktemp -d "$tmp_base/braid-guest.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The job: the caller's directory, environment (less what names this shell or this session) and
# command, each value quoted for bash.
{
  echo "cd -- $(printf %q "$PWD") || exit 125"
  while IFS= read -r name; do
    case $name in
      PWD|OLDPWD|SHLVL|_|SSH_*|DISPLAY|XAUTHORITY|XDG_RUNTIME_DIR|DBUS_SESSION_BUS_ADDRESS) continue ;;
    esac
    printf 'export %s=%q\n' "$name" "${!name}"
  done < <(compgen -e)
  printf 'exec'
  printf ' %q' "$@"
  echo
} > "$run/job.sh"
printf 'exec /bin/bash %q %q\n' "$here/guest_main.sh" "$run" > "$run/stage2.sh"

# 9p exports: the host's root read-only; the current directory and BRAID_GUEST_SHARE read-write.
qemu_escape() { printf %s "${1//,/,,}"; }
# shellcheck disable=SC2054  # qemu's options hold commas
args=(-fsdev "local,id=hostroot,path=/,security_model=passthrough,readonly=on,multidevs=remap"
      -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot)
: > "$run/shares"
n=0
IFS=: read -r -a extra <<< "${BRAID_GUEST_SHARE:-}"
for dir in "$PWD" "${extra[@]}"; do
  [ -n "$dir" ] || continue
  dir=$(realpath -e -- "$dir") || { say "BRAID_GUEST_SHARE: no directory '$dir'"; exit 2; }
  [ "$dir" != / ] || continue
  args+=(-fsdev "local,id=share$n,path=$(qemu_escape "$dir"),security_model=passthrough,multidevs=remap"
         -device "virtio-9p-pci,fsdev=share$n,mount_tag=share$n")
  printf 'share%d\t%s\n' "$n" "$dir" >> "$run/shares"
  n=$((n + 1))
done

# The guest's output: virtio ports into fifos that cat relays to our stdout and stderr. The
# device handles a port's writes in the vCPU's own thread (no ioeventfd), so every byte the
# guest wrote is in the fifo before it can power off.
mkfifo "$run/out" "$run/err" "$run/console"
cat "$run/out" & pids+=($!)
cat "$run/err" >&2 & pids+=($!)
if [ "${BRAID_GUEST_VERBOSE:-0}" = 1 ]; then
  tee "$run/console.log" < "$run/console" >&2 & pids+=($!)
else
  cat "$run/console" > "$run/console.log" & pids+=($!)
fi
# shellcheck disable=SC2054  # qemu's options hold commas
args+=(-device virtio-serial-pci,ioeventfd=off
       -chardev "file,id=out,path=$run/out" -device virtserialport,chardev=out,name=braid.out
       -chardev "file,id=err,path=$run/err" -device virtserialport,chardev=err,name=braid.err
       -chardev "file,id=status,path=$run/status" -device virtserialport,chardev=status,name=braid.status
       -chardev "file,id=console,path=$run/console" -serial chardev:console)

# TCG by default: this project's machines expose a /dev/kvm whose guests never start.
case ${BRAID_GUEST_ACCEL:-tcg} in
  tcg) accel_args=(-accel tcg) cpu=${BRAID_GUEST_CPU:-max} ;;
  kvm) accel_args=(-accel kvm) cpu=${BRAID_GUEST_CPU:-host} ;;
  *) say "BRAID_GUEST_ACCEL must be tcg or kvm, not '$BRAID_GUEST_ACCEL'"; exit 2 ;;
esac

start=$(date +%s.%N)
# panic=-1 with -no-reboot: a kernel panic ends qemu at once instead of leaving a hung guest.
"$qemu" "${accel_args[@]}" -cpu "$cpu" -smp "${BRAID_GUEST_SMP:-2}" -m "${BRAID_GUEST_MEM:-2G}" \
  -nodefaults -no-user-config -display none -no-reboot -nic none \
  -kernel "$kernel" -initrd "$initramfs" \
  -append "console=ttyS0 quiet loglevel=4 tsc=reliable panic=-1 braid.run=$run" \
  "${args[@]}" 2>"$run/qemu.log" &
qemu_pid=$!
pids+=("$qemu_pid")

# The watchdog: kills qemu when the command runs past its bound.
(
  trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
  sleep "$timeout_s" & sleeper=$!
  wait "$sleeper"
  touch "$run/timed_out"
  kill -TERM "$qemu_pid" 2>/dev/null
  for _ in $(seq 50); do
    kill -0 "$qemu_pid" 2>/dev/null || exit 0
    sleep 0.1
  done
  kill -KILL "$qemu_pid" 2>/dev/null
) &
watchdog=$!
pids+=("$watchdog")

qemu_status=0
wait "$qemu_pid" || qemu_status=$?
kill "$watchdog" 2>/dev/null || true
# A relay still blocked opening its fifo (qemu failed before opening it) sees a writer come
# and go, and ends.
for f in out err console; do exec 8<>"$run/$f"; exec 8>&-; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
elapsed=$(echo "$start $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }')

guest_tail() {
  say "the guest's console (last lines; BRAID_GUEST_VERBOSE=1 shows all of it):"
  tail -n 25 "$run/console.log" | sed 's/^/  /' >&2
  [ -s "$run/qemu.log" ] && sed 's/^/  qemu: /' "$run/qemu.log" >&2
  return 0
}
if [ -e "$run/timed_out" ]; then
  say "'$*' did not end within $timeout_s s (BRAID_GUEST_TIMEOUT_S); the guest was killed"
  guest_tail
  exit 124
fi
status_line=$(grep -a '^exit ' "$run/status" 2>/dev/null | tail -n 1 || true)
if [ -z "$status_line" ]; then
  if grep -q setup-failed "$run/status" 2>/dev/null; then
    say "the guest's setup failed (see the line above)"
  else
    say "the guest ended (qemu status $qemu_status) before '$*' could report its status"
  fi
  guest_tail
  exit 125
fi
if [ "${BRAID_GUEST_VERBOSE:-0}" = 1 ]; then
  say "guest ready at $(awk '$1 == "ready" { print $2 }' "$run/status") s of guest uptime; $elapsed s in all (qemu accel: ${accel_args[*]})"
fi
exit "${status_line#exit }"
