//! W1, uncontended: task i loops acquire `w1:{i}` → release, with a 10 s
//! explicit lease. Figures: cycles/s, p50/p99 cycle latency, client CPU per
//! cycle (see [`super::ClientCpu`]); the summary sets the rate against the
//! faster L-min reference (L-min-mux or L-min-pool, see [`super::refs`]).

use tokio::task::JoinSet;

use super::{acquire_options, lock_client, uncontended, ClientCpu, Ctx, MAX_CYCLES};
use crate::report::Measurement;
use crate::stats::mono_ns;
use crate::BenchResult;

pub(crate) async fn run(ctx: &Ctx) -> BenchResult<Measurement> {
    let client = lock_client(&ctx.url, &ctx.prefix, None).await?;
    let tasks = ctx.opts.tasks;
    let window = ctx.window();
    let cpu = ClientCpu::sample(&window);
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
                let guard = lock.acquire_with(acquire_options()).await?;
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
        "{tasks} tasks on own keys, lease 10 s, pool {}; p50/p99 = cycle latency (acquire start -> release end); client CPU = getrusage user+sys of the whole process over the window / measured cycles",
        client.config().pool_size
    );
    let mut m = uncontended("lock-core", "W1", latencies, &window, notes);
    cpu.finish(&mut m).await?;
    Ok(m)
}
