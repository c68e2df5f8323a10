//! W1, uncontended: task i loops acquire `w1:{i}` → release, with the
//! watchdog lease (the default, and the target's subject: lib `lock-core`)
//! or a fixed 10 s lease (lib `lock-core-fixed`). Figures: cycles/s,
//! p50/p99 cycle latency, client CPU, server CPU and calls per cycle (see
//! [`super::ClientCpu`]); the summary sets the rate against the faster
//! L-min reference (L-min-mux or L-min-pool, see [`super::refs`]) and
//! against R-min (Redisson's protocol).

use tokio::task::JoinSet;

use lock_core::AcquireOptions;

use super::{acquire_options, lock_client, uncontended, ClientCpu, Ctx, ACQUIRE_WAIT, MAX_CYCLES};
use crate::report::Measurement;
use crate::stats::mono_ns;
use crate::BenchResult;

/// Which lease W1's locks take.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lease {
    /// No explicit lease: renewed by the watchdog (registered on acquire,
    /// unregistered on release).
    Watchdog,
    /// The fixed 10 s lease of the other workloads.
    Fixed,
}

impl Lease {
    /// The lib name of the measurement.
    pub(crate) fn lib(self) -> &'static str {
        match self {
            Lease::Watchdog => "lock-core",
            Lease::Fixed => "lock-core-fixed",
        }
    }

    fn options(self) -> AcquireOptions {
        match self {
            Lease::Watchdog => AcquireOptions::new().wait(ACQUIRE_WAIT),
            Lease::Fixed => acquire_options(),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Lease::Watchdog => "watchdog lease (30 s, renewed every 10 s)",
            Lease::Fixed => "fixed lease 10 s",
        }
    }
}

pub(crate) async fn run(ctx: &Ctx, lease: Lease) -> BenchResult<Measurement> {
    let client = lock_client(&ctx.url, &ctx.prefix, None).await?;
    let tasks = ctx.opts.tasks;
    let window = ctx.window();
    let cpu = ClientCpu::sample(&window, &ctx.servers);
    let mut set: JoinSet<BenchResult<Vec<u64>>> = JoinSet::new();
    for i in 0..tasks {
        let lock = client.lock(format!("w1:{i}"))?;
        set.spawn(async move {
            let mut latencies = Vec::new();
            for _ in 0..MAX_CYCLES {
                let start = mono_ns();
                if start >= window.to {
                    break;
                }
                let guard = lock.acquire_with(lease.options()).await?;
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
    let notes = format!(
        "{tasks} tasks on own keys, {}, {} shared connection(s); p50/p99 = cycle latency (acquire start -> release end); client CPU = getrusage user+sys of the whole process over the window / measured cycles",
        lease.describe(),
        client.config().pool_size
    );
    let mut m = uncontended(lease.lib(), "W1", latencies, &window, notes);
    cpu.finish(&mut m).await?;
    Ok(m)
}
