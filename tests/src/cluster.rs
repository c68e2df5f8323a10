//! A Redis Cluster on loopback, formed by the harness itself (no
//! `redis-cli --cluster`): `primaries` cluster-mode servers with the 16 384
//! slots split evenly between them, each with `replicas` replicas.
//!
//! Formation: every node meets the first one (`CLUSTER MEET` with the bus
//! port, which the harness picks free, so it never collides with another
//! test's data port + 10 000), the primaries take contiguous slot ranges
//! (`CLUSTER ADDSLOTSRANGE`), the replicas follow their primary (`CLUSTER
//! REPLICATE`), and the harness waits until every node reports
//! `cluster_state:ok` and every replica's link to its primary is up.
//!
//! The nodes are plain [`RedisServer`]s: kill, pause and restart them as
//! usual. [`RedisCluster::migrate_slot`] moves a slot and its keys the way
//! `redis-cli --cluster reshard` does, [`RedisCluster::failover`] promotes a
//! replica with `CLUSTER FAILOVER`.

use std::collections::HashMap;
use std::time::Duration;

use crate::error::HarnessError;
use crate::poll::poll_until;
use crate::resp::RespValue;
use crate::server::{free_port, RedisServer};

/// Slots in a Redis Cluster.
pub const CLUSTER_SLOTS: u16 = 16_384;

/// Node timeout of the harness's clusters: a primary that stops answering
/// is failed over after about twice this.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long forming a cluster may take.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// Keys moved per `MIGRATE` call in [`RedisCluster::migrate_slot`].
const MIGRATE_BATCH: usize = 100;

/// A Redis Cluster of private `redis-server` processes on loopback.
///
/// ```no_run
/// use lock_tests::RedisCluster;
///
/// let cluster = RedisCluster::start(3, 1)?;
/// assert_eq!(cluster.nodes().len(), 6);
/// let slot = cluster.key_slot("{user:7}:lock")?;
/// let owner = cluster.primary_for_slot(slot)?;
/// cluster.nodes()[owner].command(&["SET", "{user:7}:lock", "x"])?;
/// # Ok::<(), lock_tests::HarnessError>(())
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    bus_ports: Vec<u16>,
    primaries: usize,
}

fn text(reply: RespValue, what: &str) -> Result<String, HarnessError> {
    if let Some(e) = reply.as_error() {
        return Err(HarnessError::ServerError(format!("{what}: {e}")));
    }
    reply
        .as_string()
        .ok_or_else(|| HarnessError::Protocol(format!("{what}: not a string: {reply:?}")))
}

fn ok(reply: RespValue, what: &str) -> Result<(), HarnessError> {
    match reply.as_error() {
        Some(e) => Err(HarnessError::ServerError(format!("{what}: {e}"))),
        None => Ok(()),
    }
}

/// `INFO`-style `name:value` lines as a map.
fn fields(info: &str) -> HashMap<String, String> {
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

impl RedisCluster {
    /// Starts and forms a cluster of `primaries` primaries (at least 1),
    /// each with `replicas` replicas; returns once it serves every slot.
    /// Nodes `0..primaries` are the primaries, in slot order; the replicas
    /// of primary `p` follow them (`primaries + p * replicas + r`).
    pub fn start(primaries: usize, replicas: usize) -> Result<RedisCluster, HarnessError> {
        let primaries = primaries.max(1);
        let total = primaries * (1 + replicas);
        let mut nodes = Vec::with_capacity(total);
        let mut bus_ports = Vec::with_capacity(total);
        for _ in 0..total {
            let (node, bus) = start_node()?;
            nodes.push(node);
            bus_ports.push(bus);
        }
        let cluster = RedisCluster {
            nodes,
            bus_ports,
            primaries,
        };
        cluster.form(replicas)?;
        Ok(cluster)
    }

    fn form(&self, replicas: usize) -> Result<(), HarnessError> {
        let first = &self.nodes[0];
        for (i, node) in self.nodes.iter().enumerate().skip(1) {
            let port = node.port().to_string();
            let bus = self.bus_ports[i].to_string();
            ok(
                first.command(&["CLUSTER", "MEET", "127.0.0.1", &port, &bus])?,
                "CLUSTER MEET",
            )?;
        }
        let per = CLUSTER_SLOTS as usize / self.primaries;
        for p in 0..self.primaries {
            let start = p * per;
            let end = if p + 1 == self.primaries {
                CLUSTER_SLOTS as usize - 1
            } else {
                start + per - 1
            };
            ok(
                self.nodes[p].command(&[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &start.to_string(),
                    &end.to_string(),
                ])?,
                "CLUSTER ADDSLOTSRANGE",
            )?;
        }
        // Every node must know every other before a replica can name its
        // primary.
        self.wait_until("every node knows every other", |c| {
            c.nodes.iter().try_fold(true, |all, n| {
                let known = text(n.command(&["CLUSTER", "NODES"])?, "CLUSTER NODES")?
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .count();
                Ok(all && known == c.nodes.len())
            })
        })?;
        for p in 0..self.primaries {
            let id = self.node_id(p)?;
            for r in 0..replicas {
                let replica = &self.nodes[self.primaries + p * replicas + r];
                ok(
                    replica.command(&["CLUSTER", "REPLICATE", &id])?,
                    "CLUSTER REPLICATE",
                )?;
            }
        }
        self.wait_ok(FORM_TIMEOUT)
    }

    /// Waits until every running node reports `cluster_state:ok` and every
    /// running replica's link to its primary is up.
    pub fn wait_ok(&self, timeout: Duration) -> Result<(), HarnessError> {
        poll_until(
            "cluster_state:ok on every node and every replica's link up",
            timeout,
            || self.is_ok(),
        )
    }

    fn is_ok(&self) -> Result<bool, HarnessError> {
        for node in &self.nodes {
            let Ok(reply) =
                node.command_with_timeout(&["CLUSTER", "INFO"], Duration::from_millis(500))
            else {
                // a killed or paused node is left out
                continue;
            };
            if fields(&text(reply, "CLUSTER INFO")?)
                .get("cluster_state")
                .map(String::as_str)
                != Some("ok")
            {
                return Ok(false);
            }
            let replication = fields(&text(node.command(&["INFO", "replication"])?, "INFO")?);
            if replication.get("role").map(String::as_str) == Some("slave")
                && replication.get("master_link_status").map(String::as_str) != Some("up")
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn wait_until(
        &self,
        what: &str,
        check: impl Fn(&RedisCluster) -> Result<bool, HarnessError>,
    ) -> Result<(), HarnessError> {
        poll_until(&format!("cluster: {what}"), FORM_TIMEOUT, || check(self))
    }

    /// Every node, primaries first (see [`start`](Self::start)).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// One node, to kill, pause or restart it.
    pub fn node_mut(&mut self, index: usize) -> Option<&mut RedisServer> {
        self.nodes.get_mut(index)
    }

    /// `redis://` URLs of every node: the seed list for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The client URL of the cluster: `redis+cluster://` with every node as
    /// a seed (lock-core's Cluster URL form).
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The node's cluster id (`CLUSTER MYID`).
    pub fn node_id(&self, index: usize) -> Result<String, HarnessError> {
        let node = self
            .nodes
            .get(index)
            .ok_or_else(|| HarnessError::Protocol(format!("no node {index}")))?;
        text(node.command(&["CLUSTER", "MYID"])?, "CLUSTER MYID")
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, asked of the first node that
    /// answers).
    pub fn key_slot(&self, key: &str) -> Result<u16, HarnessError> {
        let reply = self.any_node_command(&["CLUSTER", "KEYSLOT", key])?;
        reply
            .as_i64()
            .and_then(|s| u16::try_from(s).ok())
            .ok_or_else(|| HarnessError::Protocol(format!("CLUSTER KEYSLOT: {reply:?}")))
    }

    fn any_node_command(&self, args: &[&str]) -> Result<RespValue, HarnessError> {
        let mut last = None;
        for node in &self.nodes {
            match node.command_with_timeout(args, Duration::from_millis(500)) {
                Ok(reply) => return Ok(reply),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(HarnessError::NotRunning))
    }

    /// The index of the node that serves `slot` as a primary now, as the
    /// first answering node's `CLUSTER NODES` view says.
    pub fn primary_for_slot(&self, slot: u16) -> Result<usize, HarnessError> {
        let nodes = text(
            self.any_node_command(&["CLUSTER", "NODES"])?,
            "CLUSTER NODES",
        )?;
        for line in nodes.lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let (Some(addr), Some(flags)) = (parts.get(1), parts.get(2)) else {
                continue;
            };
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                continue;
            }
            let serves = parts.iter().skip(8).any(|range| {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                match (a.parse::<u16>(), b.parse::<u16>()) {
                    (Ok(a), Ok(b)) => a <= slot && slot <= b,
                    _ => false,
                }
            });
            if !serves {
                continue;
            }
            let port = addr
                .split('@')
                .next()
                .and_then(|hp| hp.rsplit(':').next())
                .and_then(|p| p.parse::<u16>().ok());
            if let Some(i) = self.nodes.iter().position(|n| Some(n.port()) == port) {
                return Ok(i);
            }
        }
        Err(HarnessError::Protocol(format!(
            "no primary serves slot {slot}"
        )))
    }

    /// Moves `slot` and its keys from node `from` to node `to` (both
    /// primaries): `SETSLOT IMPORTING` on `to`, `MIGRATING` on `from`,
    /// `MIGRATE` the keys in batches, then `SETSLOT NODE` on `to`, `from`
    /// and every other node. Between the steps, clients see `ASK`
    /// redirections for keys already moved.
    pub fn migrate_slot(&self, slot: u16, from: usize, to: usize) -> Result<(), HarnessError> {
        let (source, target) = match (self.nodes.get(from), self.nodes.get(to)) {
            (Some(s), Some(t)) => (s, t),
            _ => return Err(HarnessError::Protocol(format!("no node {from} or {to}"))),
        };
        let slot_s = slot.to_string();
        let from_id = self.node_id(from)?;
        let to_id = self.node_id(to)?;
        ok(
            target.command(&["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id])?,
            "SETSLOT IMPORTING",
        )?;
        ok(
            source.command(&["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id])?,
            "SETSLOT MIGRATING",
        )?;
        let port = target.port().to_string();
        loop {
            let batch = MIGRATE_BATCH.to_string();
            let reply = source.command(&["CLUSTER", "GETKEYSINSLOT", &slot_s, &batch])?;
            let keys: Vec<String> = reply
                .as_array()
                .unwrap_or_default()
                .iter()
                .filter_map(RespValue::as_string)
                .collect();
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            ok(source.command(&args)?, "MIGRATE")?;
        }
        ok(
            target.command(&["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id])?,
            "SETSLOT NODE (target)",
        )?;
        ok(
            source.command(&["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id])?,
            "SETSLOT NODE (source)",
        )?;
        for (i, node) in self.nodes.iter().enumerate() {
            if i != from && i != to {
                // a replica answers an error here; the epoch spreads anyway
                let _ = node.command(&["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id]);
            }
        }
        Ok(())
    }

    /// Promotes replica `replica` with `CLUSTER FAILOVER` (its primary
    /// agrees and hands over) and waits until it reports itself primary.
    pub fn failover(&self, replica: usize) -> Result<(), HarnessError> {
        let node = self
            .nodes
            .get(replica)
            .ok_or_else(|| HarnessError::Protocol(format!("no node {replica}")))?;
        ok(node.command(&["CLUSTER", "FAILOVER"])?, "CLUSTER FAILOVER")?;
        self.wait_until(
            "the replica took over",
            |c| Ok(c.role(replica)? == "master"),
        )
    }

    /// `master` or `slave`, from the node's `ROLE`.
    pub fn role(&self, index: usize) -> Result<String, HarnessError> {
        self.nodes
            .get(index)
            .ok_or_else(|| HarnessError::Protocol(format!("no node {index}")))?
            .role()
    }
}

/// One cluster-mode node with a bus port of the harness's choosing (tried
/// again with other ports if the server could not bind them).
fn start_node() -> Result<(RedisServer, u16), HarnessError> {
    let mut last = None;
    for _ in 0..3 {
        let bus = free_port()?;
        let started = RedisServer::builder()
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .arg("--cluster-port")
            .arg(bus.to_string())
            .arg("--cluster-node-timeout")
            .arg(NODE_TIMEOUT.as_millis().to_string())
            // a replica takes over as soon as its primary fails
            .args(["--cluster-replica-validity-factor", "0"])
            .start();
        match started {
            Ok(node) => return Ok((node, bus)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(HarnessError::NotRunning))
}
