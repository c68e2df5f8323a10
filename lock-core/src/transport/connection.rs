//! The client's connections, in lanes (see [`Lane`] and [`Pool`]):
//! redis-rs multiplexed connections opened through a bb8 connection
//! manager, with connect and reply time-outs and broken-connection
//! tracking.
//!
//! A connection is marked broken when a command on it fails at the I/O
//! level (or times out), and *suspect* when a caller gave up waiting for
//! its reply (its own deadline, shorter than redis-rs's reply time-out,
//! passed first: a stalled, half-open path): either way the next command
//! forgets it and opens another, so after a Redis restart or on a stalled
//! socket no dead connection is handed out again, and no command pays a
//! PING first. On a cluster connection neither a time-out nor a caller's
//! deadline marks the whole connection: it carries one connection per
//! node, and one node's stall must not cost the connections to the others
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
use crate::error::is_read_only;
use crate::transport::endpoint::Endpoint;

/// Opens the client's connections.
#[derive(Debug)]
pub(crate) struct Manager {
    endpoint: Arc<Endpoint>,
    config: AsyncConnectionConfig,
    /// For connections of blocking commands (`WAIT`): no reply time-out
    /// of redis-rs's own (the callers bound them).
    blocking: bool,
    /// The reply time-out of in-memory links on a simulated network.
    #[cfg(feature = "memory")]
    response_timeout: Option<Duration>,
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
            #[cfg(feature = "memory")]
            response_timeout: Some(config.command_timeout),
        })
    }

    /// A manager for the same endpoint whose connections carry blocking
    /// commands.
    fn blocking(&self) -> Manager {
        Manager {
            endpoint: self.endpoint.clone(),
            config: self.config.clone().set_response_timeout(None),
            blocking: true,
            #[cfg(feature = "memory")]
            response_timeout: None,
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
    /// An in-memory server of this process (feature `memory`).
    #[cfg(feature = "memory")]
    Memory(crate::transport::memory_link::MemoryLink),
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Link::Node(_) => "Link::Node",
            Link::Cluster(_) => "Link::Cluster",
            #[cfg(feature = "memory")]
            Link::Memory(_) => "Link::Memory",
        })
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Link::Node(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
            #[cfg(feature = "memory")]
            Link::Memory(c) => c.req_packed_command(cmd),
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
            #[cfg(feature = "memory")]
            Link::Memory(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Node(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
            #[cfg(feature = "memory")]
            Link::Memory(c) => c.get_db(),
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
            #[cfg(feature = "memory")]
            Link::Memory(c) => c.req_packed_command(cmd).await,
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
            #[cfg(feature = "memory")]
            Link::Memory(c) => pipe.query_async::<Vec<Value>>(c).await,
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
            // WAIT on an in-memory server answers at once (it has no replicas).
            #[cfg(feature = "memory")]
            Link::Memory(c) => c.req_packed_command(cmd).await,
        }
        .and_then(Value::extract_error);
        self.note(&result);
        result
    }

    /// The cluster connection, when this is one.
    pub(crate) fn cluster(&mut self) -> Option<&mut ClusterConnection> {
        match &mut self.inner {
            Link::Cluster(c) => Some(c),
            _ => None,
        }
    }

    /// An error one part of a reply carried (an element of a grouped
    /// script call): when it means the connection must go, as if the
    /// whole command had failed with it.
    pub(crate) fn note_failure(&mut self, e: &RedisError) {
        if must_go(&self.inner, e) {
            self.broken.store(true, Ordering::Relaxed);
        }
    }

    fn note<T>(&mut self, result: &RedisResult<T>) {
        if let Err(e) = result {
            self.note_failure(e);
        }
    }

    fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    /// One connection to one node (not a cluster's set of them).
    fn is_one_connection(&self) -> bool {
        match self.inner {
            Link::Node(_) => true,
            Link::Cluster(_) => false,
            #[cfg(feature = "memory")]
            Link::Memory(_) => true,
        }
    }

    /// What marks this connection suspect once a caller gives up waiting
    /// for a reply on it (see [`Suspect`]).
    pub(crate) fn suspect(&self) -> Suspect {
        Suspect {
            broken: self.is_one_connection().then(|| self.broken.clone()),
        }
    }
}

/// Marks a connection suspect: a caller gave up waiting for a reply on it
/// (its own deadline passed), so the next command opens a new one. Not on
/// a cluster connection (see the module doc).
#[derive(Debug)]
pub(crate) struct Suspect {
    broken: Option<Arc<AtomicBool>>,
}

impl Suspect {
    /// The caller gave up: the connection is not handed out again.
    pub(crate) fn mark(&self) {
        if let Some(broken) = &self.broken {
            broken.store(true, Ordering::Relaxed);
        }
    }
}

/// The traffic lanes of a client: each its own connections, so that slow
/// traffic of one kind never holds up another (Redis answers the commands
/// of one connection in order: one slow reply holds up every reply behind
/// it).
///
/// | lane | carries | connections |
/// |---|---|---|
/// | `Locks` | acquire, re-entry, release, hand-off, cancel, force-unlock, `is_locked`, `hold_count`, `remaining_ttl`, PING | `pool_size` shared (default 1) |
/// | `Renewals` | the watchdog's renewal batches | 1 shared |
/// | `Inspect` | `status`, `scan_locks` (lockctl list), the eviction-policy check | 1 shared |
/// | waits | `WAIT` after a fresh acquisition (`wait_for_replicas`) | one per WAIT in flight, kept for reuse (see [`Pool::wait_lane`]) |
/// | yours | `LockClient::redis_connection` | a new one per call |
///
/// The pub/sub connection (unlock messages) is apart from all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Lock operations.
    Locks,
    /// The watchdog's renewals.
    Renewals,
    /// Reads of lock state for people and tools.
    Inspect,
}

/// Connections of one shared lane: up to `size`, used round-robin.
struct Shared {
    size: usize,
    conns: Mutex<Vec<Conn>>,
    next: AtomicUsize,
    /// One connection opens at a time: a burst of first commands does not
    /// open one each.
    opening: tokio::sync::Mutex<()>,
}

impl Shared {
    fn new(size: usize) -> Self {
        Shared {
            size: size.max(1),
            conns: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            opening: tokio::sync::Mutex::new(()),
        }
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next open connection in turn: when `size` are open, or with
    /// `any`, when at least one is. Broken ones are forgotten here.
    fn pick(&self, any: bool, generation: u64) -> Option<Conn> {
        let mut conns = self.locked();
        conns.retain(|c| !c.is_broken() && c.generation == generation);
        if conns.is_empty() || (!any && conns.len() < self.size) {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % conns.len();
        Some(conns[i].clone())
    }

    fn live(&self) -> usize {
        self.locked().iter().filter(|c| !c.is_broken()).count()
    }
}

/// How many idle `WAIT` connections are kept for reuse (more are opened
/// while more `WAIT`s are in flight, and closed after).
const IDLE_WAIT_CONNECTIONS: usize = 16;

/// A connection of the wait lane, lent for one `WAIT`: back to the idle
/// ones when dropped, unless it failed or its `WAIT` was given up (marked
/// suspect: its late reply would hold up the next one).
pub(crate) struct WaitConn<'a> {
    conn: Option<Conn>,
    pool: &'a Pool,
    finished: bool,
}

impl WaitConn<'_> {
    /// The connection.
    pub(crate) fn conn(&mut self) -> Option<&mut Conn> {
        self.conn.as_mut()
    }

    /// Its command was answered: it may be lent again.
    pub(crate) fn finished(&mut self) {
        self.finished = true;
    }
}

impl Drop for WaitConn<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if !self.finished || conn.is_broken() {
            return;
        }
        let mut idle = self
            .pool
            .idle_waits
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if idle.len() < IDLE_WAIT_CONNECTIONS {
            idle.push(conn);
        }
    }
}

/// The client's connections, by lane (see [`Lane`]).
///
/// Sharing is what makes the client fast: redis-rs pipelines the commands
/// of many tasks on one socket, so Redis reads and answers them in batches.
/// Measured with lock-bench (16 tasks, uncontended): one shared connection
/// runs ~1.5 times as many acquire/release cycles per second as sixteen
/// connections each checked out for one command at a time, at less CPU on
/// both sides (see BENCHMARKS.md). No command ever waits for a connection
/// to be free: shared lanes are shared, the wait lane opens one more.
pub(crate) struct Pool {
    /// Opens connections (bb8's connector with this crate's manager; no
    /// connection is ever checked out of it).
    connector: bb8::Pool<Manager>,
    /// Opens connections for blocking commands (no reply time-out).
    blocking: bb8::Pool<Manager>,
    endpoint: Arc<Endpoint>,
    locks: Shared,
    renewals: Shared,
    inspect: Shared,
    /// Idle connections of the wait lane.
    idle_waits: Mutex<Vec<Conn>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("size", &self.locks.size)
            .field("open", &self.locks.live())
            .finish_non_exhaustive()
    }
}

impl Pool {
    fn lane(&self, lane: Lane) -> &Shared {
        match lane {
            Lane::Locks => &self.locks,
            Lane::Renewals => &self.renewals,
            Lane::Inspect => &self.inspect,
        }
    }

    /// A connection of `lane` for one command: one of the open connections
    /// once the lane's size are open; before that, a new one (while another
    /// opens, an open one if there is any). Connects here rather than in
    /// the background: a failure (refused, bad password, bad DB index,
    /// TLS) comes back at once, with its cause, instead of a time-out.
    pub(crate) async fn checkout(&self, lane: Lane) -> Result<Conn, RedisError> {
        let generation = self.generation();
        let shared = self.lane(lane);
        if let Some(conn) = shared.pick(false, generation) {
            return Ok(conn);
        }
        let _opening = match shared.opening.try_lock() {
            Ok(guard) => guard,
            Err(_) => {
                if let Some(conn) = shared.pick(true, generation) {
                    return Ok(conn);
                }
                shared.opening.lock().await
            }
        };
        // Another command may have opened the last one meanwhile.
        if let Some(conn) = shared.pick(false, generation) {
            return Ok(conn);
        }
        let conn = self.connector.dedicated_connection().await?;
        shared.locked().push(conn.clone());
        Ok(conn)
    }

    /// A new connection, not shared with the client's commands.
    pub(crate) async fn dedicated(&self) -> Result<Conn, RedisError> {
        self.connector.dedicated_connection().await
    }

    /// A connection of the wait lane for one blocking command (a `WAIT`
    /// after a fresh acquisition, see `replicas.rs`): an idle one, or a new
    /// one. Never waits for another `WAIT` to finish.
    pub(crate) async fn wait_lane(&self) -> Result<WaitConn<'_>, RedisError> {
        let generation = self.generation();
        let idle = {
            let mut idle = self.idle_waits.lock().unwrap_or_else(|p| p.into_inner());
            idle.retain(|c| !c.is_broken() && c.generation == generation);
            idle.pop()
        };
        let conn = match idle {
            Some(conn) => conn,
            None => self.blocking.dedicated_connection().await?,
        };
        Ok(WaitConn {
            conn: Some(conn),
            pool: self,
            finished: false,
        })
    }

    /// Forgets every open connection: the next command opens a new one.
    /// Commands in flight finish on the old ones (their clones keep them
    /// open until then).
    pub(crate) fn retire(&self) {
        for lane in [Lane::Locks, Lane::Renewals, Lane::Inspect] {
            self.lane(lane).locked().clear();
        }
        self.idle_waits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The endpoint's generation: connections of an older one go to a
    /// node that may no longer be the primary.
    fn generation(&self) -> u64 {
        self.endpoint.generation()
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
            #[cfg(feature = "memory")]
            Endpoint::Memory(server) => Link::Memory(server.connect(self.response_timeout)),
            _ => {
                let client = self.endpoint.client().await?;
                let mut inner = client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await
                    .map_err(|e| crate::transport::endpoint::cannot_connect(&client, e))?;
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

pub(crate) fn build_pool(manager: Manager, size: u32) -> Pool {
    let endpoint = manager.endpoint.clone();
    let connector = |manager: Manager| {
        bb8::Pool::builder()
            .max_size(1)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .retry_connection(false)
            .build_unchecked(manager)
    };
    Pool {
        blocking: connector(manager.blocking()),
        connector: connector(manager),
        endpoint,
        locks: Shared::new(size as usize),
        renewals: Shared::new(1),
        inspect: Shared::new(1),
        idle_waits: Mutex::new(Vec::new()),
    }
}
