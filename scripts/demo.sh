#!/usr/bin/env bash
# Runs the main demo. Uses $REDIS_URL when set; otherwise the demo starts a
# private redis-server (installed first when it is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${REDIS_URL:-}" ]; then
  source scripts/ensure-redis.sh
fi
cargo run --release --locked -p lock-examples --bin manual_guard
