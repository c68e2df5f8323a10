//! A shareable view of a held lock: what code running under a lock needs
//! (name, fencing token, validity, lost signal) without the power to
//! release it.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::hold::engine::Engine;
use crate::hold::Hold;
use crate::options::LockMode;
use crate::protocol::keys::LockKeys;

/// A held lock, seen from the code that runs under it. Cheap to clone
/// (three `Arc`s); `Send + Sync + 'static`, so it can go into a request's
/// extensions or a spawned task.
///
/// Where it comes from:
/// - [`LockGuard::held_lock`](crate::LockGuard::held_lock) for a guard you hold;
/// - [`HeldLock::current`] inside the body of a `#[distributed_lock]`
///   function, or inside a handler behind lock-tower's `LockLayer` (which
///   also puts it into the request's extensions);
/// - [`HeldLock::current_for`] for one lock among nested sections.
///
/// It says "held" only while the guard's hold is valid (see
/// [`LockGuard`](crate::LockGuard)) and not yet released: once the hold
/// was released, handed on, or lost, [`is_held`](Self::is_held) is false
/// for good and [`ended`](Self::ended) has resolved.
///
/// ```no_run
/// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
/// let guard = lock.acquire().await?;
/// let held = guard.held_lock();
/// assert_eq!(held.fencing_token(), guard.fencing_token());
/// assert!(held.is_held());
/// guard.release().await?;
/// assert!(!held.is_held()); // released: no longer held
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct HeldLock {
    engine: Arc<Engine>,
    keys: Arc<LockKeys>,
    hold: Arc<Hold>,
    lease: Option<Duration>,
}

impl std::fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLock")
            .field("name", &self.keys.name)
            .field("key", &self.keys.lock)
            .field("fencing_token", &self.hold.token)
            .field("held", &self.is_held())
            .finish()
    }
}

impl HeldLock {
    pub(crate) fn new(
        engine: Arc<Engine>,
        keys: Arc<LockKeys>,
        hold: Arc<Hold>,
        lease: Option<Duration>,
    ) -> Self {
        HeldLock {
            engine,
            keys,
            hold,
            lease,
        }
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub(crate) fn keys(&self) -> &Arc<LockKeys> {
        &self.keys
    }

    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    /// What local bookkeeping calls the handle (see `LockKeys::ident`).
    pub(crate) fn ident(&self) -> &str {
        &self.keys.ident
    }

    /// How this hold holds the lock: [`LockMode::Exclusive`] (a reentrant
    /// lock), or a side of a read-write lock.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// use lock_core::LockMode;
    /// let guard = client.rw_lock("catalog")?.read().acquire().await?;
    /// assert_eq!(guard.held_lock().mode(), LockMode::Read);
    /// # Ok(()) }
    /// ```
    pub fn mode(&self) -> LockMode {
        self.keys.rule.mode()
    }

    /// The lock's name (without the client's key prefix).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// assert_eq!(guard.held_lock().name(), lock.name());
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The lock's Redis key (the client's key prefix + the name).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// assert_eq!(guard.held_lock().key(), lock.key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.keys.lock
    }

    /// The hold's fencing token (see
    /// [`LockGuard::fencing_token`](crate::LockGuard::fencing_token)).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// assert_eq!(guard.held_lock().fencing_token(), guard.fencing_token());
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.hold.token
    }

    /// The hold's owner id in the lock's hash (see
    /// [`LockGuard::owner_id`](crate::LockGuard::owner_id)).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// assert_eq!(guard.held_lock().owner_id(), guard.owner_id());
    /// # Ok(()) }
    /// ```
    pub fn owner_id(&self) -> &str {
        &self.hold.owner
    }

    /// The fixed lease, or `None` for a watchdog-renewed lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// assert_eq!(lock.acquire().await?.held_lock().lease(), None);
    /// # Ok(()) }
    /// ```
    pub fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// Whether the lock is still held through this hold: its deadline has
    /// not passed, no renewal found it gone, and it was not released or
    /// handed on. Never true again once false.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// assert!(guard.held_lock().is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        !self.hold.has_ended() && self.hold.is_valid()
    }

    /// `Err(Error::Lost)` once [`is_held`](Self::is_held) is false; handy
    /// with `?` between the steps of a critical section.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// guard.held_lock().ensure_held()?;
    /// # Ok(()) }
    /// ```
    pub fn ensure_held(&self) -> Result<()> {
        if self.is_held() {
            Ok(())
        } else {
            Err(Error::Lost {
                name: self.keys.name.clone(),
            })
        }
    }

    /// Resolves when the lock is lost: at the hold's deadline (a timer, so
    /// it fires even when Redis cannot be reached) or as soon as a renewal
    /// finds the lock gone. Pending while the lock is held, and after a
    /// normal release too (use [`ended`](Self::ended) to also wake then).
    /// Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// let held = guard.held_lock();
    /// tokio::select! {
    ///     _ = held.lost() => return Err(lock_core::Error::Lost { name: held.name().into() }),
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.hold.lost().await
    }

    /// Resolves once the lock is no longer held through this hold: lost,
    /// released, or handed on. Cancel-safe. What a task working on the
    /// lock's behalf should stop on.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// let held = guard.held_lock();
    /// let watcher = tokio::spawn(async move { held.ended().await });
    /// guard.release().await?;
    /// watcher.await.expect("watcher"); // woken by the release
    /// # Ok(()) }
    /// ```
    pub async fn ended(&self) {
        self.hold.ended().await
    }

    /// A [`CancellationToken`] cancelled once the lock is no longer held
    /// through this hold (lost, released or handed on): hand it to work
    /// that must stop when the lock goes. Each call returns a new token,
    /// watched by a small task until the hold ends or the token is
    /// cancelled; call it once per piece of work. Needs a tokio runtime.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// let stop = guard.held_lock().cancellation_token();
    /// tokio::select! {
    ///     _ = stop.cancelled() => eprintln!("the lock went: stop"),
    ///     _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        let token = CancellationToken::new();
        if !self.is_held() {
            token.cancel();
            return token;
        }
        let watched = token.clone();
        let hold = self.hold.clone();
        tokio::spawn(async move {
            tokio::select! {
                biased;
                _ = hold.ended() => watched.cancel(),
                _ = watched.cancelled() => {}
            }
        });
        token
    }
}
