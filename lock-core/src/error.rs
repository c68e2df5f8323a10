//! The crate's one error type.

use std::time::Duration;

/// A specialized `Result` for lock operations.
///
/// ```
/// fn check(r: lock_core::Result<()>) -> bool {
///     r.is_ok()
/// }
/// assert!(check(Ok(())));
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when taking, keeping or releasing a lock.
///
/// Match on the variants, or use the predicates (`is_wait_timeout()`,
/// `is_not_held()`, …) so that new variants do not break your code.
///
/// ```
/// use lock_core::Error;
/// use std::time::Duration;
///
/// let err = Error::WaitTimeout { name: "orders".into(), waited: Duration::from_secs(1) };
/// assert!(err.is_wait_timeout());
/// assert_eq!(err.to_string(), "timed out after 1s waiting for lock `orders`");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The wait bound passed before the lock could be acquired.
    #[error("timed out after {waited:?} waiting for lock `{name}`")]
    WaitTimeout {
        /// The lock's name.
        name: String,
        /// The wait bound that passed.
        waited: Duration,
    },

    /// The calling owner does not hold the lock (release by a non-owner).
    #[error("lock `{name}` is not held by this owner")]
    NotHeld {
        /// The lock's name.
        name: String,
    },

    /// The lock was lost while held: it expired, was force-unlocked, or Redis
    /// forgot it (restart, failover). The critical section was not exclusive
    /// from that moment on.
    #[error("lock `{name}` was lost")]
    Lost {
        /// The lock's name.
        name: String,
    },

    /// A lock name that cannot be used (empty, too long, braces that make
    /// no hash tag, another lock's helper key). Rejected before any Redis
    /// call.
    #[error("invalid lock name: {reason}")]
    InvalidName {
        /// Why the name was rejected.
        reason: String,
    },

    /// An invalid argument or configuration value (zero lease, zero wait,
    /// bad URL, zero pool size, …). Rejected before any Redis call.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Redis answered with an error, or the connection failed; the message
    /// carries the cause once (the server's text, or the I/O failure with
    /// the address it concerns). See
    /// [`is_connection_refused`](Error::is_connection_refused),
    /// [`is_auth_failure`](Error::is_auth_failure),
    /// [`is_no_permission`](Error::is_no_permission).
    ///
    /// `source()` is `None` for this variant: the message already holds
    /// the whole of the redis-rs error, whose own `source()` repeats its
    /// text (a server error's source is the same server error), so a
    /// printer walking the chain would print one cause two or three times.
    /// Match the variant to reach the [`redis::RedisError`].
    ///
    /// ```
    /// use std::error::Error as _;
    ///
    /// let err = lock_core::Error::from(redis::RedisError::from(std::io::Error::new(
    ///     std::io::ErrorKind::ConnectionReset,
    ///     "connection reset by peer",
    /// )));
    /// assert_eq!(err.to_string(), "redis error: connection reset by peer");
    /// assert!(err.source().is_none());
    /// assert!(matches!(err, lock_core::Error::Redis(e) if e.is_connection_dropped()));
    /// ```
    #[error("redis error: {0}")]
    Redis(redis::RedisError),

    /// No pooled Redis connection became available within the connect
    /// timeout. Not produced since commands share their connections
    /// instead of waiting for one (see `ClientConfig::pool_size`); kept so
    /// that code matching on it keeps compiling.
    #[error("timed out waiting for a redis connection")]
    PoolTimeout,

    /// Redis did not answer within the command timeout.
    #[error("redis command timed out")]
    CommandTimeout,

    /// A background task of the client was cancelled before it finished
    /// (the tokio runtime is shutting down).
    #[error("lock operation cancelled: {0}")]
    Cancelled(String),

    /// Redis answered with something the lock protocol does not expect (for
    /// example a key of another type at the lock's name).
    #[error("unexpected reply from redis: {0}")]
    Protocol(String),

    /// The server's `maxmemory-policy` lets Redis evict lock keys under
    /// memory pressure (every lock key has a TTL, so `volatile-*` policies
    /// evict them first): a held lock can vanish. Reported through the
    /// error hook when the client connects or pings; set `noeviction`.
    #[error(
        "redis maxmemory-policy is `{policy}`: under memory pressure Redis may evict lock keys \
         (they all have a TTL), and a held lock can vanish; set maxmemory-policy noeviction"
    )]
    EvictionPolicy {
        /// The policy the server reported.
        policy: String,
    },

    /// No client to lock with: [`default_client`](crate::default_client)
    /// was asked for (by `#[distributed_lock]` without `client = ...`)
    /// before [`install_default`](crate::install_default) was called.
    #[error(
        "no default lock client installed: call lock_core::install_default(client) at startup, \
         or give #[distributed_lock] a `client = ...`"
    )]
    NoDefaultClient,

    /// A fresh acquisition was not acknowledged by enough replicas within
    /// the `wait_for_replicas` time-out ([`ReplicaAck`](crate::ReplicaAck)).
    /// The hold was released before this error was returned (a release
    /// that failed leaves the lock to expire with its lease); the caller
    /// does not hold the lock. Retrying may succeed once the replicas
    /// catch up.
    #[error(
        "lock `{name}` was acquired but {acknowledged} of the {wanted} required replicas \
         acknowledged it within {waited:?}; it was released"
    )]
    NotReplicated {
        /// The lock's name.
        name: String,
        /// Replicas required.
        wanted: u32,
        /// Replicas that acknowledged within the time-out.
        acknowledged: u32,
        /// The time-out that passed.
        waited: Duration,
    },

    /// The client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown)):
    /// it takes no new locks, and waiting acquisitions end with this error.
    #[error("the lock client was shut down; it takes no new locks")]
    Closed,

    /// The write side of a read-write lock was asked for where the caller
    /// holds only its read side (in the same lock context or section).
    /// Waiting would never end — the writer would wait for its own reader
    /// (Redisson's `RReadWriteLock` hangs there) — so it fails at once.
    /// Release the read first, or take the write first and read under it
    /// (a downgrade).
    #[error(
        "lock `{name}`: a read hold cannot be upgraded to a write hold (it would wait for \
         itself); release the read first, or take the write first and read under it"
    )]
    UpgradeRefused {
        /// The lock's name.
        name: String,
    },

    /// A fenced write ([`Fence`](crate::Fence)) was refused: the hold it
    /// was made through is no longer the holder of lock `name` in Redis
    /// (it expired, was released, lost, or taken over), or it had already
    /// ended here. Redis checked this in the same script as the write, so
    /// nothing was written.
    #[error(
        "fenced write on lock `{name}` refused: this hold is no longer the lock's holder; \
         nothing was written"
    )]
    FenceRefused {
        /// The lock's name.
        name: String,
    },

    /// A [`Redlock`](crate::Redlock) attempt was answered by fewer than a
    /// majority of its servers (down, partitioned, or slower than the
    /// per-server time-out), so no majority could be had; whatever was
    /// taken was released. `causes` names each silent server's failure.
    #[error(
        "redlock `{name}`: only {answered} of {servers} servers answered, a majority is \
         {quorum}; nothing is held ({causes})"
    )]
    NoQuorum {
        /// The lock's name.
        name: String,
        /// The Redlock's servers, N.
        servers: usize,
        /// The majority needed, N/2 + 1.
        quorum: usize,
        /// The servers that answered (granted or busy).
        answered: usize,
        /// Each failing server's index and error.
        causes: String,
    },
}

impl Error {
    /// A fenced write was refused: the hold it names is no longer the
    /// lock's holder in Redis (or has already ended here), so nothing was
    /// written.
    ///
    /// ```
    /// # use lock_core::Error;
    /// assert!(Error::FenceRefused { name: "stock".into() }.is_fence_refused());
    /// ```
    pub fn is_fence_refused(&self) -> bool {
        matches!(self, Error::FenceRefused { .. })
    }

    /// A Redlock attempt could not reach a majority of its servers (see
    /// [`Error::NoQuorum`]).
    ///
    /// ```
    /// # use lock_core::Error;
    /// let err = Error::NoQuorum {
    ///     name: "a".into(), servers: 5, quorum: 3, answered: 2, causes: String::new(),
    /// };
    /// assert!(err.is_no_quorum());
    /// ```
    pub fn is_no_quorum(&self) -> bool {
        matches!(self, Error::NoQuorum { .. })
    }

    /// The wait bound passed before the lock was acquired.
    ///
    /// ```
    /// # use lock_core::Error;
    /// assert!(!Error::PoolTimeout.is_wait_timeout());
    /// ```
    pub fn is_wait_timeout(&self) -> bool {
        matches!(self, Error::WaitTimeout { .. })
    }

    /// The caller did not hold the lock it tried to release.
    ///
    /// ```
    /// # use lock_core::Error;
    /// assert!(Error::NotHeld { name: "a".into() }.is_not_held());
    /// ```
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// The lock was lost while held.
    ///
    /// ```
    /// # use lock_core::Error;
    /// assert!(Error::Lost { name: "a".into() }.is_lost());
    /// ```
    pub fn is_lost(&self) -> bool {
        matches!(self, Error::Lost { .. })
    }

    /// Bad input (name, duration, configuration), rejected before any Redis call.
    ///
    /// ```
    /// # use lock_core::Error;
    /// assert!(Error::InvalidArgument("lease must be > 0".into()).is_invalid_input());
    /// ```
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, Error::InvalidName { .. } | Error::InvalidArgument(_))
    }

    /// Redis could not be reached or answered with an error: connection,
    /// pool and command time-outs, server errors, unexpected replies.
    ///
    /// ```
    /// # use lock_core::Error;
    /// assert!(Error::CommandTimeout.is_redis());
    /// ```
    pub fn is_redis(&self) -> bool {
        matches!(
            self,
            Error::Redis(_) | Error::PoolTimeout | Error::CommandTimeout | Error::Protocol(_)
        )
    }

    /// No default client was installed (see
    /// [`install_default`](crate::install_default)).
    ///
    /// ```
    /// # use lock_core::Error;
    /// assert!(Error::NoDefaultClient.is_no_default_client());
    /// ```
    pub fn is_no_default_client(&self) -> bool {
        matches!(self, Error::NoDefaultClient)
    }

    /// A fresh acquisition lacked the required replica acknowledgements and
    /// was released (see [`Error::NotReplicated`]).
    ///
    /// ```
    /// # use lock_core::Error;
    /// let err = Error::NotReplicated {
    ///     name: "a".into(),
    ///     wanted: 1,
    ///     acknowledged: 0,
    ///     waited: std::time::Duration::from_millis(200),
    /// };
    /// assert!(err.is_not_replicated() && !err.is_redis());
    /// ```
    pub fn is_not_replicated(&self) -> bool {
        matches!(self, Error::NotReplicated { .. })
    }

    /// The client was shut down and takes no new locks.
    ///
    /// ```
    /// # use lock_core::Error;
    /// assert!(Error::Closed.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        matches!(self, Error::Closed)
    }

    /// The connection a command was sent on turned out to be closed or
    /// broken (not a time-out, not a refused connect): one retry on a fresh
    /// connection is worth it where the command is safe to repeat.
    /// A `READONLY` reply counts too: the node became a replica (a
    /// failover), and refused the write without running it.
    pub(crate) fn is_stale_connection(&self) -> bool {
        matches!(self, Error::Redis(e) if ((e.is_connection_dropped() || e.is_io_error())
            && !e.is_timeout()
            && !e.is_connection_refusal())
            || is_read_only(e))
    }

    /// True for failures that may pass by themselves (Redis briefly
    /// unreachable, restarting or failing over): I/O errors, dropped,
    /// refused or unrecoverable connections, time-outs (the pool's, the
    /// command's, redis-rs's), and the server replies `LOADING`, `TRYAGAIN`,
    /// `MASTERDOWN` and `READONLY`: worth retrying within a bounded window.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Error::PoolTimeout | Error::CommandTimeout => true,
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_timeout()
                    || e.is_unrecoverable_error()
                    || e.is_connection_refusal()
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::MasterDown)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
                    )
            }
            _ => false,
        }
    }
}

impl Error {
    /// Nothing listens at the Redis address (connection refused).
    ///
    /// ```
    /// # use lock_core::Error;
    /// assert!(!Error::PoolTimeout.is_connection_refused());
    /// ```
    pub fn is_connection_refused(&self) -> bool {
        matches!(self, Error::Redis(e) if e.is_connection_refusal()
            || e.to_string().contains("Connection refused"))
    }

    /// Redis refused the credentials (`WRONGPASS`, `NOAUTH`, bad user).
    ///
    /// ```
    /// # use lock_core::Error;
    /// assert!(!Error::PoolTimeout.is_auth_failure());
    /// ```
    pub fn is_auth_failure(&self) -> bool {
        matches!(self, Error::Redis(e) if e.kind() == redis::ErrorKind::AuthenticationFailed || {
            let text = e.to_string();
            text.contains("WRONGPASS") || text.contains("NOAUTH")
        })
    }

    /// The Redis user lacks a permission the lock needs (ACL `NOPERM`): a
    /// command, a key pattern or a channel pattern.
    ///
    /// ```
    /// # use lock_core::Error;
    /// assert!(!Error::PoolTimeout.is_no_permission());
    /// ```
    pub fn is_no_permission(&self) -> bool {
        matches!(self, Error::Redis(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
        || {
            let text = e.to_string();
            text.contains("NOPERM")
                || text.contains("NoPerm")
                || text.contains("no permissions to")
        })
    }

    /// The server may evict lock keys (see [`Error::EvictionPolicy`]).
    ///
    /// ```
    /// # use lock_core::Error;
    /// let err = Error::EvictionPolicy { policy: "volatile-lru".into() };
    /// assert!(err.is_eviction_policy());
    /// assert!(err.to_string().contains("noeviction"));
    /// ```
    pub fn is_eviction_policy(&self) -> bool {
        matches!(self, Error::EvictionPolicy { .. })
    }
}

/// A failover symptom: the node answered that it is a replica now
/// (`READONLY`).
pub(crate) fn is_read_only(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        Error::Redis(err)
    }
}

impl From<bb8_redis::bb8::RunError<redis::RedisError>> for Error {
    fn from(err: bb8_redis::bb8::RunError<redis::RedisError>) -> Self {
        match err {
            bb8_redis::bb8::RunError::User(e) => Error::Redis(e),
            bb8_redis::bb8::RunError::TimedOut => Error::PoolTimeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_are_distinct() {
        let all = [
            Error::WaitTimeout {
                name: "a".into(),
                waited: Duration::from_millis(5),
            },
            Error::NotHeld { name: "a".into() },
            Error::Lost { name: "a".into() },
            Error::InvalidName { reason: "x".into() },
            Error::PoolTimeout,
            Error::NoDefaultClient,
            Error::Closed,
            Error::NotReplicated {
                name: "a".into(),
                wanted: 1,
                acknowledged: 0,
                waited: Duration::from_millis(5),
            },
        ];
        let flags: Vec<[bool; 8]> = all
            .iter()
            .map(|e| {
                [
                    e.is_wait_timeout(),
                    e.is_not_held(),
                    e.is_lost(),
                    e.is_invalid_input(),
                    e.is_redis(),
                    e.is_no_default_client(),
                    e.is_closed(),
                    e.is_not_replicated(),
                ]
            })
            .collect();
        for (i, f) in flags.iter().enumerate() {
            assert_eq!(f.iter().filter(|b| **b).count(), 1, "variant {i}");
            assert!(f[i], "variant {i} has its own predicate");
        }
    }

    /// `err`'s text and its sources', `" <- "`-separated, as a printer that
    /// walks `source()` shows them.
    fn walked(err: &dyn std::error::Error) -> String {
        let mut text = err.to_string();
        let mut next = err.source();
        while let Some(e) = next {
            text.push_str(" <- ");
            text.push_str(&e.to_string());
            next = e.source();
        }
        text
    }

    #[test]
    fn a_redis_error_is_said_once() {
        let err = Error::from(redis::RedisError::from((
            redis::ErrorKind::Io,
            "connection reset",
        )));
        assert!(err.is_transient());
        assert_eq!(walked(&err), "redis error: connection reset - Io");
        // an I/O error: redis-rs's source is the I/O error again
        let err = Error::from(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused (os error 111)",
        )));
        assert_eq!(
            walked(&err),
            "redis error: Connection refused (os error 111)"
        );
        assert!(err.is_connection_refused());
    }

    #[test]
    fn a_server_error_is_said_once() {
        // what redis-rs makes of `-NOPERM ...` (its own source repeats it)
        let reply = redis::parse_redis_value(
            b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n",
        )
        .and_then(redis::Value::extract_error);
        let redis_err = match reply {
            Err(e) => e,
            Ok(v) => panic!("not an error: {v:?}"),
        };
        // redis-rs says it twice (its source is the same server error), and
        // a source of ours on top made three
        let inner = walked(&redis_err);
        assert_eq!(inner.matches("no permissions").count(), 2, "{inner}");
        let err = Error::from(redis_err);
        assert!(err.is_no_permission());
        let text = walked(&err);
        assert_eq!(text.matches("no permissions").count(), 1, "{text}");
        assert!(text.starts_with("redis error: NoPerm: this user"), "{text}");
    }
}
