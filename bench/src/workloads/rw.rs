//! The read-write lock's workloads, both on ONE key of
//! [`LockClient::rw_lock`](lock_core::LockClient::rw_lock), with the
//! watchdog lease (as W1's `lock-core` line), `--tasks` tasks (16) of one
//! client:
//!
//! - **R1**, readers only: every task loops read acquire → release. Readers
//!   share the lock, so nobody waits for anybody: the rate should approach
//!   W1's (the same tasks on keys of their own), measured in the same run;
//!   the summary gives the ratio. Figures: read cycles/s, p50/p99 cycle
//!   latency (acquire start → release end), client and server CPU per
//!   cycle, and the most readers seen inside at once (notes).
//!
//! Inside every section a task yields to the runtime once (the section's
//! only work), so that the other tasks can enter meanwhile even on one
//! worker thread: the in-process markers can then see readers sharing and
//! catch overlaps.
//! - **M1**, mixed 90/10: every task loops acquire → release, each cycle a
//!   read with probability 0.9 and a write with 0.1 (a seeded generator per
//!   task, so every run draws the same sequence). Two lines: lib
//!   `lock-core-read` (reads/s; p50/p99/max = the readers' acquire waits)
//!   and lib `lock-core-write` (writes/s; p50/p99/max = the writers'
//!   acquire waits: how long a writer waits under continuous readers).
//!   Checked inside every section: no reader while a writer is inside, no
//!   second writer (`violations`, in-process markers: a marker is cleared
//!   before the release is sent, so an overlap it sees is a real one).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lock_core::{AcquireOptions, Lock};
use tokio::task::JoinSet;

use super::{lock_client, uncontended, ClientCpu, Ctx, ACQUIRE_WAIT, MAX_CYCLES};
use crate::report::Measurement;
use crate::stats::{mono_ns, percentile, Window};
use crate::BenchResult;

/// Every acquisition of R1 and M1: bounded wait, the watchdog lease.
fn options() -> AcquireOptions {
    AcquireOptions::new().wait(ACQUIRE_WAIT)
}

/// One in this many M1 cycles is a write (10 %).
const WRITE_ONE_IN: u64 = 10;

/// SplitMix64: a small seeded generator, so that M1 draws the same reads
/// and writes in every run without a dependency.
#[derive(Debug)]
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Raises `peak` to `value` when higher.
fn raise(peak: &AtomicU64, value: u64) {
    peak.fetch_max(value, Ordering::SeqCst);
}

/// R1: readers only, on one key.
pub(crate) async fn r1(ctx: &Ctx) -> BenchResult<Measurement> {
    let client = lock_client(&ctx.url, &ctx.prefix, None).await?;
    let read = client.rw_lock("r1")?.read();
    let tasks = ctx.opts.tasks;
    let inside = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let window = ctx.window();
    let cpu = ClientCpu::sample(&window, &ctx.servers);
    let mut set: JoinSet<BenchResult<Vec<u64>>> = JoinSet::new();
    for _ in 0..tasks {
        let read = read.clone();
        let (inside, peak) = (inside.clone(), peak.clone());
        set.spawn(async move {
            let mut latencies = Vec::new();
            for _ in 0..MAX_CYCLES {
                let start = mono_ns();
                if start >= window.to {
                    break;
                }
                let guard = read.acquire_with(options()).await?;
                raise(&peak, inside.fetch_add(1, Ordering::SeqCst) + 1);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await?;
                let end = mono_ns();
                if window.contains(end) {
                    latencies.push(end - start);
                }
            }
            Ok(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(joined) = set.join_next().await {
        latencies.extend(joined??);
    }
    let peak = peak.load(Ordering::SeqCst);
    let notes = format!(
        "{tasks} tasks on ONE key, each looping read acquire -> release (RwLock::read), watchdog lease (30 s, renewed every 10 s), {} shared connection(s); p50/p99 = cycle latency (acquire start -> release end); client CPU = getrusage user+sys of the whole process over the window / measured cycles; most readers inside at once {peak}",
        client.config().pool_size
    );
    let mut m = uncontended("lock-core", "R1", latencies, &window, notes);
    m.extra.peak_inside = Some(peak);
    cpu.finish(&mut m).await?;
    Ok(m)
}

/// What one M1 task saw: acquire waits of its reads and of its writes
/// (measured cycles only), and the sections that overlapped a writer.
#[derive(Debug, Default)]
struct Seen {
    read_waits: Vec<u64>,
    write_waits: Vec<u64>,
    violations: u64,
}

/// The in-process markers of M1: readers and writers inside now.
#[derive(Debug, Default)]
struct Inside {
    readers: AtomicU64,
    writers: AtomicU64,
    readers_peak: AtomicU64,
}

/// One M1 cycle on `lock` (a read or a write side); returns the acquire
/// wait and whether the section overlapped one it must exclude.
async fn m1_cycle(lock: &Lock, write: bool, inside: &Inside) -> BenchResult<(u64, bool)> {
    let start = mono_ns();
    let guard = lock.acquire_with(options()).await?;
    let waited = mono_ns().saturating_sub(start);
    // A marker is set before the check, cleared after a second check
    // that follows the yield: of two overlapping sections, the later one
    // to enter sees the other's marker.
    let overlap = if write {
        let writers = inside.writers.fetch_add(1, Ordering::SeqCst);
        let mut overlap = writers != 0 || inside.readers.load(Ordering::SeqCst) != 0;
        tokio::task::yield_now().await;
        overlap |= inside.writers.load(Ordering::SeqCst) != 1
            || inside.readers.load(Ordering::SeqCst) != 0;
        inside.writers.fetch_sub(1, Ordering::SeqCst);
        overlap
    } else {
        let readers = inside.readers.fetch_add(1, Ordering::SeqCst) + 1;
        raise(&inside.readers_peak, readers);
        let mut overlap = inside.writers.load(Ordering::SeqCst) != 0;
        tokio::task::yield_now().await;
        overlap |= inside.writers.load(Ordering::SeqCst) != 0;
        inside.readers.fetch_sub(1, Ordering::SeqCst);
        overlap
    };
    guard.release().await?;
    Ok((waited, overlap))
}

/// M1: 90 % reads, 10 % writes, on one key; the read line and the write line.
pub(crate) async fn m1(ctx: &Ctx) -> BenchResult<Vec<Measurement>> {
    let client = lock_client(&ctx.url, &ctx.prefix, None).await?;
    let rw = client.rw_lock("m1")?;
    let tasks = ctx.opts.tasks;
    let inside = Arc::new(Inside::default());
    let window = ctx.window();
    let mut set: JoinSet<BenchResult<Seen>> = JoinSet::new();
    for task in 0..tasks {
        let (read, write) = (rw.read(), rw.write());
        let inside = inside.clone();
        set.spawn(async move {
            let mut seen = Seen::default();
            let mut draw = SplitMix(task as u64);
            for _ in 0..MAX_CYCLES {
                if mono_ns() >= window.to {
                    break;
                }
                let is_write = draw.next().is_multiple_of(WRITE_ONE_IN);
                let lock = if is_write { &write } else { &read };
                let (waited, overlap) = m1_cycle(lock, is_write, &inside).await?;
                seen.violations += u64::from(overlap);
                if window.contains(mono_ns()) {
                    if is_write {
                        seen.write_waits.push(waited);
                    } else {
                        seen.read_waits.push(waited);
                    }
                }
            }
            Ok(seen)
        });
    }
    let mut all = Seen::default();
    while let Some(joined) = set.join_next().await {
        let seen = joined??;
        all.read_waits.extend(seen.read_waits);
        all.write_waits.extend(seen.write_waits);
        all.violations += seen.violations;
    }
    let peak = inside.readers_peak.load(Ordering::SeqCst);
    let (reads, writes) = (all.read_waits.len(), all.write_waits.len());
    let common = format!(
        "{tasks} tasks on ONE key, each cycle a read (90 %) or a write (10 %, SplitMix64 seeded by task) acquire -> release, watchdog lease; measured {reads} reads and {writes} writes; most readers inside at once {peak}; violations = sections that overlapped a writer (in-process markers)"
    );
    let line = |lib: &str, waits: Vec<u64>, side: &str| {
        let mut m = mixed_line(lib, waits, &window, all.violations);
        m.notes = format!("{common}; this line: {side}; p50/p99/max = acquire wait");
        m.extra.peak_inside = Some(peak);
        m
    };
    Ok(vec![
        line("lock-core-read", all.read_waits, "reads/s"),
        line("lock-core-write", all.write_waits, "writes/s"),
    ])
}

/// One line of M1: the rate of one side and the percentiles of its waits.
fn mixed_line(lib: &str, mut waits: Vec<u64>, window: &Window, violations: u64) -> Measurement {
    waits.sort_unstable();
    let us = |p| percentile(&waits, p).map(|ns| ns as f64 / 1000.0);
    Measurement {
        lib: lib.into(),
        workload: "M1".into(),
        cycles_per_s: Some(waits.len() as f64 / window.secs()),
        p50_us: us(50.0),
        p99_us: us(99.0),
        max_wait_ms: waits.last().map(|&ns| ns as f64 / 1e6),
        violations: Some(violations),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn about_one_draw_in_ten_is_a_write_and_runs_repeat() {
        let writes = |seed| {
            let mut draw = SplitMix(seed);
            (0..10_000)
                .filter(|_| draw.next().is_multiple_of(WRITE_ONE_IN))
                .count()
        };
        for seed in 0..16 {
            let n = writes(seed);
            assert!((800..=1200).contains(&n), "seed {seed}: {n} writes");
            assert_eq!(n, writes(seed), "the same draws every run");
        }
    }

    #[test]
    fn a_mixed_line_reports_rate_percentiles_and_longest_wait() {
        let window = Window {
            start: 0,
            from: 0,
            to: 2_000_000_000,
        };
        let waits: Vec<u64> = (1..=100).rev().map(|us| us * 1000).collect();
        let m = mixed_line("lock-core-write", waits, &window, 0);
        assert_eq!(m.cycles_per_s, Some(50.0));
        assert_eq!((m.p50_us, m.p99_us), (Some(50.0), Some(99.0)));
        assert_eq!(m.max_wait_ms, Some(0.1));
        assert_eq!(m.violations, Some(0));
    }
}
