//! Work nobody awaits, run as tasks of the client's own (tracked, so a
//! shutdown waits for them): releases of dropped guards, cancellations of
//! acquisitions whose reply was lost, leaving the line of waiting clients;
//! and, when the last handle of a client goes, a bounded wait for them.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::RuntimeFlavor;

use crate::hold::release::{ReleaseJob, Released};
use crate::hold::shared::Core;

impl Core {
    /// Runs `job` as background work of this client (see `background`).
    pub(crate) fn spawn_job(self: &Arc<Self>, job: ReleaseJob) {
        let core = self.clone();
        let span = match &job {
            ReleaseJob::Release { keys, .. } => {
                tracing::debug_span!("lock.release", lock = %keys.name, key = %keys.lock)
            }
            _ => tracing::Span::none(),
        };
        self.background.spawn_on(
            tracing::Instrument::instrument(core.run_job(job), span),
            &self.runtime,
        );
    }

    /// Does one background job, and logs how it went (nobody awaits it).
    pub(crate) async fn run_job(self: Arc<Self>, job: ReleaseJob) {
        let (keys, outcome, failed) = match &job {
            ReleaseJob::Release {
                keys,
                hold,
                lease_ms,
            } => (
                keys,
                self.release_hold(keys, hold, *lease_ms)
                    .await
                    .map(|released| {
                        if released == Released::NotHeld {
                            hold.mark_gone("not held at release");
                        }
                        released.log();
                    }),
                "background lock release failed; the lock expires with its lease",
            ),
            ReleaseJob::Cancel {
                keys,
                owner,
                mode,
                latch,
                lease_ms,
            } => (
                keys,
                self.cancel(keys, owner, *mode, latch, *lease_ms)
                    .await
                    .map(|_| ()),
                "cancelling a lock acquisition with a lost reply failed; it expires with its lease",
            ),
            ReleaseJob::StopWaiting { keys } => (
                keys,
                self.stop_waiting(keys).await.map(|_| ()),
                "leaving the line of clients waiting for a lock failed; the place lapses when its turn passes unused",
            ),
        };
        if let Err(error) = outcome {
            tracing::warn!(lock = %keys.name, key = %keys.lock, error = %error, "{failed}");
            self.report(&error);
        }
    }
}

/// Longest wait for pending releases when the last client handle drops.
const DROP_FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// The last handle of a client is gone: waits, bounded by the command
/// time-out (at most 2 s), for background releases still running, when
/// that cannot stall the runtime they need (a multi-threaded one). Never
/// panics.
pub(crate) fn flush_on_drop(core: &Arc<Core>) {
    core.background.close();
    if core.background.is_empty() {
        return;
    }
    if core.runtime.runtime_flavor() != RuntimeFlavor::MultiThread {
        tracing::debug!(
            pending = core.background.len(),
            "lock client dropped on a current_thread runtime with releases pending; \
             call LockClient::shutdown before the end of main to wait for them"
        );
        return;
    }
    // Waited for with a std channel and the thread's own clock, not
    // tokio's timer: this may run on a worker of the very runtime (even
    // while it shuts down, when no timer is driven any more). On a runtime
    // that is shutting down the waiting task is dropped at once, which
    // ends the wait at once.
    let limit = core.config.command_timeout.min(DROP_FLUSH_LIMIT);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let waiting = core.clone();
    let spawned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        core.runtime.spawn(async move {
            waiting.background.wait().await;
            let _ = done_tx.send(());
        })
    }));
    let outcome = match spawned {
        Ok(_) => done_rx.recv_timeout(limit).map_err(|_| ()),
        Err(_) => Err(()),
    };
    if outcome.is_err() {
        tracing::debug!("background lock releases could not be awaited at client drop");
    }
}
