//! RL, Redlock uncontended: as W1 (task i loops acquire `rl:{i}` → release,
//! watchdog lease), but each lock is a [`lock_core::Redlock`] over three
//! private redis-servers started for this workload (loopback, unpinned; a
//! client per server, default settings but the run's key prefix): every
//! acquisition asks the three at once and needs two, every release
//! releases on all three. Lib `lock-core-redlock3`; the summary sets it
//! against W1 of the same run (one server, no target). The three servers'
//! CPU is summed into the server figure.

use tokio::task::JoinSet;

use lock_core::{AcquireOptions, Redlock};
use lock_tests::RedisServer;

use super::{lock_client, uncontended, ClientCpu, Ctx, ACQUIRE_WAIT, MAX_CYCLES};
use crate::report::Measurement;
use crate::stats::mono_ns;
use crate::BenchResult;

/// The lib of the RL line.
pub(crate) const LIB: &str = "lock-core-redlock3";

/// The servers of the Redlock.
const SERVERS: usize = 3;

pub(crate) async fn run(ctx: &Ctx) -> BenchResult<Measurement> {
    let servers = (0..SERVERS)
        .map(|_| RedisServer::start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut clients = Vec::with_capacity(SERVERS);
    for url in &urls {
        clients.push(lock_client(url, &ctx.prefix, None).await?);
    }
    let redlock = Redlock::new(clients)?;
    let tasks = ctx.opts.tasks;
    let window = ctx.window();
    let cpu = ClientCpu::sample(&window, &urls);
    let mut set: JoinSet<BenchResult<Vec<u64>>> = JoinSet::new();
    for i in 0..tasks {
        let lock = redlock.lock(format!("rl:{i}"))?;
        set.spawn(async move {
            let mut latencies = Vec::new();
            for _ in 0..MAX_CYCLES {
                let start = mono_ns();
                if start >= window.to {
                    break;
                }
                let guard = lock
                    .acquire_with(AcquireOptions::new().wait(ACQUIRE_WAIT))
                    .await?;
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
        "{tasks} tasks on own keys, a Redlock over {SERVERS} private redis-servers (loopback, unpinned; majority 2; one client and its shared connection per server), watchdog lease (30 s); p50/p99 = cycle latency (acquire start -> release end on every server); client CPU = getrusage user+sys of the whole process over the window / measured cycles; server CPU = the {SERVERS} servers' INFO cpu summed"
    );
    let mut m = uncontended(LIB, "RL", latencies, &window, notes);
    cpu.finish(&mut m).await?;
    drop(servers);
    Ok(m)
}
