# shellcheck shell=bash
# scripts/package_lock.sh - sourced by setup.sh: another apt or dpkg (unattended-upgrades at
# boot, a second terminal) may hold the package manager's lock; setup waits for it, saying who
# holds it, rather than fail at once. Tested by tests/scripts/package_lock_test.sh.
lock_timeout_s=${SETUP_LOCK_TIMEOUT_S:-600}
# What apt and dpkg lock (fcntl locks, listed in /proc/locks with the holder's PID).
lock_files=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock)
lock_holder() {  # the PID holding a lock on any of the lock files, from /proc/locks; none: empty
  local f inode
  for f in "${lock_files[@]}"; do
    inode=$(stat -c %i "$f" 2>/dev/null) || continue
    awk -v inode="$inode" '$2 != "->" { n = split($(NF - 2), id, ":"); if (n == 3 && id[3] == inode) { print $(NF - 3); exit } }' \
      /proc/locks 2>/dev/null | grep -m1 . && return
  done
  return 0
}
wait_for_package_lock() {
  local pid waited=0 said=""
  while pid=$(lock_holder) && [ -n "$pid" ]; do
    if [ "$said" != "$pid" ]; then
      echo "setup: waiting for the package manager lock held by PID $pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo "?")) (up to $lock_timeout_s s)" >&2
      said=$pid
    fi
    if [ "$waited" -ge "$lock_timeout_s" ]; then
      echo "setup: the package manager lock is still held by PID $pid after $lock_timeout_s s; let it finish (or stop it), then run this again" >&2
      return 1
    fi
    sleep 2
    waited=$((waited + 2))
  done
}
