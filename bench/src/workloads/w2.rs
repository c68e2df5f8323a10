//! W2, contended in one process: every task loops acquire `w2` (blocking)
//! → INCR a Redis counter → release. W2F is the same loop on the fair lock
//! `w2f` (`client.fair_lock`): each task is its own waiter in Redis'
//! queue, served in arrival order, with no local queue in the process.
//!
//! Checks inside the critical section: an "inside" counter that must be 0
//! on entry (else a violation), and every cycle's INCR answer, which orders
//! the critical sections as Redis saw them (hand-offs, overlaps of the
//! recorded intervals, and "the answers are exactly 1..=N"). The counter is
//! reset before the warm-up and must end equal to the number of completed
//! cycles of the whole run.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::task::JoinSet;

use super::{acquire_options, contended, lock_client, Ctx, LockKind, MAX_CYCLES};
use crate::report::Measurement;
use crate::stats::{self, mono_ns, Cycle};
use crate::{redis_util, BenchResult};

/// W2 on `kind`'s lock: the plain lock (W2) or the fair lock (W2F).
pub(crate) async fn run(ctx: &Ctx, kind: LockKind) -> BenchResult<Measurement> {
    let (workload, name) = match kind {
        LockKind::Plain => ("W2", "w2"),
        LockKind::Fair => ("W2F", "w2f"),
    };
    let client = lock_client(&ctx.url, &ctx.prefix, None).await?;
    let lock = kind.lock(&client, name)?;
    let mut conn = redis_util::connect(&ctx.url).await?;
    let counter = ctx.key(&format!("{name}:counter"));
    let _: i64 = redis::cmd("DEL")
        .arg(&counter)
        .query_async(&mut conn)
        .await?;

    let tasks = ctx.opts.tasks;
    let inside = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let window = ctx.window();
    let mut set: JoinSet<BenchResult<Vec<Cycle>>> = JoinSet::new();
    for task in 0..tasks {
        let lock = lock.clone();
        let mut conn = conn.clone();
        let counter = counter.clone();
        let inside = inside.clone();
        let violations = violations.clone();
        set.spawn(async move {
            let mut cycles = Vec::new();
            for _ in 0..MAX_CYCLES {
                let start = mono_ns();
                if start >= window.to {
                    break;
                }
                let guard = lock.acquire_with(acquire_options()).await?;
                let enter = mono_ns();
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    violations.fetch_add(1, Ordering::SeqCst);
                }
                let incr = redis::cmd("INCR")
                    .arg(&counter)
                    .query_async(&mut conn)
                    .await;
                let exit = mono_ns();
                inside.fetch_sub(1, Ordering::SeqCst);
                let seq: u64 = incr?;
                guard.release().await?;
                cycles.push(Cycle {
                    task,
                    seq,
                    start,
                    enter,
                    exit,
                    end: mono_ns(),
                });
            }
            Ok(cycles)
        });
    }
    let mut cycles = Vec::new();
    let mut errors = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined? {
            Ok(c) => cycles.extend(c),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let total: Option<u64> = redis::cmd("GET")
        .arg(&counter)
        .query_async(&mut conn)
        .await?;
    let completed = cycles.len() as u64;
    let c = stats::contended(cycles, tasks, &window);
    let inside_violations = violations.load(Ordering::SeqCst);
    let counter_ok = errors.is_empty() && c.seq_ok && total == Some(completed);
    let mut notes = format!(
        "{tasks} tasks on one key, {}, lease 10 s; violations: inside-marker {inside_violations}, interval overlaps {}; counter {} of {completed} cycles",
        kind.text(),
        c.overlaps,
        total.unwrap_or(0)
    );
    if !errors.is_empty() {
        notes.push_str(&format!("; {} task(s) failed: {}", errors.len(), errors[0]));
    }
    Ok(contended(
        workload,
        &c,
        inside_violations.max(c.overlaps),
        counter_ok,
        &notes,
    ))
}
