//! The client, a public face: built from a configuration, it starts the
//! engine (`hold::engine`) and hands out locks; `ping`, its id and
//! configuration. Everything it does goes through the engine.

use std::sync::Arc;

use crate::builder::ClientBuilder;
use crate::config::{ClientConfig, ErrorHook};
use crate::error::Result;
use crate::hold::engine::Engine;
use crate::lock::Lock;
use crate::protocol::keys::LockKeys;

/// A handle to a Redis server for distributed locks. Cheap to clone (an
/// `Arc` inside), `Send + Sync`; build one per process and share it.
///
/// The client owns its connections (in lanes: lock commands, renewals,
/// inspection, `WAIT`), one pub/sub connection shared by every waiter, one
/// watchdog that renews every lock held with the default lease, and
/// releases guards dropped without [`release`](crate::LockGuard::release)
/// in background tasks of their own (tracked: a shutdown waits for them).
///
/// ```no_run
/// use lock_core::LockClient;
///
/// # #[tokio::main]
/// # async fn main() -> lock_core::Result<()> {
/// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.lock("nightly-report")?;
/// let guard = lock.acquire().await?;
/// // ... only one process at a time runs this ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Engine>,
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("client_id", &self.inner.core.client_id)
            .field("config", &self.inner.core.config)
            .finish_non_exhaustive()
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

    pub(crate) fn from_parts(config: ClientConfig, error_hook: Option<ErrorHook>) -> Result<Self> {
        Ok(LockClient {
            inner: Arc::new(Engine::start(config, error_hook)?),
        })
    }

    /// A handle to the lock called `name` (the Redis key is the client's key
    /// prefix followed by `name`). Checks the name; makes no Redis call.
    /// Takes any string: `&str`, `String`, `format!(..)`.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let lock = client.lock("order:42")?;
    /// let id = 7;
    /// let account = client.lock(format!("account:{id}"))?;
    /// assert!(client.lock("").unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<str>) -> Result<Lock> {
        let name = name.as_ref();
        let keys = LockKeys::new(
            &self.inner.core.config.key_prefix,
            name,
            self.inner.core.config.max_name_len,
        )?;
        Ok(Lock::new(self.clone(), Arc::new(keys)))
    }

    /// Sends PING: checks that Redis is reachable with this configuration.
    /// Then reads the server's `maxmemory-policy` (when the user may run
    /// `CONFIG GET`) and reports a policy that can evict lock keys through
    /// tracing and the error hook (see
    /// [`ClientBuilder::error_hook`](crate::ClientBuilder::error_hook));
    /// that report does not fail the ping.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// client.ping().await?;
    /// # Ok(()) }
    /// ```
    pub async fn ping(&self) -> Result<()> {
        self.inner.core.run_cmd(&redis::cmd("PING")).await?;
        crate::hold::eviction::check(&self.inner.core).await;
        Ok(())
    }

    /// The random id of this client: every owner id it uses is
    /// `"<client_id>:<n>"`, like Redisson's `"<uuid>:<threadId>"`.
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) {
    /// assert_eq!(client.client_id().len(), 36);
    /// # }
    /// ```
    pub fn client_id(&self) -> &str {
        &self.inner.core.client_id
    }

    /// The configuration this client was built with.
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) {
    /// println!("watchdog timeout: {:?}", client.config().watchdog_timeout);
    /// # }
    /// ```
    pub fn config(&self) -> &ClientConfig {
        &self.inner.core.config
    }

    /// Number of locks the watchdog is renewing right now.
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) {
    /// assert_eq!(client.renewing_count(), 0);
    /// # }
    /// ```
    pub fn renewing_count(&self) -> usize {
        self.inner.watchdog.len()
    }
}
