//! The connection pool: bb8 over redis-rs multiplexed connections, with
//! connect and reply time-outs and broken-connection tracking.
//!
//! A multiplexed connection serves many requests at once, so when every
//! pooled connection is checked out a command does not queue for a
//! checkout: it shares one of them (a clone: same socket), see
//! [`Pool::checkout`]. Commands therefore never queue behind other
//! commands' replies, and bb8 still owns creating, counting and dropping
//! connections.
//!
//! bb8-redis's own manager never reports a connection as broken, so after a
//! Redis restart its pool would keep handing out dead connections (or ping
//! on every checkout, a second round trip per command). This manager marks
//! a connection broken when a command on it fails at the I/O level, and bb8
//! then drops it instead of returning it to the pool.
//!
//! `rediss://` connections carry the client's TLS settings (see `tls.rs`);
//! a failed TLS handshake comes back with its rustls cause in the message.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bb8_redis::bb8;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisResult, Value};

use crate::config::ClientConfig;
use crate::eviction::EvictionCheck;

/// Creates pooled connections.
#[derive(Debug)]
pub(crate) struct Manager {
    client: redis::Client,
    config: AsyncConnectionConfig,
}

impl Manager {
    /// A manager for the configured server: URL, time-outs and TLS
    /// settings (CA and client certificate files are read here).
    pub(crate) fn new(config: &ClientConfig) -> crate::error::Result<Self> {
        Ok(Manager {
            client: crate::tls::redis_client(config.connection_info()?, &config.tls)?,
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                .set_response_timeout(Some(config.command_timeout)),
        })
    }

    /// The redis-rs client (TLS settings included), for the dedicated
    /// pub/sub connection.
    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }
}

/// One pooled connection (or a clone of it: same socket) and whether a
/// failure on it means it must go; clones share that flag.
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    inner: MultiplexedConnection,
    broken: Arc<AtomicBool>,
}

impl Conn {
    /// Sends one command; a connection-level failure marks the connection broken.
    pub(crate) async fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let result = self
            .inner
            .send_packed_command(cmd)
            .await
            .and_then(Value::extract_error);
        self.note(&result);
        result
    }

    /// Sends a pipeline of commands in one round trip; returns one value per
    /// command (an error reply of one command is a `Value::ServerError` there).
    pub(crate) async fn query_pipeline(&mut self, pipe: &Pipeline) -> RedisResult<Vec<Value>> {
        let result = pipe.query_async::<Vec<Value>>(&mut self.inner).await;
        self.note(&result);
        result
    }

    fn note<T>(&mut self, result: &RedisResult<T>) {
        if let Err(e) = result {
            if is_connection_failure(e) {
                self.broken.store(true, Ordering::Relaxed);
            }
        }
    }

    fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }
}

/// A connection for one command.
#[derive(Debug)]
pub(crate) enum Checkout<'a> {
    /// Checked out for the command's whole round trip (a spare one was idle).
    Held(bb8::PooledConnection<'a, Manager>),
    /// A clone of a busy pooled connection (same socket, multiplexed): its
    /// checkout went back to the pool before the command was sent.
    Shared(Conn),
}

impl std::ops::Deref for Checkout<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        match self {
            Checkout::Held(pooled) => pooled,
            Checkout::Shared(conn) => conn,
        }
    }
}

impl std::ops::DerefMut for Checkout<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        match self {
            Checkout::Held(pooled) => &mut *pooled,
            Checkout::Shared(conn) => conn,
        }
    }
}

/// The client's connections: a bb8 pool, plus clones of its connections
/// to share when every one of them is checked out.
pub(crate) struct Pool {
    pool: bb8::Pool<Manager>,
    max_size: u32,
    shared: Mutex<Vec<Conn>>,
    next: AtomicUsize,
    /// What the server's eviction policy was last seen as (see `eviction.rs`).
    pub(crate) eviction: EvictionCheck,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("state", &self.pool.state())
            .field("max_size", &self.max_size)
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// A connection for one command. While the pool has a spare connection
    /// (idle, or room for a new one), the command keeps its checkout for the
    /// round trip, so concurrent commands spread over the pool's sockets.
    /// When every connection is checked out, the command shares one (a
    /// multiplexed connection serves many requests at once) instead of
    /// queueing for a checkout behind other commands' replies: the
    /// watchdog's renewals never wait for a busy pool. Broken connections
    /// met on the way are dropped.
    pub(crate) async fn checkout(&self) -> Result<Checkout<'_>, bb8::RunError<RedisError>> {
        let state = self.pool.state();
        let spare = state.idle_connections > 0 || state.connections < self.max_size;
        if !spare {
            if let Some(conn) = self.shared_conn() {
                return Ok(Checkout::Shared(conn));
            }
        }
        if state.idle_connections == 0 && state.connections < self.max_size {
            // Connect here rather than let bb8 connect in the background: a
            // failure (refused, bad password, bad DB index, TLS) comes back
            // at once, with its cause, instead of a time-out.
            let conn = self
                .pool
                .dedicated_connection()
                .await
                .map_err(bb8::RunError::User)?;
            if let Err(bb8::AddError::NoCapacity(conn) | bb8::AddError::Broken(conn)) =
                self.pool.add(conn)
            {
                // Others filled the pool meanwhile: use this one for this
                // command only.
                return Ok(Checkout::Shared(conn));
            }
        }
        let mut tries = state.connections as usize + 1;
        loop {
            let pooled = self.pool.get().await?;
            if pooled.is_broken() && tries > 0 {
                // Returning it makes bb8 drop it (`has_broken`); take another.
                drop(pooled);
                tries -= 1;
                continue;
            }
            self.remember(&pooled);
            return Ok(if spare {
                Checkout::Held(pooled)
            } else {
                Checkout::Shared((*pooled).clone())
            });
        }
    }

    /// One of the remembered connections, in turn; broken ones are forgotten.
    fn shared_conn(&self) -> Option<Conn> {
        let mut shared = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        shared.retain(|c| !c.is_broken());
        if shared.is_empty() {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % shared.len();
        Some(shared[i].clone())
    }

    fn remember(&self, conn: &Conn) {
        let mut shared = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let known = shared.iter().any(|c| Arc::ptr_eq(&c.broken, &conn.broken));
        if !known && shared.len() < self.max_size as usize {
            shared.push(conn.clone());
        }
    }
}

pub(crate) fn is_connection_failure(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_unrecoverable_error()
}

impl bb8::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    async fn connect(&self) -> Result<Conn, RedisError> {
        let inner = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await
            .map_err(crate::tls::explain)?;
        Ok(Conn {
            inner,
            broken: Arc::new(AtomicBool::new(false)),
        })
    }

    async fn is_valid(&self, conn: &mut Conn) -> Result<(), RedisError> {
        conn.query(&redis::cmd("PING")).await.map(|_| ())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.is_broken()
    }
}

pub(crate) fn build_pool(manager: Manager, size: u32, connect_timeout: Duration) -> Pool {
    let pool = bb8::Pool::builder()
        .max_size(size)
        .min_idle(Some(0))
        // Health is tracked per command (see `Conn::note`), not by a PING per checkout.
        .test_on_check_out(false)
        // Connections live until they break: shared clones of them are
        // remembered (see `Pool::checkout`), so bb8 must not retire them.
        .idle_timeout(None)
        .max_lifetime(None)
        .connection_timeout(connect_timeout)
        .retry_connection(false)
        .build_unchecked(manager);
    Pool {
        pool,
        max_size: size,
        shared: Mutex::new(Vec::new()),
        next: AtomicUsize::new(0),
        eviction: EvictionCheck::default(),
    }
}
