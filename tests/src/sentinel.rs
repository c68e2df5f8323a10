//! A Sentinel-managed primary on loopback: one primary, one replica and
//! three sentinels (`redis-server <config> --sentinel`, quorum 2) that
//! monitor it under one name.
//!
//! The data nodes and the sentinels are plain [`RedisServer`]s: kill,
//! pause and restart them as usual. [`SentinelSet::failover`] asks the
//! sentinels for a failover (`SENTINEL FAILOVER`); killing the primary
//! makes them fail over on their own after [`SENTINEL_DOWN_AFTER`].

use std::collections::HashMap;
use std::time::Duration;

use crate::error::HarnessError;
use crate::poll::poll_until;
use crate::replicated::{info_fields, replica_link_up, ReplicatedPair};
use crate::resp::RespValue;
use crate::server::RedisServer;

/// How long a primary must be unreachable before the sentinels call it
/// down (`down-after-milliseconds`).
pub const SENTINEL_DOWN_AFTER: Duration = Duration::from_millis(1000);

/// How long forming the set (or a failover) may take.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// One primary, one replica and three sentinels monitoring them.
///
/// ```no_run
/// use lock_tests::SentinelSet;
///
/// let set = SentinelSet::start("locks")?;
/// assert_eq!(set.current_primary()?, 0);
/// set.failover()?;
/// assert_eq!(set.current_primary()?, 1);
/// # Ok::<(), lock_tests::HarnessError>(())
/// ```
#[derive(Debug)]
pub struct SentinelSet {
    name: String,
    data: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    /// The data nodes' and the sentinels' passwords, if any.
    passwords: (Option<String>, Option<String>),
}

/// `name:value` lines (`INFO`) or a flat `[name, value, ...]` array
/// (`SENTINEL MASTER`) as a map.
fn fields(reply: &RespValue) -> HashMap<String, String> {
    if let Some(items) = reply.as_array() {
        return items
            .chunks(2)
            .filter_map(|kv| Some((kv.first()?.as_string()?, kv.get(1)?.as_string()?)))
            .collect();
    }
    info_fields(&reply.as_string().unwrap_or_default())
}

impl SentinelSet {
    /// Starts the primary (data node 0), its replica (data node 1) and
    /// three sentinels monitoring them as `name`; returns once the replica
    /// is linked and every sentinel sees the replica and the two other
    /// sentinels.
    pub fn start(name: &str) -> Result<SentinelSet, HarnessError> {
        Self::start_with_passwords(name, None, None)
    }

    /// Like [`start`](Self::start), with passwords: the data nodes require
    /// `data` (the sentinels know it: `sentinel auth-pass`), the sentinels
    /// require `sentinel` (`requirepass`). [`url`](Self::url) carries both.
    pub fn start_with_passwords(
        name: &str,
        data: Option<&str>,
        sentinel: Option<&str>,
    ) -> Result<SentinelSet, HarnessError> {
        let ReplicatedPair { primary, replica } = ReplicatedPair::start_with_password(data)?;
        let mut config = format!(
            "sentinel monitor {name} 127.0.0.1 {port} 2\n\
             sentinel down-after-milliseconds {name} {down}\n\
             sentinel failover-timeout {name} 5000\n\
             sentinel parallel-syncs {name} 1\n",
            port = primary.port(),
            down = SENTINEL_DOWN_AFTER.as_millis(),
        );
        if let Some(pw) = data {
            config.push_str(&format!("sentinel auth-pass {name} {pw}\n"));
        }
        if let Some(pw) = sentinel {
            config.push_str(&format!("requirepass {pw}\n"));
        }
        let mut sentinels = Vec::with_capacity(3);
        for _ in 0..3 {
            let mut b = RedisServer::builder()
                .config_text(config.clone())
                .arg("--sentinel");
            if let Some(pw) = sentinel {
                b = b.client_auth("default", pw);
            }
            sentinels.push(b.start()?);
        }
        let set = SentinelSet {
            name: name.to_owned(),
            data: vec![primary, replica],
            sentinels,
            passwords: (data.map(str::to_owned), sentinel.map(str::to_owned)),
        };
        set.wait_until("the replica linked and every sentinel sees the set", |s| {
            if !s.replica_linked(1)? {
                return Ok(false);
            }
            s.sentinels.iter().try_fold(true, |all, sentinel| {
                let master = fields(&sentinel.command(&["SENTINEL", "MASTER", &s.name])?);
                Ok(all
                    && master.get("num-slaves").map(String::as_str) == Some("1")
                    && master.get("num-other-sentinels").map(String::as_str) == Some("2"))
            })
        })?;
        Ok(set)
    }

    /// The client URL of the set: `redis+sentinel://` with the three
    /// sentinels' addresses and the name (lock-core's Sentinel URL form),
    /// the data nodes' password in the userinfo and the sentinels' as
    /// `sentinel_password`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        let userinfo = match &self.passwords.0 {
            Some(pw) => format!(":{pw}@"),
            None => String::new(),
        };
        let query = match &self.passwords.1 {
            Some(pw) => format!("?sentinel_password={pw}"),
            None => String::new(),
        };
        format!(
            "redis+sentinel://{userinfo}{}/{}{query}",
            hosts.join(","),
            self.name
        )
    }

    /// The name the sentinels monitor the primary under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The data nodes: 0 started as the primary, 1 as its replica.
    pub fn data_nodes(&self) -> &[RedisServer] {
        &self.data
    }

    /// One data node, to kill, pause or restart it.
    pub fn data_node_mut(&mut self, index: usize) -> Option<&mut RedisServer> {
        self.data.get_mut(index)
    }

    /// The three sentinels.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// One sentinel, to kill or pause it.
    pub fn sentinel_mut(&mut self, index: usize) -> Option<&mut RedisServer> {
        self.sentinels.get_mut(index)
    }

    /// The data node the first answering sentinel names as the primary
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
    pub fn current_primary(&self) -> Result<usize, HarnessError> {
        let mut last = None;
        for sentinel in &self.sentinels {
            let reply = match sentinel.command_with_timeout(
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name],
                Duration::from_millis(500),
            ) {
                Ok(reply) => reply,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            let port = reply
                .as_array()
                .and_then(|a| a.get(1))
                .and_then(RespValue::as_string)
                .and_then(|p| p.parse::<u16>().ok());
            return self
                .data
                .iter()
                .position(|n| Some(n.port()) == port)
                .ok_or_else(|| HarnessError::Protocol(format!("unknown primary {reply:?}")));
        }
        Err(last.unwrap_or(HarnessError::NotRunning))
    }

    /// `master` or `slave`, from data node `index`'s `ROLE`.
    pub fn role(&self, index: usize) -> Result<String, HarnessError> {
        self.data
            .get(index)
            .ok_or_else(|| HarnessError::Protocol(format!("no data node {index}")))?
            .role()
    }

    /// Whether data node `index` is a replica whose link to its primary is up.
    pub fn replica_linked(&self, index: usize) -> Result<bool, HarnessError> {
        let node = self
            .data
            .get(index)
            .ok_or_else(|| HarnessError::Protocol(format!("no data node {index}")))?;
        replica_link_up(node)
    }

    /// Asks the sentinels for a failover and waits until every running
    /// sentinel names the other data node, and that node says it is the
    /// primary.
    pub fn failover(&self) -> Result<(), HarnessError> {
        let before = self.current_primary()?;
        let after = 1 - before.min(1);
        let reply = self
            .sentinels
            .iter()
            .find_map(|s| s.command(&["SENTINEL", "FAILOVER", &self.name]).ok())
            .ok_or(HarnessError::NotRunning)?;
        if let Some(e) = reply.as_error() {
            return Err(HarnessError::ServerError(format!("SENTINEL FAILOVER: {e}")));
        }
        self.wait_for_primary(after, FORM_TIMEOUT)
    }

    /// Waits until every running sentinel names data node `index` as the
    /// primary and the node says it is one.
    pub fn wait_for_primary(&self, index: usize, timeout: Duration) -> Result<(), HarnessError> {
        let port = self.data.get(index).map(|n| n.port().to_string());
        let what = format!("data node {index} as the primary of `{}`", self.name);
        poll_until(&what, timeout, || {
            let agreed = self.sentinels.iter().all(|s| {
                match s.command_with_timeout(
                    &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name],
                    Duration::from_millis(500),
                ) {
                    Ok(reply) => {
                        reply
                            .as_array()
                            .and_then(|a| a.get(1))
                            .and_then(RespValue::as_string)
                            == port
                    }
                    // a killed or paused sentinel has no say
                    Err(_) => true,
                }
            });
            Ok(agreed && self.role(index)? == "master")
        })
    }

    fn wait_until(
        &self,
        what: &str,
        check: impl Fn(&SentinelSet) -> Result<bool, HarnessError>,
    ) -> Result<(), HarnessError> {
        poll_until(&format!("sentinel set: {what}"), FORM_TIMEOUT, || {
            check(self)
        })
    }
}
