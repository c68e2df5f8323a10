//! The fair lock (Redisson's `RFairLock`): [`LockClient::fair_lock`], a
//! [`Lock`] granted in the order its waiters arrived, of every process and
//! language, through Redisson's queue in Redis; and [`Lock::fair_queue`],
//! who waits.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::inspect::run_pipeline;
use crate::lock::Lock;
use crate::protocol::keys::{LockKeys, Rule};

/// One waiter in a fair lock's queue, as [`Lock::fair_queue`] reads it.
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
/// for waiter in client.fair_lock("nightly-report")?.fair_queue().await? {
///     println!("{} until {:?}", waiter.owner, waiter.deadline);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FairWaiter {
    /// Its owner id: `<client id>:<number>` for lock-core (the client id is
    /// [`LockClient::client_id`]), `<uuid>:<thread id>` for Redisson.
    pub owner: String,
    /// Its deadline (clients' clocks): a waiter that has not got the lock
    /// by then is taken as dead and leaves the queue when it reaches its
    /// head. `None` when the queue names it without a deadline (it then
    /// leaves at once).
    pub deadline: Option<SystemTime>,
}

impl LockClient {
    /// A handle to the fair lock called `name`: Redisson's `RFairLock`
    /// (`getFairLock(name)`) on the same keys. Waiters get the lock in the
    /// order they began to wait, across every process and language
    /// sharing the name, through the queue `redisson_lock_queue:{name}`;
    /// the lock itself is the lock's hash, so a plain
    /// [`lock`](LockClient::lock) or a Java `RLock` of the same name
    /// excludes it (they just do not queue).
    ///
    /// It has every power of a [`Lock`]: wait bounds, `try_acquire` (which
    /// never queues, like `tryLock()`), lease or watchdog, re-entry,
    /// fencing tokens, `lost()`. A waiter that stops waiting (its bound, a
    /// dropped future, shutdown) leaves the queue at once. The wait
    /// allowance is the client's [`fair_lock_wait_timeout`](crate::ClientConfig::fair_lock_wait_timeout),
    /// which must be the same in every client of the lock.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let lock = client.fair_lock("ledger:close")?;
    /// assert!(lock.is_fair());
    /// let guard = lock.acquire().await?; // in arrival order
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, name: impl AsRef<str>) -> Result<Lock> {
        let config = &self.inner.core.config;
        let mut keys = LockKeys::with_rule(
            &config.key_prefix,
            name.as_ref(),
            config.max_name_len,
            Rule::Fair,
        )?;
        keys.fair_wait_ms =
            u64::try_from(config.fair_lock_wait_timeout.as_millis()).unwrap_or(u64::MAX);
        Ok(Lock::new(self.clone(), Arc::new(keys)))
    }
}

impl Lock {
    /// Whether this handle is a fair lock ([`LockClient::fair_lock`]).
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// assert!(client.fair_lock("a")?.is_fair());
    /// assert!(!client.lock("a")?.is_fair());
    /// # Ok(()) }
    /// ```
    pub fn is_fair(&self) -> bool {
        self.keys.rule == Rule::Fair
    }

    /// Who waits for this fair lock, first first, read in one
    /// `MULTI`/`EXEC` (`LRANGE` of the queue, `ZRANGE` of the deadlines).
    /// Waiters of lock-core and of Redisson alike; dead waiters stay listed
    /// until a client's next call on the lock takes them out. Fails with
    /// [`Error::InvalidArgument`] on a handle that is not fair.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let queue = client.fair_lock("ledger:close")?.fair_queue().await?;
    /// println!("{} waiting", queue.len());
    /// # Ok(()) }
    /// ```
    pub async fn fair_queue(&self) -> Result<Vec<FairWaiter>> {
        if !self.is_fair() {
            return Err(Error::InvalidArgument(format!(
                "`{}` is not a fair lock handle (make it with LockClient::fair_lock)",
                self.keys.name
            )));
        }
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("LRANGE")
            .arg(&self.keys.fair_queue)
            .arg(0)
            .arg(-1)
            .cmd("ZRANGE")
            .arg(&self.keys.fair_timeouts)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES");
        let replies = run_pipeline(&self.client.inner.core, &pipe).await?;
        let [queue, deadlines]: [Value; 2] = replies
            .try_into()
            .map_err(|r| Error::Protocol(format!("fair queue read answered {r:?}")))?;
        let queue: Vec<String> = redis::from_redis_value(queue)
            .map_err(|e| Error::Protocol(format!("LRANGE of a fair queue answered {e}")))?;
        let deadlines: Vec<(String, f64)> = redis::from_redis_value(deadlines)
            .map_err(|e| Error::Protocol(format!("ZRANGE of a fair queue answered {e}")))?;
        Ok(queue
            .into_iter()
            .map(|owner| {
                let deadline = deadlines
                    .iter()
                    .find(|(o, _)| *o == owner)
                    .and_then(|(_, ms)| {
                        (ms.is_finite() && *ms >= 0.0)
                            .then(|| UNIX_EPOCH + Duration::from_millis(*ms as u64))
                    });
                FairWaiter { owner, deadline }
            })
            .collect())
    }
}
