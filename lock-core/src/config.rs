//! Client configuration: plain data with documented defaults, and a builder.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::replicas::ReplicaAck;
use crate::transport::endpoint::{ClusterUrl, SentinelUrl};
use crate::transport::pubsub::sharding::PubSubMode;
use crate::transport::tls::{PemSource, TlsConfig};

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
/// drawn (see [`ClientBuilder::token_retention`]).
pub const DEFAULT_TOKEN_RETENTION: Duration = Duration::from_secs(60);

/// Longest accepted lease (explicit or watchdog timeout): 365 days. Longer
/// values overflow what Redis accepts for PEXPIRE once added to the clock.
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// A callback that receives errors of background work (releases of dropped
/// guards, renewals) that no caller is waiting for.
pub(crate) type ErrorHook = Arc<dyn Fn(&Error) + Send + Sync>;

/// Everything a [`LockClient`] is built from. Plain data; every field has a
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
            return Err(Error::InvalidArgument(
                crate::transport::tls::FEATURE_MISSING.into(),
            ));
        }
        let cluster = ClusterUrl::parse(&self.url)?;
        if self.pubsub_mode == PubSubMode::Sharded && cluster.is_none() {
            return Err(Error::InvalidArgument(
                "pubsub_mode Sharded needs a cluster url (redis+cluster://)".into(),
            ));
        }
        let tls = if let Some(cluster) = cluster {
            cluster.tls
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
            return Err(Error::InvalidArgument(
                crate::transport::tls::FEATURE_MISSING.into(),
            ));
        }
        let info = self.url.as_str().into_connection_info().map_err(|e| {
            Error::InvalidArgument(format!(
                "invalid redis url `{}`: {}",
                redact(&self.url),
                crate::transport::endpoint::unparsed_url(&self.url, &e)
            ))
        })?;
        if let redis::ConnectionAddr::TcpTls { insecure: true, .. } = info.addr() {
            if !self.tls.danger_accept_invalid_certificates {
                return Err(Error::InvalidArgument(
                    crate::transport::tls::INSECURE_REFUSED.into(),
                ));
            }
        }
        Ok(info)
    }
}

/// Whether the URL's scheme asks for TLS (`rediss://`, `valkeys://`).
fn is_tls_url(url: &str) -> bool {
    url.trim_start()
        .split_once("://")
        .is_some_and(|(scheme, _)| {
            scheme.eq_ignore_ascii_case("rediss")
                || scheme.eq_ignore_ascii_case("valkeys")
                || scheme.eq_ignore_ascii_case("rediss+sentinel")
                || scheme.eq_ignore_ascii_case("rediss+cluster")
        })
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
            .finish()
    }
}

/// The URL with any password replaced by `***`, for error messages and
/// `Debug` output: the userinfo's password (`redis://user:pass@host`,
/// `redis://:pass@host`) and a `pass=` / `password=` query parameter
/// (`redis+unix:///run/redis.sock?pass=...`). The user name, host, port,
/// database and other parameters stay.
fn redact(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        // Not a URL: whatever comes before an `@` may hold a password.
        return match url.rfind('@') {
            Some(i) => format!("***{}", &url[i..]),
            None => url.to_string(),
        };
    };
    let (scheme, rest) = url.split_at(start);
    // The userinfo ends at the last `@`: a password may hold any character
    // (`@`, `/`, `?` included), so this errs towards hiding too much.
    let (userinfo, host) = rest.split_at(rest.rfind('@').unwrap_or(0));
    let user = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => userinfo.to_string(),
    };
    let host = match host.split_once('?') {
        Some((path, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _))
                        if name == "pass" || name == "password" || name == "sentinel_password" =>
                    {
                        format!("{name}=***")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", pairs.join("&"))
        }
        None => host.to_string(),
    };
    format!("{scheme}{user}{host}")
}

pub(crate) fn positive(what: &str, d: Duration) -> Result<()> {
    if d.is_zero() {
        return Err(Error::InvalidArgument(format!(
            "{what} must be greater than zero"
        )));
    }
    Ok(())
}

/// A by-value builder for [`LockClient`].
///
/// ```no_run
/// use lock_core::LockClient;
/// use std::time::Duration;
///
/// # async fn demo() -> lock_core::Result<()> {
/// let client = LockClient::builder("redis://127.0.0.1:6379")
///     .pool_size(32)
///     .watchdog_timeout(Duration::from_secs(10))
///     .key_prefix("shop:")
///     .build()?;
/// # Ok(()) }
/// ```
#[must_use]
pub struct ClientBuilder {
    config: ClientConfig,
    error_hook: Option<ErrorHook>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("config", &self.config)
            .field("error_hook", &self.error_hook.is_some())
            .finish()
    }
}

impl ClientBuilder {
    /// A builder for a client of the Redis at `url`.
    ///
    /// ```
    /// let builder = lock_core::ClientBuilder::new("redis://127.0.0.1:6379");
    /// # let _ = builder;
    /// ```
    pub fn new(url: impl Into<String>) -> Self {
        Self::from_config(ClientConfig::new(url))
    }

    /// A builder that starts from a full configuration.
    ///
    /// ```
    /// let builder = lock_core::ClientBuilder::from_config(lock_core::ClientConfig::new("redis://h"));
    /// # let _ = builder;
    /// ```
    pub fn from_config(config: ClientConfig) -> Self {
        ClientBuilder {
            config,
            error_hook: None,
        }
    }

    /// How many multiplexed connections the client's commands share
    /// (default 1; see [`ClientConfig::pool_size`]).
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h").pool_size(4);
    /// # let _ = b;
    /// ```
    pub fn pool_size(mut self, size: u32) -> Self {
        self.config.pool_size = size;
        self
    }

    /// Lease of locks taken without an explicit lease (default 30 s); the
    /// watchdog renews them every third of it.
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h")
    ///     .watchdog_timeout(std::time::Duration::from_secs(9));
    /// # let _ = b;
    /// ```
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.config.watchdog_timeout = timeout;
        self
    }

    /// Every fresh acquisition of this client waits until `replicas`
    /// replicas acknowledged it, at most `timeout`; when fewer did, it is
    /// released and the acquire fails with [`Error::NotReplicated`]
    /// (see [`ClientConfig::wait_for_replicas`] and the crate docs, "Safety").
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h")
    ///     .wait_for_replicas(1, std::time::Duration::from_millis(500));
    /// # let _ = b;
    /// ```
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.config.wait_for_replicas = Some(ReplicaAck::new(replicas, timeout));
        self
    }

    /// Classic or sharded pub/sub for the lock channels on a cluster
    /// (default [`PubSubMode::Auto`]; see [`ClientConfig::pubsub_mode`]).
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")
    ///     .pubsub_mode(lock_core::PubSubMode::Global);
    /// # let _ = b;
    /// ```
    pub fn pubsub_mode(mut self, mode: PubSubMode) -> Self {
        self.config.pubsub_mode = mode;
        self
    }

    /// Prefix of every lock key (default none).
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h").key_prefix("billing:");
    /// # let _ = b;
    /// ```
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.key_prefix = prefix.into();
        self
    }

    /// Bound on opening a connection (default 5 s).
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h")
    ///     .connect_timeout(std::time::Duration::from_secs(1));
    /// # let _ = b;
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Bound on one command's reply (default 5 s).
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h")
    ///     .command_timeout(std::time::Duration::from_millis(500));
    /// # let _ = b;
    /// ```
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.config.command_timeout = timeout;
        self
    }

    /// Longest accepted lock name in bytes, prefix included (default 1024).
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h").max_name_len(128);
    /// # let _ = b;
    /// ```
    pub fn max_name_len(mut self, len: usize) -> Self {
        self.config.max_name_len = len;
        self
    }

    /// How long a lock's last fencing token is kept in Redis after it was
    /// drawn (default 60 s).
    ///
    /// Fencing tokens are a hybrid logical clock on the Redis server's
    /// `TIME`: a new token is `max(last token + 1, server time in µs)`. The
    /// last token is only needed while the server clock could be behind it
    /// (several tokens in one microsecond, a clock stepped back); after
    /// this retention its key expires, so lock names no longer used cost
    /// no memory, and the clock alone keeps tokens growing — also after a
    /// restart that lost every key. Keep it longer than any backward step
    /// of the Redis server's clock you want to survive.
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h")
    ///     .token_retention(std::time::Duration::from_secs(600));
    /// # let _ = b;
    /// ```
    pub fn token_retention(mut self, retention: std::time::Duration) -> Self {
        self.config.token_retention = retention;
        self
    }

    /// Trusts the CA certificates in this PEM text (one or more) for
    /// `rediss://` servers, instead of the platform's root certificates:
    /// for a server whose certificate a private CA signed. Needs the `tls`
    /// feature and a `rediss://` URL; the PEM is checked by
    /// [`build`](Self::build).
    ///
    /// ```
    /// let ca_pem = b"-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n";
    /// let b = lock_core::ClientBuilder::new("rediss://redis.internal:6380").tls_ca_pem(ca_pem);
    /// # let _ = b;
    /// ```
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.config.tls.ca = Some(PemSource::Bytes(pem.into()));
        self
    }

    /// Like [`tls_ca_pem`](Self::tls_ca_pem), with the PEM read from a file
    /// when the client is built.
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("rediss://redis.internal:6380")
    ///     .tls_ca_file("/etc/redis/tls/ca.crt");
    /// # let _ = b;
    /// ```
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.tls.ca = Some(PemSource::File(path.into()));
        self
    }

    /// Presents this client certificate chain and private key (PEM) to
    /// servers that require mutual TLS (`tls-auth-clients yes`). The key
    /// never appears in `Debug` output or error messages.
    ///
    /// ```
    /// # let (cert_pem, key_pem) = (Vec::<u8>::new(), Vec::<u8>::new());
    /// let b = lock_core::ClientBuilder::new("rediss://redis.internal:6380")
    ///     .tls_client_cert_pem(cert_pem, key_pem);
    /// # let _ = b;
    /// ```
    pub fn tls_client_cert_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.config.tls.client_cert = Some(PemSource::Bytes(cert.into()));
        self.config.tls.client_key = Some(PemSource::Bytes(key.into()));
        self
    }

    /// Like [`tls_client_cert_pem`](Self::tls_client_cert_pem), with both
    /// read from files when the client is built.
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("rediss://redis.internal:6380")
    ///     .tls_client_cert_files("/etc/app/redis.crt", "/etc/app/redis.key");
    /// # let _ = b;
    /// ```
    pub fn tls_client_cert_files(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.config.tls.client_cert = Some(PemSource::File(cert.into()));
        self.config.tls.client_key = Some(PemSource::File(key.into()));
        self
    }

    /// **Turns off every check of the server's certificate** (its CA, its
    /// host name, its dates) when `true`: anyone on the network path can
    /// then pose as Redis, read lock traffic and hand out locks. Only for
    /// tests against throwaway servers. Default `false`, and while it is
    /// `false` a URL with redis-rs's `#insecure` fragment is refused, so an
    /// insecure URL cannot slip in through configuration alone. With
    /// `true`, the fragment is not needed.
    ///
    /// ```
    /// let err = lock_core::ClientConfig::new("rediss://127.0.0.1:6380/#insecure")
    ///     .validate()
    ///     .unwrap_err();
    /// // (without the `tls` feature, the error asks for the feature instead)
    /// let text = err.to_string();
    /// assert!(text.contains("danger_accept_invalid_certificates") || text.contains("`tls` feature"));
    ///
    /// let b = lock_core::ClientBuilder::new("rediss://127.0.0.1:6380/#insecure")
    ///     .danger_accept_invalid_certificates(true);
    /// # let _ = b;
    /// ```
    pub fn danger_accept_invalid_certificates(mut self, accept: bool) -> Self {
        self.config.tls.danger_accept_invalid_certificates = accept;
        self
    }

    /// Called with every error of background work that no caller awaits:
    /// the release of a dropped guard that failed for good, a renewal that
    /// failed; and with warnings about the server: a `maxmemory-policy`
    /// that can evict lock keys (checked by
    /// [`LockClient::ping`](crate::LockClient::ping), once per policy seen).
    /// Such errors are also logged with `tracing`.
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h")
    ///     .error_hook(|err| eprintln!("lock background error: {err}"));
    /// # let _ = b;
    /// ```
    pub fn error_hook(mut self, hook: impl Fn(&Error) + Send + Sync + 'static) -> Self {
        self.error_hook = Some(Arc::new(hook));
        self
    }

    /// The configuration as built so far.
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h").pool_size(3);
    /// assert_eq!(b.config().pool_size, 3);
    /// ```
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Validates the configuration and creates the client. Connections are
    /// opened lazily, on first use; call [`LockClient::ping`] to check that
    /// Redis is reachable.
    ///
    /// Must be called inside a tokio runtime: the client starts its
    /// background tasks (watchdog, pub/sub, releases of dropped guards).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let err = lock_core::LockClient::builder("redis://h").pool_size(0).build().unwrap_err();
    /// assert_eq!(err.to_string(), "invalid argument: pool_size must be at least 1");
    /// # }
    /// ```
    pub fn build(self) -> Result<LockClient> {
        self.config.validate()?;
        LockClient::from_parts(self.config, self.error_hook)
    }
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
        let forms = crate::transport::endpoint::URL_FORMS;
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
    fn debug_hides_the_password_and_keeps_user_and_host() {
        let url = "redis://alice:s3cr3t-pw@cache.internal:6380/2";
        let config = ClientConfig::new(url);
        let builder = ClientBuilder::new(url).key_prefix("shop:");
        for debug in [
            format!("{config:?}"),
            format!("{builder:?}"),
            format!("{config:#?}"),
        ] {
            assert!(!debug.contains("s3cr3t-pw"), "{debug}");
            assert!(
                debug.contains("redis://alice:***@cache.internal:6380/2"),
                "{debug}"
            );
        }
        assert!(format!("{builder:?}").contains("shop:"));
        // The field itself is unchanged: only its rendering is redacted.
        assert_eq!(config.url, url);
    }
}
