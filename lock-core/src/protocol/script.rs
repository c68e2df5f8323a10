//! One Lua script (its source, SHA-1 and `EVALSHA` command), run with
//! EVALSHA and loaded on NOSCRIPT.

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, RedisResult, ServerErrorKind, Value};

use crate::transport::connection::Conn;

/// One Lua script: its source and SHA-1, computed once.
#[derive(Debug)]
pub(crate) struct Script {
    source: std::borrow::Cow<'static, str>,
    pub(super) sha: String,
    /// Its grouped form, for the scripts whose calls are grouped (see
    /// `group.rs`).
    grouped: Option<Box<Script>>,
}

impl Script {
    pub(super) fn new(source: &'static str) -> Self {
        Script {
            sha: redis::Script::new(source).get_hash().to_string(),
            source: std::borrow::Cow::Borrowed(source),
            grouped: None,
        }
    }

    /// A script whose calls may be grouped: with its grouped form.
    pub(super) fn with_group(source: &'static str) -> Self {
        Script {
            grouped: Some(Box::new(Script::owned(super::group::grouped_source(
                source,
            )))),
            ..Script::new(source)
        }
    }

    /// The grouped form of this script (see `group.rs`), when its calls
    /// may be grouped.
    pub(crate) fn grouped(&self) -> Option<&Script> {
        self.grouped.as_deref()
    }

    /// A script whose source is made at run time (a fenced write's).
    pub(crate) fn owned(source: String) -> Self {
        Script {
            sha: redis::Script::new(&source).get_hash().to_string(),
            source: std::borrow::Cow::Owned(source),
            grouped: None,
        }
    }

    /// An `EVALSHA` command for this script (keys first, then args).
    pub(crate) fn evalsha<K: redis::ToRedisArgs, A: redis::ToRedisArgs>(
        &self,
        keys: &[K],
        args: A,
    ) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha).arg(keys.len()).arg(keys).arg(args);
        cmd
    }

    /// The start of an `EVALSHA` command for `numkeys` keys, sized for
    /// `args` more arguments of `bytes` bytes in all: the caller appends
    /// the keys and arguments (no intermediate collections).
    pub(crate) fn evalsha_prefix(&self, numkeys: usize, args: usize, bytes: usize) -> Cmd {
        let mut cmd = Cmd::with_capacity(args + 3, bytes + self.sha.len() + 32);
        cmd.arg("EVALSHA").arg(&self.sha).arg(numkeys);
        cmd
    }

    /// The script's SHA1, as `EVALSHA` names it.
    #[cfg(feature = "memory")]
    pub(crate) fn sha(&self) -> &str {
        &self.sha
    }

    /// `SCRIPT LOAD` for this script.
    pub(crate) fn load_cmd(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source.as_ref());
        cmd
    }

    /// Runs `cmd` (built by [`Script::evalsha`]); loads the script and
    /// retries once when Redis does not know it (first use, restart, SCRIPT FLUSH).
    /// On a cluster the script is loaded on the key's primary first; when
    /// the key's slot moved meanwhile (the retry is redirected to a node
    /// that does not know the script either), it is loaded on every node
    /// and sent once more.
    pub(crate) async fn run(&self, conn: &mut Conn, cmd: &Cmd) -> RedisResult<Value> {
        match conn.query(cmd).await {
            Err(e) if is_noscript(&e) => {
                self.load_for(conn, cmd).await?;
                match conn.query(cmd).await {
                    Err(e) if is_noscript(&e) && conn.cluster().is_some() => {
                        conn.query(&self.load_cmd()).await?;
                        conn.query(cmd).await
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    /// Loads the script where `cmd` runs. On a cluster, on the primary of
    /// `cmd`'s first key only: redis-rs sends a plain `SCRIPT LOAD` to
    /// every node, so one stalled node would hold up a command for a
    /// healthy one until the command time-out.
    async fn load_for(&self, conn: &mut Conn, cmd: &Cmd) -> RedisResult<Value> {
        // EVALSHA sha numkeys key ...
        let key = match cmd.args_iter().nth(3) {
            Some(redis::Arg::Simple(key)) => Some(key.to_vec()),
            _ => None,
        };
        match (conn.cluster(), key) {
            (Some(cluster), Some(key)) => {
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_key(key, SlotAddr::Master),
                ));
                cluster
                    .route_command(self.load_cmd(), route)
                    .await
                    .and_then(Value::extract_error)
            }
            _ => conn.query(&self.load_cmd()).await,
        }
    }
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}
