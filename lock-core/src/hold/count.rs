//! A count of a hold as its owner has it, and its release: one call to
//! Redis that runs to its end (finished in the background when the caller
//! stops waiting), or, when dropped, a background job.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::error::{Error, Result};
use crate::hold::lease_ms;
use crate::hold::release::{ReleaseJob, Released};
use crate::hold::run_to_end::RunToEnd;
use crate::hold::target::Target;
use crate::hold::Hold;

/// One count of a hold, as its owner has it: which lock, which hold, which
/// lease. Plain: [`OwnedCount`] releases it when dropped.
#[derive(Debug)]
pub(crate) struct Count {
    pub(crate) target: Target,
    /// The hold this guard is one count of (shared with re-entrant guards).
    pub(crate) hold: Arc<Hold>,
    /// The fixed lease asked for, or `None`: renewed by the watchdog.
    pub(crate) lease: Option<Duration>,
}

impl Count {
    pub(crate) fn stop_renewal(&self) {
        if self.lease.is_none() {
            self.target.engine.watchdog.unregister(&self.hold);
        }
    }

    /// Redis confirmed the hold is gone (a renewal, re-entry or release
    /// found it missing): tells the local queue, without a call to Redis.
    pub(crate) fn forget(&self) {
        self.target
            .engine
            .core
            .queues
            .ended(&self.target.keys.local, &self.hold.owner);
    }

    /// Releases this count of the hold (inside `span`, its `lock.release`
    /// span, which the release task carries too).
    pub(crate) async fn release(self, span: tracing::Span) -> Result<()> {
        self.stop_renewal();
        let name = self.target.keys.name.clone();
        if self.hold.is_gone() {
            // Known gone: logged when it was found out ("lock lost"), or
            // given up by a shutdown.
            self.forget();
            tracing::debug!("lock was lost before release; nothing to release");
            return Err(Error::Lost { name });
        }
        // Released in Redis even when the deadline has passed: the
        // release names this hold only, so it frees the lock sooner and can
        // never touch anyone else's hold.
        let valid_at_release = self.hold.is_valid();
        if !valid_at_release {
            self.hold
                .mark_lost("its deadline passed before it was released");
        }
        let lease_ms = self.lease_ms();
        let core = self.target.engine.core.clone();
        let keys = self.target.keys.clone();
        let hold = self.hold.clone();
        // Tracked with the client's background work (a shutdown waits for
        // it), and finished there if this future is dropped.
        let (tracker, runtime) = (core.background.clone(), core.runtime.clone());
        let call = RunToEnd::new(
            tracker.track_future(
                async move { core.release_hold(&keys, &hold, lease_ms).await }.instrument(span),
            ),
            &tracker,
            &runtime,
        );
        match call.await {
            Ok(Released::NotHeld) => {
                self.hold.mark_gone("not held at release");
                Err(Error::Lost { name })
            }
            Ok(released) => {
                released.log();
                if valid_at_release {
                    Ok(())
                } else {
                    Err(Error::Lost { name })
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "lock release failed; the lock expires with its lease");
                Err(e)
            }
        }
    }

    /// The lease the hold's remaining counts keep after this release.
    pub(crate) fn lease_ms(&self) -> u64 {
        lease_ms(self.lease, self.target.engine.core.config.watchdog_timeout)
    }
}

/// One count of a hold that releases itself when dropped (in the
/// background: early return, `?`, panic, a cancelled future) — what the
/// engine hands out and a [`LockGuard`](crate::LockGuard) wraps.
#[derive(Debug)]
pub(crate) struct OwnedCount(Option<Count>);

impl OwnedCount {
    /// One count of `hold`; a watchdog lease (`lease == None`) starts
    /// renewing.
    pub(crate) fn new(target: Target, hold: Arc<Hold>, lease: Option<Duration>) -> Self {
        if lease.is_none() {
            target.engine.watchdog.register(hold.clone());
        }
        OwnedCount(Some(Count {
            target,
            hold,
            lease,
        }))
    }

    /// The count, until it is released.
    pub(crate) fn count(&self) -> &Count {
        // Only `release` (which consumes it) and `Drop` take the count.
        match &self.0 {
            Some(count) => count,
            None => unreachable!("an OwnedCount holds its count until consumed"),
        }
    }

    /// The hold this is one count of.
    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.count().hold
    }

    /// The owner id of the hold (its field in the lock's hash).
    pub(crate) fn owner_id(&self) -> &str {
        &self.count().hold.owner
    }

    /// The hold's fencing token.
    pub(crate) fn fencing_token(&self) -> u64 {
        self.count().hold.token
    }

    /// Releases this count now, inside its `lock.release` span.
    pub(crate) async fn release(mut self) -> Result<()> {
        let Some(count) = self.0.take() else {
            return Ok(());
        };
        let span = tracing::debug_span!(
            "lock.release",
            lock = %count.target.keys.name,
            key = %count.target.keys.lock
        );
        count.release(span.clone()).instrument(span).await
    }
}

impl Drop for OwnedCount {
    fn drop(&mut self) {
        if let Some(count) = self.0.take() {
            count.stop_renewal();
            if count.hold.is_gone() {
                count.forget();
                return;
            }
            if !count.hold.is_valid() {
                count
                    .hold
                    .mark_lost("its deadline passed before it was released");
            }
            let lease_ms = count.lease_ms();
            count.target.engine.core.spawn_job(ReleaseJob::Release {
                keys: count.target.keys.clone(),
                hold: count.hold.clone(),
                lease_ms,
            });
        }
    }
}
