//! The client, a public face over one engine (`hold::engine`): `ping`, its
//! id, configuration and renewal count. Each primitive adds its own
//! constructor to the client beside its face (`LockClient::lock` is in
//! `lock.rs`), and the builder adds `LockClient::builder` and `connect`
//! (`builder.rs`), so that this file imports none of them.

use std::sync::Arc;

use crate::config::ClientConfig;
use crate::error::Result;
use crate::hold::engine::Engine;

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
        crate::hold::eviction::check(&self.inner.core, &self.inner.eviction).await;
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
