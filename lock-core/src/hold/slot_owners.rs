//! Which primary serves each hash slot of a Redis Cluster, as the cluster
//! last said (`CLUSTER SLOTS`): the watchdog keeps the renewal calls of
//! each node apart with it (see `watchdog.rs`).
//!
//! The map only groups calls: every call is still routed by its key
//! (redis-rs follows `MOVED` / `ASK`), so a map that is out of date costs
//! isolation between two nodes' calls at most, never a renewal. It is read
//! in the background (a read never delays a renewal), bounded per node
//! asked, from the nodes whose calls went through first; again when it is
//! [`MAX_AGE`] old, and when a call failed (a node stalled, died or lost
//! slots: at most once per `min_gap`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::hold::shared::Core;

/// Hash slots of a Redis Cluster.
pub(crate) const SLOTS: usize = 16_384;

/// A map older than this is read again.
const MAX_AGE: Duration = Duration::from_secs(10);

/// Nodes asked, one after another, for one read of the map.
const ATTEMPTS: usize = 4;

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of
/// the key, or of its hash tag (what is between the first `{` and the first
/// `}` after it, when that is not empty), modulo 16 384.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = key.get(open + 1..)?;
            let close = rest.iter().position(|b| *b == b'}')?;
            rest.get(..close)
        })
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    crc16(tagged) % SLOTS as u16
}

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the
/// checksum of Redis Cluster's key slots.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for b in bytes {
        crc ^= u16::from(*b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// No node serves the slot (as far as the map knows).
const NO_NODE: u16 = u16::MAX;

/// One reading of the cluster: the primary of every slot, as an index into
/// its list of primaries.
#[derive(Debug)]
pub(crate) struct SlotOwners {
    /// Per slot, the index of its primary in `first_slots`, or `NO_NODE`.
    owner: Vec<u16>,
    /// Per primary, one slot it serves (to send it a command by slot).
    first_slots: Vec<u16>,
}

impl SlotOwners {
    /// The primary that serves `slot`, if the map knows one.
    pub(crate) fn node_of(&self, slot: u16) -> Option<u16> {
        self.owner
            .get(usize::from(slot))
            .copied()
            .filter(|n| *n != NO_NODE)
    }

    /// The number of primaries.
    pub(crate) fn nodes(&self) -> usize {
        self.first_slots.len()
    }

    /// Reads a `CLUSTER SLOTS` reply: `[start, end, [host, port, id, ..],
    /// replicas ..]` per range. Primaries are told apart by their id (by
    /// host and port when the reply has no id).
    fn parse(reply: &Value) -> Result<SlotOwners, String> {
        let Value::Array(ranges) = reply else {
            return Err(format!("CLUSTER SLOTS answered {reply:?}"));
        };
        let mut owner = vec![NO_NODE; SLOTS];
        let mut first_slots: Vec<u16> = Vec::new();
        let mut index: HashMap<Vec<u8>, u16> = HashMap::new();
        for range in ranges {
            let bad = || format!("CLUSTER SLOTS: a range reads {range:?}");
            let Value::Array(parts) = range else {
                return Err(bad());
            };
            let (Some(start), Some(end), Some(Value::Array(primary))) = (
                slot_number(parts.first()),
                slot_number(parts.get(1)),
                parts.get(2),
            ) else {
                return Err(bad());
            };
            let identity = match (primary.get(2), primary.first(), primary.get(1)) {
                (Some(Value::BulkString(id)), _, _) => id.clone(),
                (_, Some(host), Some(port)) => format!("{host:?}:{port:?}").into_bytes(),
                _ => return Err(bad()),
            };
            let next = u16::try_from(index.len()).map_err(|_| bad())?;
            let node = *index.entry(identity).or_insert_with(|| {
                first_slots.push(start);
                next
            });
            if let Some(slots) = owner.get_mut(usize::from(start)..=usize::from(end)) {
                slots.fill(node);
            }
        }
        Ok(SlotOwners { owner, first_slots })
    }
}

/// A slot number of a `CLUSTER SLOTS` range.
fn slot_number(v: Option<&Value>) -> Option<u16> {
    match v? {
        Value::Int(n) => u16::try_from(*n).ok().filter(|s| usize::from(*s) < SLOTS),
        _ => None,
    }
}

/// The watchdog's cached map and when to read it again.
#[derive(Debug, Default)]
pub(crate) struct SlotMap {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    current: Option<Arc<SlotOwners>>,
    /// When the last read started (done or not).
    read_at: Option<Instant>,
    /// A read is running.
    reading: bool,
    /// A call failed since the last read.
    stale: bool,
    /// Primaries (of `current`) whose last call failed: asked last.
    failing: Vec<bool>,
}

impl SlotMap {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The map as last read, if it was read.
    pub(crate) fn current(&self) -> Option<Arc<SlotOwners>> {
        self.state().current.clone()
    }

    /// How the last call to `node` (of the current map) went: a failure
    /// asks for a new reading and puts the node last in line to be asked.
    pub(crate) fn note_call(&self, node: u16, ok: bool) {
        let mut s = self.state();
        if let Some(failing) = s.failing.get_mut(usize::from(node)) {
            *failing = !ok;
        }
        if !ok {
            s.stale = true;
        }
    }

    /// Starts reading the map in the background when there is none, when
    /// it is [`MAX_AGE`] old, or when a call failed and the last read
    /// started `min_gap` ago or more. One read at a time; each node asked
    /// gets `bound` to answer; `shutdown` ends it.
    pub(crate) fn refresh_if_due(
        self: &Arc<Self>,
        core: &Arc<Core>,
        min_gap: Duration,
        bound: Duration,
        shutdown: &CancellationToken,
    ) {
        let now = Instant::now();
        let routes = {
            let mut s = self.state();
            let age = s.read_at.map(|at| now.saturating_duration_since(at));
            let due = match age {
                None => true,
                Some(age) => age >= MAX_AGE || (s.stale && age >= min_gap),
            };
            if s.reading || !due {
                return;
            }
            s.reading = true;
            s.stale = false;
            s.read_at = Some(now);
            routes_to_ask(s.current.as_deref(), &s.failing)
        };
        let map = self.clone();
        let core = core.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let read = tokio::select! {
                biased;
                read = read(&core, routes, bound) => read,
                _ = shutdown.cancelled() => None,
            };
            let mut s = map.state();
            s.reading = false;
            match read {
                Some(owners) => {
                    s.failing = vec![false; owners.nodes()];
                    s.current = Some(Arc::new(owners));
                }
                // Tried again after `min_gap`.
                None => s.stale = true,
            }
        });
    }
}

/// Where to send `CLUSTER SLOTS`: to each primary of the last map whose
/// calls went through (by a slot it serves), then to those whose calls
/// failed, then anywhere; [`ATTEMPTS`] at most.
fn routes_to_ask(current: Option<&SlotOwners>, failing: &[bool]) -> Vec<SingleNodeRoutingInfo> {
    let mut routes = Vec::with_capacity(ATTEMPTS);
    if let Some(owners) = current {
        let mut nodes: Vec<(bool, u16)> = owners
            .first_slots
            .iter()
            .enumerate()
            .map(|(i, slot)| (failing.get(i).copied().unwrap_or(false), *slot))
            .collect();
        nodes.sort_by_key(|(failed, _)| *failed);
        routes.extend(nodes.into_iter().filter_map(|(_, slot)| {
            let slot = Slot::new(slot)?;
            Some(SingleNodeRoutingInfo::SpecificNode(Route::with_slot(
                slot,
                SlotAddr::Master,
            )))
        }));
    }
    routes.truncate(ATTEMPTS - 1);
    while routes.len() < ATTEMPTS {
        routes.push(SingleNodeRoutingInfo::Random);
    }
    routes
}

/// Asks the nodes of `routes` in turn, each within `bound`; the first
/// answer that parses.
async fn read(
    core: &Core,
    routes: Vec<SingleNodeRoutingInfo>,
    bound: Duration,
) -> Option<SlotOwners> {
    for route in routes {
        let attempt = async {
            let mut conn = core
                .pool
                .checkout(crate::transport::connection::Lane::Renewals)
                .await
                .ok()?;
            let cluster = conn.cluster()?;
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SLOTS");
            let reply = cluster
                .route_command(cmd, RoutingInfo::SingleNode(route))
                .await;
            match reply {
                Ok(reply) => match SlotOwners::parse(&reply) {
                    Ok(owners) => Some(owners),
                    Err(why) => {
                        tracing::debug!(error = %why, "cluster slot map not read");
                        None
                    }
                },
                Err(e) => {
                    tracing::debug!(error = %e, "cluster slot map not read");
                    None
                }
            }
        };
        if let Ok(Some(owners)) = tokio::time::timeout(bound, attempt).await {
            return Some(owners);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_slots_are_the_clusters() {
        for key in [
            "",
            "foo",
            "many-4711",
            "{user:7}:lock",
            "a{}b",
            "a{b",
            "x{}{y}",
            "{a}{b}",
            "redisson_lock__channel:{order:1}",
        ] {
            assert_eq!(
                Slot::new(key_slot(key.as_bytes())),
                Some(Slot::for_key(key)),
                "{key}"
            );
        }
        // Redis's own CLUSTER KEYSLOT figures
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"somekey"), 11058);
    }

    fn node(host: &str, port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::BulkString(host.into()),
            Value::Int(port),
            Value::BulkString(id.into()),
        ])
    }

    #[test]
    fn a_cluster_slots_reply_maps_every_slot_to_its_primary() {
        let reply = Value::Array(vec![
            Value::Array(vec![Value::Int(0), Value::Int(5460), node("h", 1, "a")]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("h", 2, "b"),
                node("h", 4, "b-replica"),
            ]),
            Value::Array(vec![
                Value::Int(10923),
                Value::Int(16383),
                node("h", 3, "c"),
            ]),
            // a second range of the first primary
            Value::Array(vec![Value::Int(100), Value::Int(100), node("h", 1, "a")]),
        ]);
        let owners = SlotOwners::parse(&reply).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(owners.nodes(), 3);
        assert_eq!(owners.node_of(0), Some(0));
        assert_eq!(owners.node_of(100), Some(0));
        assert_eq!(owners.node_of(5461), Some(1));
        assert_eq!(owners.node_of(16383), Some(2));
        let partial = Value::Array(vec![Value::Array(vec![
            Value::Int(10),
            Value::Int(20),
            node("h", 1, "a"),
        ])]);
        let owners = SlotOwners::parse(&partial).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(owners.node_of(9), None);
        assert_eq!(owners.node_of(15), Some(0));
        assert!(SlotOwners::parse(&Value::Nil).is_err());
    }

    #[test]
    fn nodes_whose_calls_failed_are_asked_last() {
        let owners = SlotOwners {
            owner: vec![NO_NODE; SLOTS],
            first_slots: vec![0, 5461, 10923],
        };
        let routes = routes_to_ask(Some(&owners), &[true, false, false]);
        let to_slot = |slot: u16| {
            Slot::new(slot)
                .map(|s| SingleNodeRoutingInfo::SpecificNode(Route::with_slot(s, SlotAddr::Master)))
        };
        assert_eq!(
            routes.into_iter().map(Some).collect::<Vec<_>>(),
            vec![
                to_slot(5461),
                to_slot(10923),
                to_slot(0),
                Some(SingleNodeRoutingInfo::Random)
            ]
        );
        let none = routes_to_ask(None, &[]);
        assert!(none
            .iter()
            .all(|r| matches!(r, SingleNodeRoutingInfo::Random)));
    }
}
