//! A connection for the user's own commands, to the deployment the client
//! locks on: the stock counter a lock protects, the fenced write, on the
//! same server, Sentinel primary or cluster, from the same URL.

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::client::LockClient;
use crate::error::Result;
use crate::transport::connection::Link;

/// A redis-rs connection to where the client's locks live: the server, the
/// primary the sentinels name now, or the whole cluster (commands routed by
/// their keys' slots). Use it with redis-rs's `query_async`, `Script`, and
/// pipelines; it is its own connection, not shared with the lock's.
///
/// With Sentinel it stays with the primary it found: after a failover its
/// commands fail (`READONLY` or I/O errors); ask for a new one.
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
/// let mut redis = client.redis_connection().await?;
/// let guard = client.lock("stock:sku-42")?.acquire().await?;
/// let left: i64 = redis::cmd("DECR").arg("stock:sku-42:count").query_async(&mut redis).await?;
/// guard.release().await?;
/// # let _ = left;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisConnection {
    link: Link,
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.link.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.link.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.link.get_db()
    }
}

impl LockClient {
    /// A new connection for your own commands to the deployment this
    /// client locks on (see [`RedisConnection`]), with the client's URL,
    /// credentials, TLS settings and time-outs.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let mut redis = client.redis_connection().await?;
    /// let _: () = redis::cmd("SET").arg("k").arg("v").query_async(&mut redis).await?;
    /// # Ok(()) }
    /// ```
    pub async fn redis_connection(&self) -> Result<RedisConnection> {
        let core = &self.inner.core;
        let conn = tokio::time::timeout(
            core.config.connect_timeout + core.config.command_timeout,
            core.pool.dedicated(),
        )
        .await
        .map_err(|_| crate::error::Error::CommandTimeout)??;
        Ok(RedisConnection {
            link: conn.into_link(),
        })
    }
}
