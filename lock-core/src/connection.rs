//! The client's connections: redis-rs multiplexed connections shared by
//! every command (see [`Pool`]), opened through a bb8 connection manager,
//! with connect and reply time-outs and broken-connection tracking.
//!
//! A connection is marked broken when a command on it fails at the I/O
//! level (or times out); the next command forgets it and opens another, so
//! after a Redis restart no dead connection is handed out again, and no
//! command pays a PING first. A cluster connection is not dropped for a
//! time-out: one node's stall must not cost the connections to the others
//! (see `must_go`).
//!
//! `rediss://` connections carry the client's TLS settings (see `tls.rs`);
//! a failed TLS handshake comes back with its rustls cause in the message.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bb8_redis::bb8;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisResult, Value};

use crate::config::ClientConfig;
use crate::endpoint::{is_read_only, Endpoint};
use crate::eviction::EvictionCheck;

/// Opens the client's connections.
#[derive(Debug)]
pub(crate) struct Manager {
    endpoint: Arc<Endpoint>,
    config: AsyncConnectionConfig,
    /// For connections of blocking commands (`WAIT`): no reply time-out
    /// of redis-rs's own (the callers bound them).
    blocking: bool,
}

impl Manager {
    /// A manager for the configured server: URL (one server, Sentinel or
    /// Cluster), time-outs and TLS settings (CA and client certificate
    /// files are read here).
    pub(crate) fn new(config: &ClientConfig) -> crate::error::Result<Self> {
        Ok(Manager {
            endpoint: Arc::new(Endpoint::new(config)?),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                .set_response_timeout(Some(config.command_timeout)),
            blocking: false,
        })
    }

    /// A manager for the same endpoint whose connections carry blocking
    /// commands.
    fn blocking(&self) -> Manager {
        Manager {
            endpoint: self.endpoint.clone(),
            config: self.config.clone().set_response_timeout(None),
            blocking: true,
        }
    }

    /// Where connections go, for the dedicated pub/sub connection.
    pub(crate) fn endpoint(&self) -> &Arc<Endpoint> {
        &self.endpoint
    }
}

/// One connection (or a clone of it: same socket) and whether a
/// failure on it means it must go; clones share that flag.
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    inner: Link,
    broken: Arc<AtomicBool>,
    /// The endpoint's generation when it was opened (see `Endpoint::generation`).
    generation: u64,
}

/// A connection to one node, or to a whole cluster (one multiplexed
/// connection per node, commands routed by their first key's slot,
/// `MOVED` / `ASK` followed by redis-rs).
#[derive(Clone)]
pub(crate) enum Link {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Link::Node(_) => "Link::Node",
            Link::Cluster(_) => "Link::Cluster",
        })
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Link::Node(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Node(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// The connection itself, for commands of the client's user.
    pub(crate) fn into_link(self) -> Link {
        self.inner
    }

    /// Sends one command; a connection-level failure marks the connection broken.
    pub(crate) async fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let result = match &mut self.inner {
            Link::Node(c) => c.send_packed_command(cmd).await,
            Link::Cluster(c) => c.req_packed_command(cmd).await,
        }
        .and_then(Value::extract_error);
        self.note(&result);
        result
    }

    /// Sends a pipeline of commands in one round trip; returns one value per
    /// command (an error reply of one command is a `Value::ServerError` there).
    /// On a cluster every keyed command of the pipeline must be in one slot.
    pub(crate) async fn query_pipeline(&mut self, pipe: &Pipeline) -> RedisResult<Vec<Value>> {
        let result = match &mut self.inner {
            Link::Node(c) => pipe.query_async::<Vec<Value>>(c).await,
            Link::Cluster(c) => pipe.query_async::<Vec<Value>>(c).await,
        };
        self.note(&result);
        result
    }

    /// Sends one command whose reply may take up to `timeout` (a `WAIT`),
    /// instead of the command time-out; on a cluster, to the primary of
    /// `key`'s slot (the node whose writes it must count).
    pub(crate) async fn query_within(
        &mut self,
        cmd: &Cmd,
        timeout: Duration,
        key: &str,
    ) -> RedisResult<Value> {
        let result = match &mut self.inner {
            Link::Node(c) => {
                let mut c = c.clone();
                c.set_response_timeout(timeout);
                c.send_packed_command(cmd).await
            }
            Link::Cluster(c) => {
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_key(key, SlotAddr::Master),
                ));
                match tokio::time::timeout(timeout, c.route_command(cmd.clone(), route)).await {
                    Ok(r) => r,
                    Err(_) => Err(RedisError::from((
                        redis::ErrorKind::Io,
                        "no reply in time",
                        format!("{timeout:?}"),
                    ))),
                }
            }
        }
        .and_then(Value::extract_error);
        self.note(&result);
        result
    }

    /// The cluster connection, when this is one.
    pub(crate) fn cluster(&mut self) -> Option<&mut ClusterConnection> {
        match &mut self.inner {
            Link::Cluster(c) => Some(c),
            Link::Node(_) => None,
        }
    }

    fn note<T>(&mut self, result: &RedisResult<T>) {
        if let Err(e) = result {
            if must_go(&self.inner, e) {
                self.broken.store(true, Ordering::Relaxed);
            }
        }
    }

    fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }
}

/// The client's connections: up to `size` multiplexed connections that
/// every command shares (round-robin), opened as the first commands need
/// them; a broken one is forgotten and replaced by the next command.
///
/// Sharing is what makes the client fast: redis-rs pipelines the commands
/// of many tasks on one socket, so Redis reads and answers them in batches.
/// Measured with lock-bench (16 tasks, uncontended): one shared connection
/// runs ~1.5 times as many acquire/release cycles per second as sixteen
/// connections each checked out for one command at a time, at less CPU on
/// both sides (see BENCHMARKS.md).
pub(crate) struct Pool {
    /// Opens connections (`dedicated_connection`: bb8's connector with this
    /// crate's manager) and keeps the exclusive ones (`exclusive`); the
    /// shared connections are never checked out.
    connector: bb8::Pool<Manager>,
    /// Connections checked out for one blocking command at a time.
    exclusive: bb8::Pool<Manager>,
    endpoint: Arc<Endpoint>,
    size: usize,
    shared: Mutex<Vec<Conn>>,
    next: AtomicUsize,
    /// One connection opens at a time: a burst of first commands does not
    /// open one each.
    opening: tokio::sync::Mutex<()>,
    /// What the server's eviction policy was last seen as (see `eviction.rs`).
    pub(crate) eviction: EvictionCheck,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("size", &self.size)
            .field("open", &self.live())
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// A connection for one command: one of the open connections once
    /// `size` of them are open; before that, a new one (while another
    /// opens, an open one if there is any). Connects here rather than in
    /// the background: a failure (refused, bad password, bad DB index,
    /// TLS) comes back at once, with its cause, instead of a time-out.
    pub(crate) async fn checkout(&self) -> Result<Conn, RedisError> {
        if let Some(conn) = self.pick(false) {
            return Ok(conn);
        }
        let _opening = match self.opening.try_lock() {
            Ok(guard) => guard,
            Err(_) => {
                if let Some(conn) = self.pick(true) {
                    return Ok(conn);
                }
                self.opening.lock().await
            }
        };
        // Another command may have opened the last one meanwhile.
        if let Some(conn) = self.pick(false) {
            return Ok(conn);
        }
        let conn = self.connector.dedicated_connection().await?;
        self.lock_shared().push(conn.clone());
        Ok(conn)
    }

    /// A new connection, not shared with the client's commands.
    pub(crate) async fn dedicated(&self) -> Result<Conn, RedisError> {
        self.connector.dedicated_connection().await
    }

    /// A connection of its own for commands that block it (a `WAIT` after
    /// a fresh acquisition, see `replicas.rs`): one of up to
    /// [`EXCLUSIVE_CONNECTIONS`] kept open for this, waiting for one while
    /// all are out.
    pub(crate) async fn exclusive(
        &self,
    ) -> Result<bb8::PooledConnection<'_, Manager>, crate::error::Error> {
        Ok(self.exclusive.get().await?)
    }

    /// The next open connection in turn: when `size` are open, or with
    /// `any`, when at least one is. Broken ones are forgotten here.
    fn pick(&self, any: bool) -> Option<Conn> {
        let generation = self.generation();
        let mut shared = self.lock_shared();
        shared.retain(|c| !c.is_broken() && c.generation == generation);
        if shared.is_empty() || (!any && shared.len() < self.size) {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % shared.len();
        Some(shared[i].clone())
    }

    /// Forgets every open connection: the next command opens a new one.
    /// Commands in flight finish on the old ones (their clones keep them
    /// open until then).
    pub(crate) fn retire(&self) {
        self.lock_shared().clear();
    }

    /// The endpoint's generation: connections of an older one go to a
    /// node that may no longer be the primary.
    fn generation(&self) -> u64 {
        self.endpoint.generation()
    }

    fn live(&self) -> usize {
        self.lock_shared().iter().filter(|c| !c.is_broken()).count()
    }

    fn lock_shared(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A failure that means the connection must go: I/O, time-outs, and a
/// node that became a replica (`READONLY`: a failover moved the primary).
pub(crate) fn is_connection_failure(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || is_read_only(e)
}

/// Whether `e`, from a command on `link`, means the link must go: a
/// [connection failure](is_connection_failure), except a response time-out
/// on a cluster link. A cluster link is one connection per node, which
/// redis-rs keeps itself (it retries a timed-out command on the same node
/// and repairs a node's dropped connection alone): a time-out says one
/// node is slow or stalled, not that the others are, and a new cluster
/// link would start by waiting on that node too. (Whoever gives up on a
/// command by its own deadline drops it without marking anything.)
fn must_go(link: &Link, e: &RedisError) -> bool {
    match link {
        Link::Cluster(_) if e.is_timeout() => false,
        _ => is_connection_failure(e),
    }
}

impl bb8::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    async fn connect(&self) -> Result<Conn, RedisError> {
        // Read first: a switch while connecting makes this one old at once.
        let generation = self.endpoint.generation();
        let inner = match &*self.endpoint {
            Endpoint::Cluster(cluster) => Link::Cluster(cluster.connect(self.blocking).await?),
            _ => {
                let client = self.endpoint.client().await?;
                let mut inner = client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await
                    .map_err(crate::tls::explain)?;
                self.endpoint.check(&mut inner).await?;
                Link::Node(inner)
            }
        };
        Ok(Conn {
            inner,
            broken: Arc::new(AtomicBool::new(false)),
            generation,
        })
    }

    async fn is_valid(&self, conn: &mut Conn) -> Result<(), RedisError> {
        conn.query(&redis::cmd("PING")).await.map(|_| ())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.is_broken() || conn.generation != self.endpoint.generation()
    }
}

/// How many connections blocking commands may have open at once (see
/// [`Pool::exclusive`]).
pub(crate) const EXCLUSIVE_CONNECTIONS: u32 = 16;

pub(crate) fn build_pool(manager: Manager, size: u32, wait_bound: Duration) -> Pool {
    let endpoint = manager.endpoint.clone();
    let exclusive = bb8::Pool::builder()
        .max_size(EXCLUSIVE_CONNECTIONS)
        .connection_timeout(wait_bound)
        .min_idle(Some(0))
        .test_on_check_out(false)
        .retry_connection(false)
        .build_unchecked(manager.blocking());
    let connector = bb8::Pool::builder()
        .max_size(1)
        .min_idle(Some(0))
        .test_on_check_out(false)
        .retry_connection(false)
        .build_unchecked(manager);
    Pool {
        connector,
        exclusive,
        endpoint,
        size: size.max(1) as usize,
        shared: Mutex::new(Vec::new()),
        next: AtomicUsize::new(0),
        opening: tokio::sync::Mutex::new(()),
        eviction: EvictionCheck::default(),
    }
}
