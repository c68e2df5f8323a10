//! Which pub/sub the lock channels use: classic (`PUBLISH` / `SUBSCRIBE`)
//! or Redis 7's sharded pub/sub (`SPUBLISH` / `SSUBSCRIBE`), which on a
//! cluster keeps a channel's messages on the nodes of its slot. Redisson
//! chooses sharded pub/sub on a cluster that answers `PUBSUB SHARDNUMSUB`;
//! a Java service and this crate must choose alike to hear each other.

use std::future::Future;

use redis::{RedisError, RedisResult};
use tokio::sync::OnceCell;

use crate::config::PubSubMode;

/// The choice, made once per client (probing the server when `Auto` on a
/// cluster).
#[derive(Debug)]
pub(crate) struct Sharding {
    mode: PubSubMode,
    cluster: bool,
    probed: OnceCell<bool>,
}

impl Sharding {
    pub(crate) fn new(mode: PubSubMode, cluster: bool) -> Self {
        Sharding {
            mode,
            cluster,
            probed: OnceCell::new(),
        }
    }

    /// Whether lock channels are sharded, when known without a probe.
    pub(crate) fn known(&self) -> Option<bool> {
        match (self.mode, self.cluster) {
            (PubSubMode::Sharded, _) => Some(true),
            (PubSubMode::Global, _) | (PubSubMode::Auto, false) => Some(false),
            (PubSubMode::Auto, true) => self.probed.get().copied(),
        }
    }

    /// Whether lock channels are sharded; `probe` sends `PUBSUB
    /// SHARDNUMSUB` (the first caller's probe decides; an error reply means
    /// no sharded pub/sub, a connection failure is returned and decides
    /// nothing).
    pub(crate) async fn sharded<F>(&self, probe: impl FnOnce() -> F) -> RedisResult<bool>
    where
        F: Future<Output = RedisResult<redis::Value>>,
    {
        if let Some(known) = self.known() {
            return Ok(known);
        }
        let decided = self
            .probed
            .get_or_try_init(|| async {
                match probe().await {
                    Ok(_) => Ok(true),
                    Err(e) if is_refusal(&e) => {
                        tracing::info!(error = %e, "the cluster has no sharded pub/sub; lock channels use PUBLISH / SUBSCRIBE");
                        Ok(false)
                    }
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(*decided)
    }

    /// The publish command for the scripts.
    pub(crate) fn publish_command(sharded: bool) -> &'static str {
        if sharded {
            "spublish"
        } else {
            "publish"
        }
    }
}

/// A server's error reply (unknown command or subcommand, not allowed),
/// as opposed to a failed connection.
fn is_refusal(e: &RedisError) -> bool {
    e.code().is_some() && !crate::transport::connection::is_connection_failure(e)
}

/// The probe command.
pub(crate) fn probe_cmd() -> redis::Cmd {
    let mut cmd = redis::cmd("PUBSUB");
    cmd.arg("SHARDNUMSUB");
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fixed_modes_never_probe() {
        let never = || async { panic!("probed") };
        assert!(Sharding::new(PubSubMode::Sharded, true)
            .sharded(never)
            .await
            .unwrap_or(false));
        assert!(!Sharding::new(PubSubMode::Global, true)
            .sharded(never)
            .await
            .unwrap_or(true));
        assert!(!Sharding::new(PubSubMode::Auto, false)
            .sharded(never)
            .await
            .unwrap_or(true));
    }

    #[tokio::test]
    async fn auto_on_a_cluster_probes_once_and_an_error_reply_means_global() {
        let s = Sharding::new(PubSubMode::Auto, true);
        let refused = || async {
            Err(RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "unknown subcommand",
            )))
        };
        assert_eq!(s.sharded(refused).await.ok(), Some(false));
        assert_eq!(s.known(), Some(false));
        let s = Sharding::new(PubSubMode::Auto, true);
        let broken = || async { Err(RedisError::from((redis::ErrorKind::Io, "reset"))) };
        assert!(s.sharded(broken).await.is_err());
        assert_eq!(s.known(), None, "a broken connection decides nothing");
        let ok = || async { Ok(redis::Value::Array(vec![])) };
        assert_eq!(s.sharded(ok).await.ok(), Some(true));
    }
}
