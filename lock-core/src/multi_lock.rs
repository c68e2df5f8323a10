//! The multi-lock: several named locks taken as one, without deadlock
//! (`LockClient::multi_lock`, `MultiLock`, `MultiGuard`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::multi::MultiTarget;
use crate::hold::Hold;
use crate::options::{AcquireOptions, Wait};
use crate::protocol::keys::LockKeys;

/// Several named locks taken as one (Redisson's `RedissonMultiLock`): one
/// [`MultiGuard`] holds them all, or the acquisition holds none. Made by
/// [`LockClient::multi_lock`]; cheap to clone; making one makes no Redis
/// call.
///
/// - **No deadlock.** The names are deduplicated and sorted, and nothing is
///   held while waiting: two multi-locks over the same names in any order
///   (a transfer from `a` to `b` and one from `b` to `a`) never block each
///   other for good.
/// - **All or nothing.** On one Redis server every name is taken by one
///   script call. On a Redis Cluster the names of one hash slot are taken
///   by one call, the slots one after the other in ascending order; when a
///   slot's locks are found held, the slots taken already are released and
///   the whole set is tried again once the lock in the way is unlocked.
/// - **Each a normal lock.** Every name is held as a [`Lock`](crate::Lock)
///   of that name would be (Redisson's `RLock` hash, its own owner id,
///   fencing token and renewal): a Java `RLock` or a lock-core
///   [`Lock`](crate::Lock) of one of the names excludes the multi-lock and
///   is excluded by it.
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
/// let (from, to) = ("account:17", "account:4");
/// let both = client.multi_lock([from, to])?;
/// let guard = both.acquire().await?;
/// // ... move money from one account to the other ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    target: MultiTarget,
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names())
            .field("groups", &self.target.group_count())
            .finish()
    }
}

impl MultiLock {
    /// The names, deduplicated, in the order they are taken (sorted; on a
    /// Redis Cluster by hash slot first).
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let both = client.multi_lock(["b", "a", "b"])?;
    /// assert_eq!(both.names(), ["a", "b"]); // on one Redis server
    /// # Ok(()) }
    /// ```
    pub fn names(&self) -> Vec<&str> {
        self.target.keys().map(|k| k.name.as_str()).collect()
    }

    /// Takes every lock, waiting as long as it takes; the watchdog keeps
    /// them until the guard is released or dropped.
    ///
    /// Cancel-safe: when this future is dropped, locks it took are
    /// released in the background.
    ///
    /// ```no_run
    /// # async fn demo(both: lock_core::MultiLock) -> lock_core::Result<()> {
    /// let guard = both.acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<MultiGuard> {
        self.acquire_with(AcquireOptions::new()).await
    }

    /// Takes every lock, waiting at most `wait`; fails with
    /// [`Error::WaitTimeout`] after that, holding none of them.
    ///
    /// ```no_run
    /// # async fn demo(both: lock_core::MultiLock) -> lock_core::Result<()> {
    /// match both.acquire_timeout(std::time::Duration::from_secs(1)).await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(e) if e.is_wait_timeout() => println!("busy, try later"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<MultiGuard> {
        self.acquire_with(AcquireOptions::new().wait(wait)).await
    }

    /// Takes every lock, waiting as long as it takes, for a fixed `lease`:
    /// they expire after it and are not renewed.
    ///
    /// ```no_run
    /// # async fn demo(both: lock_core::MultiLock) -> lock_core::Result<()> {
    /// let guard = both.acquire_with_lease(std::time::Duration::from_secs(10)).await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub async fn acquire_with_lease(&self, lease: Duration) -> Result<MultiGuard> {
        self.acquire_with(AcquireOptions::new().lease(lease)).await
    }

    /// One attempt, no waiting: `Ok(None)` when one of the locks is held
    /// (then none is taken). Returns within the client's
    /// `connect_timeout + command_timeout` (every slot group's call
    /// included), whatever Redis does.
    ///
    /// ```no_run
    /// # async fn demo(both: lock_core::MultiLock) -> lock_core::Result<()> {
    /// if let Some(guard) = both.try_acquire().await? {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<MultiGuard>> {
        self.acquire_inner(AcquireOptions::new().no_wait()).await
    }

    /// Takes every lock with explicit options (wait bound, lease, replica
    /// acknowledgement: each lock's new hold is confirmed). Re-entry does
    /// not apply: a multi-lock always takes new holds, and a name the
    /// current [`LockContext`](crate::LockContext) holds already is
    /// waited for like any held lock.
    ///
    /// ```no_run
    /// # async fn demo(both: lock_core::MultiLock) -> lock_core::Result<()> {
    /// use lock_core::AcquireOptions;
    /// use std::time::Duration;
    /// let guard = both
    ///     .acquire_with(AcquireOptions::new().wait(Duration::from_secs(2)).lease(Duration::from_secs(5)))
    ///     .await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub async fn acquire_with(&self, options: AcquireOptions) -> Result<MultiGuard> {
        match self.acquire_inner(options).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::WaitTimeout {
                name: self.names().join(", "),
                waited: match options.wait {
                    Wait::Bounded(w) => w,
                    _ => Duration::ZERO,
                },
            }),
        }
    }

    async fn acquire_inner(&self, options: AcquireOptions) -> Result<Option<MultiGuard>> {
        let counts = self.target.acquire(options).await?;
        Ok(counts.map(|counts| {
            let holds = counts.iter().map(|c| c.hold().clone()).collect();
            MultiGuard {
                guards: counts.into_iter().map(LockGuard::new).collect(),
                holds,
            }
        }))
    }
}

/// Proof of holding every lock of a [`MultiLock`]: one guard for all.
/// Release it with [`release`](MultiGuard::release); dropping it releases
/// every lock in the background.
///
/// It is valid until the earliest of its locks' deadlines (each renewed by
/// the watchdog like a [`LockGuard`]'s): [`is_held`](MultiGuard::is_held)
/// is true while every lock is held, and [`lost`](MultiGuard::lost)
/// resolves as soon as one of them is lost.
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
/// let guard = client.multi_lock(["account:1", "account:2"])?.acquire().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("a lock was lost: stop writing"),
///     _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the locks at once"]
pub struct MultiGuard {
    /// One per lock, in the order they were taken.
    guards: Vec<LockGuard>,
    /// Their holds, for the deadline and the lost signal.
    holds: Vec<Arc<Hold>>,
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiGuard")
            .field("guards", &self.guards)
            .field("held", &self.is_held())
            .finish()
    }
}

impl MultiGuard {
    /// The guard of each lock, in the order they were taken (sorted by
    /// name; on a Redis Cluster by hash slot first): its name, fencing
    /// token, owner id, [`held_lock`](LockGuard::held_lock).
    ///
    /// ```no_run
    /// # async fn demo(guard: lock_core::MultiGuard) {
    /// for lock in guard.guards() {
    ///     println!("{} token {}", lock.name(), lock.fencing_token());
    /// }
    /// # }
    /// ```
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The fencing token of the lock `name`, if this guard holds it.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let guard = client.multi_lock(["a", "b"])?.acquire().await?;
    /// assert!(guard.fencing_token("a").is_some());
    /// assert!(guard.fencing_token("c").is_none());
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(LockGuard::fencing_token)
    }

    /// Whether every lock is still held (each before its deadline, none
    /// found gone by a renewal). Never true again once false.
    ///
    /// ```no_run
    /// # async fn demo(guard: lock_core::MultiGuard) {
    /// assert!(guard.is_held());
    /// # }
    /// ```
    pub fn is_held(&self) -> bool {
        self.holds.iter().all(|h| h.is_valid())
    }

    /// `Err(Error::Lost)` (naming a lost lock) once one of the locks is no
    /// longer held.
    ///
    /// ```no_run
    /// # async fn demo(guard: lock_core::MultiGuard) -> lock_core::Result<()> {
    /// guard.ensure_held()?;
    /// # Ok(()) }
    /// ```
    pub fn ensure_held(&self) -> Result<()> {
        match self.holds.iter().find(|h| !h.is_valid()) {
            None => Ok(()),
            Some(lost) => Err(Error::Lost {
                name: lost.keys.name.clone(),
            }),
        }
    }

    /// Time left before the earliest deadline of its locks (zero once one
    /// is lost); renewals push it on.
    ///
    /// ```no_run
    /// # async fn demo(guard: lock_core::MultiGuard) {
    /// println!("valid for at least {:?}", guard.remaining());
    /// # }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.holds
            .iter()
            .map(|h| h.remaining())
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// Resolves as soon as one of the locks is lost (its deadline passed,
    /// or a renewal found it gone). Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(guard: lock_core::MultiGuard) {
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("lost"),
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) {
        if self.holds.is_empty() {
            return;
        }
        futures_util::future::select_all(self.holds.iter().map(|h| Box::pin(h.lost()))).await;
    }

    /// Releases every lock (together, each by the normal release path).
    /// `Ok(())` when every lock was still held; otherwise the first error
    /// in the order of [`guards`](Self::guards) ([`Error::Lost`] for a lock
    /// that was not held any more); the other locks are released all the
    /// same. Cancel-safe: the releases complete if this future is dropped.
    ///
    /// ```no_run
    /// # async fn demo(guard: lock_core::MultiGuard) -> lock_core::Result<()> {
    /// match guard.release().await {
    ///     Ok(()) => {}
    ///     Err(e) if e.is_lost() => eprintln!("a lock expired before we were done"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<()> {
        let results = join_all(self.guards.into_iter().map(LockGuard::release)).await;
        results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
    }
}

impl LockClient {
    /// A multi-lock over `names`: one guard for every lock, taken without
    /// deadlock (see [`MultiLock`]). The names are checked like
    /// [`lock`](LockClient::lock)'s and deduplicated; at least one is
    /// needed. Makes no Redis call.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let guard = client.multi_lock(["account:1", "account:2"])?.acquire().await?;
    /// guard.release().await?;
    /// let none: [&str; 0] = [];
    /// assert!(client.multi_lock(none).unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// ```
    pub fn multi_lock<I>(&self, names: I) -> Result<MultiLock>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let config = &self.inner.core.config;
        let keys = names
            .into_iter()
            .map(|name| {
                LockKeys::new(&config.key_prefix, name.as_ref(), config.max_name_len).map(Arc::new)
            })
            .collect::<Result<Vec<_>>>()?;
        if keys.is_empty() {
            return Err(Error::InvalidArgument(
                "a multi-lock needs at least one name".into(),
            ));
        }
        Ok(MultiLock {
            target: MultiTarget::new(self.inner.clone(), keys),
        })
    }
}
