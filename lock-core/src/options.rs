//! The options of one acquisition (how long to wait, the lease, a
//! section's hold, replica acknowledgement): plain data, checked before
//! the engine runs.

use std::time::Duration;

use crate::config::ReplicaAck;
use crate::error::{Error, Result};

/// How long an acquisition may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    Forever,
    Bounded(Duration),
    Never,
}

/// Options of one acquisition: how long to wait, and the lease.
///
/// The defaults are "wait until acquired" and "watchdog lease" (the lock's
/// key expires after the client's watchdog timeout unless renewed, and the
/// watchdog renews it for as long as the guard lives).
///
/// ```
/// use lock_core::AcquireOptions;
/// use std::time::Duration;
///
/// let opts = AcquireOptions::new()
///     .wait(Duration::from_secs(2))      // give up after 2 s
///     .lease(Duration::from_secs(10));   // expire after 10 s, no renewal
/// # let _ = opts;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct AcquireOptions {
    pub(crate) wait: Wait,
    pub(crate) lease: Option<Duration>,
    pub(crate) section: bool,
    replicas: Replicas,
}

/// Whether a fresh acquisition waits for replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Replicas {
    /// As the client is configured ([`ClientConfig::wait_for_replicas`](crate::ClientConfig::wait_for_replicas)).
    Client,
    Wait(ReplicaAck),
    Skip,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl AcquireOptions {
    /// Wait until acquired, watchdog lease.
    ///
    /// ```
    /// let opts = lock_core::AcquireOptions::new();
    /// # let _ = opts;
    /// ```
    pub fn new() -> Self {
        AcquireOptions {
            wait: Wait::Forever,
            lease: None,
            section: false,
            replicas: Replicas::Client,
        }
    }

    /// Give up with [`Error::WaitTimeout`] when the lock is not acquired
    /// within `wait`. Zero means one attempt, as [`no_wait`](Self::no_wait)
    /// (Redisson's `tryLock(0, …)`).
    ///
    /// The bound holds whatever Redis does: no Redis call of the
    /// acquisition runs past it (a connection attempt included) and no
    /// retry starts after it. When the bound passes during an attempt, the
    /// acquire fails with [`Error::WaitTimeout`]; when Redis had failed
    /// before that (refused, broken connection, no answer within the
    /// command time-out), with that failure.
    ///
    /// ```
    /// let opts = lock_core::AcquireOptions::new().wait(std::time::Duration::from_millis(500));
    /// # let _ = opts;
    /// ```
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = if wait.is_zero() {
            Wait::Never
        } else {
            Wait::Bounded(wait)
        };
        self
    }

    /// Make one attempt only; when the lock is held by another owner, fail
    /// with [`Error::WaitTimeout`] (see also [`Lock::try_acquire`](crate::Lock::try_acquire)). The
    /// attempt takes at most the client's `connect_timeout +
    /// command_timeout`, retry included.
    ///
    /// ```
    /// let opts = lock_core::AcquireOptions::new().no_wait();
    /// # let _ = opts;
    /// ```
    pub fn no_wait(mut self) -> Self {
        self.wait = Wait::Never;
        self
    }

    /// Hold the lock for at most `lease` (at least 1 ms): the key expires then
    /// and is never renewed. Without it the watchdog keeps the lock alive.
    ///
    /// ```
    /// let opts = lock_core::AcquireOptions::new().lease(std::time::Duration::from_secs(30));
    /// # let _ = opts;
    /// ```
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Acquire for a *section* (what `#[distributed_lock]` and lock-tower's
    /// layer do): the acquisition re-enters a hold only when it is nested in
    /// a section of that hold ([`LockContext::enter`](crate::LockContext::enter)) or when the current
    /// context holds the lock through the manual API; a new hold it takes is
    /// re-entered only by acquisitions nested in its section, never by the
    /// context's other futures. So sibling futures of one task (`join!`,
    /// `select!`) that take the same lock this way exclude each other.
    ///
    /// ```
    /// let opts = lock_core::AcquireOptions::new().for_section();
    /// # let _ = opts;
    /// ```
    pub fn for_section(mut self) -> Self {
        self.section = true;
        self
    }

    /// After a fresh acquisition, wait until `replicas` replicas
    /// acknowledged it, at most `timeout`; when fewer did, the hold is
    /// released and the acquire fails with [`Error::NotReplicated`].
    /// Overrides the client's setting
    /// ([`ClientBuilder::wait_for_replicas`](crate::ClientBuilder::wait_for_replicas)).
    /// Re-entries of a hold do not wait. See the crate docs, "Safety".
    ///
    /// ```
    /// let opts = lock_core::AcquireOptions::new()
    ///     .wait_for_replicas(1, std::time::Duration::from_millis(500));
    /// # let _ = opts;
    /// ```
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Replicas::Wait(ReplicaAck::new(replicas, timeout));
        self
    }

    /// Do not wait for replicas, whatever the client's setting.
    ///
    /// ```
    /// let opts = lock_core::AcquireOptions::new().skip_replica_wait();
    /// # let _ = opts;
    /// ```
    pub fn skip_replica_wait(mut self) -> Self {
        self.replicas = Replicas::Skip;
        self
    }

    /// The replica acknowledgement this acquisition needs, if any.
    pub(crate) fn replica_ack(&self, client: Option<ReplicaAck>) -> Option<ReplicaAck> {
        match self.replicas {
            Replicas::Client => client,
            Replicas::Wait(ack) => Some(ack),
            Replicas::Skip => None,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if let Replicas::Wait(ack) = &self.replicas {
            ack.validate()?;
        }
        if let Some(lease) = self.lease {
            if lease < Duration::from_millis(1) {
                return Err(Error::InvalidArgument("lease must be at least 1ms".into()));
            }
            if lease > crate::config::MAX_LEASE {
                return Err(Error::InvalidArgument(
                    "lease must be at most 365 days".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Which primitive a lock handle is: the reentrant lock, or a side of a
/// read-write lock ([`RwLock`](crate::RwLock)).
///
/// ```no_run
/// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
/// use lock_core::LockMode;
/// assert_eq!(client.lock("a")?.mode(), LockMode::Exclusive);
/// assert_eq!(client.rw_lock("b")?.read().mode(), LockMode::Read);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockMode {
    /// The reentrant lock (Redisson's `RLock`): one holder at a time.
    Exclusive,
    /// The read side of a read-write lock (`RReadWriteLock.readLock()`):
    /// readers share it, and exclude writers.
    Read,
    /// The write side of a read-write lock (`RReadWriteLock.writeLock()`):
    /// one writer, and no reader but the writer's own (a downgrade).
    Write,
}

impl LockMode {
    /// `"exclusive"`, `"read"` or `"write"`.
    ///
    /// ```
    /// assert_eq!(lock_core::LockMode::Read.as_str(), "read");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "exclusive",
            LockMode::Read => "read",
            LockMode::Write => "write",
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
