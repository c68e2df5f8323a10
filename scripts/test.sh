#!/usr/bin/env bash
# The whole test suite: format check, clippy with warnings as errors, the
# MSRV check, docs with warnings as errors, and every test of the workspace
# (unit, end-to-end against private redis-servers, the macro's UI cases, doc
# tests), ending with one line "N passed, N failed". Installs redis-server
# first when it is missing. Exits non-zero when any step fails.
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
# the demo's build (scripts/demo.sh): the examples without axum, tonic, protox
cargo clippy -p lock-examples --no-default-features --bins --locked -- -D warnings
echo "== rust-version and packaging files" >&2
bash scripts/check-msrv.sh
for crate in lock-core lock-macros lock-tower lockctl tests; do
  for file in LICENSE-MIT LICENSE-APACHE; do
    cmp -s "$file" "$crate/$file" || { echo "error: $crate/$file differs from $file (copy it again)" >&2; exit 1; }
  done
done
echo "== cargo doc (warnings are errors: broken links, missing docs)" >&2
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
echo "== cargo test" >&2
# Every test binary runs even after a failure (--no-fail-fast); the output is
# also kept to count the results of all "test result:" lines.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || status=$?
summary=$(awk '
  /^test result: / {
    for (i = 1; i < NF; i++) {
      if ($(i + 1) ~ /^passed/) passed += $i
      if ($(i + 1) ~ /^failed/) failed += $i
      if ($(i + 1) ~ /^ignored/) ignored += $i
    }
    runs++
  }
  END {
    if (runs == 0) print "no test ran"
    else printf "%d passed, %d failed, %d ignored (%d test binaries and doc-test runs)\n", passed, failed, ignored, runs
  }
' "$log")
echo "== cargo test: $summary"
if [ "$status" -ne 0 ]; then
  echo "== cargo test FAILED (exit status $status): look for \"FAILED\" or \"error\" above" >&2
fi
exit "$status"
