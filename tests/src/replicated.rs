//! A primary with one replica on loopback (`--replicaof`), for tests of
//! replica acknowledgement (`WAIT`): pause the replica and the primary's
//! writes go unacknowledged.

use std::collections::HashMap;
use std::time::Duration;

use crate::error::HarnessError;
use crate::poll::poll_until;
use crate::server::RedisServer;

/// How long the replica may take to link up.
const LINK_TIMEOUT: Duration = Duration::from_secs(30);

/// A primary and its replica.
///
/// ```no_run
/// use lock_tests::ReplicatedPair;
///
/// let pair = ReplicatedPair::start()?;
/// pair.primary.command(&["SET", "k", "v"])?;
/// assert_eq!(pair.primary.command(&["WAIT", "1", "1000"])?.as_i64(), Some(1));
/// # Ok::<(), lock_tests::HarnessError>(())
/// ```
#[derive(Debug)]
pub struct ReplicatedPair {
    /// The primary: clients connect here.
    pub primary: RedisServer,
    /// Its replica (`--replicaof` the primary).
    pub replica: RedisServer,
}

impl ReplicatedPair {
    /// Starts both; returns once the replica's link to the primary is up.
    pub fn start() -> Result<ReplicatedPair, HarnessError> {
        Self::start_with_password(None)
    }

    /// Like [`start`](Self::start), both servers requiring `password` for
    /// the default user (`requirepass`, and `masterauth` so that either can
    /// replicate from the other after a failover); the harness's own
    /// commands authenticate.
    pub fn start_with_password(password: Option<&str>) -> Result<ReplicatedPair, HarnessError> {
        let builder = || {
            let b = RedisServer::builder();
            match password {
                Some(pw) => b
                    .args(["--requirepass", pw, "--masterauth", pw])
                    .client_auth("default", pw),
                None => b,
            }
        };
        // No 5 s wait for more replicas before the first full sync.
        let primary = builder()
            .args(["--repl-diskless-sync-delay", "0"])
            .start()?;
        let replica = builder()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(primary.port().to_string())
            .start()?;
        // Linked, and acknowledging: right after the first sync the link
        // is up a while before the replica acknowledges writes.
        poll_until("the replica linked to its primary", LINK_TIMEOUT, || {
            Ok(replica_link_up(&replica)? && write_acknowledged(&primary)?)
        })?;
        Ok(ReplicatedPair { primary, replica })
    }
}

/// Whether `node` is a replica whose link to its primary is up (`INFO
/// replication`).
pub(crate) fn replica_link_up(node: &RedisServer) -> Result<bool, HarnessError> {
    let info = info_fields(
        &node
            .command(&["INFO", "replication"])?
            .as_string()
            .unwrap_or_default(),
    );
    Ok(info.get("role").map(String::as_str) == Some("slave")
        && info.get("master_link_status").map(String::as_str) == Some("up"))
}

/// Whether a replica acknowledges a write on `primary` within 200 ms (the
/// write is undone: the primary's data is left as it was).
fn write_acknowledged(primary: &RedisServer) -> Result<bool, HarnessError> {
    let replies = primary.commands(&[
        &["SET", "lock-tests:replication-probe", "1"],
        &["DEL", "lock-tests:replication-probe"],
        &["WAIT", "1", "200"],
    ])?;
    Ok(replies.last().and_then(|r| r.as_i64()) == Some(1))
}

/// `name:value` lines of an `INFO` reply as a map.
pub(crate) fn info_fields(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}
