//! Ending a client (the face; the engine's `hold/shutdown.rs` does it): no
//! new locks, every hold given back, background releases finished — so a
//! deploy leaves no lock behind.

use std::time::Duration;

use crate::client::LockClient;

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
        let tally = self.inner.shut_down(timeout).await;
        ShutdownReport {
            released: tally.released,
            not_held: tally.not_held,
            failed: tally.failed,
            finished_in_time: tally.finished_in_time,
        }
    }
}
