//! Why a request could not take its lock.

use std::fmt;

/// A type-erased error, as tower's `BoxError`: what the generic flavour
/// returns, and what `HandleErrorLayer` receives.
///
/// ```
/// let err: lock_tower::BoxError = "boom".into();
/// assert_eq!(err.to_string(), "boom");
/// ```
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request's lock could not be taken: the wait bound passed (another
/// request holds the key), Redis failed, or the derived key is not a valid
/// lock name; or, with [`cancel_on_lost`](crate::LockLayer::cancel_on_lost),
/// the lock was lost while the request ran and the request was cancelled.
///
/// A [`PermitLayer`](crate::PermitLayer) answers with the same type when a
/// request gets no permit of its key's limit: then
/// [`is_permit_limit`](Self::is_permit_limit) is true, the key is the
/// semaphore's name, "busy" means every permit stayed taken for the whole
/// wait bound, and the texts (and the gRPC flavour's busy status) say
/// "limit" rather than "lock".
///
/// A [`MultiLockLayer`](crate::MultiLockLayer) answers with it when a
/// request's locks cannot all be taken: then [`is_multi`](Self::is_multi)
/// is true and [`keys`](Self::keys) lists every key of the request.
///
/// Each flavour turns it into an answer: the HTTP flavour into a response
/// (503 + `Retry-After` when busy, 500 when Redis failed, 400 for a bad
/// key, 503 when lost), the gRPC flavour into a `tonic::Status`, the
/// generic flavour into a boxed error for `HandleErrorLayer` (downcast it
/// to `LockError`). [`reason`](Self::reason) names the case in one word, as
/// the layer's log events and metrics do.
///
/// ```
/// use lock_tower::LockError;
/// use std::time::Duration;
///
/// let busy = LockError::new(
///     "account:7",
///     lock_core::Error::WaitTimeout { name: "account:7".into(), waited: Duration::from_secs(2) },
/// );
/// assert!(busy.is_busy() && !busy.is_redis());
/// assert_eq!(busy.key(), "account:7");
/// assert_eq!(busy.to_string(), "lock `account:7` is busy");
/// ```
#[derive(Debug)]
pub struct LockError {
    key: String,
    source: lock_core::Error,
    /// The key names a [`PermitLayer`](crate::PermitLayer)'s semaphore,
    /// not a lock.
    permit: bool,
    /// A [`MultiLockLayer`](crate::MultiLockLayer)'s request: every key it
    /// mapped to (`key` is them joined with `, `).
    multi: Option<Vec<String>>,
}

impl LockError {
    /// An error for the lock `key` (the key the request mapped to), caused
    /// by `source`.
    ///
    /// ```
    /// let err = lock_tower::LockError::new("k", lock_core::Error::PoolTimeout);
    /// assert!(err.is_redis());
    /// ```
    pub fn new(key: impl Into<String>, source: lock_core::Error) -> Self {
        LockError {
            key: key.into(),
            source,
            permit: false,
            multi: None,
        }
    }

    /// An error of a [`MultiLockLayer`](crate::MultiLockLayer): the locks
    /// `keys` (every key the request mapped to) could not be taken
    /// together, caused by `source`. [`key`](Self::key) is the keys joined
    /// with `, `; [`keys`](Self::keys) lists them.
    ///
    /// ```
    /// use std::time::Duration;
    /// let busy = lock_tower::LockError::for_keys(
    ///     ["account:4", "account:17"],
    ///     lock_core::Error::WaitTimeout { name: "account:17, account:4".into(), waited: Duration::from_secs(1) },
    /// );
    /// assert!(busy.is_busy() && busy.is_multi());
    /// assert_eq!(busy.keys(), ["account:4", "account:17"]);
    /// assert_eq!(busy.key(), "account:4, account:17");
    /// assert_eq!(busy.to_string(), "locks `account:4`, `account:17` are busy");
    /// ```
    pub fn for_keys<I>(keys: I, source: lock_core::Error) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        LockError {
            key: keys.join(", "),
            source,
            permit: false,
            multi: Some(keys),
        }
    }

    /// Whether the error comes from a [`MultiLockLayer`](crate::MultiLockLayer)
    /// (a request that maps to several keys, all taken together).
    ///
    /// ```
    /// let one = lock_tower::LockError::new("k", lock_core::Error::PoolTimeout);
    /// let many = lock_tower::LockError::for_keys(["a", "b"], lock_core::Error::PoolTimeout);
    /// assert!(!one.is_multi() && many.is_multi());
    /// ```
    pub fn is_multi(&self) -> bool {
        self.multi.is_some()
    }

    /// Every key the request mapped to: the one [`key`](Self::key) of a
    /// [`LockLayer`](crate::LockLayer)'s or
    /// [`PermitLayer`](crate::PermitLayer)'s error, each key of a
    /// [`MultiLockLayer`](crate::MultiLockLayer)'s (sorted, without
    /// duplicates).
    ///
    /// ```
    /// let one = lock_tower::LockError::new("k", lock_core::Error::PoolTimeout);
    /// assert_eq!(one.keys(), ["k"]);
    /// let many = lock_tower::LockError::for_keys(["a", "b"], lock_core::Error::PoolTimeout);
    /// assert_eq!(many.keys(), ["a", "b"]);
    /// ```
    pub fn keys(&self) -> &[String] {
        match &self.multi {
            Some(keys) => keys,
            None => std::slice::from_ref(&self.key),
        }
    }

    /// An error of a [`PermitLayer`](crate::PermitLayer): no permit of the
    /// limit `key` (a semaphore's name) could be taken, caused by
    /// `source`. The same cases as for a lock; the answers say "limit".
    ///
    /// ```
    /// use std::time::Duration;
    /// let full = lock_tower::LockError::for_permit(
    ///     "limit:reports",
    ///     lock_core::Error::WaitTimeout { name: "limit:reports".into(), waited: Duration::from_secs(1) },
    /// );
    /// assert!(full.is_busy() && full.is_permit_limit());
    /// assert_eq!(full.to_string(), "concurrency limit `limit:reports` reached");
    /// ```
    pub fn for_permit(key: impl Into<String>, source: lock_core::Error) -> Self {
        LockError {
            key: key.into(),
            source,
            permit: true,
            multi: None,
        }
    }

    /// Whether the error comes from a [`PermitLayer`](crate::PermitLayer)
    /// (the key names a concurrency limit's semaphore) rather than from a
    /// [`LockLayer`](crate::LockLayer).
    ///
    /// ```
    /// let lock = lock_tower::LockError::new("k", lock_core::Error::PoolTimeout);
    /// let limit = lock_tower::LockError::for_permit("k", lock_core::Error::PoolTimeout);
    /// assert!(!lock.is_permit_limit() && limit.is_permit_limit());
    /// ```
    pub fn is_permit_limit(&self) -> bool {
        self.permit
    }

    /// The lock key the request mapped to (for a
    /// [`PermitLayer`](crate::PermitLayer), the semaphore's name; for a
    /// [`MultiLockLayer`](crate::MultiLockLayer), its keys joined with
    /// `, `: see [`keys`](Self::keys)).
    ///
    /// ```
    /// let err = lock_tower::LockError::new("k", lock_core::Error::PoolTimeout);
    /// assert_eq!(err.key(), "k");
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Contention: the wait bound passed while another request (in this
    /// process or another) held the key. Retrying later is the right move.
    ///
    /// ```
    /// let err = lock_tower::LockError::new("k", lock_core::Error::CommandTimeout);
    /// assert!(!err.is_busy());
    /// ```
    pub fn is_busy(&self) -> bool {
        self.source.is_wait_timeout()
    }

    /// Redis could not be reached, timed out or answered with an error:
    /// the lock store failed, not the request.
    ///
    /// ```
    /// let err = lock_tower::LockError::new("k", lock_core::Error::CommandTimeout);
    /// assert!(err.is_redis());
    /// ```
    pub fn is_redis(&self) -> bool {
        self.source.is_redis()
    }

    /// The key is not a valid lock name (empty, longer than the client's
    /// limit, or with braces that make no hash tag); rejected before any
    /// Redis call. Keys are usually derived from
    /// the request, so this is usually the request's fault.
    ///
    /// ```
    /// let err = lock_tower::LockError::new(
    ///     "",
    ///     lock_core::Error::InvalidName { reason: "empty".into() },
    /// );
    /// assert!(err.is_invalid_key());
    /// ```
    pub fn is_invalid_key(&self) -> bool {
        matches!(self.source, lock_core::Error::InvalidName { .. })
    }

    /// The lock was lost while the request ran, and the request was
    /// cancelled: only with [`cancel_on_lost`](crate::LockLayer::cancel_on_lost).
    /// The request may have done part of its work; nothing after the loss
    /// ran under the lock.
    ///
    /// ```
    /// let err = lock_tower::LockError::new("k", lock_core::Error::Lost { name: "k".into() });
    /// assert!(err.is_lost() && !err.is_redis());
    /// assert_eq!(err.to_string(), "lock `k` was lost");
    /// ```
    pub fn is_lost(&self) -> bool {
        self.source.is_lost()
    }

    /// The lock client was shut down ([`LockClient::shutdown`](lock_core::LockClient::shutdown)):
    /// this replica is going away and takes no new locks; another replica
    /// can serve the request.
    ///
    /// ```
    /// let err = lock_tower::LockError::new("k", lock_core::Error::Closed);
    /// assert!(err.is_closed() && !err.is_redis());
    /// assert_eq!(err.reason(), "closed");
    /// ```
    pub fn is_closed(&self) -> bool {
        self.source.is_closed()
    }

    /// Too few replicas acknowledged the fresh lock within the client's
    /// `wait_for_replicas` time-out; the lock was released and the request
    /// did not run. The replicas lag or are down: retrying later (or on
    /// another replica of the service) may succeed.
    ///
    /// ```
    /// let err = lock_tower::LockError::new("k", lock_core::Error::NotReplicated {
    ///     name: "k".into(),
    ///     wanted: 1,
    ///     acknowledged: 0,
    ///     waited: std::time::Duration::from_millis(500),
    /// });
    /// assert!(err.is_not_replicated() && !err.is_redis());
    /// assert_eq!(err.reason(), "not_replicated");
    /// ```
    pub fn is_not_replicated(&self) -> bool {
        self.source.is_not_replicated()
    }

    /// A read-write layer's request asked for the write side of a lock
    /// whose read side it already holds (a layer or handler nested in a
    /// read request took the same key's write side): refused at once, as
    /// waiting would never end. A mistake in the service, not the
    /// client's: the HTTP flavour answers 500, the gRPC flavour `INTERNAL`.
    ///
    /// ```
    /// let err = lock_tower::LockError::new("k", lock_core::Error::UpgradeRefused { name: "k".into() });
    /// assert!(err.is_upgrade_refused() && !err.is_redis());
    /// assert_eq!(err.reason(), "upgrade_refused");
    /// ```
    pub fn is_upgrade_refused(&self) -> bool {
        matches!(self.source, lock_core::Error::UpgradeRefused { .. })
    }

    /// The case in one word, the `reason` of the layer's log events and of
    /// its `lock_tower_rejections_total` counter:
    ///
    /// | reason | when |
    /// |---|---|
    /// | `"busy"` | [`is_busy`](Self::is_busy): the wait bound passed |
    /// | `"invalid_key"` | [`is_invalid_key`](Self::is_invalid_key) |
    /// | `"lost"` | [`is_lost`](Self::is_lost): cancelled by `cancel_on_lost` |
    /// | `"closed"` | [`is_closed`](Self::is_closed): the client was shut down |
    /// | `"not_replicated"` | [`is_not_replicated`](Self::is_not_replicated): too few replicas acknowledged the lock |
    /// | `"upgrade_refused"` | [`is_upgrade_refused`](Self::is_upgrade_refused): a write asked for under the request's own read |
    /// | `"redis"` | anything else: Redis failed ([`is_redis`](Self::is_redis)) |
    ///
    /// ```
    /// let err = lock_tower::LockError::new("k", lock_core::Error::PoolTimeout);
    /// assert_eq!(err.reason(), "redis");
    /// ```
    pub fn reason(&self) -> &'static str {
        if self.is_busy() {
            "busy"
        } else if self.is_invalid_key() {
            "invalid_key"
        } else if self.is_lost() {
            "lost"
        } else if self.is_closed() {
            "closed"
        } else if self.is_not_replicated() {
            "not_replicated"
        } else if self.is_upgrade_refused() {
            "upgrade_refused"
        } else {
            "redis"
        }
    }

    /// The lock-core error behind this one.
    ///
    /// ```
    /// let err = lock_tower::LockError::new("k", lock_core::Error::PoolTimeout);
    /// assert!(matches!(err.lock_error(), lock_core::Error::PoolTimeout));
    /// ```
    pub fn lock_error(&self) -> &lock_core::Error {
        &self.source
    }

    /// The lock-core error behind this one, by value.
    ///
    /// ```
    /// let err = lock_tower::LockError::new("k", lock_core::Error::PoolTimeout);
    /// assert!(err.into_lock_error().is_redis());
    /// ```
    pub fn into_lock_error(self) -> lock_core::Error {
        self.source
    }
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.permit {
            return self.fmt_permit(f);
        }
        if let Some(keys) = &self.multi {
            return self.fmt_multi(f, keys);
        }
        if self.is_busy() {
            write!(f, "lock `{}` is busy", self.key)
        } else if self.is_invalid_key() {
            write!(f, "invalid lock key `{}`", self.key)
        } else if self.is_lost() {
            write!(f, "lock `{}` was lost", self.key)
        } else if self.is_not_replicated() {
            write!(f, "lock `{}` was not acknowledged by replicas", self.key)
        } else if self.is_upgrade_refused() {
            write!(
                f,
                "lock `{}`: write refused under the request's own read",
                self.key
            )
        } else {
            write!(f, "could not take lock `{}`", self.key)
        }
    }
}

impl LockError {
    /// The texts of a [`PermitLayer`](crate::PermitLayer)'s errors.
    fn fmt_permit(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_busy() {
            write!(f, "concurrency limit `{}` reached", self.key)
        } else if self.is_invalid_key() {
            write!(f, "invalid limit key `{}`", self.key)
        } else if self.is_lost() {
            write!(f, "permit of `{}` was lost", self.key)
        } else if self.is_not_replicated() {
            write!(
                f,
                "permit of `{}` was not acknowledged by replicas",
                self.key
            )
        } else {
            write!(f, "could not take a permit of `{}`", self.key)
        }
    }
}

impl LockError {
    /// The texts of a [`MultiLockLayer`](crate::MultiLockLayer)'s errors:
    /// every key, each in backticks.
    fn fmt_multi(&self, f: &mut fmt::Formatter<'_>, keys: &[String]) -> fmt::Result {
        let list = keys
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ");
        if self.is_busy() {
            write!(f, "locks {list} are busy")
        } else if self.is_invalid_key() {
            write!(f, "invalid lock key among {list}")
        } else if let lock_core::Error::Lost { name } = &self.source {
            write!(f, "lock `{name}` of {list} was lost")
        } else if self.is_not_replicated() {
            write!(f, "locks {list} were not acknowledged by replicas")
        } else {
            write!(f, "could not take locks {list}")
        }
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn the_lock_core_error_is_the_source() {
        let err = LockError::new("k", lock_core::Error::CommandTimeout);
        assert_eq!(err.to_string(), "could not take lock `k`");
        assert_eq!(
            err.source().map(|s| s.to_string()).as_deref(),
            Some("redis command timed out")
        );
    }

    #[test]
    fn kinds_are_distinct() {
        let busy = LockError::new(
            "k",
            lock_core::Error::WaitTimeout {
                name: "k".into(),
                waited: std::time::Duration::from_millis(1),
            },
        );
        let redis = LockError::new("k", lock_core::Error::PoolTimeout);
        let invalid = LockError::new("", lock_core::Error::InvalidName { reason: "e".into() });
        let lost = LockError::new("k", lock_core::Error::Lost { name: "k".into() });
        let unreplicated = LockError::new(
            "k",
            lock_core::Error::NotReplicated {
                name: "k".into(),
                wanted: 1,
                acknowledged: 0,
                waited: std::time::Duration::from_millis(1),
            },
        );
        let upgrade = LockError::new("k", lock_core::Error::UpgradeRefused { name: "k".into() });
        assert!(upgrade.is_upgrade_refused() && !upgrade.is_redis());
        assert_eq!(upgrade.reason(), "upgrade_refused");
        assert!(!busy.is_upgrade_refused());
        let flags = |e: &LockError| {
            [
                e.is_busy(),
                e.is_redis(),
                e.is_invalid_key(),
                e.is_lost(),
                e.is_not_replicated(),
            ]
        };
        assert_eq!(flags(&busy), [true, false, false, false, false]);
        assert_eq!(flags(&redis), [false, true, false, false, false]);
        assert_eq!(flags(&invalid), [false, false, true, false, false]);
        assert_eq!(flags(&lost), [false, false, false, true, false]);
        assert_eq!(flags(&unreplicated), [false, false, false, false, true]);
        let reasons = [&busy, &redis, &invalid, &lost, &unreplicated].map(LockError::reason);
        assert_eq!(
            reasons,
            ["busy", "redis", "invalid_key", "lost", "not_replicated"]
        );
    }

    #[test]
    fn multi_errors_name_every_key_and_keep_their_kinds() {
        let keys = ["a", "b"];
        let busy = LockError::for_keys(
            keys,
            lock_core::Error::WaitTimeout {
                name: "a, b".into(),
                waited: std::time::Duration::from_millis(1),
            },
        );
        let invalid = LockError::for_keys(
            ["", "b"],
            lock_core::Error::InvalidName { reason: "e".into() },
        );
        let lost = LockError::for_keys(keys, lock_core::Error::Lost { name: "b".into() });
        let redis = LockError::for_keys(keys, lock_core::Error::PoolTimeout);
        assert!(busy.is_busy() && busy.is_multi() && busy.reason() == "busy");
        assert!(invalid.is_invalid_key() && invalid.reason() == "invalid_key");
        assert!(lost.is_lost() && lost.reason() == "lost");
        assert!(redis.is_redis() && redis.reason() == "redis");
        assert_eq!(busy.keys(), ["a", "b"]);
        assert_eq!(busy.key(), "a, b");
        assert_eq!(busy.to_string(), "locks `a`, `b` are busy");
        assert_eq!(invalid.to_string(), "invalid lock key among ``, `b`");
        assert_eq!(lost.to_string(), "lock `b` of `a`, `b` was lost");
        assert_eq!(redis.to_string(), "could not take locks `a`, `b`");
        let one = LockError::new("k", lock_core::Error::PoolTimeout);
        assert!(!one.is_multi());
        assert_eq!(one.keys(), ["k"]);
    }

    #[test]
    fn permit_errors_keep_their_kinds_and_say_limit() {
        let busy = LockError::for_permit(
            "k",
            lock_core::Error::WaitTimeout {
                name: "k".into(),
                waited: std::time::Duration::from_millis(1),
            },
        );
        let redis = LockError::for_permit("k", lock_core::Error::PoolTimeout);
        let invalid =
            LockError::for_permit("", lock_core::Error::InvalidName { reason: "e".into() });
        assert!(busy.is_busy() && busy.is_permit_limit() && busy.reason() == "busy");
        assert!(redis.is_redis() && redis.reason() == "redis");
        assert!(invalid.is_invalid_key() && invalid.reason() == "invalid_key");
        assert_eq!(busy.to_string(), "concurrency limit `k` reached");
        assert_eq!(redis.to_string(), "could not take a permit of `k`");
        assert_eq!(invalid.to_string(), "invalid limit key ``");
        assert!(!LockError::new("k", lock_core::Error::PoolTimeout).is_permit_limit());
    }
}
