//! Ending a client: no new locks, every hold given back, background
//! releases finished — so a deploy leaves no lock behind.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;
use tracing::Instrument;

use crate::client::LockClient;
use crate::hold::shared::Core;
use crate::metrics::ReleaseOutcome;

/// What [`LockClient::shutdown`] did.
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) {
/// let report = client.shutdown(std::time::Duration::from_secs(5)).await;
/// assert!(report.is_complete(), "{report:?}");
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Holds released in Redis by the shutdown.
    pub released: usize,
    /// Holds that were already gone from Redis (expired or taken away).
    pub not_held: usize,
    /// Holds whose release failed (Redis unreachable): they expire with
    /// their lease, no longer renewed.
    pub failed: usize,
    /// Everything (acquisitions ending, releases, background releases of
    /// dropped guards) finished before the time-out.
    pub finished_in_time: bool,
}

impl ShutdownReport {
    /// Every hold was given back (or was already gone) and every
    /// background release finished, within the time-out.
    ///
    /// ```
    /// assert!(!lock_core::ShutdownReport::default().is_complete());
    /// ```
    pub fn is_complete(&self) -> bool {
        self.finished_in_time && self.failed == 0
    }
}

impl LockClient {
    /// Shuts the client down for a graceful exit (a deploy, SIGTERM):
    ///
    /// 1. it takes no new locks: acquisitions started from now on, and
    ///    acquisitions still waiting, end with [`Error::Closed`](crate::Error::Closed);
    /// 2. it releases every hold it has in Redis, all counts at once (the
    ///    next waiter of another replica is woken at once), and stops
    ///    renewing; guards of those holds report the lock as no longer held
    ///    (`is_held()` false, `lost()` resolves) and their release or drop
    ///    makes no further Redis call;
    /// 3. it waits for the background releases of guards dropped earlier.
    ///
    /// All of it bounded by `timeout`; what did not finish in time expires
    /// with its lease. Applies to every clone of this client. Call it after
    /// the server stopped taking requests (for axum, after
    /// `with_graceful_shutdown` returned), so that requests in flight had
    /// their chance to finish.
    ///
    /// Dropping the last handle of a client (every guard holds one) also
    /// waits, bounded by the command time-out, for the background releases
    /// of dropped guards, when the client runs on a multi-threaded runtime;
    /// on a `current_thread` runtime, call `shutdown` before the end of
    /// `main`.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// use std::time::Duration;
    ///
    /// let guard = client.lock("job")?.acquire().await?;
    /// let report = client.shutdown(Duration::from_secs(5)).await;
    /// assert_eq!(report.released, 1);
    /// assert!(!guard.is_held());
    /// assert!(client.lock("job")?.acquire().await.unwrap_err().is_closed());
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self, timeout: Duration) -> ShutdownReport {
        let core = self.inner.core.clone();
        let deadline = Instant::now() + timeout;
        core.closed.cancel();
        tracing::info!(client = %core.client_id, "lock client shutting down");
        let mut report = ShutdownReport::default();
        // No more renewals: a hold whose release fails expires with its lease.
        self.inner.stop_tasks.cancel();
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
async fn release_holds(core: &Arc<Core>, deadline: Instant, report: &mut ShutdownReport) -> bool {
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
            crate::metrics::release(match outcome {
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
            report.failed += holds.len();
            false
        }
    }
}
