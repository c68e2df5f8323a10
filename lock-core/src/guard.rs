//! The guard of a held lock: fencing token, lost-lock signal, release.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::error::{Error, Result};
use crate::held::HeldLock;
use crate::hold::release::{ReleaseJob, Released};
use crate::hold::run_to_end::RunToEnd;
use crate::hold::Hold;
use crate::lock::{lease_ms, Lock};

#[derive(Debug)]
struct Held {
    lock: Lock,
    /// The hold this guard is one count of (shared with re-entrant guards).
    hold: Arc<Hold>,
    /// The fixed lease asked for, or `None`: renewed by the watchdog.
    lease: Option<Duration>,
}

impl Held {
    fn stop_renewal(&self) {
        if self.lease.is_none() {
            self.lock.client.inner.watchdog.unregister(&self.hold);
        }
    }

    /// Redis confirmed the hold is gone (a renewal, re-entry or release
    /// found it missing): tells the local queue, without a call to Redis.
    fn forget(&self) {
        self.lock
            .client
            .inner
            .core
            .queues
            .ended(&self.lock.keys.lock, &self.hold.owner);
    }

    /// Releases this count of the hold (inside `span`, its `lock.release`
    /// span, which the release task carries too).
    async fn release(self, span: tracing::Span) -> Result<()> {
        self.stop_renewal();
        let name = self.lock.keys.name.clone();
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
        let core = self.lock.client.inner.core.clone();
        let keys = self.lock.keys.clone();
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
    fn lease_ms(&self) -> u64 {
        lease_ms(
            self.lease,
            self.lock.client.inner.core.config.watchdog_timeout,
        )
    }
}

/// Proof of holding a lock. Release it with [`release`](LockGuard::release)
/// to learn whether the lock was still held; dropping it releases the lock
/// in the background (early return, `?`, panic, cancelled future), so a lock
/// is never left behind until its lease runs out.
///
/// A guard is valid until a local deadline: the send time of the last
/// acquire or renewal Redis confirmed, plus the lease, minus a drift margin
/// of 1 % of the lease + 2 ms. [`is_held`](LockGuard::is_held) compares that
/// deadline with the monotonic clock and [`lost`](LockGuard::lost) is a
/// timer at it, so a partition, a paused Redis or a blocked runtime can
/// never make a guard say "held" after its lease may have run out in Redis.
/// While a watchdog-leased guard lives, the client renews its lock every
/// third of the watchdog timeout, pushing the deadline on; a renewal that
/// finds the lock gone (expired, force-unlocked, lost in a restart or
/// failover) ends it at once.
///
/// ```no_run
/// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
/// let guard = lock.acquire().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lock lost: stop writing"),
///     _ = do_the_work(guard.fencing_token()) => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// # async fn do_the_work(_token: u64) {}
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    held: Option<Held>,
}

impl LockGuard {
    /// A guard for one count of `hold`; a watchdog lease (`lease == None`)
    /// starts renewing.
    pub(crate) fn new(lock: Lock, hold: Arc<Hold>, lease: Option<Duration>) -> Self {
        if lease.is_none() {
            lock.client.inner.watchdog.register(hold.clone());
        }
        LockGuard {
            held: Some(Held { lock, hold, lease }),
        }
    }

    /// What a section of this guard's hold needs (see `LockContext::enter`).
    pub(crate) fn section_parts(&self) -> (Arc<str>, HeldLock) {
        (
            self.held().lock.client.inner.core.client_id.clone(),
            self.held_lock(),
        )
    }

    /// A handle on this guard's hold that can be cloned and shared (a
    /// request extension, a spawned task): the lock's name, fencing token,
    /// validity and lost signal, without the power to release.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// let held = guard.held_lock();
    /// let worker = tokio::spawn(async move {
    ///     tokio::select! {
    ///         _ = held.lost() => "stopped: the lock was lost",
    ///         _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => "done",
    ///     }
    /// });
    /// let _ = worker.await;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn held_lock(&self) -> HeldLock {
        let held = self.held();
        HeldLock::new(held.lock.keys.clone(), held.hold.clone(), held.lease)
    }

    /// The hold this guard is one count of.
    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.held().hold
    }

    /// The lock this guard holds.
    pub(crate) fn lock(&self) -> &Lock {
        &self.held().lock
    }

    fn held(&self) -> &Held {
        // `held` is only taken by `release` (which consumes the guard) and by `Drop`.
        match &self.held {
            Some(h) => h,
            None => unreachable!("a LockGuard is always held until consumed"),
        }
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// assert_eq!(guard.name(), lock.name());
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.held().lock.name()
    }

    /// The fencing token of this hold: it grows strictly with every fresh
    /// acquisition of the lock, across holders, releases and a Redis restart
    /// that lost its data (a re-entry keeps its hold's token). Send it with
    /// every write the lock protects, and let the store reject writes with
    /// a token lower than one it has seen, so a holder that lost the lock
    /// without knowing cannot overwrite its successor.
    ///
    /// Tokens are a hybrid logical clock on the Redis server's `TIME`:
    /// `max(last token + 1, server time in µs)`, the last token being kept
    /// for the client's [token retention](crate::ClientBuilder::token_retention)
    /// only, so names no longer used cost no memory.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let first = lock.acquire().await?;
    /// let t1 = first.fencing_token();
    /// first.release().await?;
    /// let second = lock.acquire().await?;
    /// assert!(second.fencing_token() > t1);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.held().hold.token
    }

    /// The owner id in the lock's hash: `"<client-id>:<n>"`. Every fresh
    /// acquisition gets an owner id of its own (re-entries share it), so it
    /// identifies this hold: a stale guard can never touch a newer hold.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let guard = client.lock("a")?.acquire().await?;
    /// assert!(guard.owner_id().starts_with(client.client_id()));
    /// # Ok(()) }
    /// ```
    pub fn owner_id(&self) -> &str {
        &self.held().hold.owner
    }

    /// The fixed lease, or `None` for a watchdog-renewed lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// assert_eq!(lock.acquire().await?.lease(), None);
    /// # Ok(()) }
    /// ```
    pub fn lease(&self) -> Option<Duration> {
        self.held().lease
    }

    /// Whether the lock is still held: false once the guard's deadline has
    /// passed (see [`LockGuard`]) or a renewal found the lock gone. Never
    /// true again after that.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// assert!(guard.is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.held().hold.is_valid()
    }

    /// `Err(Error::Lost)` once the lock is no longer held; handy with `?`
    /// between the steps of a critical section.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// guard.ensure_held()?;
    /// # Ok(()) }
    /// ```
    pub fn ensure_held(&self) -> Result<()> {
        if self.is_held() {
            Ok(())
        } else {
            Err(Error::Lost {
                name: self.name().to_string(),
            })
        }
    }

    /// Resolves when the lock is lost: at the guard's deadline (a timer, so
    /// it fires even when Redis cannot be reached), or as soon as a renewal
    /// finds the lock gone. Never resolves while the lock is held.
    /// Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => return Err(lock_core::Error::Lost { name: guard.name().into() }),
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.held().hold.lost().await
    }

    /// Releases one hold of the lock. `Ok(())` when the lock was still held;
    /// [`Error::Lost`] when it was not (it expired or was taken away, so the
    /// critical section was not exclusive to the end); a Redis error when
    /// Redis could not be reached (then the lock expires with its lease).
    ///
    /// Cancel-safe: the release completes even if this future is dropped
    /// (the rest of it then runs as the client's background work).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// match guard.release().await {
    ///     Ok(()) => {}
    ///     Err(e) if e.is_lost() => eprintln!("the lock expired before we were done"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        let span = tracing::debug_span!(
            "lock.release",
            lock = %held.lock.keys.name,
            key = %held.lock.keys.lock
        );
        held.release(span.clone()).instrument(span).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            held.stop_renewal();
            if held.hold.is_gone() {
                held.forget();
                return;
            }
            if !held.hold.is_valid() {
                held.hold
                    .mark_lost("its deadline passed before it was released");
            }
            let lease_ms = held.lease_ms();
            held.lock.client.release_in_background(ReleaseJob::Release {
                keys: held.lock.keys.clone(),
                hold: held.hold.clone(),
                lease_ms,
            });
        }
    }
}
