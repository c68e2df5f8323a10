//! Ending a client's engine: no new acquisitions, renewals stopped, every
//! hold given up locally and then released in Redis (all its counts at
//! once), acquisitions in flight drained, background work finished — all
//! bounded by one time-out (see `LockClient::shutdown`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;
use tracing::Instrument;

use crate::hold::engine::Engine;
use crate::hold::shared::Core;
use crate::metrics::{self, ReleaseOutcome};

/// What a shutdown did (the public `ShutdownReport` shows it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) released: usize,
    pub(crate) not_held: usize,
    pub(crate) failed: usize,
    pub(crate) finished_in_time: bool,
}

impl Engine {
    /// Shuts this engine down within `timeout` (the steps are
    /// `LockClient::shutdown`'s documentation).
    pub(crate) async fn shut_down(&self, timeout: Duration) -> Tally {
        let core = self.core.clone();
        let deadline = Instant::now() + timeout;
        core.closed.cancel();
        tracing::info!(client = %core.client_id, "lock client shutting down");
        let mut report = Tally::default();
        // No more renewals: a hold whose release fails expires with its lease.
        self.stop_tasks.cancel();
        // The releases go out on a new connection: on the shared one they
        // could queue behind a slow reply (Redis answers in order).
        core.pool.retire();
        // The holds of now, then (after the acquisitions in flight ended,
        // for at most half the time) those granted meanwhile.
        let mut finished = release_holds(&core, deadline, &mut report).await;
        let drain_deadline =
            Instant::now() + deadline.saturating_duration_since(Instant::now()) / 2;
        let drained = tokio::time::timeout_at(drain_deadline, async {
            while core.acquiring.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .is_ok();
        finished &= drained;
        finished &= release_holds(&core, deadline, &mut report).await;
        core.background.close();
        finished &= tokio::time::timeout_at(deadline, core.background.wait())
            .await
            .is_ok();
        report.finished_in_time = finished;
        tracing::info!(
            client = %core.client_id,
            released = report.released,
            not_held = report.not_held,
            failed = report.failed,
            finished_in_time = report.finished_in_time,
            "lock client shut down"
        );
        report
    }
}

/// Gives up and releases every hold the client has now that it has not
/// given up yet, by `deadline`; adds to `report`. False when the deadline
/// cut it short.
async fn release_holds(core: &Arc<Core>, deadline: Instant, report: &mut Tally) -> bool {
    let permits = release_permits(core, deadline, report);
    let holds: Vec<_> = core
        .queues
        .holdings()
        .into_iter()
        .filter(|(_, hold)| !hold.is_gone())
        .collect();
    // Lost for local code before the lock is free in Redis: nothing keeps
    // working under a lock another replica may hold a moment later.
    for (_, hold) in &holds {
        hold.give_up();
    }
    let releases = holds.iter().map(|(_, hold)| {
        let core = core.clone();
        let span = tracing::debug_span!(
            "lock.release",
            lock = %hold.keys.name,
            key = %hold.keys.lock
        );
        async move {
            let outcome = core.release_all(&hold.keys, &hold.owner).await;
            metrics::release(match outcome {
                Ok(true) => ReleaseOutcome::Shutdown,
                Ok(false) => ReleaseOutcome::NotHeld,
                Err(_) => ReleaseOutcome::Error,
            });
            match &outcome {
                Ok(true) => tracing::debug!("lock released at shutdown"),
                Ok(false) => tracing::debug!("lock was not held at shutdown"),
                Err(e) => tracing::warn!(
                    lock = %hold.keys.name,
                    key = %hold.keys.lock,
                    error = %e,
                    "releasing a lock at shutdown failed; it expires with its lease"
                ),
            }
            outcome
        }
        .instrument(span)
    });
    let (permits_in_time, locks) = futures_util::future::join(
        permits,
        tokio::time::timeout_at(deadline, join_all(releases)),
    )
    .await;
    if !permits_in_time {
        return false;
    }
    match locks {
        Ok(outcomes) => {
            for outcome in outcomes {
                match outcome {
                    Ok(true) => report.released += 1,
                    Ok(false) => report.not_held += 1,
                    Err(_) => report.failed += 1,
                }
            }
            true
        }
        Err(_) => {
            report.failed += holds.len();
            false
        }
    }
}

/// Gives up and gives back every semaphore permit the client holds now, by
/// `deadline`; adds to `report` (each acquisition's permits count as one
/// hold). False when the deadline cut it short.
async fn release_permits(core: &Arc<Core>, deadline: Instant, report: &mut Tally) -> bool {
    let records = core.permits.take_all();
    for record in &records {
        record.hold.give_up();
    }
    let releases = records.iter().map(|record| async move {
        let outcome = core.release_permits(record).await;
        if let Err(e) = &outcome {
            tracing::warn!(
                semaphore = %record.keys.name,
                error = %e,
                "giving permits back at shutdown failed; leased permits expire with their lease"
            );
        }
        outcome
    });
    match tokio::time::timeout_at(deadline, join_all(releases)).await {
        Ok(outcomes) => {
            for outcome in outcomes {
                match outcome {
                    Ok(true) => report.released += 1,
                    Ok(false) => report.not_held += 1,
                    Err(_) => report.failed += 1,
                }
            }
            true
        }
        Err(_) => {
            report.failed += records.len();
            false
        }
    }
}
