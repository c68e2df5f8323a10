//! WD, the watchdog: hold N locks (10 000 and 100 000 by default) with
//! watchdog renewal — a client with a short watchdog timeout (3 s, so a
//! renewal period of 1 s) — for three renewal periods, and measure:
//!
//! - Redis commands per period: the `INFO commandstats` delta over the
//!   window (every command but our own INFO), divided by the periods. Redis
//!   7 counts the commands a Lua script runs there too, so the figure is
//!   split: script calls (EVALSHA/EVAL/FCALL/SCRIPT: one command on the
//!   wire each) and the rest (commands run inside those scripts, or sent
//!   directly), with a per-command breakdown in the notes;
//! - round trips per period: not visible from outside the client, so it is
//!   estimated by the server's read events (`INFO stats`
//!   `total_reads_processed` delta, less our own INFO calls): one pipelined
//!   batch that arrives in one read counts once; a batch split over several
//!   reads counts more than once, so this errs high;
//! - client CPU: `getrusage` user + system time of this process over the
//!   window, as a percentage of one core;
//! - whether every lock was still held at the end: the watchdog's
//!   `renewing_count()`, every guard's `is_held()`, and `EXISTS` on every key
//!   (pipelined in chunks).
//!
//! The locks are acquired with at most 256 acquisitions in flight
//! (`--wd-in-flight`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lock_core::{AcquireOptions, LockGuard};
use tokio::task::JoinSet;

use super::{lock_client, Ctx, ACQUIRE_WAIT};
use crate::report::{Extra, Measurement, WdFigures};
use crate::stats::{cpu_ns, mono_ns};
use crate::{redis_util, BenchResult};

/// Attempts per lock while acquiring them all.
const ACQUIRE_ATTEMPTS: u32 = 3;
/// Keys per EXISTS command in the final check.
const EXISTS_CHUNK: usize = 1000;
/// INFO calls of the second snapshot that the server counts in the delta of
/// read events (the first snapshot's last call counts before its reply).
const OWN_INFO_CALLS: u64 = 3;

/// Failed acquisitions that were retried: how many, and the first error.
#[derive(Debug, Default)]
struct Retries {
    count: AtomicUsize,
    first: Mutex<Option<String>>,
}

impl Retries {
    fn record(&self, e: &lock_core::Error) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert_with(|| crate::chain(e));
    }

    fn describe(&self) -> String {
        let n = self.count.load(Ordering::Relaxed);
        match &*self.first.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => format!("{n} (first: {e})"),
            None => n.to_string(),
        }
    }
}

/// Acquires `count` locks with at most `in_flight` in flight, each with up
/// to [`ACQUIRE_ATTEMPTS`] attempts; returns the guards and the Redis keys.
/// On a final failure the other workers stop, what was acquired is
/// released, and the error says how far it got.
async fn acquire_all(
    client: &lock_core::LockClient,
    count: usize,
    in_flight: usize,
    retries: &Arc<Retries>,
) -> BenchResult<(Vec<LockGuard>, Vec<String>)> {
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let started = mono_ns();
    type Held = Vec<(LockGuard, String)>;
    let mut set: JoinSet<(Held, Option<String>)> = JoinSet::new();
    for _ in 0..in_flight.min(count) {
        let client = client.clone();
        let next = next.clone();
        let failed = failed.clone();
        let retries = retries.clone();
        set.spawn(async move {
            let mut held = Vec::new();
            // Each worker takes the next index until all are taken: bounded by `count`.
            while !failed.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let lock = match client.lock(format!("wd:{i}")) {
                    Ok(lock) => lock,
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        return (held, Some(crate::chain(&e)));
                    }
                };
                // Bounded retries: what WD measures is the renewal of held
                // locks, so a failed acquisition is retried (and reported).
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    match lock
                        .acquire_with(AcquireOptions::new().wait(ACQUIRE_WAIT))
                        .await
                    {
                        Ok(g) => {
                            held.push((g, lock.key().to_owned()));
                            break;
                        }
                        Err(e) if attempt < ACQUIRE_ATTEMPTS => {
                            retries.record(&e);
                        }
                        Err(e) => {
                            failed.store(true, Ordering::Relaxed);
                            return (held, Some(crate::chain(&e)));
                        }
                    }
                }
            }
            (held, None)
        });
    }
    let mut guards = Vec::with_capacity(count);
    let mut keys = Vec::with_capacity(count);
    let mut error = None;
    while let Some(joined) = set.join_next().await {
        let (held, e) = match joined {
            Ok(r) => r,
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        error = error.or(e);
        for (g, k) in held {
            guards.push(g);
            keys.push(k);
        }
    }
    if let Some(e) = error {
        let n = guards.len();
        let secs = (mono_ns() - started) as f64 / 1e9;
        release_all(guards, in_flight).await;
        return Err(format!("acquiring {count} locks failed after {n} in {secs:.1} s: {e}").into());
    }
    Ok((guards, keys))
}

/// Releases every guard with at most `in_flight` in flight; returns how
/// many releases failed.
async fn release_all(guards: Vec<LockGuard>, in_flight: usize) -> usize {
    let chunk = guards.len().div_ceil(in_flight.max(1)).max(1);
    let mut set = JoinSet::new();
    let mut guards = guards.into_iter();
    loop {
        let batch: Vec<LockGuard> = guards.by_ref().take(chunk).collect();
        if batch.is_empty() {
            break;
        }
        set.spawn(async move {
            let mut failed = 0;
            for g in batch {
                if g.release().await.is_err() {
                    failed += 1;
                }
            }
            failed
        });
    }
    let mut failed = 0;
    while let Some(joined) = set.join_next().await {
        failed += joined.unwrap_or(1);
    }
    failed
}

/// How many of `keys` exist.
async fn count_existing(
    conn: &mut redis_util::Conn,
    keys: &[String],
    cluster: bool,
) -> BenchResult<u64> {
    if cluster {
        // One key per EXISTS (a cluster refuses keys of several slots in one
        // command), many at once.
        let mut total = 0;
        for chunk in keys.chunks(EXISTS_CHUNK) {
            let mut set = tokio::task::JoinSet::new();
            for key in chunk {
                let mut conn = conn.clone();
                let key = key.clone();
                set.spawn(async move {
                    redis::cmd("EXISTS")
                        .arg(&key)
                        .query_async::<u64>(&mut conn)
                        .await
                });
            }
            while let Some(n) = set.join_next().await {
                total += n??;
            }
        }
        return Ok(total);
    }
    let mut pipe = redis::pipe();
    for chunk in keys.chunks(EXISTS_CHUNK) {
        pipe.cmd("EXISTS").arg(chunk);
    }
    let counts: Vec<u64> = pipe.query_async(conn).await?;
    Ok(counts.iter().sum())
}

/// Commands, read events, input bytes and CPU seconds the server has seen so far.
struct Snapshot {
    calls: std::collections::HashMap<String, u64>,
    reads: u64,
    bytes_in: u64,
    cpu_s: f64,
}

/// Three INFO calls; `INFO stats` last, so that only the next snapshot's
/// calls fall between the two read counters ([`OWN_INFO_CALLS`]).
/// Summed over the servers (every node of a cluster).
async fn snapshot(servers: &mut [redis_util::Conn]) -> BenchResult<Snapshot> {
    let calls = redis_util::command_calls(servers).await?;
    let cpu_s = redis_util::server_cpu_s(servers).await?;
    let stats = redis_util::stats(servers).await?;
    Ok(Snapshot {
        calls,
        reads: redis_util::stat(&stats, "total_reads_processed"),
        bytes_in: redis_util::stat(&stats, "total_net_input_bytes"),
        cpu_s,
    })
}

/// One WD measurement with `count` locks.
pub(crate) async fn run(ctx: &Ctx, count: usize) -> BenchResult<Measurement> {
    let watchdog = ctx.opts.wd_watchdog;
    let client = lock_client(&ctx.url, &ctx.prefix, Some(watchdog)).await?;
    let mut conn = redis_util::connect(&ctx.url).await?;
    let mut servers = redis_util::connect_servers(&ctx.servers).await?;

    let t = mono_ns();
    let retries = Arc::new(Retries::default());
    let in_flight = ctx.opts.wd_in_flight;
    let (guards, keys) = acquire_all(&client, count, in_flight, &retries).await?;
    let acquire_s = (mono_ns() - t) as f64 / 1e9;

    let period = watchdog / 3;
    let held_at_start = client.renewing_count();
    let before = snapshot(&mut servers).await?;
    let (cpu0, t0) = (cpu_ns(), mono_ns());
    tokio::time::sleep(period * ctx.opts.wd_periods).await;
    let (cpu1, t1) = (cpu_ns(), mono_ns());
    let after = snapshot(&mut servers).await?;

    let periods = (t1 - t0) as f64 / period.as_nanos() as f64;
    let mut deltas: Vec<(String, u64)> = after
        .calls
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .map(|(name, &n)| {
            (
                name.clone(),
                n - before.calls.get(name).copied().unwrap_or(0).min(n),
            )
        })
        .filter(|(_, d)| *d > 0)
        .collect();
    deltas.sort_by_key(|(_, d)| std::cmp::Reverse(*d));
    let commands: u64 = deltas.iter().map(|(_, d)| d).sum();
    let script_calls: u64 = deltas
        .iter()
        .filter(|(name, _)| redis_util::is_script_call(name))
        .map(|(_, d)| d)
        .sum();
    let reads = after
        .reads
        .saturating_sub(before.reads + OWN_INFO_CALLS * servers.len() as u64);
    let cpu_pct = match (cpu0, cpu1) {
        (Some(a), Some(b)) => Some((b.saturating_sub(a)) as f64 * 100.0 / (t1 - t0) as f64),
        _ => None,
    };

    let window_s = (t1 - t0) as f64 / 1e9;
    let redis_cpu_pct = (after.cpu_s - before.cpu_s) * 100.0 / window_s;

    let renewing = client.renewing_count();
    let guards_held = guards.iter().filter(|g| g.is_held()).count();
    let existing = count_existing(&mut conn, &keys, ctx.cluster).await?;
    let all_held = renewing == count && guards_held == count && existing == count as u64;
    let failed_releases = release_all(guards, in_flight).await;

    let per = |n: u64| n as f64 / periods;
    let breakdown = deltas
        .iter()
        .map(|(name, d)| format!("{name} {:.0}", per(*d)))
        .collect::<Vec<_>>()
        .join(", ");
    let figures = WdFigures {
        locks: count,
        commands_per_period: per(commands),
        script_calls_per_period: per(script_calls),
        round_trips_per_period: per(reads),
        cpu_pct,
        all_held,
    };
    let notes = format!(
        "locks={count}; watchdog {} ms (period {} ms), window {periods:.2} periods; commands/period={:.0}: script calls {:.0} + commands inside scripts or sent directly {:.0} ({breakdown}); round trips/period~{:.0} (server read events, INFO stats total_reads_processed); bytes in/period={:.0}; client CPU={}% of one core (getrusage); redis-server CPU={:.1}% of one core (INFO cpu); all_held={all_held} (renewing {held_at_start} at the window's start; at its end renewing {renewing}, guards held {guards_held}, keys existing {existing}); acquire of all took {acquire_s:.2} s with {in_flight} in flight, retried acquisitions {}; failed releases {failed_releases}",
        watchdog.as_millis(),
        period.as_millis(),
        figures.commands_per_period,
        figures.script_calls_per_period,
        figures.commands_per_period - figures.script_calls_per_period,
        figures.round_trips_per_period,
        per(after.bytes_in.saturating_sub(before.bytes_in)),
        cpu_pct.map_or("?".into(), |c| format!("{c:.2}")),
        redis_cpu_pct,
        retries.describe(),
    );
    Ok(Measurement {
        lib: "lock-core".into(),
        workload: "WD".into(),
        notes,
        extra: Extra {
            cycle_p50_us: None,
            wd: Some(figures),
            ..Default::default()
        },
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_calls_are_told_from_commands_inside_them() {
        for name in ["evalsha", "eval", "script|load", "fcall"] {
            assert!(redis_util::is_script_call(name), "{name}");
        }
        for name in ["hexists", "pexpire", "pttl", "exists", "info"] {
            assert!(!redis_util::is_script_call(name), "{name}");
        }
    }
}
