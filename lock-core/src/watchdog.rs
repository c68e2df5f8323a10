//! One watchdog per client: renews every watchdog-leased lock it holds.
//!
//! All such locks share one lease (the client's watchdog timeout) and one
//! renewal period (a third of it), so the schedule is a FIFO queue ordered by
//! due time. When the front is due, the watchdog takes every entry due
//! within the next tenth of a period and renews them in pipelined batches,
//! one script call per batch, all batches at once.
//!
//! Entries are holds (see `hold`): a confirmed renewal pushes the hold's
//! deadline to the renewal's send time plus the lease (minus the drift
//! margin). A renewal that answers 0 marks the hold lost at once. A batch
//! is bounded by the remaining validity of its holds, and a failed renewal
//! is retried well before the deadline; a hold whose deadline passes is
//! lost whatever the watchdog does (its guards compare with the clock).
//! Several guards of one hold (re-entry) share one entry.

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
use crate::hold::Hold;
use crate::metrics::RenewalFailure;

/// Renewals per script call (one round trip).
const BATCH: usize = 512;

/// Identifies a hold: the address of its `Hold` (unique while the entry,
/// which keeps the `Arc`, exists): no string hashing per renewal.
type EntryKey = usize;

fn entry_key(hold: &Arc<Hold>) -> EntryKey {
    Arc::as_ptr(hold) as usize
}

#[derive(Debug)]
struct Entry {
    generation: u64,
    /// Watchdog-leased guards of this hold.
    guards: usize,
    hold: Arc<Hold>,
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

    /// Starts renewing `hold` for one more guard.
    pub(crate) fn register(&self, hold: Arc<Hold>) {
        let mut s = locked(&self.schedule);
        let entry_key = entry_key(&hold);
        if let Some(entry) = s.entries.get_mut(&entry_key) {
            entry.guards += 1;
            return;
        }
        s.next_generation += 1;
        let generation = s.next_generation;
        let was_empty = s.entries.is_empty();
        // Renewed a period from now, or sooner when the hold has less than
        // two periods of validity left (picked up late, a slow round trip).
        let due = Instant::now() + self.period.min(hold.remaining() / 2);
        s.queue.push(Reverse((due, generation, entry_key)));
        s.entries.insert(
            entry_key,
            Entry {
                generation,
                guards: 1,
                hold,
            },
        );
        drop(s);
        if was_empty {
            self.wake.notify_one();
        }
    }

    /// One guard of `hold` stops renewing; the entry goes with its last
    /// guard.
    pub(crate) fn unregister(&self, hold: &Arc<Hold>) {
        let mut s = locked(&self.schedule);
        let entry_key = entry_key(hold);
        if let Some(entry) = s.entries.get_mut(&entry_key) {
            entry.guards = entry.guards.saturating_sub(1);
            if entry.guards == 0 {
                s.entries.remove(&entry_key);
            }
        }
    }

    /// Number of holds being renewed.
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

        // Take everything due now or within the slack; holds whose
        // deadline has passed are lost, not renewed.
        let now = Instant::now();
        let horizon = now + slack;
        let mut due: Vec<(EntryKey, u64, Arc<Hold>)> = Vec::new();
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
                let hold = match s.entries.get(&key) {
                    Some(e) if e.generation == generation => e.hold.clone(),
                    _ => continue,
                };
                if hold.is_valid() {
                    due.push((key, generation, hold));
                } else {
                    mark_lost(
                        s,
                        &key,
                        "its deadline passed before it could be renewed",
                        false,
                    );
                }
            }
        }
        if due.is_empty() {
            continue;
        }

        let started = Instant::now();
        let lease = core.config.watchdog_timeout;
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        // A batch may take at most a period, and never longer than its
        // most urgent hold has left: an answer after that is of no use.
        let core_ref = &*core;
        let batches = due.chunks(BATCH).map(|chunk| {
            let bound = chunk
                .iter()
                .map(|(_, _, hold)| hold.remaining())
                .min()
                .unwrap_or(period)
                .min(period)
                .max(Duration::from_millis(1));
            async move {
                match tokio::time::timeout(bound, renew_batch(core_ref, chunk, lease_ms)).await {
                    Ok(result) => result,
                    Err(_) => Err(Error::CommandTimeout),
                }
            }
        });
        let results = futures_util::future::join_all(batches).await;
        for (chunk, err) in due
            .chunks(BATCH)
            .zip(&results)
            .filter_map(|(chunk, r)| Some((chunk, r.as_ref().err()?)))
        {
            // One event per failed batch; with a single hold, its lock.
            match chunk {
                [(_, _, hold)] => tracing::warn!(
                    lock = %hold.keys.name,
                    key = %hold.keys.lock,
                    error = %err,
                    "lock renewal failed; retrying before the lock's deadline"
                ),
                _ => tracing::warn!(
                    locks = chunk.len(),
                    error = %err,
                    "lock renewal failed; retrying before the locks' deadlines"
                ),
            }
            core.report(err);
        }

        let mut guard = locked(&schedule);
        let s = &mut *guard;
        let after = Instant::now();
        let mut lost = 0usize;
        for (chunk, result) in due.chunks(BATCH).zip(results) {
            for (i, (key, generation, hold)) in chunk.iter().enumerate() {
                let outcome = match &result {
                    Ok(values) => values.get(i).copied().flatten(),
                    Err(_) => None,
                };
                let live = s
                    .entries
                    .get(key)
                    .is_some_and(|e| e.generation == *generation);
                if !live {
                    continue;
                }
                let next_due = match outcome {
                    // The lease runs from when the renewal was sent, and so
                    // does the period: a slow pass must not stretch the
                    // renewal cadence.
                    Some(true) if hold.extend(started, lease) => {
                        crate::metrics::renewed();
                        Ok(started + period)
                    }
                    Some(true) => Err("its deadline passed while it was being renewed"),
                    Some(false) => {
                        crate::metrics::renewal_failed(RenewalFailure::Gone);
                        Err("the lock is gone (expired, deleted or force-unlocked)")
                    }
                    None => {
                        crate::metrics::renewal_failed(RenewalFailure::Error);
                        match hold.remaining() {
                            left if left.is_zero() => Err("renewals failed until its deadline"),
                            // Retry soon enough to have another go before the deadline.
                            left => {
                                Ok(after + retry_delay.min(left / 3).max(Duration::from_millis(1)))
                            }
                        }
                    }
                };
                match next_due {
                    Ok(at) => s.queue.push(Reverse((at, *generation, *key))),
                    Err(why) => {
                        mark_lost(s, key, why, outcome == Some(false));
                        lost += 1;
                    }
                }
            }
        }
        drop(guard);
        tracing::trace!(
            locks = due.len(),
            lost,
            elapsed_us = started.elapsed().as_micros() as u64,
            "lock watchdog pass"
        );
    }
}

/// `gone`: Redis answered that the hold no longer exists (else only its
/// deadline passed, and it may still be in Redis: its guards release it).
fn mark_lost(s: &mut Schedule, key: &EntryKey, why: &str, gone: bool) {
    if let Some(entry) = s.entries.remove(key) {
        if gone {
            entry.hold.mark_gone(why);
        } else {
            entry.hold.mark_lost(why);
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
    chunk: &[(EntryKey, u64, Arc<Hold>)],
    lease_ms: u64,
) -> Result<Vec<Option<bool>>, Error> {
    let script = &core.scripts.renew;
    let keys: Vec<&str> = chunk
        .iter()
        .map(|(_, _, hold)| hold.keys.lock.as_str())
        .collect();
    let owners: Vec<&str> = chunk.iter().map(|(_, _, hold)| &*hold.owner).collect();
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
