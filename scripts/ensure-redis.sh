#!/usr/bin/env bash
# Makes sure a redis-server binary is on PATH; installs Debian's package when
# it is missing (as root, or through sudo). Sourced by demo.sh and test.sh.
set -euo pipefail

# The TLS suite (tests/tests/ops/tls.rs) starts redis-server with --tls-port:
# that needs a build with TLS (Debian's links OpenSSL). Only a warning: a
# statically linked build with TLS would not show libssl here.
warn_without_tls() {
  local bin="${REDIS_SERVER_BIN:-$(command -v redis-server || true)}"
  if [ -n "$bin" ] && command -v ldd >/dev/null 2>&1 && ! ldd "$bin" 2>/dev/null | grep -q libssl; then
    echo "warning: $bin does not link OpenSSL, so it may lack TLS support: the TLS suite (tests/tests/ops/tls.rs) would fail" >&2
  fi
  return 0
}

if command -v redis-server >/dev/null 2>&1 || [ -n "${REDIS_SERVER_BIN:-}" ]; then
  warn_without_tls
  return 0 2>/dev/null || exit 0
fi

echo "redis-server is not installed: installing Debian's redis-server package (apt-get)..." >&2
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: no apt-get here; install redis-server yourself (e.g. 'brew install redis') or set REDIS_SERVER_BIN" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "error: installing redis-server needs root (or sudo)" >&2
    exit 1
  fi
fi
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
# The package's post-install step may fail to start a system service (no
# init system, port 6379 taken); only the binary matters here.
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
  || echo "apt-get reported an error (often the service start); checking for the binary" >&2
command -v redis-server >/dev/null 2>&1 || { echo "error: redis-server still not found after install" >&2; exit 1; }
echo "installed $(redis-server --version)" >&2
warn_without_tls
