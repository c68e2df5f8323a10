//! One watchdog per client: renews every watchdog-leased lock it holds.
//!
//! All such locks share one lease (the client's watchdog timeout) and one
//! renewal period (a third of it), so the schedule is a FIFO queue ordered by
//! due time. When the front is due, the watchdog takes every entry due
//! within the next tenth of a period and renews them in pipelined batches,
//! one script call per batch, all batches at once. A renewal that
//! answers 0 marks the lock lost at once; a renewal that fails is retried
//! until the lease would have run out, and then the lock is marked lost.
//! Several guards of one owner on one lock (re-entry) share one entry.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::Value;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::Core;
use crate::error::Error;

/// Renewals per script call (one round trip).
const BATCH: usize = 512;

/// Identifies a held lock: (lock key, owner id).
type EntryKey = (Arc<str>, Arc<str>);

#[derive(Debug)]
struct Entry {
    generation: u64,
    /// The guards sharing this (key, owner): id and their "lost" signal.
    guards: Vec<(u64, CancellationToken)>,
    /// When the lease was last known to be extended.
    renewed_at: Instant,
}

#[derive(Debug, Default)]
struct Schedule {
    entries: HashMap<EntryKey, Entry>,
    /// Min-heap of (due, generation, key); stale items are skipped when popped.
    queue: BinaryHeap<Reverse<(Instant, u64, EntryKey)>>,
    next_generation: u64,
}

/// Handle to the client's watchdog task.
#[derive(Debug)]
pub(crate) struct Watchdog {
    schedule: Arc<Mutex<Schedule>>,
    wake: Arc<Notify>,
    period: Duration,
}

fn locked(schedule: &Mutex<Schedule>) -> MutexGuard<'_, Schedule> {
    schedule.lock().unwrap_or_else(|p| p.into_inner())
}

impl Watchdog {
    /// Starts the watchdog task on the current runtime.
    pub(crate) fn start(core: Arc<Core>, shutdown: CancellationToken) -> Self {
        let schedule = Arc::new(Mutex::new(Schedule::default()));
        let wake = Arc::new(Notify::new());
        let period = core.config.watchdog_timeout / 3;
        tokio::spawn(run(core, schedule.clone(), wake.clone(), period, shutdown));
        Watchdog {
            schedule,
            wake,
            period,
        }
    }

    /// Starts renewing (key, owner) for the guard `guard_id`; `lost` is
    /// cancelled when the lock is found lost.
    pub(crate) fn register(
        &self,
        key: Arc<str>,
        owner: Arc<str>,
        guard_id: u64,
        lost: CancellationToken,
        acquired_at: Instant,
    ) {
        let mut s = locked(&self.schedule);
        let entry_key = (key, owner);
        if let Some(entry) = s.entries.get_mut(&entry_key) {
            entry.guards.push((guard_id, lost));
            return;
        }
        s.next_generation += 1;
        let generation = s.next_generation;
        let was_empty = s.entries.is_empty();
        s.queue.push(Reverse((
            acquired_at + self.period,
            generation,
            entry_key.clone(),
        )));
        s.entries.insert(
            entry_key,
            Entry {
                generation,
                guards: vec![(guard_id, lost)],
                renewed_at: acquired_at,
            },
        );
        drop(s);
        if was_empty {
            self.wake.notify_one();
        }
    }

    /// Stops renewing for `guard_id`; the entry goes when its last guard does.
    pub(crate) fn unregister(&self, key: &Arc<str>, owner: &Arc<str>, guard_id: u64) {
        let mut s = locked(&self.schedule);
        let entry_key = (key.clone(), owner.clone());
        if let Some(entry) = s.entries.get_mut(&entry_key) {
            entry.guards.retain(|(id, _)| *id != guard_id);
            if entry.guards.is_empty() {
                s.entries.remove(&entry_key);
            }
        }
    }

    /// Number of (key, owner) entries being renewed.
    pub(crate) fn len(&self) -> usize {
        locked(&self.schedule).entries.len()
    }
}

async fn run(
    core: Arc<Core>,
    schedule: Arc<Mutex<Schedule>>,
    wake: Arc<Notify>,
    period: Duration,
    shutdown: CancellationToken,
) {
    let slack = period / 10;
    let retry_delay = (period / 4).max(Duration::from_millis(10));
    loop {
        // Find the next due time, dropping stale queue items on the way.
        let next_due = {
            let mut guard = locked(&schedule);
            let s = &mut *guard;
            loop {
                match s.queue.peek() {
                    None => break None,
                    Some(Reverse((due, generation, key))) => {
                        let live = s
                            .entries
                            .get(key)
                            .is_some_and(|e| e.generation == *generation);
                        if live {
                            break Some(*due);
                        }
                        s.queue.pop();
                    }
                }
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = wake.notified(), if next_due.is_none() => continue,
            _ = tokio::time::sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => {}
        }

        // Take everything due now or within the slack.
        let now = Instant::now();
        let horizon = now + slack;
        let mut due: Vec<(EntryKey, u64)> = Vec::new();
        {
            let mut guard = locked(&schedule);
            let s = &mut *guard;
            while let Some(Reverse((at, _, _))) = s.queue.peek() {
                if *at > horizon {
                    break;
                }
                let Some(Reverse((_, generation, key))) = s.queue.pop() else {
                    break;
                };
                let live = s
                    .entries
                    .get(&key)
                    .is_some_and(|e| e.generation == generation);
                if live {
                    due.push((key, generation));
                }
            }
        }
        if due.is_empty() {
            continue;
        }

        let started = Instant::now();
        let lease_ms = core.config.watchdog_timeout.as_millis() as u64;
        // One slow connection must not hold up every renewal: a batch that
        // takes longer than a period counts as failed and is retried.
        let batches = due.chunks(BATCH).map(|chunk| async {
            match tokio::time::timeout(period, renew_batch(&core, chunk, lease_ms)).await {
                Ok(result) => result,
                Err(_) => Err(Error::CommandTimeout),
            }
        });
        let results = futures_util::future::join_all(batches).await;
        for err in results.iter().filter_map(|r| r.as_ref().err()) {
            tracing::warn!(error = %err, "lock watchdog renewal failed; will retry until the lease runs out");
            core.report(err);
        }

        let mut guard = locked(&schedule);
        let s = &mut *guard;
        let after = Instant::now();
        let mut lost = 0usize;
        for (chunk, result) in due.chunks(BATCH).zip(results) {
            for (i, (key, generation)) in chunk.iter().enumerate() {
                let outcome = match &result {
                    Ok(values) => values.get(i).copied().flatten(),
                    Err(_) => None,
                };
                let Some(entry) = s.entries.get_mut(key) else {
                    continue;
                };
                if entry.generation != *generation {
                    continue;
                }
                let next_due = match outcome {
                    Some(true) => {
                        // The lease runs from when the renewal was sent, and
                        // so does the period: a slow pass must not stretch
                        // the renewal cadence.
                        entry.renewed_at = started;
                        Ok(started + period)
                    }
                    Some(false) => Err("the lock is gone (expired, deleted or force-unlocked)"),
                    None if after.duration_since(entry.renewed_at)
                        >= core.config.watchdog_timeout =>
                    {
                        Err("renewals failed until the lease ran out")
                    }
                    None => Ok(after + retry_delay),
                };
                match next_due {
                    Ok(at) => s.queue.push(Reverse((at, *generation, key.clone()))),
                    Err(why) => {
                        mark_lost(s, key, why);
                        lost += 1;
                    }
                }
            }
        }
        drop(guard);
        tracing::trace!(
            renewed = due.len(),
            lost,
            elapsed_us = started.elapsed().as_micros() as u64,
            "lock watchdog pass"
        );
    }
}

fn mark_lost(s: &mut Schedule, key: &EntryKey, why: &str) {
    if let Some(entry) = s.entries.remove(key) {
        tracing::warn!(lock = %key.0, owner = %key.1, reason = why, "lock lost");
        for (_, token) in entry.guards {
            token.cancel();
        }
    }
}

/// Renews one batch with one script call (one command, one round trip).
/// Per entry: Some(true) renewed, Some(false) gone, None unknown (retry
/// later).
///
/// One call touches many keys, so on a Redis Cluster a batch would have to
/// be split by hash slot; this client speaks to a single Redis server.
async fn renew_batch(
    core: &Core,
    chunk: &[(EntryKey, u64)],
    lease_ms: u64,
) -> Result<Vec<Option<bool>>, Error> {
    let script = &core.scripts.renew;
    let keys: Vec<&str> = chunk.iter().map(|((key, _), _)| &**key).collect();
    let owners: Vec<&str> = chunk.iter().map(|((_, owner), _)| &**owner).collect();
    let cmd = script.evalsha(&keys, (lease_ms, owners));
    let mut conn = core.pool.checkout().await.map_err(Error::from)?;
    let reply = script.run(&mut conn, &cmd).await?;
    let Value::Array(values) = reply else {
        return Err(Error::Protocol(format!("renew script answered {reply:?}")));
    };
    if values.len() != chunk.len() {
        return Err(Error::Protocol(format!(
            "renew script answered {} results for {} locks",
            values.len(),
            chunk.len()
        )));
    }
    Ok(values
        .into_iter()
        .map(|v| match v {
            Value::Int(1) => Some(true),
            Value::Int(0) => Some(false),
            _ => None,
        })
        .collect())
}
