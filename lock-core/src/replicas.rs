//! Replica acknowledgement of fresh acquisitions (`wait_for_replicas`):
//! after a new hold, the holder writes to it once more (`confirm.lua`) and
//! runs `WAIT n timeout` on the same connection, which it has to itself
//! (a `WAIT` blocks its connection, and counts only that connection's
//! writes). Replication is one ordered stream, so the replicas that have
//! the confirming write have the acquisition, and a local hand-off before
//! it, too.

use std::time::Duration;

use redis::Value;

use crate::client::Core;
use crate::error::{Error, Result};
use crate::protocol::confirm::{confirm_cmd, ConfirmReply};
use crate::protocol::keys::LockKeys;
use crate::protocol::unexpected_reply;

/// Longest accepted replica wait.
const MAX_REPLICA_WAIT: Duration = Duration::from_secs(3600);

/// How many replicas must acknowledge a new hold, and how long to wait for
/// them: Redisson's `syncSlaves` / `checkLockSyncedSlaves`. Set it for a
/// client with [`ClientBuilder::wait_for_replicas`](crate::ClientBuilder::wait_for_replicas)
/// or for one acquisition with
/// [`AcquireOptions::wait_for_replicas`](crate::AcquireOptions::wait_for_replicas);
/// the crate docs' "Safety" section says what it does and does not
/// guarantee.
///
/// ```
/// use lock_core::ReplicaAck;
/// use std::time::Duration;
///
/// let ack = ReplicaAck::new(1, Duration::from_millis(500));
/// assert_eq!(ack.replicas(), 1);
/// assert_eq!(ack.timeout(), Duration::from_millis(500));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaAck {
    replicas: u32,
    timeout: Duration,
}

impl ReplicaAck {
    /// `replicas` acknowledgements within `timeout` (checked when the
    /// client is built or the acquisition starts: `replicas` ≥ 1,
    /// `timeout` between 1 ms and one hour).
    ///
    /// ```
    /// let ack = lock_core::ReplicaAck::new(2, std::time::Duration::from_secs(1));
    /// # let _ = ack;
    /// ```
    pub fn new(replicas: u32, timeout: Duration) -> Self {
        ReplicaAck { replicas, timeout }
    }

    /// How many replicas must acknowledge.
    ///
    /// ```
    /// let ack = lock_core::ReplicaAck::new(2, std::time::Duration::from_secs(1));
    /// assert_eq!(ack.replicas(), 2);
    /// ```
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How long to wait for them (`WAIT`'s time-out).
    ///
    /// ```
    /// let ack = lock_core::ReplicaAck::new(2, std::time::Duration::from_secs(1));
    /// assert_eq!(ack.timeout(), std::time::Duration::from_secs(1));
    /// ```
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.replicas == 0 {
            return Err(Error::InvalidArgument(
                "wait_for_replicas needs at least 1 replica".into(),
            ));
        }
        if self.timeout < Duration::from_millis(1) || self.timeout > MAX_REPLICA_WAIT {
            return Err(Error::InvalidArgument(
                "wait_for_replicas timeout must be between 1ms and 1h \
                 (WAIT with 0 would block forever)"
                    .into(),
            ));
        }
        Ok(())
    }

    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

/// What the confirmation of a fresh hold found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Confirmed {
    /// The owner holds the lock; this many replicas acknowledged it.
    Acknowledged(u32),
    /// The owner no longer holds the lock (it ran out, or was taken away).
    Gone,
}

impl Core {
    /// Confirms the hold of `owner` on a connection of the wait lane (its
    /// own for this `WAIT`: never waits for another) and waits for
    /// `ack.replicas` replicas to acknowledge it (at most `ack.timeout`).
    ///
    /// Boxed (see `Core::run_script_within`): it runs inside every acquire.
    pub(crate) fn confirm_on_replicas<'a>(
        &'a self,
        keys: &'a LockKeys,
        owner: &'a str,
        ack: ReplicaAck,
    ) -> crate::client::BoxFuture<'a, Result<Confirmed>> {
        Box::pin(self.confirm_now(keys, owner, ack))
    }

    async fn confirm_now(
        &self,
        keys: &LockKeys,
        owner: &str,
        ack: ReplicaAck,
    ) -> Result<Confirmed> {
        let limit = self.config.connect_timeout + 2 * self.config.command_timeout + ack.timeout;
        let deadline = tokio::time::Instant::now() + limit;
        let mut lent = match tokio::time::timeout_at(deadline, self.pool.wait_lane()).await {
            Ok(lent) => lent?,
            Err(_) => return Err(Error::CommandTimeout),
        };
        let Some(conn) = lent.conn() else {
            return Err(Error::Protocol("the wait lane lent no connection".into()));
        };
        let suspect = conn.suspect();
        let confirm = async {
            let cmd = confirm_cmd(&self.scripts.confirm, keys, owner);
            let reply = self.scripts.confirm.run(conn, &cmd).await?;
            if ConfirmReply::parse(&reply)? == ConfirmReply::Gone {
                return Ok(Confirmed::Gone);
            }
            let mut wait = redis::cmd("WAIT");
            wait.arg(ack.replicas).arg(ack.timeout_ms());
            // The reply comes after up to `ack.timeout` by design.
            match conn
                .query_within(&wait, self.config.command_timeout + ack.timeout, &keys.lock)
                .await?
            {
                Value::Int(n) => Ok(Confirmed::Acknowledged(u32::try_from(n).unwrap_or(0))),
                other => Err(unexpected_reply("WAIT", &other)),
            }
        };
        let result = match tokio::time::timeout_at(deadline, confirm).await {
            Ok(result) => result,
            Err(_) => {
                suspect.mark();
                Err(Error::CommandTimeout)
            }
        };
        if result.is_ok() {
            lent.finished();
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused_with_the_rule() {
        let zero = ReplicaAck::new(0, Duration::from_secs(1)).validate();
        assert!(zero
            .expect_err("zero replicas")
            .to_string()
            .contains("at least 1 replica"));
        let forever = ReplicaAck::new(1, Duration::ZERO).validate();
        assert!(forever
            .expect_err("zero timeout")
            .to_string()
            .contains("block forever"));
        let long = ReplicaAck::new(1, Duration::from_secs(3601)).validate();
        assert!(long.expect_err("over an hour").is_invalid_input());
        assert!(ReplicaAck::new(1, Duration::from_millis(1))
            .validate()
            .is_ok());
    }

    #[test]
    fn wait_takes_whole_milliseconds_at_least_one() {
        assert_eq!(
            ReplicaAck::new(1, Duration::from_micros(1500)).timeout_ms(),
            1
        );
        assert_eq!(
            ReplicaAck::new(1, Duration::from_millis(250)).timeout_ms(),
            250
        );
    }
}
