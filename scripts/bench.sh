#!/usr/bin/env bash
# The benchmark, the one command to run: builds lock-bench in release mode and
# runs every workload (REF, W1, S1, F1, RL, W2, W2F, R1, M1, W3, W3NP, W3F, WD, LAYER) against a private redis-server,
# with redis-server pinned to CPU 0 and the benchmark (and its W3 child
# processes) pinned to CPU 1. Extra arguments go to lock-bench, e.g.
#   bash scripts/bench.sh --workloads REF,W2 --duration 10
# One JSON line per measurement on stdout; the summary with the ratios
# against the targets on stderr. REF measures L-min twice in the same run:
# over one multiplexed connection shared by all tasks (L-min-mux) and over
# lock-core's pool shape (L-min-pool); W1's ratio is against the faster. REF
# also measures R-min (Redisson's RLock protocol, lock + unlock script, over
# one multiplexed connection): W1 is set against it too. The uncontended
# lines report client CPU, server CPU and calls per cycle. Installs
# redis-server first when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/ensure-redis.sh

pin=()
if [ "$(nproc)" -ge 2 ]; then
  pin=(--redis-cpu 0 --bench-cpu 1)
else
  echo "bench.sh: only one CPU: running unpinned" >&2
fi

cargo build --release --locked -p lock-bench >&2
exec cargo run --release --locked --quiet -p lock-bench -- "${pin[@]}" "$@"
