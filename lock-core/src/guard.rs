//! The guard of a held lock: fencing token, lost-lock signal, release.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::held::HeldLock;
use crate::hold::count::{Count, OwnedCount};
use crate::options::LockMode;
use crate::protocol::keys::LockKeys;

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
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    count: OwnedCount,
}

impl std::fmt::Debug for LockGuard {
    /// The lock, its hold and whether it is still held:
    /// `LockGuard { lock: "order:42", key: "shop:order:42", owner: "<client-id>:7",
    /// fencing_token: .., lease: None, held: true }`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self.held();
        f.debug_struct("LockGuard")
            .field("lock", &count.target.keys.name)
            .field("key", &count.target.keys.lock)
            .field("owner", &count.hold.owner)
            .field("fencing_token", &count.hold.token)
            .field("lease", &count.lease)
            .field("held", &count.hold.is_valid())
            .finish()
    }
}

impl LockGuard {
    /// The guard of a count the engine handed out.
    pub(crate) fn new(count: OwnedCount) -> Self {
        LockGuard { count }
    }

    /// What a section of this guard's hold needs (see `LockContext::enter`).
    pub(crate) fn section_parts(&self) -> (Arc<str>, HeldLock) {
        (
            self.held().target.engine.core.client_id.clone(),
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
        HeldLock::new(
            held.target.engine.clone(),
            held.target.keys.clone(),
            held.hold.clone(),
            held.lease,
        )
    }

    /// How this guard holds its lock: [`LockMode::Exclusive`], or a side
    /// of a read-write lock.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let guard = client.rw_lock("prices")?.write().acquire().await?;
    /// assert_eq!(guard.mode(), lock_core::LockMode::Write);
    /// # Ok(()) }
    /// ```
    pub fn mode(&self) -> LockMode {
        self.keys().rule.mode()
    }

    /// The keys of the lock this guard holds.
    pub(crate) fn keys(&self) -> &Arc<LockKeys> {
        &self.held().target.keys
    }

    fn held(&self) -> &Count {
        self.count.count()
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
        &self.held().target.keys.name
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
    pub async fn release(self) -> Result<()> {
        self.count.release().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::hold::Hold;

    #[tokio::test(flavor = "current_thread")]
    async fn debug_names_the_lock_its_hold_and_whether_it_is_held() {
        // Connections open lazily: no server is needed to build a client.
        let client = crate::LockClient::builder("redis://127.0.0.1:1")
            .key_prefix("shop:")
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let lock = client.lock("order:42").unwrap_or_else(|e| panic!("{e}"));
        let target = lock.target();
        let hold = Hold::granted(
            target.keys.clone(),
            Arc::from("c:7"),
            99,
            None,
            Instant::now(),
            Duration::from_secs(60),
        )
        .expect("a fresh grant is valid");
        let guard = LockGuard::new(OwnedCount::new(target, hold, Some(Duration::from_secs(60))));
        assert_eq!(
            format!("{guard:?}"),
            "LockGuard { lock: \"order:42\", key: \"shop:order:42\", owner: \"c:7\", \
             fencing_token: 99, lease: Some(60s), held: true }"
        );
        // Not released in Redis (there is none): the hold is known gone.
        guard.count.hold().mark_gone("test");
    }
}
