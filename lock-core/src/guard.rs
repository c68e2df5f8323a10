//! The guard of a held lock: fencing token, lost-lock signal, release.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::ReleaseJob;
use crate::error::{Error, Result};
use crate::lock::{lease_ms, Lock};

static NEXT_GUARD_ID: AtomicU64 = AtomicU64::new(1);

/// How the lock is kept alive.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lease {
    /// Renewed by the client's watchdog.
    Watchdog,
    /// Fixed: the key expires at `expires_at` (measured from when the
    /// acquire request was sent, so never later than Redis' own expiry).
    Fixed {
        lease: Duration,
        expires_at: Instant,
    },
}

#[derive(Debug)]
struct Held {
    lock: Lock,
    owner: Arc<str>,
    /// The lock key shared with the watchdog entry.
    watch_key: Option<Arc<str>>,
    token: u64,
    lease: Lease,
    lost: CancellationToken,
    id: u64,
    /// Which holding of `owner` this guard belongs to (see `queue`).
    epoch: u64,
}

impl Held {
    fn stop_renewal(&self) {
        if let Some(key) = &self.watch_key {
            self.lock
                .client
                .inner
                .watchdog
                .unregister(key, &self.owner, self.id);
        }
    }

    /// Known lost: a renewal found it gone, renewals failed until the lease
    /// ran out, or a fixed lease ran out. Releasing it in Redis could only
    /// take a hold that a later acquisition of the same owner made.
    fn known_lost(&self) -> bool {
        self.lost.is_cancelled()
            || matches!(self.lease, Lease::Fixed { expires_at, .. } if Instant::now() >= expires_at)
    }

    /// Tells the client's local queue that this holding is over without a
    /// release in Redis (it was lost).
    fn forget(&self) {
        self.lock.client.inner.core.queues.ended(
            &self.lock.keys.lock,
            &self.owner,
            Some(self.epoch),
        );
    }

    fn lease_ms(&self) -> u64 {
        match self.lease {
            Lease::Watchdog => lease_ms(None, self.lock.client.inner.core.config.watchdog_timeout),
            Lease::Fixed { lease, .. } => lease_ms(Some(lease), lease),
        }
    }
}

/// Proof of holding a lock. Release it with [`release`](LockGuard::release)
/// to learn whether the lock was still held; dropping it releases the lock
/// in the background (early return, `?`, panic, cancelled future), so a lock
/// is never left behind until its lease runs out.
///
/// While a watchdog-leased guard lives, the client renews its lock every
/// third of the watchdog timeout. If a renewal finds the lock gone
/// (expired, force-unlocked, lost in a Redis restart or failover),
/// [`is_held`](LockGuard::is_held) turns false and [`lost`](LockGuard::lost)
/// resolves, so the critical section can stop.
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
    pub(crate) fn new(
        lock: Lock,
        owner: Arc<str>,
        token: u64,
        lease: Lease,
        sent_at: Instant,
        epoch: u64,
        lost: CancellationToken,
    ) -> Self {
        let id = NEXT_GUARD_ID.fetch_add(1, Ordering::Relaxed);
        let watch_key = match lease {
            Lease::Watchdog => {
                let key: Arc<str> = Arc::from(lock.keys.lock.as_str());
                lock.client.inner.watchdog.register(
                    key.clone(),
                    owner.clone(),
                    id,
                    lost.clone(),
                    sent_at,
                );
                Some(key)
            }
            Lease::Fixed { .. } => None,
        };
        LockGuard {
            held: Some(Held {
                lock,
                owner,
                watch_key,
                token,
                lease,
                lost,
                id,
                epoch,
            }),
        }
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

    /// The fencing token of this holding: a per-lock counter incremented on
    /// every fresh acquisition (a re-entry keeps its holder's token). Send it
    /// with every write the lock protects, and let the store reject writes
    /// with a token lower than one it has seen, so a holder that lost the
    /// lock without knowing cannot overwrite its successor.
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
        self.held().token
    }

    /// The owner id in the lock's hash: `"<client-id>:<n>"`.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let guard = client.lock("a")?.acquire().await?;
    /// assert!(guard.owner_id().starts_with(client.client_id()));
    /// # Ok(()) }
    /// ```
    pub fn owner_id(&self) -> &str {
        &self.held().owner
    }

    /// The fixed lease, or `None` for a watchdog-renewed lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// assert_eq!(lock.acquire().await?.lease(), None);
    /// # Ok(()) }
    /// ```
    pub fn lease(&self) -> Option<Duration> {
        match self.held().lease {
            Lease::Watchdog => None,
            Lease::Fixed { lease, .. } => Some(lease),
        }
    }

    /// Whether the lock is still held, as far as this process knows: false
    /// once a renewal found it gone, or once a fixed lease ran out.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// assert!(guard.is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        let held = self.held();
        if held.lost.is_cancelled() {
            return false;
        }
        match held.lease {
            Lease::Watchdog => true,
            Lease::Fixed { expires_at, .. } => Instant::now() < expires_at,
        }
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

    /// Resolves when the lock is lost: a renewal found it gone, renewals
    /// failed until the lease ran out, or (fixed lease) the lease ran out.
    /// Never resolves while the lock is held. Cancel-safe.
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
        let held = self.held();
        match held.lease {
            Lease::Watchdog => held.lost.cancelled().await,
            Lease::Fixed { expires_at, .. } => {
                tokio::select! {
                    _ = held.lost.cancelled() => {}
                    _ = tokio::time::sleep_until(expires_at) => {}
                }
            }
        }
    }

    /// Releases one hold of the lock. `Ok(())` when the lock was still held;
    /// [`Error::Lost`] when it was not (it expired or was taken away, so the
    /// critical section was not exclusive to the end); a Redis error when
    /// Redis could not be reached (then the lock expires with its lease).
    ///
    /// Cancel-safe: the release runs in its own task and completes even if
    /// this future is dropped.
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
        held.stop_renewal();
        let name = held.lock.keys.name.clone();
        if held.known_lost() {
            held.forget();
            tracing::warn!(lock = %name, "lock was lost before release");
            return Err(Error::Lost { name });
        }
        let lease_ms = held.lease_ms();
        let core = held.lock.client.inner.core.clone();
        let keys = held.lock.keys.clone();
        let owner = held.owner.clone();
        let epoch = held.epoch;
        let span = tracing::debug_span!("lock.release", lock = %keys.lock, owner = %owner);
        let task = tokio::spawn(tracing::Instrument::instrument(
            async move {
                core.release_hold(&keys, &owner, Some(epoch), lease_ms)
                    .await
            },
            span,
        ));
        match task.await {
            Ok(Ok(true)) => {
                tracing::debug!(lock = %name, "lock released");
                Ok(())
            }
            Ok(Ok(false)) => {
                tracing::warn!(lock = %name, "lock was no longer held at release");
                Err(Error::Lost { name })
            }
            Ok(Err(e)) => Err(e),
            Err(e) => Err(Error::Cancelled(format!("release task ended: {e}"))),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            held.stop_renewal();
            if held.known_lost() {
                held.forget();
                return;
            }
            let lease_ms = held.lease_ms();
            held.lock.client.release_in_background(ReleaseJob {
                keys: held.lock.keys.clone(),
                owner: held.owner.clone(),
                epoch: Some(held.epoch),
                lease_ms,
            });
        }
    }
}
