//! W1, uncontended: task i loops acquire `w1:{i}` → release, with the
//! watchdog lease (the default, and the target's subject: lib `lock-core`)
//! or a fixed 10 s lease (lib `lock-core-fixed`), and with the watchdog
//! lease on a client whose group commit is off (lib `lock-core-grouped`:
//! every operation its own script call, the shape before group commit).
//! Figures: cycles/s,
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

/// The lib name of W1 with group commit on.
pub(crate) const GROUPED: &str = "lock-core-grouped";

/// A client like [`lock_client`]'s with group commit on.
async fn lock_client_grouped(url: &str, prefix: &str) -> BenchResult<lock_core::LockClient> {
    let client = lock_core::LockClient::builder(url)
        .key_prefix(prefix)
        .group_commit(true)
        .build()?;
    client.ping().await?;
    Ok(client)
}

/// Which lease W1's locks take (and whether group commit is on).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lease {
    /// No explicit lease: renewed by the watchdog (registered on acquire,
    /// unregistered on release).
    Watchdog,
    /// The fixed 10 s lease of the other workloads.
    Fixed,
    /// The watchdog lease on a client with group commit on.
    Grouped,
}

impl Lease {
    /// The lib name of the measurement.
    pub(crate) fn lib(self) -> &'static str {
        match self {
            Lease::Watchdog => "lock-core",
            Lease::Fixed => "lock-core-fixed",
            Lease::Grouped => GROUPED,
        }
    }

    fn options(self) -> AcquireOptions {
        match self {
            Lease::Watchdog | Lease::Grouped => AcquireOptions::new().wait(ACQUIRE_WAIT),
            Lease::Fixed => acquire_options(),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Lease::Watchdog => "watchdog lease (30 s, renewed every 10 s)",
            Lease::Fixed => "fixed lease 10 s",
            Lease::Grouped => {
                "watchdog lease, group commit on (operations ready together in one script call)"
            }
        }
    }
}

pub(crate) async fn run(ctx: &Ctx, lease: Lease) -> BenchResult<Measurement> {
    let client = match lease {
        Lease::Grouped => lock_client_grouped(&ctx.url, &ctx.prefix).await?,
        _ => lock_client(&ctx.url, &ctx.prefix, None).await?,
    };
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
