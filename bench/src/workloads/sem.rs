//! S1, permits uncontended: task i loops acquire 1 permit of its own
//! semaphore `s1:<kind>:{i}` (1 permit, set before the window) → release,
//! as W1 loops on locks of its own. Two lines: the expirable kind
//! ([`LockClient::permit_semaphore`](lock_core::LockClient::permit_semaphore),
//! watchdog-renewed permit ids; lib `lock-core-permit`) and the plain kind
//! ([`LockClient::semaphore`](lock_core::LockClient::semaphore), a counter;
//! lib `lock-core-sem`). Figures as W1's: permits/s (cycles/s), p50/p99
//! cycle latency (acquire start → release end), client and server CPU per
//! cycle; the summary sets the rates against the faster L-min reference of
//! the same run (see [`super::refs`]) and against W1.

use tokio::task::JoinSet;

use lock_core::{AcquireOptions, LockClient, Permits};

use super::{lock_client, uncontended, ClientCpu, Ctx, ACQUIRE_WAIT, MAX_CYCLES};
use crate::report::Measurement;
use crate::stats::mono_ns;
use crate::BenchResult;

/// Which semaphore S1's tasks take permits of.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    /// `RPermitExpirableSemaphore`: permit ids renewed by the watchdog.
    Expirable,
    /// `RSemaphore`: a counter, no lease.
    Plain,
}

impl Kind {
    /// The lib name of the measurement.
    pub(crate) fn lib(self) -> &'static str {
        match self {
            Kind::Expirable => "lock-core-permit",
            Kind::Plain => "lock-core-sem",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Kind::Expirable => "expirable permits (permit_semaphore: an id per permit in the semaphore's sorted set, watchdog lease 30 s, renewed every 10 s)",
            Kind::Plain => "plain permits (semaphore: a counter, no lease)",
        }
    }
}

/// One task's semaphore, of either kind.
enum Sem {
    Plain(lock_core::Semaphore),
    Expirable(lock_core::PermitSemaphore),
}

impl Sem {
    fn new(client: &LockClient, kind: Kind, name: &str) -> BenchResult<Sem> {
        Ok(match kind {
            Kind::Plain => Sem::Plain(client.semaphore(name)?),
            Kind::Expirable => Sem::Expirable(client.permit_semaphore(name)?),
        })
    }

    /// Sets its one permit (fails when a run left the key with another
    /// count: the permits would not be its own).
    async fn set_one(&self) -> BenchResult<()> {
        let (set, available) = match self {
            Sem::Plain(s) => (s.try_set_permits(1).await?, s.available().await?),
            Sem::Expirable(s) => (s.try_set_permits(1).await?, s.available().await?),
        };
        if !set || available != 1 {
            return Err(format!("a semaphore of S1 existed with {available} permits").into());
        }
        Ok(())
    }

    async fn acquire_one(&self) -> BenchResult<Permits> {
        let options = AcquireOptions::new().wait(ACQUIRE_WAIT);
        Ok(match self {
            Sem::Plain(s) => s.acquire_with(1, options).await?,
            Sem::Expirable(s) => s.acquire_with(1, options).await?,
        })
    }

    async fn available(&self) -> BenchResult<u64> {
        Ok(match self {
            Sem::Plain(s) => s.available().await?,
            Sem::Expirable(s) => s.available().await?,
        })
    }
}

/// S1 on `kind`'s semaphores: the permits/s line.
pub(crate) async fn run(ctx: &Ctx, kind: Kind) -> BenchResult<Measurement> {
    let client = lock_client(&ctx.url, &ctx.prefix, None).await?;
    let tasks = ctx.opts.tasks;
    let mut sems = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let sem = Sem::new(&client, kind, &format!("s1:{}:{i}", kind.lib()))?;
        sem.set_one().await?;
        sems.push(sem);
    }
    let window = ctx.window();
    let cpu = ClientCpu::sample(&window, &ctx.servers);
    let mut set: JoinSet<BenchResult<(Vec<u64>, Sem)>> = JoinSet::new();
    for sem in sems {
        set.spawn(async move {
            let mut latencies = Vec::new();
            for _ in 0..MAX_CYCLES {
                let start = mono_ns();
                if start >= window.to {
                    break;
                }
                let permit = sem.acquire_one().await?;
                permit.release().await?;
                let end = mono_ns();
                if window.contains(end) {
                    latencies.push(end - start);
                }
            }
            Ok((latencies, sem))
        });
    }
    let mut latencies = Vec::new();
    let mut back = 0;
    while let Some(joined) = set.join_next().await {
        let (l, sem) = joined??;
        latencies.extend(l);
        // every permit given back: the semaphore has its one permit again
        back += sem.available().await?;
    }
    if back != tasks as u64 {
        return Err(format!("{back} of {tasks} permits back after the loop").into());
    }
    let notes = format!(
        "{tasks} tasks, each its own semaphore of 1 permit, looping acquire 1 -> release; {}; {} shared connection(s); p50/p99 = cycle latency (acquire start -> release end); client CPU = getrusage user+sys of the whole process over the window / measured cycles; every permit back at the end",
        kind.describe(),
        client.config().pool_size
    );
    let mut m = uncontended(kind.lib(), "S1", latencies, &window, notes);
    cpu.finish(&mut m).await?;
    Ok(m)
}
