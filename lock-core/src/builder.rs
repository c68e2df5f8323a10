//! The by-value builder of a [`LockClient`]: a [`ClientConfig`] filled in
//! step by step, an optional error hook, and `build`; and the client's two
//! ways to be made (`LockClient::builder`, `LockClient::connect`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::config::{ClientConfig, ErrorHook, PemSource, PubSubMode, ReplicaAck};
use crate::error::{Error, Result};
use crate::hold::engine::Engine;

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

    /// The wait allowance of this client's fair locks (Redisson's
    /// `fairLockWaitTimeout`, default 5 minutes; see
    /// [`ClientConfig::fair_lock_wait_timeout`]): every client of a fair
    /// lock must use the same value.
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h")
    ///     .fair_lock_wait_timeout(std::time::Duration::from_secs(60));
    /// # let _ = b;
    /// ```
    pub fn fair_lock_wait_timeout(mut self, allowance: Duration) -> Self {
        self.config.fair_lock_wait_timeout = allowance;
        self
    }

    /// Whether lock operations that are ready at the same moment go to
    /// Redis as one script call (default `false`; see
    /// [`ClientConfig::group_commit`]).
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h").group_commit(true);
    /// # let _ = b;
    /// ```
    pub fn group_commit(mut self, on: bool) -> Self {
        self.config.group_commit = on;
        self
    }

    /// How long this client may pass a lock from one of its waiters to
    /// the next before letting other clients in (default 2 ms; see
    /// [`ClientConfig::hand_off_window`]).
    ///
    /// ```
    /// let b = lock_core::ClientBuilder::new("redis://h")
    ///     .hand_off_window(std::time::Duration::from_millis(20));
    /// # let _ = b;
    /// ```
    pub fn hand_off_window(mut self, window: Duration) -> Self {
        self.config.hand_off_window = window;
        self
    }

    /// Every fresh lock acquisition of this client (not semaphore permits) waits until `replicas`
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

impl LockClient {
    /// A builder for a client of the Redis at `url`.
    ///
    /// ```no_run
    /// # async fn demo() -> lock_core::Result<()> {
    /// let client = lock_core::LockClient::builder("redis://127.0.0.1:6379")
    ///     .key_prefix("shop:")
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// Builds a client with default settings and checks that Redis answers
    /// (see [`ping`](Self::ping), which also checks the eviction policy).
    ///
    /// ```no_run
    /// # async fn demo() -> lock_core::Result<()> {
    /// let client = lock_core::LockClient::connect("redis://127.0.0.1:6379").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: impl Into<String>) -> Result<Self> {
        let client = Self::builder(url).build()?;
        client.ping().await?;
        Ok(client)
    }

    fn from_parts(config: ClientConfig, error_hook: Option<ErrorHook>) -> Result<Self> {
        Ok(LockClient {
            inner: Arc::new(Engine::start(config, error_hook)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
