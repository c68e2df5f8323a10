//! F1, fenced writes: `--tasks` tasks, each holding a lock of its own
//! (`f1:{i}`, acquired before the window), loop a fenced `INCRBY 1` on a
//! counter in the lock's slot ([`lock_core::Fence::incr_by`]: the check
//! that the hold is still the lock's holder and the write, in one script).
//! Beside it, in the same run, the raw reference: the same tasks looping a
//! plain `INCRBY 1` on keys of their own over ONE multiplexed connection
//! (what an unfenced write costs; lib `raw-INCRBY`). Figures: writes/s
//! (cycles/s), p50/p99 write latency, client and server CPU per write;
//! each counter is checked against the writes counted.

use tokio::task::JoinSet;

use super::{lock_client, uncontended, ClientCpu, Ctx, MAX_CYCLES};
use crate::report::Measurement;
use crate::stats::{mono_ns, Window};
use crate::{redis_util, BenchResult};

/// The lib of the fenced line.
pub(crate) const FENCED: &str = "lock-core-fenced";
/// The lib of the raw reference line.
pub(crate) const RAW: &str = "raw-INCRBY";

/// Per task: measured latencies, writes done, the counter's key.
type TaskResult = BenchResult<(Vec<u64>, i64, String)>;

/// F1's fenced line.
pub(crate) async fn run(ctx: &Ctx) -> BenchResult<Measurement> {
    let client = lock_client(&ctx.url, &ctx.prefix, None).await?;
    let tasks = ctx.opts.tasks;
    let mut guards = Vec::with_capacity(tasks);
    for i in 0..tasks {
        // the hash tag puts the counter in the lock's cluster slot
        let guard = client.lock(format!("f1:{{{i}}}"))?.acquire().await?;
        guards.push((guard, ctx.key(&format!("f1:{{{i}}}:n"))));
    }
    let window = ctx.window();
    let cpu = ClientCpu::sample(&window, &ctx.servers);
    let mut set: JoinSet<TaskResult> = JoinSet::new();
    let mut held = Vec::new();
    for (guard, counter) in guards {
        let fence = guard.fence();
        held.push(guard);
        set.spawn(write_loop(window, counter, move |key| {
            let fence = fence.clone();
            async move { Ok(fence.incr_by(&key, 1).await?) }
        }));
    }
    let (latencies, writes, counters) = collect(&mut set).await?;
    for guard in held {
        guard.release().await?;
    }
    let mut conn = redis_util::connect(&ctx.url).await?;
    check_counters(&mut conn, &counters, writes).await?;
    let notes = format!(
        "{tasks} tasks, each holding a lock of its own (watchdog), looping a fenced INCRBY 1 (Fence::incr_by: the hold checked and the write done in one script) on a counter in the lock's slot; {} shared connection(s); p50/p99 = write latency; client CPU = getrusage user+sys of the whole process over the window / measured writes; every counter read back equal to its writes ({writes} in all)",
        client.config().pool_size
    );
    let mut m = uncontended(FENCED, "F1", latencies, &window, notes);
    cpu.finish(&mut m).await?;
    Ok(m)
}

/// F1's raw reference line: plain `INCRBY 1` over one multiplexed connection.
pub(crate) async fn raw(ctx: &Ctx) -> BenchResult<Measurement> {
    let tasks = ctx.opts.tasks;
    let conn = redis_util::connect(&ctx.url).await?;
    let window = ctx.window();
    // the loop's INCRBY is a call of its own (no script here)
    let cpu = ClientCpu::sample(&window, &ctx.servers).sending(&["incrby"]);
    let mut set: JoinSet<TaskResult> = JoinSet::new();
    for i in 0..tasks {
        let conn = conn.clone();
        let counter = ctx.key(&format!("f1raw:{{{i}}}:n"));
        set.spawn(write_loop(window, counter, move |key| {
            let mut conn = conn.clone();
            async move {
                let after: i64 = redis::cmd("INCRBY")
                    .arg(&key)
                    .arg(1)
                    .query_async(&mut conn)
                    .await?;
                Ok(after)
            }
        }));
    }
    let (latencies, writes, counters) = collect(&mut set).await?;
    let mut check = conn.clone();
    check_counters(&mut check, &counters, writes).await?;
    let notes = format!(
        "reference: plain INCRBY 1 (no fence), {tasks} tasks on keys of their own sharing ONE multiplexed connection; p50/p99 = write latency; client CPU as F1's; every counter read back ({writes} writes in all)"
    );
    let mut m = uncontended(RAW, "F1", latencies, &window, notes);
    cpu.finish(&mut m).await?;
    Ok(m)
}

/// One task's loop: `write` (an `INCRBY 1` of `counter`, answering the
/// value after) until the window ends, each answer checked against the
/// writes done.
async fn write_loop<F, Fut>(window: Window, counter: String, mut write: F) -> TaskResult
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = BenchResult<i64>>,
{
    let mut latencies = Vec::new();
    let mut writes = 0;
    for _ in 0..MAX_CYCLES {
        let start = mono_ns();
        if start >= window.to {
            break;
        }
        let after = write(counter.clone()).await?;
        writes += 1;
        if after != writes {
            return Err(format!("{counter}: {after} after {writes} writes").into());
        }
        let end = mono_ns();
        if window.contains(end) {
            latencies.push(end - start);
        }
    }
    Ok((latencies, writes, counter))
}

async fn collect(set: &mut JoinSet<TaskResult>) -> BenchResult<(Vec<u64>, i64, Vec<String>)> {
    let mut latencies = Vec::new();
    let mut writes = 0;
    let mut counters = Vec::new();
    while let Some(joined) = set.join_next().await {
        let (l, w, counter) = joined??;
        latencies.extend(l);
        writes += w;
        counters.push(counter);
    }
    Ok((latencies, writes, counters))
}

/// Every counter read from Redis: their sum is the writes counted.
async fn check_counters(
    conn: &mut redis_util::Conn,
    counters: &[String],
    writes: i64,
) -> BenchResult<()> {
    let mut sum = 0;
    for counter in counters {
        let value: Option<i64> = redis::cmd("GET").arg(counter).query_async(conn).await?;
        sum += value.unwrap_or(0);
    }
    if sum != writes {
        return Err(format!("the counters hold {sum}, {writes} writes were counted").into());
    }
    Ok(())
}
