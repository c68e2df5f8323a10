//! The lock handle: acquire (blocking, bounded, try), inspect, force-unlock.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tracing::Instrument;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::acquire::Reentrancy;
use crate::hold::lease_ms;
use crate::hold::release::Released;
use crate::hold::run_to_end::RunToEnd;
use crate::hold::target::Target;
use crate::hold::Hold;
use crate::options::{AcquireOptions, LockMode, Wait};
use crate::protocol::fair;
use crate::protocol::force_unlock::{force_unlock_cmd, ForceUnlockReply};
use crate::protocol::keys::{LockKeys, Rule};
use crate::protocol::unexpected_reply;

/// A named distributed lock. Cheap to clone; make one per name and reuse it,
/// or make them on the fly: creating a handle makes no Redis call.
///
/// | Redisson `RLock`            | here                                            |
/// |-----------------------------|-------------------------------------------------|
/// | `lock()`                    | [`acquire`](Lock::acquire)                      |
/// | `lock(leaseTime)`           | [`acquire_with_lease`](Lock::acquire_with_lease)|
/// | `tryLock()`                 | [`try_acquire`](Lock::try_acquire)              |
/// | `tryLock(wait, unit)`       | [`acquire_timeout`](Lock::acquire_timeout)      |
/// | `tryLock(wait, lease, unit)`| [`acquire_with`](Lock::acquire_with)            |
/// | `unlock()`                  | [`LockGuard::release`] (or [`Lock::unlock`])    |
/// | `forceUnlock()`             | [`force_unlock`](Lock::force_unlock)            |
/// | `isLocked()`                | [`is_locked`](Lock::is_locked)                  |
/// | `getHoldCount()`            | [`hold_count`](Lock::hold_count)                |
/// | `isHeldByCurrentThread()`   | [`is_held_by_current_context`](Lock::is_held_by_current_context) |
/// | `remainTimeToLive()`        | [`remaining_ttl`](Lock::remaining_ttl)          |
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
/// let lock = client.lock("invoice:2024-06")?;
/// let guard = lock.acquire().await?;
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    pub(crate) client: LockClient,
    pub(crate) keys: Arc<LockKeys>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.keys.lock)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(client: LockClient, keys: Arc<LockKeys>) -> Self {
        Lock { client, keys }
    }

    /// The name given to [`LockClient::lock`].
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// assert_eq!(client.lock("a")?.name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// Which primitive this handle is: [`LockMode::Exclusive`] for
    /// [`LockClient::lock`], or a side of a read-write lock
    /// ([`RwLock::read`](crate::RwLock::read), [`RwLock::write`](crate::RwLock::write)).
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// assert_eq!(client.lock("a")?.mode(), lock_core::LockMode::Exclusive);
    /// # Ok(()) }
    /// ```
    pub fn mode(&self) -> LockMode {
        self.keys.rule.mode()
    }

    /// The Redis key of the lock (key prefix + name).
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let lock = client.lock("a")?;
    /// assert!(lock.key().ends_with("a"));
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.keys.lock
    }

    /// Acquires the lock, waiting as long as it takes; the watchdog keeps it
    /// until the guard is released or dropped. Re-enters when the current
    /// [`LockContext`](crate::LockContext) holds it already.
    ///
    /// Cancel-safe: when this future is dropped after the request reached
    /// Redis, a lock it took is released in the background.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.acquire_with(AcquireOptions::new()).await
    }

    /// Acquires the lock, waiting at most `wait`; fails with
    /// [`Error::WaitTimeout`] after that. A zero `wait` is one attempt. The
    /// bound holds whatever Redis does (see [`AcquireOptions::wait`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// match lock.acquire_timeout(Duration::from_secs(1)).await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(e) if e.is_wait_timeout() => println!("busy, try later"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<LockGuard> {
        self.acquire_with(AcquireOptions::new().wait(wait)).await
    }

    /// Acquires the lock, waiting as long as it takes, for a fixed `lease`:
    /// the lock expires after it and is not renewed.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire_with_lease(std::time::Duration::from_secs(10)).await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub async fn acquire_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire_with(AcquireOptions::new().lease(lease)).await
    }

    /// One attempt, no waiting: `Ok(None)` when another owner holds the lock.
    /// Returns within the client's `connect_timeout + command_timeout`,
    /// whatever Redis does.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// if let Some(guard) = lock.try_acquire().await? {
    ///     // we are the one replica that runs the job
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.acquire_inner(AcquireOptions::new().no_wait()).await
    }

    /// Acquires the lock with explicit options (wait bound, lease).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// use lock_core::AcquireOptions;
    /// use std::time::Duration;
    /// let guard = lock
    ///     .acquire_with(AcquireOptions::new().wait(Duration::from_secs(2)).lease(Duration::from_secs(5)))
    ///     .await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub async fn acquire_with(&self, options: AcquireOptions) -> Result<LockGuard> {
        match self.acquire_inner(options).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::WaitTimeout {
                name: self.keys.name.clone(),
                waited: match options.wait {
                    Wait::Bounded(w) => w,
                    _ => Duration::ZERO,
                },
            }),
        }
    }

    /// This lock as the engine sees it.
    pub(crate) fn target(&self) -> Target {
        Target {
            engine: self.client.inner.clone(),
            keys: self.keys.clone(),
        }
    }

    /// A fresh hold, whatever the current lock context or section holds:
    /// never a re-entry (an election's campaign: two leaderships must never
    /// share one hold). `None` when the wait bound passed.
    pub(crate) async fn acquire_unshared(
        &self,
        options: AcquireOptions,
    ) -> Result<Option<LockGuard>> {
        let reentrancy = Reentrancy::default();
        let target = self.scoped_target(&reentrancy, options.section)?;
        let count = target.acquire(options, reentrancy).await?;
        Ok(count.map(LockGuard::new))
    }

    /// Every acquire method's way into the engine.
    async fn acquire_inner(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        let reentrancy = self.reentrancy();
        let target = self.scoped_target(&reentrancy, options.section)?;
        let count = target.acquire(options, reentrancy).await?;
        Ok(count.map(LockGuard::new))
    }

    /// The hold the current task would re-enter, if any.
    fn current_hold(&self) -> Option<Arc<Hold>> {
        let reentrancy = self.reentrancy();
        self.scoped_target(&reentrancy, false)
            .ok()?
            .reentrant_hold(&reentrancy)
            .map(|(hold, _)| hold)
    }

    /// Deletes the lock whoever holds it, and wakes its waiters. Returns
    /// whether there was a lock to delete. The holder's guard learns it at
    /// its next renewal ([`LockGuard::lost`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// if lock.force_unlock().await? {
    ///     println!("removed a stuck lock");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        let core = &self.client.inner.core;
        let publish = core.publish_command().await?;
        let (script, cmd) = match self.keys.rule {
            // a fair lock tells the next in its queue
            Rule::Fair => {
                let script = &core.scripts.fair_force_unlock;
                (script, fair::force_unlock_cmd(script, &self.keys, publish))
            }
            _ => {
                let script = &core.scripts.force_unlock;
                (script, force_unlock_cmd(script, &self.keys, publish))
            }
        };
        let reply = core.run_script(script, &cmd).await?;
        let deleted = match ForceUnlockReply::parse(&reply)? {
            ForceUnlockReply::DeletedUntold { refusal } => {
                core.publish_denied(&self.keys, &refusal);
                true
            }
            ForceUnlockReply::Deleted => true,
            ForceUnlockReply::NotFound => false,
        };
        tracing::debug!(
            lock = %self.keys.name,
            key = %self.keys.lock,
            deleted,
            "lock force-unlocked"
        );
        Ok(deleted)
    }

    /// Whether any owner holds the lock now.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// println!("locked: {}", lock.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(self.keys.lock.as_str());
        match self.client.inner.core.run_cmd(&cmd).await? {
            Value::Int(n) => Ok(n > 0),
            other => Err(unexpected_reply("EXISTS", &other)),
        }
    }

    /// How many times the current [`LockContext`](crate::LockContext) holds the lock (re-entries
    /// included); 0 outside a context or when it does not hold it.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// lock_core::in_context(async {
    ///     let outer = lock.acquire().await?;
    ///     let inner = lock.acquire().await?; // re-entry, no waiting
    ///     assert_eq!(lock.hold_count().await?, 2);
    ///     inner.release().await?;
    ///     outer.release().await
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        let Some(hold) = self.current_hold() else {
            return Ok(0);
        };
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.keys.lock.as_str())
            .arg(self.keys.field(&hold.owner).as_ref());
        let reply = self.client.inner.core.run_cmd(&cmd).await?;
        redis::from_redis_value::<Option<u32>>(reply)
            .map(Option::unwrap_or_default)
            .map_err(|e| Error::Protocol(format!("HGET answered a non-count: {e}")))
    }

    /// Whether the current [`LockContext`](crate::LockContext) holds the lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// assert!(!lock.is_held_by_current_context().await?); // no context open
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_context(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// Time until the lock expires: `None` when it is not locked,
    /// `Some(Duration::MAX)` when its key has no expiry (never the case for
    /// locks taken by this crate or Redisson).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// if let Some(ttl) = lock.remaining_ttl().await? {
    ///     println!("held for another {ttl:?} at most, unless renewed");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(self.keys.lock.as_str());
        match self.client.inner.core.run_cmd(&cmd).await? {
            Value::Int(-2) => Ok(None),
            Value::Int(-1) => Ok(Some(Duration::MAX)),
            Value::Int(ms) if ms >= 0 => Ok(Some(Duration::from_millis(ms as u64))),
            other => Err(unexpected_reply("PTTL", &other)),
        }
    }

    /// Releases one hold of the current [`LockContext`](crate::LockContext), Redisson-style,
    /// without a guard. Fails with [`Error::NotHeld`] (and changes nothing)
    /// when the context does not hold the lock, or outside any context.
    ///
    /// Prefer [`LockGuard::release`]: a guard whose hold was released here
    /// releases one more hold when it is released or dropped.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let err = lock.unlock().await.unwrap_err(); // no context: nothing held
    /// assert!(err.is_not_held());
    /// # Ok(()) }
    /// ```
    pub async fn unlock(&self) -> Result<()> {
        let not_held = || Error::NotHeld {
            name: self.keys.name.clone(),
        };
        let hold = self.current_hold().ok_or_else(not_held)?;
        let core = self.client.inner.core.clone();
        let lease_ms = lease_ms(None, core.config.watchdog_timeout);
        // the hold's own keys: a reader's name its own local queue
        let keys = hold.keys.clone();
        let span = tracing::debug_span!(
            "lock.release",
            lock = %self.keys.name,
            key = %self.keys.lock
        );
        // Runs to the end once started, finished in the background if this
        // future is dropped (tracked with the background work: a shutdown
        // waits for it).
        let runtime = core.runtime.clone();
        let tracker = core.background.clone();
        let call = RunToEnd::new(
            tracker.track_future(
                async move {
                    let released = core.release_hold(&keys, &hold, lease_ms).await;
                    if let Ok(released) = released {
                        released.log();
                    }
                    released
                }
                .instrument(span),
            ),
            &tracker,
            &runtime,
        );
        match call.await? {
            Released::NotHeld => Err(not_held()),
            _ => Ok(()),
        }
    }
}

impl LockClient {
    /// A handle to the lock called `name` (the Redis key is the client's key
    /// prefix followed by `name`). Checks the name; makes no Redis call.
    /// Takes any string: `&str`, `String`, `format!(..)`.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let lock = client.lock("order:42")?;
    /// let id = 7;
    /// let account = client.lock(format!("account:{id}"))?;
    /// assert!(client.lock("").unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<str>) -> Result<Lock> {
        let name = name.as_ref();
        let keys = LockKeys::new(
            &self.inner.core.config.key_prefix,
            name,
            self.inner.core.config.max_name_len,
        )?;
        Ok(Lock::new(self.clone(), Arc::new(keys)))
    }
}
