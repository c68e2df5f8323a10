#!/usr/bin/env bash
# Checks that the workspace's rust-version (Cargo.toml, [workspace.package])
# is at least the highest `rust-version` declared by the dependencies that
# Cargo.lock pins for the published crates: their normal and build
# dependencies, transitively, for every target platform, with every feature
# on (`tls` pulls in rustls).
# Dev-dependencies, and the unpublished members (lock-examples,
# lock-bench) with theirs, are not in the set: a user of the published
# crates never builds them. Run by scripts/test.sh; needs python3.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v python3 >/dev/null 2>&1; then
  echo "check-msrv.sh: needs python3 (apt-get install python3)" >&2
  exit 1
fi

check=$(cat <<'PY'
import json, sys

meta = json.load(sys.stdin)
packages = {p["id"]: p for p in meta["packages"]}
members = [packages[i] for i in meta["workspace_members"]]
# `publish = false` shows as an empty list of registries.
published = [p for p in members if p.get("publish") != []]
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}

def version(v):
    """ "1.89" and "1.89.0" alike: (1, 89, 0). """
    parts = [int(x) for x in v.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))

declared = {p["rust_version"] for p in published}
if len(declared) != 1 or None in declared:
    sys.exit(f"check-msrv: the published crates should share one rust-version, found {sorted(map(str, declared))}")
msrv = declared.pop()

# Normal and build dependencies (any target), from the published crates down.
seen, todo = set(), [p["id"] for p in published]
while todo:
    pid = todo.pop()
    if pid in seen:
        continue
    seen.add(pid)
    for dep in nodes[pid]["deps"]:
        if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
            todo.append(dep["pkg"])

needs = sorted(
    ((version(packages[i]["rust_version"]), packages[i]["name"], packages[i]["version"])
     for i in seen if packages[i].get("rust_version") and i not in {p["id"] for p in published}),
    reverse=True,
)
names = ", ".join(p["name"] for p in published)
if not needs:
    print(f"check-msrv: rust-version {msrv}; no dependency of {names} declares one")
    sys.exit(0)
top = needs[0][0]
highest = [f"{n} {v}" for (rv, n, v) in needs if rv == top]
top_s = ".".join(map(str, top[:2] if top[2] == 0 else top))
if version(msrv) < top:
    sys.exit(
        f"check-msrv: FAILED: the workspace says rust-version = \"{msrv}\", but Cargo.lock pins "
        f"{', '.join(highest)}, which needs Rust {top_s}.\n"
        f"  Raise rust-version in Cargo.toml ([workspace.package]) to \"{top_s}\", "
        f"or pin older versions (cargo update -p <crate> --precise <version>)."
    )
print(f"check-msrv: rust-version {msrv} >= {top_s}, the highest needed by the "
      f"{len(seen) - len(published)} normal/build dependencies of {names} ({', '.join(highest)})")
PY
)
cargo metadata --format-version 1 --locked --all-features | python3 -c "$check"
