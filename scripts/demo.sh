#!/usr/bin/env bash
# The flash-sale demo (examples/src/bin/flash_sale.rs): 100 units, 4
# processes x 50 buyers, once without and once with the distributed lock
# (its decrement a fenced write); then a paused buyer: stopped (SIGSTOP)
# past its 1 s lease while another buyer sells the last unit, its late
# decrement lands as a plain DECR and is refused through the fence (a few
# seconds). Uses $REDIS_URL when set; otherwise the demo starts a private
# redis-server (installed first when it is missing). Extra arguments go to
# the demo (e.g. `bash scripts/demo.sh --processes 8 --buyers 100`,
# `--rounds locked,paused`, or `--help`).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${REDIS_URL:-}" ]; then
  source scripts/ensure-redis.sh
fi
echo "building and running the demo (a release build: about a minute the first time)..." >&2
# --no-default-features: only what flash_sale needs (lock-core with the macro,
# clap, the redis-server harness), not the axum and tonic examples' crates.
exec cargo run --release --locked -p lock-examples --no-default-features --bin flash_sale -- "$@"
