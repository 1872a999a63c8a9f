#!/usr/bin/env bash
# Builds the libFuzzer targets (Tests/Fuzz) with AddressSanitizer and runs each for a bounded time.
#
#   scripts/fuzz.sh [--seconds N | --minutes N] [--build-only] [TARGET...]
#
# TARGET: request-head, chunked-decoder, response-head, response-reader, toml, token-rejection, url, outbound-head (default: all, one at a time).
# Each target starts from its committed seeds (Tests/Fuzz/corpus/TARGET, read only) plus what earlier runs found
# ($FUZZ_WORK/TARGET/corpus). A crash, an invariant violation, a leak or an out-of-memory stops that target; its input
# is kept as $FUZZ_WORK/TARGET/crash-* (printed in base64 too, for CI logs) and the script exits 1 after the others ran.
# Reproduce one with: AUTHPROXY_FUZZ_TARGET=TARGET $FUZZ_SCRATCH/debug/authproxy-fuzz CRASH_FILE
#
# Environment: FUZZ_SCRATCH (SwiftPM scratch path, default .build-libfuzzer), FUZZ_WORK (default
# $FUZZ_SCRATCH/fuzz), FUZZ_ARGS (extra libFuzzer flags, e.g. "-max_len=20000").
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(request-head chunked-decoder response-head response-reader toml token-rejection url outbound-head)
seconds=60
build_only=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --minutes) seconds=$(( $2 * 60 )); shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *)
      if [[ " ${all_targets[*]} " != *" $1 "* ]]; then
        echo "fuzz.sh: unknown target '$1' (targets: ${all_targets[*]})" >&2; exit 2
      fi
      targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

scratch="${FUZZ_SCRATCH:-.build-libfuzzer}"
work="${FUZZ_WORK:-$scratch/fuzz}"

# AUTHPROXY_FUZZ declares the fuzz targets in Package.swift; a normal build never sees them.
echo "== building authproxy-fuzz (libFuzzer + AddressSanitizer) in $scratch"
# The filter only hides a linker note; the build's own status decides (a failed build in a reused scratch
# directory leaves the previous binary in place, which must not be fuzzed as if it were this tree's).
set +e
AUTHPROXY_FUZZ=1 swift build --scratch-path "$scratch" --product authproxy-fuzz \
  -Xswiftc -sanitize=fuzzer,address 2>&1 | grep -v "Cannot export local symbol"
build_status=${PIPESTATUS[0]}
set -e
bin="$scratch/debug/authproxy-fuzz"
[ "$build_status" -eq 0 ] || { echo "fuzz.sh: build failed (swift build exited $build_status); not fuzzing" >&2; exit 1; }
[ -x "$bin" ] || { echo "fuzz.sh: build failed ($bin missing)" >&2; exit 1; }
[ "$build_only" -eq 0 ] || exit 0

# Swift's own crash backtracer would hold the process for its 30 s timeout after every invariant violation.
export SWIFT_BACKTRACE=enable=no
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"

failed=()
for t in "${targets[@]}"; do
  dir="$work/$t"
  mkdir -p "$dir/corpus"
  echo "== $t: ${seconds}s"
  log="$dir/last-run.log"
  set +e
  # The request line (8 KiB) and chunk-extension (4 KiB) limits: let those targets' inputs grow past them.
  max_len=4096
  case "$t" in request-head|chunked-decoder) max_len=9000 ;; esac
  # shellcheck disable=SC2086
  AUTHPROXY_FUZZ_TARGET="$t" "$bin" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/" ${FUZZ_ARGS:-} "$dir/corpus" "Tests/Fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  # (No such line when the target died at start: that is reported below, not by set -e here.)
  { grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::(number_of_executed_units|peak_rss_mb)" "$log" || true; } | sed 's/^/   /'
  echo "   corpus: $(ls "$dir/corpus" | wc -l) inputs (seeds: $(ls "Tests/Fuzz/corpus/$t" | wc -l))"
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    echo "!! $t failed (exit $rc); log: $log"
    { grep -E "Fatal error|ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|SUMMARY" "$log" || true; } | head -5 | sed 's/^/   /'
    for f in "$dir"/crash-* "$dir"/leak-* "$dir"/oom-* "$dir"/timeout-*; do
      [ -e "$f" ] || continue
      echo "   kept input: $f (base64: $(base64 -w0 "$f" | head -c 4000))"
    done
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "== fuzzing FAILED: ${failed[*]}"
  exit 1
fi
echo "== fuzzing passed: ${targets[*]}"
