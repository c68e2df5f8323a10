//! The read-write lock: `LockClient::rw_lock`, its two sides as lock
//! handles, and the scope rules of a read acquisition (its own local
//! queue, downgrades) and of a write acquisition (no upgrade).
//!
//! A side is a [`Lock`] whose keys carry its rule ([`LockMode::Read`] or
//! [`LockMode::Write`]): the engine runs it with the read-write scripts
//! (`protocol/rw_*.lua`) and everything else as for the lock — waiting,
//! turns between clients, renewal, validity deadline, `lost()`, fencing
//! tokens, cancellation of lost replies, shutdown.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::hold::acquire::Reentrancy;
use crate::hold::target::Target;
use crate::hold::Hold;
use crate::inspect::LockStatus;
use crate::lock::Lock;
use crate::options::LockMode;
use crate::protocol::keys::{ident_of, reader_local_of, LockKeys, ReaderScope};

/// Numbers the local queues of read acquisitions made outside a lock
/// context (each has its own: readers never queue behind each other).
static NEXT_READER: AtomicU64 = AtomicU64::new(1);

/// A named read-write lock, wire-compatible with Redisson's
/// `RReadWriteLock`: readers share it, a writer has it alone. Cheap to
/// clone; creating one makes no Redis call.
///
/// Each side is a [`Lock`] handle with every power of the lock: wait
/// bounds, `try_acquire`, a fixed lease or the watchdog, re-entry in a
/// [`LockContext`](crate::LockContext) or a nested section, the validity
/// deadline and [`LockGuard::lost`](crate::LockGuard::lost), a fencing
/// token on every guard, release at shutdown.
///
/// | Redisson `RReadWriteLock`   | here                         |
/// |-----------------------------|------------------------------|
/// | `readLock()`                | [`read`](RwLock::read)       |
/// | `writeLock()`               | [`write`](RwLock::write)     |
///
/// Better than Redisson, on the same keys:
///
/// - **No upgrade deadlock.** Asking for the write side where the caller
///   holds only the read side (same lock context or section) fails at once
///   with [`Error::UpgradeRefused`] instead of waiting for itself forever.
///   A downgrade (read while holding the write) works, as in Redisson.
/// - **Writers do not starve.** While a writer of this library waits, new
///   readers of this library wait behind it (a mark `lockcore_writer:{name}`
///   that Redisson ignores, renewed by the waiting writer, lapsing 2 s after
///   it stops), and writers of several clients take turns as for the lock.
///   A Redisson reader does not see the mark: a stream of Java readers can
///   still keep a writer waiting. The preference goes to writers: under a
///   stream of writers of several clients with no gap, new readers wait.
/// - **Renewal touches only its own keys.** Redisson's watchdog renews every
///   reader's timeout key; ours renews only this client's own readers'.
///
/// Two things to know:
///
/// - Re-entry needs a scope, as for the lock: a read nested in a lock
///   context or section re-enters its read; a second read taken by the
///   same task outside any scope is a hold of its own, and while a writer
///   waits it waits behind the writer — which waits for the first read
///   (until a wait bound ends it). Take nested reads in a
///   [`LockContext`](crate::LockContext), or through the attribute or the
///   layer.
/// - In a fleet shared with Java readers, keep this client's read leases
///   (its watchdog timeout, or a fixed lease) at most Redisson's
///   `lockWatchdogTimeout` (30 s by default): Redisson's watchdog sets every
///   reader's timeout key to its own lease, shortening a longer one.
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
/// let prices = client.rw_lock("prices")?;
/// // many readers at once, in any replica
/// let read = prices.read().acquire().await?;
/// read.release().await?;
/// // one writer, nobody else
/// let write = prices.write().acquire().await?;
/// write.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    client: LockClient,
    read: Arc<LockKeys>,
    write: Arc<LockKeys>,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("key", &self.read.lock)
            .finish()
    }
}

impl LockClient {
    /// A handle to the read-write lock called `name` (the Redis key is the
    /// client's key prefix followed by `name`, as for [`LockClient::lock`];
    /// the same name as a Java service's `redisson.getReadWriteLock(name)`
    /// shares the lock with it). Checks the name; makes no Redis call.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let catalog = client.rw_lock("catalog")?;
    /// let guard = catalog.read().acquire().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn rw_lock(&self, name: impl AsRef<str>) -> Result<RwLock> {
        let config = &self.inner.core.config;
        let side = |rule: LockMode| {
            LockKeys::with_rule(
                &config.key_prefix,
                name.as_ref(),
                config.max_name_len,
                rule.into(),
            )
            .map(Arc::new)
        };
        Ok(RwLock {
            client: self.clone(),
            read: side(LockMode::Read)?,
            write: side(LockMode::Write)?,
        })
    }
}

impl RwLock {
    /// The name given to [`LockClient::rw_lock`].
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// assert_eq!(client.rw_lock("a")?.name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.read.name
    }

    /// The Redis key of the lock's hash (key prefix + name).
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// assert!(client.rw_lock("a")?.key().ends_with('a'));
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.read.lock
    }

    /// The read side: any number of readers, in any client, hold it at
    /// once while nobody writes. A reader re-enters its own hold in its
    /// lock context or section; a read where the scope holds the write side
    /// is a downgrade (granted at once, and kept after the write's release).
    ///
    /// ```no_run
    /// # async fn demo(rw: lock_core::RwLock) -> lock_core::Result<()> {
    /// let guard = rw.read().acquire().await?;
    /// println!("reading under token {}", guard.fencing_token());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self) -> Lock {
        Lock::new(self.client.clone(), self.read.clone())
    }

    /// The write side: one writer, and no reader but the writer's own
    /// downgrades. Waiting writers keep new readers of this library out
    /// (see the type's docs); asking for it where the scope holds only the
    /// read side fails with [`Error::UpgradeRefused`].
    ///
    /// ```no_run
    /// # async fn demo(rw: lock_core::RwLock) -> lock_core::Result<()> {
    /// let guard = rw.write().acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn write(&self) -> Lock {
        Lock::new(self.client.clone(), self.write.clone())
    }

    /// Who holds the lock now, in which mode (one atomic read; see
    /// [`Lock::status`]): its `mode`, its readers and its writer in
    /// `owners`, each with its [`LockMode`].
    ///
    /// ```no_run
    /// # async fn demo(rw: lock_core::RwLock) -> lock_core::Result<()> {
    /// let status = rw.status().await?;
    /// println!("{:?}: {} holder(s)", status.mode, status.owners.len());
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<LockStatus> {
        self.read().status().await
    }

    /// Deletes the lock whatever its mode and whoever holds it, and wakes
    /// every waiter; the holders' guards learn it at their next renewal.
    /// Readers' timeout keys are left to expire (as Redisson's). Returns
    /// whether there was a lock to delete.
    ///
    /// ```no_run
    /// # async fn demo(rw: lock_core::RwLock) -> lock_core::Result<()> {
    /// if rw.force_unlock().await? {
    ///     println!("removed a stuck lock");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.write().force_unlock().await
    }
}

impl Lock {
    /// This lock as the engine sees it for an acquisition (or a look-up of
    /// the hold it would re-enter) in `reentrancy`'s scope. For a reader,
    /// keys of its own: its local queue (the lock context's, for manual
    /// acquisitions in a context, so that they re-enter each other; else
    /// one of its own), and the scope's write hold, which makes it a
    /// downgrade. For a writer, the upgrade check.
    pub(crate) fn scoped_target(&self, reentrancy: &Reentrancy, section: bool) -> Result<Target> {
        let target = self.target();
        match self.keys.rule.mode() {
            LockMode::Exclusive => Ok(target),
            LockMode::Write => {
                if target.reentrant_hold(reentrancy).is_none()
                    && self.scope_hold(LockMode::Read, reentrancy).is_some()
                {
                    return Err(Error::UpgradeRefused {
                        name: self.keys.name.clone(),
                    });
                }
                Ok(target)
            }
            LockMode::Read => {
                // A section nested in the context's manual read re-enters
                // it (as for the lock); otherwise a section's read is a
                // hold of its own (re-entered by its nested sections).
                let scope = match reentrancy.context {
                    Some(id) if !section || self.context_read(id).is_some() => {
                        ReaderScope::Context(id)
                    }
                    _ => ReaderScope::Alone(NEXT_READER.fetch_add(1, Ordering::Relaxed)),
                };
                let downgrade = self
                    .scope_hold(LockMode::Write, reentrancy)
                    .map(|hold| hold.owner.clone());
                Ok(Target {
                    engine: target.engine,
                    keys: Arc::new(self.keys.for_reader(scope, downgrade)),
                })
            }
        }
    }

    /// The manual read hold of the lock context `context`, if any.
    fn context_read(&self, context: u64) -> Option<Arc<Hold>> {
        let local = self.keys.reader_local(ReaderScope::Context(context));
        self.client.inner.core.queues.context_hold(&local, context)
    }

    /// The valid hold of the side `side` of this read-write lock that the
    /// scope has: its innermost section of that side, else its lock
    /// context's manual hold.
    fn scope_hold(&self, side: LockMode, reentrancy: &Reentrancy) -> Option<Arc<Hold>> {
        // No lock context: no scope to look in (and nothing built).
        let ctx = crate::LockContext::current()?;
        let client_id = &self.client.inner.core.client_id;
        let ident = ident_of(&self.keys.lock, side.into());
        if let Some(hold) = ctx
            .section_hold(client_id, &ident)
            .filter(|hold| hold.is_valid() && hold.counts() > 0)
        {
            return Some(hold);
        }
        let context = reentrancy.context?;
        let local = match side {
            LockMode::Read => reader_local_of(&ident, ReaderScope::Context(context)),
            _ => ident,
        };
        self.client.inner.core.queues.context_hold(&local, context)
    }
}
