//! The reference loops, written with plain redis-rs commands:
//!
//! - **L-min** (on W1): the least a correct lock can do, two round trips per
//!   cycle: `SET key token NX PX 10000`, then a compare-and-delete script
//!   (EVALSHA). `--tasks` tasks (16) on their own keys. Measured twice in the
//!   same run, in two connection shapes:
//!   - **L-min-mux**: every task on ONE multiplexed connection (a
//!     connection cloned per task), so redis-rs pipelines the
//!     tasks' concurrent commands into shared writes and reads: the fastest
//!     correct two-round-trip lock redis-rs can do, and W1's honest bar;
//!   - **L-min-pool**: the library's pool shape, as many multiplexed
//!     connections as lock-core's default pool (`--ref-conns`, default
//!     `lock_core::DEFAULT_POOL_SIZE`), task i on connection i mod n.
//!
//!   W1's ratio is against the faster of the two. Both report the client
//!   CPU, server CPU and calls per cycle (see [`super::ClientCpu`]).
//! - **R-min** (on W1): Redisson's own RLock protocol as Redisson sends it,
//!   over ONE multiplexed connection shared by the `--tasks` tasks (16),
//!   task i looping on its own lock `rmin:{i}`: the lock script
//!   ([`REDISSON_LOCK`], `RedissonLock.tryLockInnerAsync`, watchdog lease
//!   30 000 ms), then the unlock script ([`REDISSON_UNLOCK`],
//!   `RedissonLock.unlockInnerAsync` of Redisson 3.2x with the unlock
//!   latch, a fresh request id per unlock), each an EVALSHA of a script
//!   loaded once: two round trips per cycle, the floor of any
//!   Redisson-compatible lock that sends one script per operation (issue
//!   28's target: W1 >= 1.5 x R-min). Every lock must answer nil (taken)
//!   and every unlock 1 (freed): any other answer is a violation, and the
//!   workload fails. After the loop a connection of its own reads every
//!   lock key gone and every task's last unlock latch at 1 (`counter_ok`);
//!   then the run's unlock latches (one per cycle, 13.5 s each) are
//!   deleted, so their expiry does not land in a later workload's window.
//! - **L-serial** (on W2): one task, no contention, on one connection:
//!   acquire (SET NX PX) → INCR counter → release (compare-and-delete). Its
//!   rate is what a perfect zero-gap hand-off between waiters would reach.

use std::sync::Arc;

use redis::Script;
use tokio::task::JoinSet;

use super::{uncontended, ClientCpu, Ctx, LEASE, MAX_CYCLES};
use crate::report::{Measurement, L_MIN_MUX, L_MIN_POOL, R_MIN};
use crate::stats::{mono_ns, Window};
use crate::{redis_util, BenchResult};

/// Deletes the key only while it still holds our token.
const COMPARE_AND_DELETE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"#;

/// One reference cycle step: acquire by `SET NX PX`; `true` when acquired.
async fn set_nx(conn: &mut redis_util::Conn, key: &str, token: &str) -> BenchResult<bool> {
    let reply: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(LEASE.as_millis() as u64)
        .query_async(conn)
        .await?;
    Ok(reply.is_some())
}

/// Release by compare-and-delete; `true` when the key was ours.
async fn compare_and_delete(
    script: &Script,
    conn: &mut redis_util::Conn,
    key: &str,
    token: &str,
) -> BenchResult<bool> {
    let deleted: i64 = script.key(key).arg(token).invoke_async(conn).await?;
    Ok(deleted == 1)
}

/// A token unique to this process, task and cycle (as lock-core's owner ids).
fn token(base: u32, task: usize, n: usize) -> String {
    format!("{base:08x}:{task}:{n}")
}

/// Per-task outcome of the L-min loop: measured latencies and misses.
type TaskResult = BenchResult<(Vec<u64>, u64)>;

/// The connection shape of an L-min run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// L-min-mux: one multiplexed connection shared by every task.
    Mux,
    /// L-min-pool: `--ref-conns` connections, task i on connection i mod n.
    Pool,
}

impl Shape {
    fn lib(self) -> &'static str {
        match self {
            Shape::Mux => L_MIN_MUX,
            Shape::Pool => L_MIN_POOL,
        }
    }
}

/// The L-min reference on W1, over `shape`'s connections.
pub(crate) async fn l_min(ctx: &Ctx, shape: Shape) -> BenchResult<Measurement> {
    let tasks = ctx.opts.tasks;
    let wanted = match shape {
        Shape::Mux => 1,
        Shape::Pool => ctx.opts.ref_conns.min(tasks),
    };
    let mut conns = Vec::new();
    for _ in 0..wanted {
        conns.push(redis_util::connect(&ctx.url).await?);
    }
    let script = Arc::new(Script::new(COMPARE_AND_DELETE));
    if let Some(c) = conns.first_mut() {
        script.prepare_invoke().load_async(c).await?;
    }
    let base = std::process::id();
    let window = ctx.window();
    // the loop's SET is a call of its own; GET and DEL run in the script
    let cpu = ClientCpu::sample(&window, &ctx.servers).sending(&["set"]);
    let mut set: JoinSet<TaskResult> = JoinSet::new();
    for i in 0..tasks {
        let mut conn = conns[i % conns.len()].clone();
        let script = script.clone();
        let key = match shape {
            Shape::Mux => ctx.key(&format!("w1mux:{i}")),
            Shape::Pool => ctx.key(&format!("w1pool:{i}")),
        };
        set.spawn(async move {
            let mut latencies = Vec::new();
            let mut misses = 0;
            for n in 0..MAX_CYCLES {
                let start = mono_ns();
                if start >= window.to {
                    break;
                }
                let token = token(base, i, n);
                if !set_nx(&mut conn, &key, &token).await? {
                    misses += 1;
                    continue;
                }
                if !compare_and_delete(&script, &mut conn, &key, &token).await? {
                    misses += 1;
                }
                let end = mono_ns();
                if window.contains(end) {
                    latencies.push(end - start);
                }
            }
            Ok((latencies, misses))
        });
    }
    let mut latencies = Vec::new();
    let mut misses = 0;
    while let Some(joined) = set.join_next().await {
        let (l, m) = joined??;
        latencies.extend(l);
        misses += m;
    }
    let conns_text = match shape {
        Shape::Mux => "sharing ONE multiplexed connection (cloned per task; redis-rs pipelines their concurrent commands)".to_owned(),
        Shape::Pool => format!(
            "over {} multiplexed connections (the library's pool shape, --ref-conns), task i on connection i mod {}",
            conns.len(),
            conns.len()
        ),
    };
    let notes = format!(
        "reference: SET NX PX + compare-and-delete EVALSHA (2 round trips/cycle); {tasks} tasks on own keys {conns_text}; p50/p99 = cycle latency; client CPU = getrusage user+sys of the whole process over the window / measured cycles; calls = EVALSHA + SET counted by the server (INFO commandstats) / measured cycles; misses={misses}"
    );
    let mut m = uncontended(shape.lib(), "W1", latencies, &window, notes);
    cpu.finish(&mut m).await?;
    Ok(m)
}

/// The L-serial reference on W2.
pub(crate) async fn l_serial(ctx: &Ctx) -> BenchResult<Measurement> {
    let mut conn = redis_util::connect(&ctx.url).await?;
    let script = Script::new(COMPARE_AND_DELETE);
    script.prepare_invoke().load_async(&mut conn).await?;
    let key = ctx.key("lserial");
    let counter = ctx.key("lserial:counter");
    let _: i64 = redis::cmd("DEL")
        .arg(&counter)
        .query_async(&mut conn)
        .await?;
    let base = std::process::id();
    let window: Window = ctx.window();
    let mut latencies = Vec::new();
    let mut completed: u64 = 0;
    let mut misses = 0;
    for n in 0..MAX_CYCLES {
        let start = mono_ns();
        if start >= window.to {
            break;
        }
        let token = token(base, 0, n);
        if !set_nx(&mut conn, &key, &token).await? {
            misses += 1;
            continue;
        }
        let _: u64 = redis::cmd("INCR")
            .arg(&counter)
            .query_async(&mut conn)
            .await?;
        completed += 1;
        if !compare_and_delete(&script, &mut conn, &key, &token).await? {
            misses += 1;
        }
        let end = mono_ns();
        if window.contains(end) {
            latencies.push(end - start);
        }
    }
    let total: Option<u64> = redis::cmd("GET")
        .arg(&counter)
        .query_async(&mut conn)
        .await?;
    let mut m = uncontended(
        "L-serial",
        "W2",
        latencies,
        &window,
        format!(
            "reference: one task, SET NX PX -> INCR -> compare-and-delete (3 round trips/cycle, one connection); p50/p99 = cycle latency; counter {} of {completed}; misses={misses}",
            total.unwrap_or(0)
        ),
    );
    m.counter_ok = Some(total.unwrap_or(0) == completed);
    Ok(m)
}

/// Redisson's RLock acquire, as `RedissonLock.tryLockInnerAsync` sends it.
/// `KEYS[1]` the lock's name; `ARGV[1]` the lease in ms, `ARGV[2]` the owner
/// `<client uuid>:<thread id>`. Taken (a free lock, or a re-entry of the
/// owner's hold): the owner's count + 1, the lease renewed, nil. Held by
/// another owner: the lock's PTTL.
pub(crate) const REDISSON_LOCK: &str = r#"
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
"#;

/// Redisson's RLock release, as `RedissonLock.unlockInnerAsync` of Redisson
/// 3.2x sends it (with the unlock latch). `KEYS[1]` the lock's name, `KEYS[2]`
/// the unlock channel `redisson_lock__channel:{<name>}`, `KEYS[3]` this
/// unlock's latch `redisson_unlock_latch:{<name>}:<request id>`; `ARGV[1]`
/// the unlock message (0), `ARGV[2]` the lease in ms, `ARGV[3]` the owner,
/// `ARGV[4]` the publish command, `ARGV[5]` the latch's lifetime in ms. A
/// request applied already answers what it answered then (its latch); not
/// the owner: nil; the owner's count - 1: 0 while counts remain (lease
/// renewed), else the lock deleted, the unlock message published and 1.
pub(crate) const REDISSON_UNLOCK: &str = r#"
local latch = redis.call('get', KEYS[3])
if latch ~= false then
    return tonumber(latch)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
"#;

/// R-min's lease: Redisson's watchdog default (`lockWatchdogTimeout`), ms.
pub(crate) const R_MIN_LEASE_MS: u64 = 30_000;
/// Lifetime of an unlock latch, ms. Redisson derives it from its response
/// timeout and retry settings; R-min uses this fixed value (13.5 s).
pub(crate) const UNLOCK_LATCH_MS: u64 = 13_500;
/// Redisson's unlock message (`LockPubSub.UNLOCK_MESSAGE`).
const UNLOCK_MESSAGE: i64 = 0;

/// The two scripts of R-min.
#[derive(Debug)]
pub(crate) struct RedissonScripts {
    lock: Script,
    unlock: Script,
}

impl RedissonScripts {
    pub(crate) fn new() -> Self {
        RedissonScripts {
            lock: Script::new(REDISSON_LOCK),
            unlock: Script::new(REDISSON_UNLOCK),
        }
    }

    /// `SCRIPT LOAD` of both, so that every cycle is two EVALSHA.
    pub(crate) async fn load(&self, conn: &mut redis_util::Conn) -> BenchResult<()> {
        self.lock.prepare_invoke().load_async(conn).await?;
        self.unlock.prepare_invoke().load_async(conn).await?;
        Ok(())
    }
}

/// Redisson's unlock channel of the lock `name`.
impl RedissonScripts {
    /// The unlock script's call for `owner`'s hold of `name`, as Redisson
    /// sends it (a fresh `request` id per unlock: its latch).
    fn unlock_call(&self, name: &str, owner: &str, request: &str) -> redis::ScriptInvocation<'_> {
        let mut call = self.unlock.prepare_invoke();
        call.key(name)
            .key(unlock_channel(name))
            .key(unlock_latch(name, request))
            .arg(UNLOCK_MESSAGE)
            .arg(R_MIN_LEASE_MS)
            .arg(owner)
            .arg("publish")
            .arg(UNLOCK_LATCH_MS);
        call
    }
}

fn unlock_channel(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

/// Redisson's unlock latch of the lock `name` for one unlock request.
fn unlock_latch(name: &str, request: &str) -> String {
    format!("redisson_unlock_latch:{{{name}}}:{request}")
}

/// A client id in the form of Redisson's (a UUID), unique to this process.
fn client_uuid() -> String {
    let t = mono_ns();
    format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        std::process::id(),
        (t >> 48) & 0xffff,
        (t >> 36) & 0xfff,
        (t >> 24) & 0xfff,
        t & 0xffff_ffff_ffff
    )
}

/// A fresh unlock request id (32 hex digits, as Redisson's), unique to
/// this process, task and cycle.
fn request_id(base: u32, task: usize, n: usize) -> String {
    format!("{base:08x}{task:08x}{n:016x}")
}

/// One R-min cycle on the lock `name`: the lock script, then (when it
/// answered nil) the unlock script with the latch of `request`. `None`
/// when the answers are those of a free lock taken and freed (nil, then
/// 1); else what was answered instead: a violation.
pub(crate) async fn r_min_cycle(
    scripts: &RedissonScripts,
    conn: &mut redis_util::Conn,
    name: &str,
    owner: &str,
    request: &str,
) -> BenchResult<Option<String>> {
    let pttl: Option<i64> = scripts
        .lock
        .key(name)
        .arg(R_MIN_LEASE_MS)
        .arg(owner)
        .invoke_async(conn)
        .await?;
    if let Some(pttl) = pttl {
        return Ok(Some(format!(
            "the lock script answered PTTL {pttl} (held by another owner) on {name}"
        )));
    }
    let freed: Option<i64> = scripts
        .unlock_call(name, owner, request)
        .invoke_async(conn)
        .await?;
    Ok(match freed {
        Some(1) => None,
        other => Some(format!(
            "the unlock script answered {other:?}, not 1, on {name}"
        )),
    })
}

/// Per-task outcome of the R-min loop: the task's number, measured
/// latencies, violations, the first violation's text, the request id of
/// the last unlock that freed.
type RTaskResult = BenchResult<(usize, Vec<u64>, u64, Option<String>, Option<String>)>;

/// The R-min reference on W1: Redisson's protocol over ONE multiplexed
/// connection.
pub(crate) async fn r_min(ctx: &Ctx) -> BenchResult<Measurement> {
    let tasks = ctx.opts.tasks;
    let mut conn = redis_util::connect(&ctx.url).await?;
    let scripts = Arc::new(RedissonScripts::new());
    scripts.load(&mut conn).await?;
    let uuid = client_uuid();
    let base = std::process::id();
    let names: Vec<String> = (0..tasks).map(|i| ctx.key(&format!("rmin:{i}"))).collect();
    let window = ctx.window();
    // every call is an EVALSHA: the commands the scripts run are not calls
    let cpu = ClientCpu::sample(&window, &ctx.servers);
    let mut set: JoinSet<RTaskResult> = JoinSet::new();
    for (i, name) in names.iter().enumerate() {
        let mut conn = conn.clone();
        let scripts = scripts.clone();
        let name = name.clone();
        // Redisson's owner: the client's id and the thread's
        let owner = format!("{uuid}:{}", i + 1);
        set.spawn(async move {
            let mut latencies = Vec::new();
            let mut violations = 0;
            let mut first = None;
            let mut last = None;
            for n in 0..MAX_CYCLES {
                let start = mono_ns();
                if start >= window.to {
                    break;
                }
                let request = request_id(base, i, n);
                if let Some(why) = r_min_cycle(&scripts, &mut conn, &name, &owner, &request).await?
                {
                    violations += 1;
                    first.get_or_insert(why);
                    continue;
                }
                last = Some(request);
                let end = mono_ns();
                if window.contains(end) {
                    latencies.push(end - start);
                }
            }
            Ok((i, latencies, violations, first, last))
        });
    }
    let mut latencies = Vec::new();
    let mut violations = 0;
    let mut first = None;
    // in task order (the tasks end in any order)
    let mut lasts = vec![None; tasks];
    while let Some(joined) = set.join_next().await {
        let (i, l, v, f, last) = joined??;
        latencies.extend(l);
        violations += v;
        if first.is_none() {
            first = f;
        }
        lasts[i] = last;
    }
    // The independent observer: a connection of its own reads every lock
    // gone and the last unlock latch of every task at 1.
    let mut check = redis_util::connect(&ctx.url).await?;
    let (left, unlatched) = r_min_leftovers(&mut check, &names, &lasts).await?;
    let deleted = delete_unlock_latches(ctx).await?;
    if violations > 0 {
        return Err(format!(
            "R-min: {violations} cycle(s) did not answer nil then 1; first: {}",
            first.unwrap_or_default()
        )
        .into());
    }
    let notes = format!(
        "reference: Redisson's RLock protocol as Redisson sends it, lock script (tryLockInnerAsync: EXISTS/HEXISTS -> HINCRBY + PEXPIRE {R_MIN_LEASE_MS} ms, else PTTL) + unlock script (unlockInnerAsync of Redisson 3.2x: unlock latch GET -> HEXISTS -> HINCRBY -1 -> DEL + PUBLISH + SET latch PX {UNLOCK_LATCH_MS}, a fresh request id per unlock), each an EVALSHA of a script loaded once (2 round trips/cycle); {tasks} tasks on own keys sharing ONE multiplexed connection (cloned per task); every lock answered nil and every unlock 1 (violations={violations}); p50/p99 = cycle latency; client CPU = getrusage user+sys of the whole process over the window / measured cycles; calls = EVALSHA counted by the server (INFO commandstats) / measured cycles; after the loop, on a connection of its own: lock keys left {left}, tasks whose last unlock latch is not 1: {unlatched}; {deleted} unlock latches deleted after the measurement"
    );
    let mut m = uncontended(R_MIN, "W1", latencies, &window, notes);
    m.violations = Some(violations);
    m.counter_ok = Some(left == 0 && unlatched == 0);
    cpu.finish(&mut m).await?;
    Ok(m)
}

/// After the loop: how many of the locks `names` still exist, and how many
/// tasks' last unlock latch (`lasts[i]`, the last request that freed
/// `names[i]`; `None`: the task never freed it) does not read 1.
async fn r_min_leftovers(
    conn: &mut redis_util::Conn,
    names: &[String],
    lasts: &[Option<String>],
) -> BenchResult<(u64, u64)> {
    let mut left = 0;
    let mut unlatched = 0;
    for (name, last) in names.iter().zip(lasts) {
        let exists: u64 = redis::cmd("EXISTS").arg(name).query_async(conn).await?;
        left += exists;
        let latch: Option<String> = match last {
            Some(request) => {
                redis::cmd("GET")
                    .arg(unlock_latch(name, request))
                    .query_async(conn)
                    .await?
            }
            None => None,
        };
        if latch.as_deref() != Some("1") {
            unlatched += 1;
        }
    }
    Ok((left, unlatched))
}

/// Deletes the unlock latches of this run's R-min locks on every server;
/// how many.
async fn delete_unlock_latches(ctx: &Ctx) -> BenchResult<u64> {
    let pattern = format!(
        "redisson_unlock_latch:{{{}rmin:*",
        redis_util::escape_glob(&ctx.prefix)
    );
    let mut deleted = 0;
    for mut conn in redis_util::connect_servers(&ctx.servers).await? {
        deleted += redis_util::delete_matching(&mut conn, &pattern).await?;
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use lock_tests::{RedisServer, RespValue};

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    }

    /// An independent raw connection's view: one command on a fresh
    /// connection of the test harness.
    fn raw(server: &RedisServer, args: &[&str]) -> RespValue {
        server
            .command(args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    fn int(v: &RespValue) -> i64 {
        v.as_i64()
            .unwrap_or_else(|| panic!("not an integer: {v:?}"))
    }

    fn text(v: &RespValue) -> Option<String> {
        v.as_string()
    }

    fn stats(server: &RedisServer) -> u64 {
        let info = raw(server, &["INFO", "stats"]);
        let info = text(&info).expect("INFO text");
        info.lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("total_commands_processed")
    }

    fn unlock(
        rt: &tokio::runtime::Runtime,
        scripts: &RedissonScripts,
        conn: &mut redis_util::Conn,
        name: &str,
        owner: &str,
        request: &str,
    ) -> Option<i64> {
        rt.block_on(async {
            scripts
                .unlock_call(name, owner, request)
                .invoke_async(conn)
                .await
        })
        .expect("the unlock script runs")
    }

    fn lock(
        rt: &tokio::runtime::Runtime,
        scripts: &RedissonScripts,
        conn: &mut redis_util::Conn,
        name: &str,
        owner: &str,
    ) -> Option<i64> {
        rt.block_on(async {
            scripts
                .lock
                .key(name)
                .arg(R_MIN_LEASE_MS)
                .arg(owner)
                .invoke_async(conn)
                .await
        })
        .expect("the lock script runs")
    }

    #[test]
    fn the_redisson_scripts_lock_reenter_refuse_and_unlock_as_redisson_does() {
        let server = RedisServer::start().expect("a redis-server");
        let rt = runtime();
        let mut conn = rt
            .block_on(redis_util::connect(&server.url()))
            .expect("a connection");
        let scripts = RedissonScripts::new();
        rt.block_on(scripts.load(&mut conn)).expect("SCRIPT LOAD");
        let (name, me, other) = ("rmin:0", "uuid-a:1", "uuid-b:7");

        assert_eq!(lock(&rt, &scripts, &mut conn, name, me), None, "taken");
        assert_eq!(lock(&rt, &scripts, &mut conn, name, me), None, "re-entered");
        assert_eq!(
            text(&raw(&server, &["HGET", name, me])).as_deref(),
            Some("2")
        );
        let pttl = lock(&rt, &scripts, &mut conn, name, other);
        assert!(
            pttl.is_some_and(|t| t > 0 && t <= R_MIN_LEASE_MS as i64),
            "another owner gets the PTTL: {pttl:?}"
        );
        assert_eq!(
            unlock(&rt, &scripts, &mut conn, name, other, "r0"),
            None,
            "not the owner"
        );
        assert_eq!(unlock(&rt, &scripts, &mut conn, name, me, "r1"), Some(0));
        assert_eq!(
            text(&raw(&server, &["HGET", name, me])).as_deref(),
            Some("1")
        );
        // the same request again: its latch answers, nothing changes
        assert_eq!(unlock(&rt, &scripts, &mut conn, name, me, "r1"), Some(0));
        assert_eq!(
            text(&raw(&server, &["HGET", name, me])).as_deref(),
            Some("1")
        );
        let published = |server: &RedisServer| {
            server
                .info_commandstats()
                .expect("commandstats")
                .get("publish")
                .copied()
                .unwrap_or(0)
        };
        let before = published(&server);
        assert_eq!(unlock(&rt, &scripts, &mut conn, name, me, "r2"), Some(1));
        assert_eq!(int(&raw(&server, &["EXISTS", name])), 0, "freed");
        assert_eq!(published(&server), before + 1, "the unlock message");
        let latch = unlock_latch(name, "r2");
        assert_eq!(latch, "redisson_unlock_latch:{rmin:0}:r2");
        assert_eq!(text(&raw(&server, &["GET", &latch])).as_deref(), Some("1"));
        let ttl = int(&raw(&server, &["PTTL", &latch]));
        assert!(ttl > 0 && ttl <= UNLOCK_LATCH_MS as i64, "{ttl}");
        // a retry of the freeing unlock answers 1 again, from its latch
        assert_eq!(unlock(&rt, &scripts, &mut conn, name, me, "r2"), Some(1));
    }

    #[test]
    fn an_r_min_cycle_reports_a_planted_foreign_hold_and_a_planted_latch() {
        let server = RedisServer::start().expect("a redis-server");
        let rt = runtime();
        let mut conn = rt
            .block_on(redis_util::connect(&server.url()))
            .expect("a connection");
        let scripts = RedissonScripts::new();
        rt.block_on(scripts.load(&mut conn)).expect("SCRIPT LOAD");
        let cycle = |conn: &mut redis_util::Conn, name: &str, request: &str| {
            rt.block_on(r_min_cycle(&scripts, conn, name, "uuid-a:1", request))
                .expect("the cycle runs")
        };
        assert_eq!(cycle(&mut conn, "rmin:0", "q1"), None, "a clean cycle");

        // planted: another owner holds the lock
        raw(&server, &["HSET", "rmin:1", "uuid-b:3", "1"]);
        let why = cycle(&mut conn, "rmin:1", "q2");
        eprintln!("planted foreign hold -> {why:?}");
        assert!(
            why.as_deref().is_some_and(|w| w.contains("PTTL")),
            "{why:?}"
        );
        // planted: the unlock's latch says 0 (a replay of a release that
        // did not free): the lock stays taken, the cycle says so
        raw(&server, &["SET", "redisson_unlock_latch:{rmin:2}:q3", "0"]);
        let why = cycle(&mut conn, "rmin:2", "q3");
        eprintln!("planted latch 0 -> {why:?}");
        assert!(
            why.as_deref().is_some_and(|w| w.contains("Some(0)")),
            "{why:?}"
        );
        // and the observer after the loop sees it too
        let names = ["rmin:0".to_owned(), "rmin:2".to_owned()];
        let lasts = [Some("q1".to_owned()), Some("q3".to_owned())];
        let (left, unlatched) = rt
            .block_on(r_min_leftovers(&mut conn, &names, &lasts))
            .expect("the check runs");
        eprintln!("leftovers: {left} lock(s) left, {unlatched} task(s) unlatched");
        assert_eq!((left, unlatched), (1, 1));
    }

    /// What `calls_per_cycle` counts, measured: Redis 7 counts the commands
    /// a script runs in `total_commands_processed` and `INFO commandstats`
    /// alike, so the calls clients sent are the script calls (and the
    /// plain commands a loop sends itself), not the total.
    #[test]
    fn redis_counts_script_internal_commands_so_calls_are_the_script_calls() {
        let server = RedisServer::start().expect("a redis-server");
        let rt = runtime();
        let mut conn = rt
            .block_on(redis_util::connect(&server.url()))
            .expect("a connection");
        let scripts = RedissonScripts::new();
        rt.block_on(scripts.load(&mut conn)).expect("SCRIPT LOAD");
        let calls = |server: &RedisServer| -> HashMap<String, u64> {
            server.info_commandstats().expect("commandstats")
        };
        const CYCLES: usize = 50;
        let (total0, calls0) = (stats(&server), calls(&server));
        for n in 0..CYCLES {
            let why = rt
                .block_on(r_min_cycle(
                    &scripts,
                    &mut conn,
                    "rmin:0",
                    "u:1",
                    &format!("q{n}"),
                ))
                .expect("a cycle");
            assert_eq!(why, None);
        }
        let (calls1, total1) = (calls(&server), stats(&server));
        // between the two totals: the cycles' commands and the harness's own
        // INFO commandstats (twice) and INFO stats (once, the first)
        let executed = total1 - total0 - 3;
        let sent = redis_util::client_calls(&calls0, &calls1, &[]);
        let delta = |name: &str| {
            calls1.get(name).copied().unwrap_or(0) - calls0.get(name).copied().unwrap_or(0)
        };
        eprintln!(
            "{CYCLES} R-min cycles: total_commands_processed +{executed}, client calls (script calls) {sent}, evalsha +{}, hincrby +{}, set +{}",
            delta("evalsha"),
            delta("hincrby"),
            delta("set")
        );
        assert_eq!(sent, 2 * CYCLES as u64, "two EVALSHA per cycle");
        // lock: EXISTS, HINCRBY, PEXPIRE; unlock: GET, HEXISTS, HINCRBY,
        // DEL, PUBLISH, SET: 9 commands inside the scripts per cycle
        assert_eq!(
            executed,
            11 * CYCLES as u64,
            "total_commands_processed counts the commands run inside scripts"
        );
        assert_eq!(delta("hincrby"), 2 * CYCLES as u64, "commandstats too");
        assert_eq!(delta("set"), CYCLES as u64, "the latch's SET runs inside");
    }
}
