# shellcheck shell=bash
# bench/common.sh - sourced by the comparison scripts: installs the anchors' packages, builds
# braid in $BUILD_DIR (default build) and the anchors, and empties $OUT/results.tsv ($OUTFILE).
# Needs ROOT, ANCHORS and OUT set, and ANCHOR_BUILD/ANCHOR_RESULTS exported. NINJA_TARGETS: the
# ninja targets a script runs (default: everything), so a benchmark on a shared machine does
# not build the test suites.
prepare_braid_and_anchors() {
  BRAID_SETUP_ANCHORS=1 scripts/setup.sh
  BUILD_DIR=${BUILD_DIR:-build}
  [ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" >/dev/null
  # shellcheck disable=SC2086
  ninja -C "$BUILD_DIR" ${NINJA_TARGETS:-} >/dev/null
  # shellcheck source=/dev/null
  . "$ANCHORS/tools/common.sh"
  build_all
  mkdir -p "$OUT"
  OUTFILE=$OUT/results.tsv
  : > "$OUTFILE"
}
