#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-16, ASan + UBSan) and runs each for
# FUZZ_SECONDS (default 300), FUZZ_JOBS targets at a time (default 2).
# Seeds: fuzz/corpus/<target>/ (kept in the repository); what a run finds
# goes to build/fuzz/corpus/<target>/, crashes to build/fuzz/artifacts/.
# Exits non-zero if any target found a crash, a leak or a hang.
# FUZZ_BUILD: a CMake tree configured with NOSTALL_FUZZ=ON to build them in
# (`make fuzz` passes build/asan, the tree its ASan tests use); default: its
# own, build/fuzz (RelWithDebInfo: more runs per second).
#   FUZZ_TARGETS="tar_index_fuzz spec_fuzz" FUZZ_SECONDS=60 fuzz/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-300}
JOBS=${FUZZ_JOBS:-2}
TARGETS=${FUZZ_TARGETS:-"tar_index_fuzz decode_fuzz spec_fuzz minio_cache_fuzz shared_fuzz s3_listing_fuzz s3_response_fuzz index_file_fuzz memcached_value_fuzz audio_fuzz annotations_fuzz parquet_fuzz arrow_ipc_fuzz http_listing_fuzz trace_fuzz video_fuzz"}
CMAKE=${CMAKE:-cmake}
for tool in clang-16 clang++-16 "$CMAKE" ninja; do
  if ! command -v "$tool" >/dev/null; then
    echo "fuzz/run.sh: $tool is not installed; the fuzz targets need clang-16 with libFuzzer" \
         "(Debian: apt-get install clang-16 libfuzzer-16-dev), CMake and Ninja" \
         "(\`make fuzz\` installs them and uses the ones in .venv/bin)" >&2
    exit 2
  fi
done
TREE=${FUZZ_BUILD:-build/fuzz}
if [ -z "${FUZZ_BUILD:-}" ]; then
  CC=clang-16 CXX=clang++-16 "$CMAKE" -S . -B "$TREE" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DNOSTALL_FUZZ=ON -DNOSTALL_BUILD_TESTS=OFF >/dev/null
elif ! grep -q '^NOSTALL_FUZZ:BOOL=ON' "$TREE/CMakeCache.txt" 2>/dev/null; then
  echo "fuzz/run.sh: FUZZ_BUILD=$TREE is not a CMake tree configured with -DNOSTALL_FUZZ=ON" >&2
  exit 2
fi
"$CMAKE" --build "$TREE" --target $TARGETS
mkdir -p build/fuzz/artifacts build/fuzz/logs
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
# Leaks inside libraries on their own error paths, each explained there.
export LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

run_one() {
  local t=$1
  mkdir -p "build/fuzz/corpus/$t"
  local seeds="fuzz/corpus/$t"
  local dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  local TIMEFORMAT="$t: cpu %U s user + %S s system"
  if time "$TREE/$t" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=3072 \
       -max_len=65536 -print_final_stats=1 "${dict[@]}" \
       -artifact_prefix="build/fuzz/artifacts/$t-" \
       "build/fuzz/corpus/$t" "$seeds" >"build/fuzz/logs/$t.log" 2>&1; then
    echo "$t: ok ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "build/fuzz/logs/$t.log" | grep -o '[0-9]*$') runs in ${SECONDS_EACH}s)"
  else
    echo "$t: FAILED (build/fuzz/logs/$t.log)"; tail -40 "build/fuzz/logs/$t.log"; return 1
  fi
}

status=0
pids=()
for t in $TARGETS; do
  run_one "$t" & pids+=($!)
  if [ ${#pids[@]} -ge "$JOBS" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
