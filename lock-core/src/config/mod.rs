//! Client configuration: plain data with documented defaults, and a builder.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};

mod choices;
mod tls;
pub(crate) mod url;

pub use choices::{PubSubMode, ReplicaAck};
pub use tls::{PemSource, TlsConfig};
pub(crate) use tls::{FEATURE_MISSING, INSECURE_REFUSED};
use url::{is_tls_url, redact, ClusterUrl, MemoryUrl, SentinelUrl, MEMORY_FEATURE_MISSING};

/// Default watchdog timeout (the lease of a lock taken without an explicit
/// lease), as Redisson's `lockWatchdogTimeout`.
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// Default number of shared (multiplexed) Redis connections.
pub const DEFAULT_POOL_SIZE: u32 = 1;
/// Default bound on connecting.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default bound on one Redis command's reply.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// Default maximum length of a lock name in bytes (prefix included).
pub const DEFAULT_MAX_NAME_LEN: usize = 1024;
/// Default time a lock's last fencing token is kept in Redis after it was
/// drawn (see [`ClientBuilder::token_retention`](crate::ClientBuilder::token_retention)).
pub const DEFAULT_TOKEN_RETENTION: Duration = Duration::from_secs(60);
/// Default [`ClientConfig::hand_off_window`]: 2 ms.
pub const DEFAULT_HAND_OFF_WINDOW: Duration = Duration::from_millis(2);

/// Default [`ClientConfig::fair_lock_wait_timeout`]: 5 minutes, Redisson's
/// default `fairLockWaitTimeout`.
pub const DEFAULT_FAIR_LOCK_WAIT_TIMEOUT: Duration = Duration::from_secs(300);

/// Longest accepted lease (explicit or watchdog timeout): 365 days. Longer
/// values overflow what Redis accepts for PEXPIRE once added to the clock.
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// A callback that receives errors of background work (releases of dropped
/// guards, renewals) that no caller is waiting for.
pub(crate) type ErrorHook = Arc<dyn Fn(&Error) + Send + Sync>;

/// Everything a [`LockClient`](crate::LockClient) is built from. Plain data; every field has a
/// documented default (see [`ClientConfig::new`]).
///
/// ```
/// use lock_core::ClientConfig;
/// use std::time::Duration;
///
/// let config = ClientConfig::new("redis://127.0.0.1:6379");
/// assert_eq!(config.watchdog_timeout, Duration::from_secs(30));
/// assert_eq!(config.pool_size, 1);
/// assert_eq!(config.key_prefix, "");
/// ```
///
/// Its `Debug` output shows the URL with the password replaced by `***`,
/// and no certificate or key bytes.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Redis URL: `redis://[user[:password]@]host[:port][/db]`, or `rediss://`
    /// for TLS (needs the `tls` feature; see [`tls`](Self::tls)); redis-rs's
    /// `valkey://`, `valkeys://` and a Unix socket's `redis+unix:///path`
    /// (`unix://`, `valkey+unix://`) are taken too. A URL of another form
    /// is refused with a message that lists them all.
    ///
    /// Through Sentinel: `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/<service>[/db]`
    /// (`rediss+sentinel://` for TLS to sentinels and data nodes; sentinel
    /// port 26379 by default). The userinfo holds the data nodes'
    /// credentials; the sentinels' go in `?sentinel_username=..&sentinel_password=..`.
    /// Every new connection asks the sentinels (in the order given) for the
    /// primary and checks its `ROLE`; after a failover the client follows
    /// the new primary (see the crate docs, "Deployments").
    ///
    /// Redis Cluster: `redis+cluster://[user[:password]@]host[:port][,host[:port]...]`
    /// (`rediss+cluster://` for TLS; port 6379 by default): seed nodes, any
    /// of which gives the client the cluster's slot map; redirections and
    /// topology changes are followed.
    pub url: String,
    /// How many connections the client's lock commands share (the lock
    /// lane). Each is a multiplexed connection: it carries the commands of
    /// many tasks at once, and Redis answers them in batches. Default 1, the
    /// fastest shape in lock-bench (BENCHMARKS.md). Renewals, inspection,
    /// `WAIT` and pub/sub have connections of their own on top (see the
    /// README's "Connections and wait bounds"). Replies on one connection
    /// come back in order, so a slow reply holds up the replies behind it;
    /// more connections spread commands round-robin and limit that to their
    /// share (a shutdown always sends its releases on a new connection).
    pub pool_size: u32,
    /// Lease of locks taken without an explicit lease; the watchdog renews
    /// them every third of it. Default 30 s.
    pub watchdog_timeout: Duration,
    /// Prepended to every lock name to form the Redis key. Default empty.
    pub key_prefix: String,
    /// Bound on opening a connection. Default 5 s.
    pub connect_timeout: Duration,
    /// Bound on one command's reply. Default 5 s.
    pub command_timeout: Duration,
    /// Longest accepted lock name in bytes, prefix included. Default 1024.
    pub max_name_len: usize,
    /// How long a lock's last fencing token is kept in Redis after it was
    /// drawn. Default 60 s.
    pub token_retention: Duration,
    /// TLS settings for `rediss://` URLs (feature `tls`). Default: the
    /// platform's root certificates, no client certificate, every check on.
    pub tls: TlsConfig,
    /// Replicas that must acknowledge every fresh acquisition before it is
    /// handed out (`WAIT`; Redisson's `syncSlaves`). Default none. An
    /// acquisition can override it ([`AcquireOptions::wait_for_replicas`](crate::AcquireOptions::wait_for_replicas)).
    /// See the crate docs, "Safety", for what it does and does not guarantee.
    pub wait_for_replicas: Option<ReplicaAck>,
    /// Classic or sharded pub/sub for the lock channels on a Redis Cluster.
    /// Default [`PubSubMode::Auto`]: sharded when the cluster answers
    /// `PUBSUB SHARDNUMSUB`, as Redisson chooses.
    pub pubsub_mode: PubSubMode,
    /// The wait allowance of fair locks ([`LockClient::fair_lock`](crate::LockClient::fair_lock)):
    /// Redisson's `fairLockWaitTimeout`, default 5 minutes. It is part of
    /// the protocol: a queued waiter's deadline is its predecessor's plus
    /// this allowance, and every client takes it off the deadlines behind
    /// each grant, so **every client of a fair lock (Java ones included)
    /// must use the same value**, or live Java waiters are dropped from the
    /// queue (Redisson issues 1104, 3004, 6150). A waiter of Redisson's
    /// that dies leaves the queue when its deadline passes; one of
    /// lock-core's within seconds (see the README, "Fair lock").
    pub fair_lock_wait_timeout: Duration,
    /// Group commit: lock operations of this client that are ready while
    /// an earlier one of their kind is on its way to Redis (acquisitions,
    /// re-entries and releases of plain locks; on a cluster, per hash slot)
    /// go together as one script call when it comes back, each with its own
    /// outcome. No timer: an operation with nothing in flight before it is
    /// sent at once. Default `false` (every operation its own call): on
    /// one server over loopback, lock-bench measured group commit slower,
    /// since a multiplexed connection already pipelines the calls in flight
    /// and the grouped script costs the server more per operation (see
    /// BENCHMARKS.md, "Group commit").
    pub group_commit: bool,
    /// How long this client may pass a lock it took from Redis from one of
    /// its waiters to the next (local hand-offs, one round trip each)
    /// before it releases it in Redis and lets other clients in; at least
    /// one round of the waiters queued when it took the lock. Longer: more
    /// throughput under contention between processes, longer waits for the
    /// other processes (each waits about one window per process ahead of
    /// it). Default 2 ms (the trade-off curve is in BENCHMARKS.md, "Fair
    /// without paying"); zero: one round only.
    pub hand_off_window: Duration,
}

impl ClientConfig {
    /// A configuration for `url` with every other field at its default.
    ///
    /// ```
    /// let config = lock_core::ClientConfig::new("redis://localhost");
    /// assert_eq!(config.url, "redis://localhost");
    /// ```
    pub fn new(url: impl Into<String>) -> Self {
        ClientConfig {
            url: url.into(),
            pool_size: DEFAULT_POOL_SIZE,
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            key_prefix: String::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            max_name_len: DEFAULT_MAX_NAME_LEN,
            token_retention: DEFAULT_TOKEN_RETENTION,
            tls: TlsConfig::default(),
            wait_for_replicas: None,
            pubsub_mode: PubSubMode::Auto,
            fair_lock_wait_timeout: DEFAULT_FAIR_LOCK_WAIT_TIMEOUT,
            group_commit: false,
            hand_off_window: DEFAULT_HAND_OFF_WINDOW,
        }
    }

    /// Checks every field; the errors name the field and the rule.
    ///
    /// ```
    /// let mut config = lock_core::ClientConfig::new("redis://localhost");
    /// config.pool_size = 0;
    /// assert!(config.validate().unwrap_err().is_invalid_input());
    /// ```
    pub fn validate(&self) -> Result<()> {
        if self.pool_size == 0 {
            return Err(Error::InvalidArgument(
                "pool_size must be at least 1".into(),
            ));
        }
        positive("watchdog_timeout", self.watchdog_timeout)?;
        if self.hand_off_window > Duration::from_secs(10) {
            return Err(Error::InvalidArgument(
                "hand_off_window must be at most 10s (other clients wait about this long for each streak of local hand-offs)".into(),
            ));
        }
        if self.watchdog_timeout < Duration::from_millis(30) {
            return Err(Error::InvalidArgument(
                "watchdog_timeout must be at least 30ms (it is renewed every third of it)".into(),
            ));
        }
        if self.watchdog_timeout > MAX_LEASE {
            return Err(Error::InvalidArgument(
                "watchdog_timeout must be at most 365 days".into(),
            ));
        }
        if self.fair_lock_wait_timeout < Duration::from_millis(1)
            || self.fair_lock_wait_timeout > MAX_LEASE
        {
            return Err(Error::InvalidArgument(
                "fair_lock_wait_timeout must be between 1ms and 365 days".into(),
            ));
        }
        positive("connect_timeout", self.connect_timeout)?;
        positive("command_timeout", self.command_timeout)?;
        if self.token_retention < Duration::from_millis(1) {
            return Err(Error::InvalidArgument(
                "token_retention must be at least 1ms".into(),
            ));
        }
        if self.max_name_len == 0 {
            return Err(Error::InvalidArgument(
                "max_name_len must be at least 1".into(),
            ));
        }
        if self.key_prefix.len() >= self.max_name_len {
            return Err(Error::InvalidArgument(format!(
                "key_prefix is {} bytes, which leaves no room under max_name_len {}",
                self.key_prefix.len(),
                self.max_name_len
            )));
        }
        if let Some(ack) = &self.wait_for_replicas {
            ack.validate()?;
        }
        if !cfg!(feature = "tls") && is_tls_url(&self.url) {
            return Err(Error::InvalidArgument(FEATURE_MISSING.into()));
        }
        let cluster = ClusterUrl::parse(&self.url)?;
        if self.pubsub_mode == PubSubMode::Sharded && cluster.is_none() {
            return Err(Error::InvalidArgument(
                "pubsub_mode Sharded needs a cluster url (redis+cluster://)".into(),
            ));
        }
        let tls = if let Some(cluster) = cluster {
            cluster.tls
        } else if MemoryUrl::parse(&self.url)?.is_some() {
            if !cfg!(feature = "memory") {
                return Err(Error::InvalidArgument(MEMORY_FEATURE_MISSING.into()));
            }
            false
        } else if let Some(sentinel) = SentinelUrl::parse(&self.url)? {
            sentinel.tls
        } else {
            matches!(
                self.connection_info()?.addr(),
                redis::ConnectionAddr::TcpTls { .. }
            )
        };
        self.tls.validate(tls)
    }

    pub(crate) fn connection_info(&self) -> Result<redis::ConnectionInfo> {
        use redis::IntoConnectionInfo;
        if self.url.trim().is_empty() {
            return Err(Error::InvalidArgument("redis url is empty".into()));
        }
        if !cfg!(feature = "tls") && is_tls_url(&self.url) {
            return Err(Error::InvalidArgument(FEATURE_MISSING.into()));
        }
        let info = self.url.as_str().into_connection_info().map_err(|e| {
            Error::InvalidArgument(format!(
                "invalid redis url `{}`: {}",
                redact(&self.url),
                url::unparsed_url(&self.url, &e)
            ))
        })?;
        if let redis::ConnectionAddr::TcpTls { insecure: true, .. } = info.addr() {
            if !self.tls.danger_accept_invalid_certificates {
                return Err(Error::InvalidArgument(INSECURE_REFUSED.into()));
            }
        }
        Ok(info)
    }
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured so that a new field cannot be forgotten here.
        let Self {
            url,
            pool_size,
            watchdog_timeout,
            key_prefix,
            connect_timeout,
            command_timeout,
            max_name_len,
            token_retention,
            tls,
            wait_for_replicas,
            pubsub_mode,
            fair_lock_wait_timeout,
            group_commit,
            hand_off_window,
        } = self;
        f.debug_struct("ClientConfig")
            .field("url", &redact(url))
            .field("pool_size", pool_size)
            .field("watchdog_timeout", watchdog_timeout)
            .field("key_prefix", key_prefix)
            .field("connect_timeout", connect_timeout)
            .field("command_timeout", command_timeout)
            .field("max_name_len", max_name_len)
            .field("token_retention", token_retention)
            .field("tls", tls)
            .field("wait_for_replicas", wait_for_replicas)
            .field("pubsub_mode", pubsub_mode)
            .field("fair_lock_wait_timeout", fair_lock_wait_timeout)
            .field("group_commit", group_commit)
            .field("hand_off_window", hand_off_window)
            .finish()
    }
}

pub(crate) fn positive(what: &str, d: Duration) -> Result<()> {
    if d.is_zero() {
        return Err(Error::InvalidArgument(format!(
            "{what} must be greater than zero"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_documented_values() {
        let c = ClientConfig::new("redis://127.0.0.1");
        assert_eq!(c.pool_size, DEFAULT_POOL_SIZE);
        assert_eq!(c.watchdog_timeout, Duration::from_secs(30));
        assert_eq!(c.connect_timeout, Duration::from_secs(5));
        assert_eq!(c.command_timeout, Duration::from_secs(5));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn bad_values_are_rejected_with_the_field_name() {
        let cases: Vec<(ClientConfig, &str)> = vec![
            (ClientConfig::new(""), "redis url is empty"),
            (ClientConfig::new("http://x"), "invalid redis url"),
            (
                ClientConfig {
                    watchdog_timeout: Duration::ZERO,
                    ..ClientConfig::new("redis://h")
                },
                "watchdog_timeout",
            ),
            (
                ClientConfig {
                    command_timeout: Duration::ZERO,
                    ..ClientConfig::new("redis://h")
                },
                "command_timeout",
            ),
            (
                ClientConfig {
                    key_prefix: "x".repeat(20),
                    max_name_len: 10,
                    ..ClientConfig::new("redis://h")
                },
                "key_prefix",
            ),
        ];
        for (config, needle) in cases {
            let err = config.validate().expect_err(needle);
            assert!(err.is_invalid_input());
            assert!(
                err.to_string().contains(needle),
                "{err} should mention {needle}"
            );
        }
    }

    #[test]
    fn a_url_that_does_not_parse_lists_the_accepted_forms() {
        let forms = url::URL_FORMS;
        for (url, why) in [
            ("http://x", "unknown scheme `http`"),
            ("redis:/x", "no `<scheme>://` at its start"),
            ("foo", "no `<scheme>://` at its start"),
            ("redis+clustr://h", "unknown scheme `redis+clustr`"),
            ("redis://", "Missing hostname - InvalidClientConfig"),
        ] {
            let err = ClientConfig::new(url).validate().expect_err(url);
            assert!(err.is_invalid_input(), "{url}: {err:?}");
            assert_eq!(
                err.to_string(),
                format!(
                    "invalid argument: invalid redis url `{url}`: it did not parse ({why}); \
                     the accepted forms are {forms}"
                )
            );
        }
        // the list names every scheme, and every scheme it names is taken
        for url in [
            "redis://h",
            "rediss://h",
            "valkey://h",
            "valkeys://h",
            "redis+unix:///run/redis.sock",
            "unix:///run/redis.sock",
            "valkey+unix:///run/redis.sock",
            "redis+sentinel://h/service",
            "rediss+sentinel://h/service",
            "redis+cluster://h",
            "rediss+cluster://h",
        ] {
            let scheme = &url[..url.find("://").map_or(0, |i| i + 3)];
            assert!(forms.contains(scheme), "{scheme} is not listed");
            if let Err(e) = ClientConfig::new(url).validate() {
                // only the `tls` feature may be missing
                assert!(
                    !cfg!(feature = "tls") && e.to_string().contains("`tls` feature"),
                    "{url}: {e}"
                );
            }
        }
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_without_the_feature_names_the_feature() {
        let err = ClientConfig::new("rediss://h:6380")
            .validate()
            .expect_err("no tls");
        assert!(err.is_invalid_input());
        assert!(
            err.to_string().contains("lock-core's `tls` feature"),
            "{err}"
        );
    }

    #[cfg(feature = "tls")]
    #[test]
    fn the_insecure_fragment_needs_the_danger_option() {
        let mut config = ClientConfig::new("rediss://h:6380/#insecure");
        let err = config.validate().expect_err("refused");
        assert!(
            err.to_string()
                .contains("danger_accept_invalid_certificates(true)"),
            "{err}"
        );
        config.tls.danger_accept_invalid_certificates = true;
        assert!(config.validate().is_ok());
        assert!(ClientConfig::new("rediss://h:6380").validate().is_ok());
    }

    #[test]
    fn tls_settings_need_a_tls_url() {
        let mut config = ClientConfig::new("redis://h:6379");
        config.tls.ca = Some(PemSource::File("/etc/ca.pem".into()));
        let err = config.validate().expect_err("plain url");
        assert!(err.to_string().contains("rediss://"), "{err}");
    }

    #[test]
    fn passwords_are_redacted_in_url_errors() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(redact("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact("rediss://u:se@c:r@t@h:1"), "rediss://u:***@h:1");
        assert_eq!(redact("redis://u@h:1"), "redis://u@h:1");
        assert_eq!(redact("redis://u:p/a?s#s@h"), "redis://u:***@h");
        assert_eq!(
            redact("redis+unix:///run/r.sock?db=1&pass=secret&user=u"),
            "redis+unix:///run/r.sock?db=1&pass=***&user=u"
        );
        assert_eq!(
            redact("redis://h/0?protocol=resp3&password=secret"),
            "redis://h/0?protocol=resp3&password=***"
        );
        assert_eq!(redact("not a url"), "not a url");
        assert_eq!(redact("redis:/u:secret@h:1"), "***@h:1");
        let err = ClientConfig::new("redis://u:secret@h:notaport")
            .validate()
            .expect_err("bad port");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn sharded_pub_sub_needs_a_cluster_url() {
        let mut config = ClientConfig::new("redis://127.0.0.1");
        config.pubsub_mode = PubSubMode::Sharded;
        let err = config.validate().expect_err("accepted");
        assert!(err.to_string().contains("needs a cluster url"), "{err}");
        config.url = "redis+cluster://127.0.0.1:7000".into();
        assert!(config.validate().is_ok());
    }
}
