#!/usr/bin/env bash
# The whole test suite: format check, clippy with warnings as errors, and every
# test of the workspace (unit, end-to-end against private redis-servers, doc
# tests). Installs redis-server first when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/ensure-redis.sh

for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "installing the $component toolchain component..." >&2
    rustup component add "$component"
  fi
done

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p lock-core --features tls --locked -- -D warnings
echo "== cargo doc (warnings are errors: broken links, missing docs)" >&2
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
echo "== cargo test" >&2
cargo test --workspace --locked
