#!/usr/bin/env bash
# Server cost of lock-core's uncontended acquire and release scripts, piece
# by piece, against Redisson's own lock/unlock scripts (R-min) and against
# L-min (SET NX PX + a compare-and-delete script). Measurement only: nothing
# in lock-core/ is changed; the variants below are temporary copies of
# lock-core/src/protocol/acquire.lua and release.lua made under a temp dir.
#
#   bash scripts/script-costs.sh            # N=100000 calls per phase, 3 runs
#   N=20000 RUNS=15 bash scripts/script-costs.sh   # shorter, more runs: less
#                                                  # hurt by bursts of other work
#
# Method
# - A PRIVATE redis-server (--save '' --appendonly no) on a free loopback
#   port (never 6379), pinned to CPU 0; the driver (redis-cli --pipe) pinned
#   to CPU 1 when nproc >= 2. Killed at the end.
# - Every script is SCRIPT LOADed once and sent as EVALSHA with the argument
#   list its client sends: lock-core's exactly as acquire.rs / release.rs
#   build it (acquire: 5 KEYS + 7 ARGV, mode 'new', line '1' = lock();
#   release: 4 KEYS + 7 ARGV, counts 1, 'publish'), Redisson's as
#   bench/src/workloads/refs.rs sends it (lock 1 + 2, unlock 3 + 5).
# - A variant is measured in two phases over N distinct locks k:{1}..k:{N}
#   (so the fast paths run: nothing exists yet, nobody subscribes):
#   phase "acq", N acquire calls; then phase "rel", N release calls of
#   those same holds. Before each phase CONFIG RESETSTAT; after it, INFO
#   commandstats and INFO cpu. Between variants (and runs) FLUSHALL.
# - After each phase an independent check counts the k:{*} lock keys: N
#   after an acquire phase, 0 after a release phase (the calls really took
#   and freed the locks), and redis-cli --pipe must report 0 errors.
#
# Columns
# - cmd us/call: usec / calls of the phase's top-level command in INFO
#   commandstats (cmdstat_evalsha; cmdstat_set for L-min's SET NX PX):
#   the time Redis spends executing the call (for a script: loading the
#   KEYS/ARGV tables, running the Lua, every redis.call inside, converting
#   the reply), without reading/parsing the request or writing the reply.
# - cpu us/call: (used_cpu_user + used_cpu_sys) delta / calls: everything
#   the server process spent, including socket reads, request parsing,
#   reply writes. NB --pipe sends in large batches, so the per-syscall cost
#   is amortised over many calls: in lock-bench (16 tasks, a few calls per
#   read) the per-call CPU is higher; the cmd column is comparable.
# - Each run's figure is printed, then the median, the minimum and the
#   spread (max-min). Per-cycle sums and "pieces" are given from both the
#   minimum (other work on the machine only adds time) and the median of
#   the runs. A piece = full script minus the variant without that piece.
# - Noise floor: some variants run an unchanged copy of a script in one of
#   their phases (lc-nopublish's acquire, lc-notoken's and lc-noexists'
#   release are lc-full's): their gap to lc-full is pure noise, and a piece
#   smaller than that gap (about 1-2 us on a quiet 2-core machine) is not
#   resolved. Nothing else should run on the machine meanwhile (a compile
#   beside it makes the spread 5-10 us); RUNS=15 N=20000 with the medians
#   is the sturdier choice then.
#
# Variants (a = acquire phase, r = release phase)
#   lc-full         acquire.lua / release.lua as they are
#   lc-notoken      acquire without the fencing token (TIME, SET .. GET,
#                   string.format, tonumber): `local token = 0`
#   lc-noexists     acquire without the EXISTS of latch/lock/turn (fast = mode=='new')
#   lc-noline       acquire without the waiting-line/turn bookkeeping of the
#                   new-hold branch (ARGV[7]=='2' ZREM test, the turn test);
#                   release without the `if told > 0` hand-over block
#   lc-nopublish    release without the PUBLISH (told = 0)
#   lc-shortargs    same bodies, the arguments the fast path does not read
#                   dropped (acquire 4 KEYS + 5 ARGV; release 2 KEYS + 4 ARGV)
#   lc-bare         acquire: EXISTS lock, HINCRBY, PEXPIRE (Redisson's work)
#                   with lock-core's 5 + 7 arguments; release: HGET, DEL only
#   lc-incrtoken    acquire with the token drawn by INCR of the token key
#                   (one above the last; seeded from TIME only when the key
#                   was missing) and its lifetime renewed by PEXPIRE: an
#                   alternative measured for issue 28 and rejected (without
#                   the clock floor a failover that loses the last writes
#                   hands out a token again; docs/architecture.md, "Fencing
#                   tokens"). NB every phase here uses fresh locks, so the
#                   key is always missing: its steady state is measured in
#                   BENCHMARKS.md, "Cheaper per-operation work"
#   lc-incronly     the same without the PEXPIRE
#   rmin            Redisson's lock + unlock (refs.rs REDISSON_LOCK/UNLOCK)
#   lmin            SET NX PX + compare-and-delete (refs.rs)
#   empty-lc        `return 0` with lock-core's arguments (5+7 / 4+7)
#   empty-rmin      `return 0` with Redisson's arguments (1+2 / 3+5)
#   empty-0         `return 0` with no arguments at all
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/ensure-redis.sh

N="${N:-100000}"
RUNS="${RUNS:-3}"
ONLY="${ONLY:-}" # e.g. ONLY="lc-full rmin": just these variants
REDIS_SERVER="${REDIS_SERVER_BIN:-redis-server}"
CLI="${REDIS_CLI_BIN:-redis-cli}"
command -v "$CLI" >/dev/null 2>&1 || { echo "error: redis-cli not found (it comes with redis-server; set REDIS_CLI_BIN)" >&2; exit 1; }
case "$N" in '' | *[!0-9]*) echo "error: N must be a number" >&2; exit 1 ;; esac
[ "$N" -ge 1 ] && [ "$N" -le 1000000 ] || { echo "error: N must be 1..1000000" >&2; exit 1; }
case "$RUNS" in '' | *[!0-9]*) echo "error: RUNS must be a number" >&2; exit 1 ;; esac
[ "$RUNS" -ge 1 ] && [ "$RUNS" -le 30 ] || { echo "error: RUNS must be 1..30" >&2; exit 1; }

export LC_ALL=C
tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

srv_pin=()
cli_pin=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
  srv_pin=(taskset -c 0)
  cli_pin=(taskset -c 1)
else
  echo "script-costs.sh: one CPU (or no taskset): running unpinned" >&2
fi

# A free loopback port: try a few random ones, keep the first redis-server
# that answers PING (a port in use makes it exit at once).
port=""
for _ in $(seq 1 20); do
  p=$((20000 + RANDOM % 40000))
  [ "$p" -eq 6379 ] && continue
  "${srv_pin[@]}" "$REDIS_SERVER" --bind 127.0.0.1 --port "$p" --save '' --appendonly no \
    --daemonize no --logfile "$tmp/redis.log" --dir "$tmp" &
  server_pid=$!
  for _ in $(seq 1 50); do
    if "$CLI" -p "$p" ping >/dev/null 2>&1; then port=$p; break; fi
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ] && break
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
done
[ -n "$port" ] || { echo "error: could not start redis-server on a free port" >&2; exit 1; }
rc() { "$CLI" -p "$port" "$@"; }
echo "redis-server $("$REDIS_SERVER" --version | awk '{print $3}') pid $server_pid on 127.0.0.1:$port; N=$N calls per phase, $RUNS runs" >&2

# ---------------------------------------------------------------- scripts
ACQ=lock-core/src/protocol/acquire.lua
REL=lock-core/src/protocol/release.lua
[ -f "$ACQ" ] && [ -f "$REL" ] || { echo "error: $ACQ / $REL missing" >&2; exit 1; }
S="$tmp/lua"
mkdir -p "$S"
cp "$ACQ" "$S/lc-full.a.lua"
cp "$REL" "$S/lc-full.r.lua"

# Each variant must really differ from the original: a sed that matches
# nothing (the script changed) is an error, not a silent no-op.
variant() { # variant <src> <dst> <sed program>
  sed -e "$3" "$1" >"$2"
  if cmp -s "$1" "$2"; then
    echo "error: variant $2: the edit matched nothing in $1 (was the script changed?)" >&2
    exit 1
  fi
}
variant "$ACQ" "$S/lc-notoken.a.lua" '/^if fast or/,/^end/ s/local token = next_token()/local token = 0/'
variant "$ACQ" "$S/lc-noexists.a.lua" "s/local fast = mode == 'new' and redis.call('exists', KEYS\[3\], KEYS\[1\], KEYS\[5\]) == 0/local fast = mode == 'new'/"
variant "$ACQ" "$S/lc-noline.a.lua" '/^if fast or/,/^end/ {
  /^  local turn = nil/,/^  end$/ d
  /^  if turn then/,/^  end$/ d
  /^  if ARGV\[7\] == .2. then/,/^  end$/ d
}'
# release: drop the block run when someone listened
variant "$REL" "$S/lc-noline.r.lua" '/^if told > 0 then/,/^end/ d'
variant "$REL" "$S/lc-nopublish.r.lua" 's/^local told = redis.pcall(ARGV\[7\], KEYS\[2\], ARGV\[3\])/local told = 0/'
cp "$ACQ" "$S/lc-nopublish.a.lua"
cp "$REL" "$S/lc-notoken.r.lua"
cp "$REL" "$S/lc-noexists.r.lua"
cp "$ACQ" "$S/lc-nopublish.a.lua"
# shortargs: renumber what the fast paths read; what only the slow paths
# read becomes [9] (nil: those paths never run here)
variant "$ACQ" "$S/lc-shortargs.a.lua" 's/KEYS\[4\]/KEYS[9]/g; s/KEYS\[5\]/KEYS[4]/g; s/ARGV\[5\]/ARGV[9]/g; s/ARGV\[6\]/ARGV[9]/g; s/ARGV\[7\]/ARGV[5]/g'
variant "$REL" "$S/lc-shortargs.r.lua" 's/KEYS\[3\]/KEYS[9]/g; s/KEYS\[4\]/KEYS[9]/g; s/ARGV\[2\]/ARGV[9]/g; s/ARGV\[4\]/ARGV[9]/g; s/ARGV\[5\]/ARGV[9]/g; s/ARGV\[3\]/ARGV[2]/g; s/ARGV\[6\]/ARGV[3]/g; s/ARGV\[7\]/ARGV[4]/g'
variant "$ACQ" "$S/lc-incrtoken.a.lua" '/^local function next_token()/,/^end/ c\
local function next_token()\
  local token = redis.call('"'"'incr'"'"', KEYS[2])\
  if token == 1 then\
    local now = redis.call('"'"'time'"'"')\
    token = tonumber(now[1]) * 1000000 + tonumber(now[2])\
    redis.call('"'"'set'"'"', KEYS[2], token, '"'"'px'"'"', ARGV[4])\
  else\
    redis.call('"'"'pexpire'"'"', KEYS[2], ARGV[4])\
  end\
  return token\
end'
variant "$S/lc-incrtoken.a.lua" "$S/lc-incronly.a.lua" '/^  else$/,/^  end$/ c\
  end'
cp "$REL" "$S/lc-incrtoken.r.lua"
cp "$REL" "$S/lc-incronly.r.lua"
cat >"$S/lc-bare.a.lua" <<'EOF'
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, 0}
end
return {0, redis.call('pttl', KEYS[1])}
EOF
cat >"$S/lc-bare.r.lua" <<'EOF'
if not redis.call('hget', KEYS[1], ARGV[1]) then
  return nil
end
redis.call('del', KEYS[1])
return 1
EOF
# Redisson's, copied from bench/src/workloads/refs.rs (the text between
# the r#" "# of each constant)
extract() { # extract <CONST>
  awk -v c="$1" '
    $0 ~ "const " c ": &str = r#\"" { on = 1; next }
    on && /^"#;/ { exit }
    on { print }
  ' bench/src/workloads/refs.rs
}
extract REDISSON_LOCK >"$S/rmin.a.lua"
extract REDISSON_UNLOCK >"$S/rmin.r.lua"
extract COMPARE_AND_DELETE >"$S/lmin.r.lua"
for f in rmin.a rmin.r lmin.r; do
  grep -q "redis.call" "$S/$f.lua" || { echo "error: could not extract $f from bench/src/workloads/refs.rs" >&2; exit 1; }
done
for v in empty-lc empty-rmin empty-0; do
  echo 'return 0' >"$S/$v.a.lua"
  echo 'return 0' >"$S/$v.r.lua"
done

# ---------------------------------------------------------------- commands
# RESP for one command per line of space-separated words (no word holds a
# space); @...@ (40 @, a SHA1's length) stands for the phase's script.
UUID=5f0e6c1a-3b2d-4c9e-8a7f-1d2e3f405162    # lock-core's client id / Redisson's client uuid
REQ=0f3a9c6b5d4e4f1a8b7c6d5e4f3a2b1c         # lock-core's request-id prefix / Redisson's request id base
# The argument lists, for lock i (awk's `i`):
#   lc-*   acquire: EVALSHA sha 5 lock token latch queue turn  lease owner 'new' retention latch_ms client line
#          release: EVALSHA sha 4 lock channel queue turn  owner lease '0' client turn_ms counts 'publish'
#   (lock k:{i} has a '{': helper names are <kind>:k:{i}, see keys.rs prefixed())
PH=$(printf '@%.0s' $(seq 1 40)) # placeholder of a SHA1's length
gen() { # gen <shape> <file>
  awk -v ph="$PH" -v n="$N" -v shape="$1" -v uuid="$UUID" -v req="$REQ" '
    function resp(line,   a, k, i, out) {
      k = split(line, a, " ")
      out = "*" k "\r\n"
      for (i = 1; i <= k; i++) out = out "$" length(a[i]) "\r\n" a[i] "\r\n"
      return out
    }
    BEGIN {
      for (i = 1; i <= n; i++) {
        lock = "k:{" i "}"
        owner = uuid ":" i
        if (shape == "lc.a")
          c = "EVALSHA " ph " 5 " lock " redisson_lock_token:" lock " redisson_unlock_latch:" lock ":" req ":" i \
              " lockcore_waiters:" lock " lockcore_turn:" lock " 30000 " owner " new 60000 30000 " uuid " 1"
        else if (shape == "lc.r")
          c = "EVALSHA " ph " 4 " lock " redisson_lock__channel:" lock " lockcore_waiters:" lock " lockcore_turn:" lock \
              " " owner " 30000 0 " uuid " 20 1 publish"
        else if (shape == "short.a")   # 4 KEYS + 5 ARGV: queue, latch_ms, client id dropped
          c = "EVALSHA " ph " 4 " lock " redisson_lock_token:" lock " redisson_unlock_latch:" lock ":" req ":" i \
              " lockcore_turn:" lock " 30000 " owner " new 60000 1"
        else if (shape == "short.r")   # 2 KEYS + 4 ARGV: owner, message, counts, publish
          c = "EVALSHA " ph " 2 " lock " redisson_lock__channel:" lock " " owner " 0 1 publish"
        else if (shape == "rmin.a")
          c = "EVALSHA " ph " 1 " lock " 30000 " owner
        else if (shape == "rmin.r")
          c = "EVALSHA " ph " 3 " lock " redisson_lock__channel:" lock " redisson_unlock_latch:" lock ":" req sprintf("%016x", i) \
              " 0 30000 " owner " publish 13500"
        else if (shape == "lmin.a")
          c = "SET " lock " " owner " NX PX 10000"
        else if (shape == "lmin.r")
          c = "EVALSHA " ph " 1 " lock " " owner
        else if (shape == "zero")
          c = "EVALSHA " ph " 0"
        else { print "unknown shape " shape > "/dev/stderr"; exit 1 }
        printf "%s", resp(c)
      }
    }' >"$2"
}
C="$tmp/cmd"
mkdir -p "$C"
for shape in lc.a lc.r short.a short.r rmin.a rmin.r lmin.a lmin.r zero; do
  gen "$shape" "$C/$shape.resp"
done

# variant -> the shapes of its two phases
shape_of() { # shape_of <variant> <a|r>
  case "$1" in
    lc-shortargs) echo "short.$2" ;;
    rmin | empty-rmin) echo "rmin.$2" ;;
    lmin) echo "lmin.$2" ;;
    empty-0) echo "zero" ;;
    *) echo "lc.$2" ;;
  esac
}
# what the lock keys k:{*} must number after each phase (- : not checked)
expect_after() { # expect_after <variant> <a|r>
  case "$1" in
    empty-*) echo "0" ;;
    *) if [ "$2" = a ]; then echo "$N"; else echo 0; fi ;;
  esac
}

cpu_now() { rc info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }
# calls and usec of one cmdstat line
cmdstat() { # cmdstat <name> <file>
  awk -F'[:=,]' -v c="cmdstat_$1" '$1 == c { print $3, $5 }' "$2"
}
count_locks() { rc eval "return #redis.call('keys', 'k:{*')" 0; }

results="$tmp/results"
: >"$results"
breakdown="$tmp/breakdown"
: >"$breakdown"

run_phase() { # run_phase <variant> <a|r> <run>
  local v=$1 ph=$2 run=$3 sha shape file top out c0 c1 stats calls usec want got
  shape=$(shape_of "$v" "$ph")
  if [ "$v" = lmin ] && [ "$ph" = a ]; then
    cp "$C/$shape.resp" "$tmp/phase.resp"
    top=set
  else
    sha=$(rc script load "$(cat "$S/$v.$ph.lua")")
    [ "${#sha}" -eq 40 ] || { echo "error: SCRIPT LOAD of $v.$ph: $sha" >&2; exit 1; }
    sed "s/$PH/$sha/" "$C/$shape.resp" >"$tmp/phase.resp"
    top=evalsha
  fi
  rc config resetstat >/dev/null
  c0=$(cpu_now)
  out=$("${cli_pin[@]}" "$CLI" -p "$port" --pipe <"$tmp/phase.resp" 2>&1) || true
  c1=$(cpu_now)
  rc info commandstats | tr -d '\r' >"$tmp/stats"
  echo "$out" | grep -q "errors: 0, replies: $N" || { echo "error: $v.$ph run $run: redis-cli --pipe said: $out" >&2; exit 1; }
  read -r calls usec < <(cmdstat "$top" "$tmp/stats")
  [ "${calls:-0}" -eq "$N" ] || { echo "error: $v.$ph run $run: $calls $top calls, expected $N" >&2; exit 1; }
  want=$(expect_after "$v" "$ph")
  got=$(count_locks)
  [ "$got" = "$want" ] || { echo "error: $v.$ph run $run: $got lock keys k:{*} after the phase, expected $want (the calls did not take/free the locks)" >&2; exit 1; }
  awk -v v="$v" -v ph="$ph" -v r="$run" -v n="$calls" -v u="$usec" -v c0="$c0" -v c1="$c1" \
    'BEGIN { printf "%s %s %d %d %.4f %.4f\n", v, ph, r, n, u / n, (c1 - c0) * 1e6 / n }' >>"$results"
  # the commands run inside the script, as Redis counts them (first run only)
  if [ "$run" -eq 1 ]; then
    awk -F'[:=,]' -v v="$v" -v ph="$ph" '$1 ~ /^cmdstat_/ && $1 !~ /^cmdstat_(config|info|script|echo)/ {
      sub("cmdstat_", "", $1); printf "%s %s %s %d %.3f\n", v, ph, $1, $3, $5 / $3 }' "$tmp/stats" >>"$breakdown"
  fi
}

VARIANTS="lc-full lc-incrtoken lc-incronly lc-notoken lc-noexists lc-noline lc-nopublish lc-shortargs lc-bare rmin lmin empty-lc empty-rmin empty-0"
[ -n "$ONLY" ] && VARIANTS="$ONLY"
read -r -a vlist <<<"$VARIANTS"
for run in $(seq 1 "$RUNS"); do
  # each run starts one variant further on, so that a burst of other work
  # on the machine does not always land on the same variants
  rot=$(((run - 1) % ${#vlist[@]}))
  for v in "${vlist[@]:rot}" "${vlist[@]:0:rot}"; do
    [ -f "$S/$v.a.lua" ] || [ "$v" = lmin ] || { echo "error: unknown variant $v" >&2; exit 1; }
    rc flushall sync >/dev/null
    rc script flush sync >/dev/null
    run_phase "$v" a "$run"
    run_phase "$v" r "$run"
    echo "run $run: $v done" >&2
  done
done

# ---------------------------------------------------------------- report
echo
echo "Per call, N=$N calls per phase, $RUNS runs (acq = acquire/lock call, rel = release/unlock call)."
echo "cmd = usec per call from INFO commandstats (evalsha; set for L-min's acquire); cpu = server used_cpu_user+sys per call."
awk -v runs="$RUNS" '
  function median(s,   a, k, i, j, t) {
    k = split(s, a, " ")
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
  }
  function least(s,   a, k, i, lo) {
    k = split(s, a, " "); lo = a[1]
    for (i = 2; i <= k; i++) if (a[i] + 0 < lo + 0) lo = a[i]
    return lo
  }
  function spread(s,   a, k, i, lo, hi) {
    k = split(s, a, " "); lo = hi = a[1]
    for (i = 2; i <= k; i++) { if (a[i] + 0 < lo + 0) lo = a[i]; if (a[i] + 0 > hi + 0) hi = a[i] }
    return hi - lo
  }
  {
    key = $1 " " $2
    if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
    calls[key] = $4; cmd[key] = cmd[key] " " $5; cpu[key] = cpu[key] " " $6
  }
  END {
    printf "\n%-13s %-4s %7s  %-26s %7s %6s %6s  %-26s %7s %6s %6s\n", "variant", "ph", "calls", "cmd us/call (runs)", "median", "min", "sprd", "cpu us/call (runs)", "median", "min", "sprd"
    for (i = 1; i <= nk; i++) {
      k = order[i]; split(k, p, " ")
      mc[k] = least(cmd[k]); mu[k] = least(cpu[k]); md[k] = median(cmd[k]); mdu[k] = median(cpu[k])
      cs = ""; split(cmd[k], a, " "); for (j = 1; j <= runs; j++) cs = cs sprintf("%6.2f", a[j]) " "
      us = ""; split(cpu[k], a, " "); for (j = 1; j <= runs; j++) us = us sprintf("%6.2f", a[j]) " "
      printf "%-13s %-4s %7d  %-26s %7.2f %6.2f %6.2f  %-26s %7.2f %6.2f %6.2f\n", p[1], (p[2] == "a" ? "acq" : "rel"), calls[k], cs, median(cmd[k]), mc[k], spread(cmd[k]), us, median(cpu[k]), mu[k], spread(cpu[k])
    }
    # a cycle: one acquire + one release
    printf "\nPer cycle (acquire + release): %-13s %10s %10s %10s %10s\n", "variant", "cmd min", "cpu min", "cmd median", "cpu median"
    for (i = 1; i <= nk; i++) {
      split(order[i], p, " ")
      if (p[2] != "a") continue
      ka = p[1] " a"; kr = p[1] " r"
      if (!(kr in mc)) continue
      printf "%31s %-13s %10.2f %10.2f %10.2f %10.2f\n", "", p[1], mc[ka] + mc[kr], mu[ka] + mu[kr], md[ka] + md[kr], mdu[ka] + mdu[kr]
    }
    # pieces: full minus variant (medians)
    printf "\nPieces (lc-full minus the variant without the piece, us per call; min of runs, median of runs):\n"
    printf "%-44s %8s %8s %10s %10s\n", "piece", "cmd min", "cpu min", "cmd median", "cpu median"
    n = split("a lc-notoken fencing-token(TIME+SET..GET+format)|a lc-noexists EXISTS(latch,lock,turn)|a lc-noline waiting-line/turn-tests(acquire)|r lc-noline hand-over-block(release)|r lc-nopublish PUBLISH(release)|a lc-shortargs unused-args(acquire:5+7->4+5)|r lc-shortargs unused-args(release:4+7->2+4)|a lc-bare all-but-Redisson-work(acquire)|r lc-bare all-but-HGET+DEL(release)", list, "|")
    for (i = 1; i <= n; i++) {
      split(list[i], q, " ")
      kf = "lc-full " q[1]; kv = q[2] " " q[1]
      if (!(kf in mc) || !(kv in mc)) continue
      printf "%-44s %8.2f %8.2f %10.2f %10.2f\n", q[3], mc[kf] - mc[kv], mu[kf] - mu[kv], md[kf] - md[kv], mdu[kf] - mdu[kv]
    }
    printf "\nFixed cost of an EVALSHA (empty script `return 0`; min of runs, median of runs):\n"
    for (i = 1; i <= nk; i++) {
      split(order[i], p, " ")
      if (p[1] !~ /^empty/) continue
      printf "  %-11s %s  cmd %6.2f  cpu %6.2f  |  cmd %6.2f  cpu %6.2f\n", p[1], (p[2] == "a" ? "acq-shape" : "rel-shape"), mc[order[i]], mu[order[i]], md[order[i]], mdu[order[i]]
    }
  }' "$results"

echo
echo "Inside the scripts (run 1): calls and usec per call of every command Redis counted in the phase"
echo "(nested redis.call commands are counted by Redis too; evalsha's usec includes them)."
awk '{ k = $1 " " $2; if (k != last) { printf "\n  %-13s %-3s", $1, ($2 == "a" ? "acq" : "rel"); last = k } printf "  %s %d x %.2f", $3, $4, $5 }
     END { print "" }' "$breakdown"
