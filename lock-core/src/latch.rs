//! The count-down latch, wire-compatible with Redisson's `RCountDownLatch`.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::hold::engine::Engine;
use crate::hold::permits::RECHECK;
use crate::protocol::sem_keys::LatchKeys;
use crate::protocol::semaphore::{count_down_cmd, parse_count_down, set_cmd};

impl LockClient {
    /// A handle on the count-down latch `name` (Redisson's `RCountDownLatch`
    /// on the same name). On a Redis Cluster a name with a `{` is refused
    /// ([`Error::InvalidName`]): Redisson's latch channel adds its own
    /// braces, which would put it in another slot.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let ready = client.latch("migrations-done")?;
    /// ready.try_set_count(3).await?;
    /// // each of three workers, when done:
    /// ready.count_down().await?;
    /// # Ok(()) }
    /// ```
    pub fn latch(&self, name: impl AsRef<str>) -> Result<CountDownLatch> {
        let core = &self.inner.core;
        let keys = LatchKeys::new(
            &core.config.key_prefix,
            name.as_ref(),
            core.config.max_name_len,
            core.cluster,
        )?;
        Ok(CountDownLatch {
            engine: self.inner.clone(),
            keys: Arc::new(keys),
        })
    }
}

/// Redisson's `RCountDownLatch` on one name (see [`LockClient::latch`]):
/// a count that [`count_down`](Self::count_down) takes to zero, and
/// [`wait`](Self::wait) for zero. Cheap to clone.
///
/// Waiting never hangs on a lost message: waiters are woken by the latch's
/// channel and read the count again at least every second.
#[derive(Clone)]
pub struct CountDownLatch {
    engine: Arc<Engine>,
    keys: Arc<LatchKeys>,
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("key", &self.keys.counter)
            .finish()
    }
}

impl CountDownLatch {
    /// The name given to [`LockClient::latch`].
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// assert_eq!(client.latch("l")?.name(), "l");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// Sets the count when the latch has none (Redisson's `trySetCount`):
    /// true when set, false when a count exists (it is left alone). A
    /// count of 0 fails with [`Error::InvalidArgument`] (a latch at zero
    /// has no key).
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let latch = client.latch("boot")?;
    /// assert!(latch.try_set_count(2).await? || latch.count().await? > 0);
    /// # Ok(()) }
    /// ```
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        if count == 0 || i64::try_from(count).is_err() {
            return Err(Error::InvalidArgument(format!(
                "a latch's count must be between 1 and {}, not {count}",
                i64::MAX
            )));
        }
        let core = &self.engine.core;
        let publish = core.publish_command().await?;
        let cmd = set_cmd(
            &self.keys.counter,
            &self.keys.channel,
            count,
            1,
            publish,
            &core.scripts.sem_set,
        );
        match core.run_script(&core.scripts.sem_set, &cmd).await? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(crate::protocol::unexpected("latch set", &other)),
        }
    }

    /// Counts down by one and returns the count after (0: the waiters are
    /// released). Applied at most once, also when a reply is lost and the
    /// call retried. At zero already, nothing changes.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let left = client.latch("boot")?.count_down().await?;
    /// println!("{left} to go");
    /// # Ok(()) }
    /// ```
    pub async fn count_down(&self) -> Result<u64> {
        let core = &self.engine.core;
        let publish = core.publish_command().await?;
        let latch = self.keys.request(&core.request_id());
        let cmd = count_down_cmd(
            &self.keys,
            &latch,
            core.latch_ms(),
            publish,
            &core.scripts.latch_count_down,
        );
        let reply = core
            .run_with_retries(
                &crate::protocol::keys::LockKeys::for_permits(
                    &self.keys.name,
                    &self.keys.counter,
                    &self.keys.channel,
                ),
                &core.scripts.latch_count_down,
                &cmd,
                || {},
            )
            .await?;
        parse_count_down(&reply).map(|(_, count)| count)
    }

    /// The count now (0 when the latch has none).
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let n = client.latch("boot")?.count().await?;
    /// # let _ = n;
    /// # Ok(()) }
    /// ```
    pub async fn count(&self) -> Result<u64> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(&self.keys.counter);
        match self.engine.core.run_cmd(&cmd).await? {
            Value::Nil => Ok(0),
            Value::BulkString(b) => std::str::from_utf8(&b)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .map(|v| u64::try_from(v).unwrap_or(0))
                .ok_or_else(|| {
                    Error::Protocol(format!(
                        "the latch count `{}` is not an integer",
                        self.keys.counter
                    ))
                }),
            other => Err(crate::protocol::unexpected_reply("GET", &other)),
        }
    }

    /// Waits until the count is zero.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// client.latch("boot")?.wait().await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait(&self) -> Result<()> {
        self.wait_until(None).await.map(|_| ())
    }

    /// Waits at most `wait` until the count is zero: true when it is,
    /// false when the time ran out first.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// if !client.latch("boot")?.wait_timeout(Duration::from_secs(5)).await? {
    ///     println!("still waiting for the others");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_timeout(&self, wait: Duration) -> Result<bool> {
        self.wait_until(Some(Instant::now() + wait)).await
    }

    async fn wait_until(&self, deadline: Option<Instant>) -> Result<bool> {
        let core = &self.engine.core;
        // Subscribed before the first read, so that the last count-down
        // between the read and the wait is not missed.
        let mut sub = self.engine.pubsub.subscribe_shared(&self.keys.channel);
        let mut ready = core.config.command_timeout.min(RECHECK);
        if let Some(d) = deadline {
            ready = ready.min(d.saturating_duration_since(Instant::now()));
        }
        sub.ready(ready).await;
        let mut outage: Option<Instant> = None;
        loop {
            let read = match deadline {
                Some(d) => match tokio::time::timeout_at(d, self.count()).await {
                    Ok(read) => read,
                    Err(_) => return Ok(false),
                },
                None => self.count().await,
            };
            let mut pause = RECHECK;
            match read {
                Ok(0) => return Ok(true),
                Ok(_) => outage = None,
                // Redis away for a moment: read again shortly, within the
                // usual bound of one command.
                Err(e) if e.is_transient() && core.has_reached_redis() => {
                    let began = *outage.get_or_insert_with(Instant::now);
                    if began.elapsed() >= core.command_bound() {
                        return Err(e);
                    }
                    pause = Duration::from_millis(100);
                }
                Err(e) => return Err(e),
            }
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                pause = pause.min(left);
            }
            tokio::select! {
                biased;
                _ = core.closed.cancelled() => return Err(Error::Closed),
                _ = sub.woken() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}
