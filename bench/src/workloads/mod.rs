//! The workloads, and what they share: settings, the lock-core client, the
//! uncontended figures.

pub(crate) mod fenced;
pub(crate) mod layer;
pub(crate) mod redlock;
pub(crate) mod refs;
pub(crate) mod rw;
pub(crate) mod sem;
pub(crate) mod w1;
pub(crate) mod w2;
pub(crate) mod w3;
pub(crate) mod wd;

use std::collections::HashMap;
use std::time::Duration;

use lock_core::{AcquireOptions, Lock, LockClient};
use tokio::task::JoinHandle;

use crate::args::Options;
use crate::report::Measurement;
use crate::stats::{cpu_ns, mono_ns, percentile, Window};
use crate::{redis_util, BenchResult};

/// Explicit lease of every non-watchdog acquisition (the 10 s).
pub(crate) const LEASE: Duration = Duration::from_secs(10);
/// Wait bound of every blocking acquisition: no loop waits forever.
pub(crate) const ACQUIRE_WAIT: Duration = Duration::from_secs(30);
/// Upper bound on the cycles of one task, besides the time bound.
pub(crate) const MAX_CYCLES: usize = 50_000_000;

/// The options of every timed acquisition.
pub(crate) fn acquire_options() -> AcquireOptions {
    AcquireOptions::new().wait(ACQUIRE_WAIT).lease(LEASE)
}

/// Which lock a contended workload loops on: W2, W3 and W3NP take the
/// plain lock (`client.lock`), W2F and W3F the fair lock
/// (`client.fair_lock`, Redisson's `RFairLock`: every waiter queued in
/// Redis and served in arrival order, no local queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockKind {
    Plain,
    Fair,
}

impl LockKind {
    /// The handle to the lock `name` of this kind.
    pub(crate) fn lock(self, client: &LockClient, name: &str) -> BenchResult<Lock> {
        Ok(match self {
            LockKind::Plain => client.lock(name)?,
            LockKind::Fair => client.fair_lock(name)?,
        })
    }

    /// How the notes name the lock.
    pub(crate) fn text(self) -> &'static str {
        match self {
            LockKind::Plain => "the plain lock",
            LockKind::Fair => "the FAIR lock (Redisson's RFairLock: every waiter queued in Redis, served in arrival order, no local queue or hand-off)",
        }
    }
}

/// What every workload needs to know.
#[derive(Clone, Debug)]
pub(crate) struct Ctx {
    pub(crate) url: String,
    /// Every server of the deployment (one, or each cluster node), for the
    /// server figures (INFO), summed over them.
    pub(crate) servers: Vec<String>,
    /// `url` is a Redis Cluster.
    pub(crate) cluster: bool,
    /// Prefix of every key of this run (lock keys through the client's key
    /// prefix, raw keys by hand), so runs never collide.
    pub(crate) prefix: String,
    pub(crate) opts: Options,
}

impl Ctx {
    /// The measurement window of a workload that starts now.
    pub(crate) fn window(&self) -> Window {
        Window::new(
            crate::stats::mono_ns(),
            self.opts.warmup,
            self.opts.duration,
        )
    }

    /// A raw key of this run.
    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

/// A lock-core client with default settings (one shared connection, as users get it)
/// except the run's key prefix and, for WD, the watchdog timeout.
/// `--hand-off-window-ms`, for every lock-core client of this process.
static HAND_OFF_WINDOW: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

/// Sets the hand-off window of this process's lock-core clients (once, at
/// start; `None`: lock-core's default).
pub(crate) fn set_hand_off_window(window: Option<Duration>) {
    if let Some(w) = window {
        let _ = HAND_OFF_WINDOW.set(w);
    }
}

/// The hand-off window `--hand-off-window-ms` set, if any.
pub(crate) fn hand_off_window() -> Option<Duration> {
    HAND_OFF_WINDOW.get().copied()
}

pub(crate) async fn lock_client(
    url: &str,
    prefix: &str,
    watchdog: Option<Duration>,
) -> BenchResult<LockClient> {
    let mut builder = LockClient::builder(url).key_prefix(prefix);
    if let Some(w) = hand_off_window() {
        builder = builder.hand_off_window(w);
    }
    if let Some(w) = watchdog {
        builder = builder.watchdog_timeout(w);
    }
    let client = builder.build()?;
    client.ping().await?;
    Ok(client)
}

/// The client CPU of this process over the measured part of a window:
/// getrusage(RUSAGE_SELF) user + system time of every thread (the
/// workload's tasks, redis-rs's connection drivers, lock-core's background
/// tasks, tokio itself), read when the window opens and when it closes;
/// the server's CPU over the same window (`INFO cpu` of the server the
/// run talks to, on a connection of its own); and the calls the clients
/// sent the server over the same window (`INFO commandstats`, read right
/// after `INFO cpu`: see [`redis_util::client_calls`]). Every server
/// figure is summed over `servers`. Aborted when dropped, so a workload
/// that fails leaves no task behind.
#[derive(Debug)]
pub(crate) struct ClientCpu {
    sampler: JoinHandle<BenchResult<CpuShares>>,
    /// The plain commands the measured loop sends itself (counted as
    /// calls beside the script calls).
    direct: &'static [&'static str],
}

/// CPU seconds per second over a window: this process's, the server's;
/// and the commands the server counted over it.
#[derive(Debug, Default)]
pub(crate) struct CpuShares {
    client: Option<f64>,
    server: Option<f64>,
    commands: Option<Commands>,
}

/// `INFO commandstats` calls per command at both ends of a window, and the
/// seconds between the two reads.
#[derive(Debug, Default)]
struct Commands {
    before: HashMap<String, u64>,
    after: HashMap<String, u64>,
    secs: f64,
}

impl ClientCpu {
    /// Starts sampling `window` (call before the workload's tasks start);
    /// `servers`: the servers whose CPU and commands are read too (summed).
    pub(crate) fn sample(window: &Window, servers: &[String]) -> Self {
        let (from, to) = (window.from, window.to);
        let servers = servers.to_vec();
        let until = |at: u64| Duration::from_nanos(at.saturating_sub(mono_ns()));
        let sampler = tokio::spawn(async move {
            let mut conns = redis_util::connect_servers(&servers).await?;
            tokio::time::sleep(until(from)).await;
            let (cpu0, t0) = (cpu_ns(), mono_ns());
            let server0 = redis_util::server_cpu_s(&mut conns).await?;
            let c0 = mono_ns();
            let calls0 = redis_util::command_calls(&mut conns).await?;
            tokio::time::sleep(until(to)).await;
            let (cpu1, t1) = (cpu_ns(), mono_ns());
            let server1 = redis_util::server_cpu_s(&mut conns).await?;
            let c1 = mono_ns();
            let calls1 = redis_util::command_calls(&mut conns).await?;
            // Timers may fire a little late: divide by the time actually
            // sampled, not by the window's length.
            let secs = (t1 > t0).then(|| (t1 - t0) as f64);
            Ok(CpuShares {
                client: match (cpu0, cpu1, secs) {
                    (Some(a), Some(b), Some(ns)) => Some(b.saturating_sub(a) as f64 / ns),
                    _ => None,
                },
                server: secs.map(|ns| (server1 - server0).max(0.0) * 1e9 / ns),
                commands: (c1 > c0).then(|| Commands {
                    before: calls0,
                    after: calls1,
                    secs: (c1 - c0) as f64 / 1e9,
                }),
            })
        });
        ClientCpu {
            sampler,
            direct: &[],
        }
    }

    /// The plain (non-script) commands the measured loop sends itself,
    /// as `INFO commandstats` names them: counted as calls beside the
    /// script calls. None of the loop's scripts may run them.
    pub(crate) fn sending(mut self, direct: &'static [&'static str]) -> Self {
        self.direct = direct;
        self
    }

    /// Sets `m.client_cpu_us_per_cycle` and `m.server_cpu_us_per_cycle`:
    /// CPU seconds per second over the window divided by the measured
    /// cycles per second, in µs per cycle; and `m.calls_per_cycle`: the
    /// clients' calls per second over the window (script calls and the
    /// [`sending`](Self::sending) commands) divided by the same rate.
    pub(crate) async fn finish(mut self, m: &mut Measurement) -> BenchResult<()> {
        let shares = (&mut self.sampler).await??;
        let per_cycle = |per_s: Option<f64>| match (per_s, m.cycles_per_s) {
            (Some(v), Some(rate)) if rate > 0.0 => Some(v / rate),
            _ => None,
        };
        m.client_cpu_us_per_cycle = per_cycle(shares.client.map(|s| s * 1e6));
        m.server_cpu_us_per_cycle = per_cycle(shares.server.map(|s| s * 1e6));
        m.calls_per_cycle =
            per_cycle(shares.commands.map(|c| {
                redis_util::client_calls(&c.before, &c.after, self.direct) as f64 / c.secs
            }));
        Ok(())
    }
}

impl Drop for ClientCpu {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// The figures of an uncontended loop (W1, S1, F1, RL, R1, L-min-mux, L-min-pool, R-min, L-serial): cycles/s and
/// the percentiles of the cycle latency (acquire start → release end).
pub(crate) fn uncontended(
    lib: &str,
    workload: &str,
    mut latencies: Vec<u64>,
    window: &Window,
    notes: String,
) -> Measurement {
    latencies.sort_unstable();
    let us = |p| percentile(&latencies, p).map(|ns| ns as f64 / 1000.0);
    Measurement {
        lib: lib.into(),
        workload: workload.into(),
        cycles_per_s: Some(latencies.len() as f64 / window.secs()),
        p50_us: us(50.0),
        p99_us: us(99.0),
        extra: crate::report::Extra {
            cycle_p50_us: us(50.0),
            ..Default::default()
        },
        notes,
        ..Default::default()
    }
}

/// The figures of a contended loop (W2, W2F, W3, W3NP, W3F): p50/p99/max
/// are acquire waits; the cycle latency, the lock-level cycle time and the
/// share of sections that jumped the queue go to the notes.
pub(crate) fn contended(
    workload: &str,
    c: &crate::stats::Contended,
    violations: u64,
    counter_ok: bool,
    notes: &str,
) -> Measurement {
    let us = |v: &[u64], p| percentile(v, p).map(|ns| ns as f64 / 1000.0);
    let cycle_p50 = us(&c.latencies, 50.0);
    let lock_cycle_us = (c.cycles_per_s > 0.0).then(|| 1e6 / c.cycles_per_s);
    let fmt = |v: Option<f64>| v.map_or("-".to_owned(), |x| format!("{x:.0}"));
    Measurement {
        lib: "lock-core".into(),
        workload: workload.into(),
        cycles_per_s: Some(c.cycles_per_s),
        p50_us: us(&c.waits, 50.0),
        p99_us: us(&c.waits, 99.0),
        max_wait_ms: c.waits.last().map(|&ns| ns as f64 / 1e6),
        jain: c.jain,
        handoff_pct: c.handoff_pct,
        violations: Some(violations),
        counter_ok: Some(counter_ok),
        by_process: None,
        client_cpu_us_per_cycle: None,
        server_cpu_us_per_cycle: None,
        calls_per_cycle: None,
        notes: format!(
            "{notes}; p50/p99/max = acquire wait; cycle latency p50 {} us, p99 {} us; lock-level cycle time 1/cycles_per_s {} us; measured cycles {}; hand-offs in counter (INCR) order; jumped the queue {} % of sections (the holder called acquire after a waiter that was served later)",
            fmt(cycle_p50),
            fmt(us(&c.latencies, 99.0)),
            fmt(lock_cycle_us),
            c.measured,
            c.jumped_pct.map_or("-".to_owned(), |x| format!("{x:.2}"))
        ),
        extra: crate::report::Extra {
            cycle_p50_us: cycle_p50,
            jumped_pct: c.jumped_pct,
            ..Default::default()
        },
    }
}
