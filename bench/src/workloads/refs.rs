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
//!   CPU per cycle (see [`super::ClientCpu`]).
//! - **L-serial** (on W2): one task, no contention, on one connection:
//!   acquire (SET NX PX) → INCR counter → release (compare-and-delete). Its
//!   rate is what a perfect zero-gap hand-off between waiters would reach.

use std::sync::Arc;

use redis::Script;
use tokio::task::JoinSet;

use super::{uncontended, ClientCpu, Ctx, LEASE, MAX_CYCLES};
use crate::report::{Measurement, L_MIN_MUX, L_MIN_POOL};
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
    let cpu = ClientCpu::sample(&window, &ctx.servers);
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
        "reference: SET NX PX + compare-and-delete EVALSHA (2 round trips/cycle); {tasks} tasks on own keys {conns_text}; p50/p99 = cycle latency; client CPU = getrusage user+sys of the whole process over the window / measured cycles; misses={misses}"
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
