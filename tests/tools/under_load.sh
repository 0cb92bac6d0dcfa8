#!/usr/bin/env bash
# Runs a command with N processes busy-looping beside it (default 2: as many
# as this machine's cores), as a loaded CI machine or a laptop compiling
# beside the tests would: the suite must stay green under it.
#
#   tests/tools/under_load.sh [-n N] -- make test
set -uo pipefail
n=2
if [ "${1:-}" = "-n" ]; then n=$2; shift 2; fi
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "usage: $0 [-n N] -- command..." >&2; exit 2; }
pids=()
for _ in $(seq "$n"); do
  ( while :; do :; done ) &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
echo "under_load: $n busy loops beside: $*" >&2
"$@"
