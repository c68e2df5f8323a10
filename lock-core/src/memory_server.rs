//! The public handle of an in-memory server (feature `memory`): tests of
//! code that takes locks, with nothing installed.

use std::sync::Arc;

use crate::config::url::MemoryUrl;
use crate::error::{Error, Result};
use crate::memory::{registry, Server};

/// A Redis of this process, in memory, for tests: clients built with its
/// [`url`](MemoryServer::url) (`memory://<name>`) share it, run the very
/// same Lua scripts as on Redis (on an embedded Lua 5.1, the version Redis
/// embeds) and see the same replies. Needs lock-core's `memory` feature,
/// usually in `[dev-dependencies]`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// use lock_core::{LockClient, MemoryServer};
///
/// let server = MemoryServer::new();
/// let a = LockClient::builder(server.url()).build()?;
/// let b = LockClient::builder(server.url()).build()?;
/// let guard = a.lock("nightly-report")?.acquire().await?;
/// assert!(b.lock("nightly-report")?.try_acquire().await?.is_none());
/// guard.release().await?;
/// assert!(b.lock("nightly-report")?.try_acquire().await?.is_some());
/// # Ok(()) }
/// ```
///
/// What differs from Redis: one process only (no network, no other
/// program can connect); nothing is persisted; only the commands the
/// library sends and its scripts call exist (any other fails with an error
/// that names it); `WAIT` answers that no replica acknowledged (there are
/// none), so `wait_for_replicas` fails with `Error::NotReplicated`; no
/// Cluster, Sentinel, TLS or ACL. Expiry runs on tokio's clock, so
/// `tokio::time::pause` and `advance` drive leases in tests.
#[derive(Clone)]
pub struct MemoryServer {
    name: Arc<str>,
    server: Arc<Server>,
}

impl std::fmt::Debug for MemoryServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryServer")
            .field("url", &self.url())
            .finish()
    }
}

impl Default for MemoryServer {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryServer {
    /// A new, empty server of its own (a unique name).
    ///
    /// ```
    /// let server = lock_core::MemoryServer::new();
    /// assert!(server.url().starts_with("memory://"));
    /// ```
    pub fn new() -> Self {
        let name = format!("server-{}", uuid::Uuid::new_v4().simple());
        MemoryServer {
            server: registry::named(&name),
            name: Arc::from(name),
        }
    }

    /// The server called `name`: the same one for every handle and client
    /// of that name while one of them lives (`memory://<name>` reaches it
    /// too); a new, empty one otherwise. Fails for a name a URL cannot
    /// carry (`/`, `?`, `#`, `@`, `:`).
    ///
    /// ```
    /// let a = lock_core::MemoryServer::named("orders")?;
    /// let b = lock_core::MemoryServer::named("orders")?;
    /// assert_eq!(a.url(), b.url());
    /// assert!(lock_core::MemoryServer::named("a/b").is_err());
    /// # Ok::<(), lock_core::Error>(())
    /// ```
    pub fn named(name: &str) -> Result<Self> {
        let url = format!("memory://{name}");
        let parsed = MemoryUrl::parse(&url)?
            .ok_or_else(|| Error::InvalidArgument(format!("`{name}` is not a server name")))?;
        Ok(MemoryServer {
            server: registry::named(&parsed.name),
            name: Arc::from(parsed.name),
        })
    }

    /// The URL that clients of this server are built with.
    ///
    /// ```
    /// let server = lock_core::MemoryServer::named("jobs")?;
    /// assert_eq!(server.url(), "memory://jobs");
    /// # Ok::<(), lock_core::Error>(())
    /// ```
    pub fn url(&self) -> String {
        format!("memory://{}", self.name)
    }

    /// Empties the server as a restart that lost its data would: every
    /// key, every loaded script, every subscription (subscribers are told
    /// and subscribe again).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let server = lock_core::MemoryServer::new();
    /// let client = lock_core::LockClient::builder(server.url()).build()?;
    /// let guard = client.lock("job")?.acquire().await?;
    /// server.flush_all();
    /// assert!(!client.lock("job")?.is_locked().await?);
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    pub fn flush_all(&self) {
        self.server.flush_all();
    }
}
