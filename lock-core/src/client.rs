//! The client: connection pool, scripts, watchdog, pub/sub hub and the
//! background task that releases dropped guards.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{ClientBuilder, ClientConfig, ErrorHook};
use crate::connection::{build_pool, Manager, Pool};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lock::Lock;
use crate::pubsub::PubSub;
use crate::scripts::{Script, Scripts};
use crate::watchdog::Watchdog;

/// How long a release keeps retrying after connection failures before it
/// gives up (the lock then expires with its lease).
const RELEASE_RETRY_WINDOW_FACTOR: u32 = 3;

/// What background tasks need; holds no reference to the client itself, so
/// the tasks end when the last client handle and guard are gone.
pub(crate) struct Core {
    pub(crate) config: ClientConfig,
    pub(crate) pool: Pool,
    pub(crate) scripts: Scripts,
    error_hook: Option<ErrorHook>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Core {
    /// Hands a background error to the error hook.
    pub(crate) fn report(&self, err: &Error) {
        if let Some(hook) = &self.error_hook {
            hook(err);
        }
    }

    /// Runs one script invocation on a pooled connection, bounded by the
    /// command timeout (pool wait included).
    pub(crate) async fn run_script(&self, script: &Script, cmd: &Cmd) -> Result<Value> {
        let fut = async {
            let mut conn = self.pool.get().await?;
            Ok::<_, Error>(script.run(&mut conn, cmd).await?)
        };
        self.bounded(fut).await
    }

    /// Runs one plain command on a pooled connection.
    pub(crate) async fn run_cmd(&self, cmd: &Cmd) -> Result<Value> {
        let fut = async {
            let mut conn = self.pool.get().await?;
            Ok::<_, Error>(conn.query(cmd).await?)
        };
        self.bounded(fut).await
    }

    async fn bounded<T>(&self, fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let limit = self.config.connect_timeout + self.config.command_timeout;
        match tokio::time::timeout(limit, fut).await {
            Ok(r) => r,
            Err(_) => Err(Error::CommandTimeout),
        }
    }

    /// Releases one hold of `owner` on the lock, retrying transient
    /// failures with the same request id (the script's latch makes a retry
    /// after a lost reply harmless). Returns Ok(true) when the owner held the
    /// lock, Ok(false) when it did not.
    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
    ) -> Result<bool> {
        let request_id = uuid::Uuid::new_v4().simple().to_string();
        let latch = keys.latch(&request_id);
        // The latch must outlive the last retry that can reach Redis.
        let window = self.config.command_timeout * RELEASE_RETRY_WINDOW_FACTOR;
        let latch_ms = (window + self.config.connect_timeout + self.config.command_timeout * 2)
            .as_millis()
            .max(1000) as u64;
        let cmd = self.scripts.release.evalsha(
            &[keys.lock.as_str(), keys.channel.as_str(), latch.as_str()],
            (owner, lease_ms, crate::keys::UNLOCK_MESSAGE, latch_ms),
        );
        let deadline =
            tokio::time::Instant::now() + self.config.command_timeout * RELEASE_RETRY_WINDOW_FACTOR;
        let mut backoff = Duration::from_millis(10);
        loop {
            match self.run_script(&self.scripts.release, &cmd).await {
                Ok(Value::Nil) => return Ok(false),
                Ok(Value::Int(_)) => return Ok(true),
                Ok(other) => {
                    return Err(Error::Protocol(format!(
                        "release script answered {other:?}"
                    )))
                }
                Err(e) if e.is_transient() && tokio::time::Instant::now() + backoff < deadline => {
                    tracing::debug!(lock = %keys.lock, error = %e, "lock release failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A release that no caller awaits: a dropped guard, a cancelled acquire.
#[derive(Debug)]
pub(crate) struct ReleaseJob {
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) owner: Arc<str>,
    pub(crate) lease_ms: u64,
}

pub(crate) struct ClientInner {
    pub(crate) core: Arc<Core>,
    pub(crate) client_id: String,
    pub(crate) watchdog: Watchdog,
    pub(crate) pubsub: PubSub,
    releases: mpsc::UnboundedSender<ReleaseJob>,
    shutdown: CancellationToken,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        // Stops the watchdog and the pub/sub task. The release task ends by
        // itself once it has drained the jobs already handed to it.
        self.shutdown.cancel();
    }
}

/// A handle to a Redis server for distributed locks. Cheap to clone (an
/// `Arc` inside), `Send + Sync`; build one per process and share it.
///
/// The client owns a bb8 pool, one pub/sub connection shared by every
/// waiter, one watchdog that renews every lock held with the default lease,
/// and a background task that releases guards dropped without
/// [`release`](crate::LockGuard::release).
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
    pub(crate) inner: Arc<ClientInner>,
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("client_id", &self.inner.client_id)
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

    /// Builds a client with default settings and checks that Redis answers.
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
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::InvalidArgument(
                "a LockClient must be built inside a tokio runtime (it starts background tasks)"
                    .into(),
            ));
        }
        let manager = Manager::new(
            config.connection_info()?,
            config.connect_timeout,
            config.command_timeout,
        )
        .map_err(|e| Error::InvalidArgument(format!("redis url: {e}")))?;
        let pubsub_client = manager.client().clone();
        let pool = build_pool(manager, config.pool_size, config.connect_timeout);
        let shutdown = CancellationToken::new();
        let core = Arc::new(Core {
            pool,
            scripts: Scripts::new(),
            error_hook,
            config,
        });
        let watchdog = Watchdog::start(core.clone(), shutdown.clone());
        let pubsub = PubSub::start(
            pubsub_client,
            core.config.connect_timeout,
            core.config.command_timeout,
            shutdown.clone(),
        );
        let (releases, rx) = mpsc::unbounded_channel();
        tokio::spawn(release_worker(core.clone(), rx));
        Ok(LockClient {
            inner: Arc::new(ClientInner {
                core,
                client_id: uuid::Uuid::new_v4().to_string(),
                watchdog,
                pubsub,
                releases,
                shutdown,
            }),
        })
    }

    /// A handle to the lock called `name` (the Redis key is the client's key
    /// prefix followed by `name`). Checks the name; makes no Redis call.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let lock = client.lock("order:42")?;
    /// assert!(client.lock("").unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: &str) -> Result<Lock> {
        let keys = LockKeys::new(
            &self.inner.core.config.key_prefix,
            name,
            self.inner.core.config.max_name_len,
        )?;
        Ok(Lock::new(self.clone(), Arc::new(keys)))
    }

    /// Sends PING: checks that Redis is reachable with this configuration.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// client.ping().await?;
    /// # Ok(()) }
    /// ```
    pub async fn ping(&self) -> Result<()> {
        self.inner
            .core
            .run_cmd(&redis::cmd("PING"))
            .await
            .map(|_| ())
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
        &self.inner.client_id
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

    pub(crate) fn owner_id(&self, n: u64) -> Arc<str> {
        Arc::from(format!("{}:{n}", self.inner.client_id))
    }

    /// Hands a release to the background task (from `Drop`, without awaiting).
    pub(crate) fn release_in_background(&self, job: ReleaseJob) {
        if let Err(mpsc::error::SendError(job)) = self.inner.releases.send(job) {
            tracing::warn!(lock = %job.keys.lock, "lock client is shutting down; the lock will expire with its lease");
        }
    }
}

async fn release_worker(core: Arc<Core>, mut jobs: mpsc::UnboundedReceiver<ReleaseJob>) {
    while let Some(job) = jobs.recv().await {
        let core = core.clone();
        tokio::spawn(async move {
            match core.release(&job.keys, &job.owner, job.lease_ms).await {
                Ok(held) => {
                    tracing::debug!(lock = %job.keys.lock, was_held = held, "lock released in background")
                }
                Err(e) => {
                    tracing::warn!(lock = %job.keys.lock, error = %e, "background lock release failed; the lock expires with its lease");
                    core.report(&e);
                }
            }
        });
    }
}
