# shellcheck shell=bash
# scripts/build_progress.sh - sourced by test.sh and bench.sh, so that a build is never minutes
# of silence. On a terminal ninja draws its own one-line status. Elsewhere (CI logs, a pipe) its
# line per step would be hundreds of lines: they are folded into one line at most every
# BUILD_PROGRESS_PERIOD_S seconds with the step count and the time so far, and everything else
# ninja prints (warnings, errors) passes through.

BUILD_PROGRESS_PERIOD_S=${BUILD_PROGRESS_PERIOD_S:-20}

# build_with_progress LABEL NINJA_ARGS... - returns ninja's exit status.
build_with_progress() {
  local label=$1
  shift
  if [ -t 1 ]; then
    echo "== $label"
    ninja "$@"
    return
  fi
  local start=$SECONDS
  NINJA_STATUS='[%f/%t] ' ninja "$@" 2>&1 | fold_ninja_steps "$label" "$start"
  return "${PIPESTATUS[0]}"
}

elapsed_since() {
  local s=$((SECONDS - $1))
  echo "$((s / 60))m$((s % 60))s"
}

# Reads ninja's output; prints "== LABEL: DONE/TOTAL steps, XmYs" now and then and at the end.
fold_ninja_steps() {
  local label=$1 start=$2 last=$SECONDS line done_steps=0 total=0
  echo "== $label: started"
  while IFS= read -r line; do
    if [[ $line =~ ^\[([0-9]+)/([0-9]+)\]\  ]]; then
      done_steps=${BASH_REMATCH[1]}
      total=${BASH_REMATCH[2]}
      if ((SECONDS - last >= BUILD_PROGRESS_PERIOD_S)); then
        last=$SECONDS
        echo "== $label: $done_steps/$total steps, $(elapsed_since "$start")"
      fi
    elif [[ $line != "ninja: Entering directory"* ]]; then
      printf '%s\n' "$line"
    fi
  done
  if ((total > 0)); then echo "== $label: $done_steps/$total steps, $(elapsed_since "$start")"; fi
}
