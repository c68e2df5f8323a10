//! The client's two enumerated choices: which pub/sub carries lock
//! channels on a cluster, and how many replicas must acknowledge a fresh
//! hold.

use std::time::Duration;

use crate::error::{Error, Result};

/// How lock channels are published and subscribed on a Redis Cluster
/// ([`ClientBuilder::pubsub_mode`](crate::ClientBuilder::pubsub_mode)).
///
/// ```
/// use lock_core::PubSubMode;
/// assert_eq!(PubSubMode::default(), PubSubMode::Auto);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PubSubMode {
    /// Sharded on a cluster that answers `PUBSUB SHARDNUMSUB` (Redis 7+,
    /// Valkey), classic otherwise and on a single server or Sentinel, as
    /// Redisson chooses.
    #[default]
    Auto,
    /// `SPUBLISH` / `SSUBSCRIBE` on the node of the channel's slot (cluster
    /// URLs only; for services that rewrite `PUBLISH` to `SPUBLISH`).
    Sharded,
    /// `PUBLISH` / `SUBSCRIBE` everywhere (for servers without sharded
    /// pub/sub, such as a cluster of Redis 6).
    Global,
}

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

    pub(crate) fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
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
