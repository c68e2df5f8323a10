//! Read-only inspection: who holds a lock, how many times, for how much
//! longer ([`Lock::status`]), and which locks exist ([`LockClient::scan_locks`]).
//!
//! Nothing here changes Redis; an operator tool can call it freely.

use std::time::Duration;

use redis::{Pipeline, Value};

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::hold::shared::Core;
use crate::lock::Lock;
use crate::options::LockMode;
use crate::transport::connection::Lane;

/// Key prefixes of the helper keys and channel of a lock (see `keys.rs`);
/// keys starting with them are never locks themselves.
const HELPER_PREFIXES: [&str; 4] = [
    "redisson_lock__channel:",
    "redisson_lock_token:",
    "redisson_unlock_latch:",
    "redisson_rwlock:",
];

/// The most fields a hash read as a possible lock may have: a lock hash has
/// one per owner (one for a reentrant lock); anything bigger is not a lock
/// and is not read.
const MAX_LOCK_FIELDS: i64 = 64;

/// `HLEN` was refused (ACL) and the warning about it given.
static HLEN_DENIED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How many keys one `SCAN` call is asked to look at.
const SCAN_COUNT: usize = 500;

/// One holder of a lock: its owner id and how many times it holds the lock
/// (more than 1 after re-entries).
///
/// ```no_run
/// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
/// for owner in lock.status().await?.owners {
///     println!("{} holds it {} time(s)", owner.owner, owner.count);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOwner {
    /// The owner id, `"<client-id>:<n>"` (Redisson: `"<uuid>:<threadId>"`).
    pub owner: String,
    /// The hold count.
    pub count: u32,
    /// How it holds the lock: [`LockMode::Exclusive`] for a reentrant
    /// lock's holder, [`LockMode::Read`] or [`LockMode::Write`] on a
    /// read-write lock (a writer's field in Redis is `<owner>:write`; the
    /// owner id here is without the suffix).
    pub mode: LockMode,
}

/// A snapshot of one lock, read in one atomic step.
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
/// let status = client.lock("nightly-report")?.status().await?;
/// if status.is_locked() {
///     println!("held by {:?}, expires in {:?}", status.owners, status.ttl);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock's name (without the client's key prefix).
    pub name: String,
    /// The lock's Redis key (key prefix + name).
    pub key: String,
    /// The holders, sorted by owner id; empty when the lock is free. A
    /// mutex has at most one.
    pub owners: Vec<LockOwner>,
    /// `None` when the lock is free; [`LockMode::Exclusive`] for a
    /// reentrant lock; on a read-write lock its hash's `mode`:
    /// [`LockMode::Read`] (readers, and perhaps a writer that downgraded)
    /// or [`LockMode::Write`].
    pub mode: Option<LockMode>,
    /// Time until the lock expires: `None` when it is free,
    /// `Some(Duration::MAX)` when its key has no expiry (never the case for
    /// locks taken by this crate or Redisson).
    pub ttl: Option<Duration>,
}

impl LockStatus {
    /// Whether anyone holds the lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// println!("locked: {}", lock.status().await?.is_locked());
    /// # Ok(()) }
    /// ```
    pub fn is_locked(&self) -> bool {
        !self.owners.is_empty()
    }

    /// Builds a status from the replies to `HGETALL key` and `PTTL key`.
    fn from_replies(name: &str, key: &str, hash: Value, pttl: &Value) -> Result<Self> {
        let (owners, mode) = parse_owners(key, hash)?;
        let ttl = match pttl {
            _ if owners.is_empty() => None,
            Value::Int(-1) => Some(Duration::MAX),
            Value::Int(ms) if *ms >= 0 => Some(Duration::from_millis(*ms as u64)),
            // Expired between the two reads of a non-atomic batch.
            Value::Int(-2) => None,
            other => return Err(Error::Protocol(format!("PTTL answered {other:?}"))),
        };
        let owners = if ttl.is_none() { Vec::new() } else { owners };
        Ok(LockStatus {
            name: name.to_string(),
            key: key.to_string(),
            mode: (!owners.is_empty()).then_some(mode),
            owners,
            ttl,
        })
    }
}

/// The owners in a lock hash and the lock's mode; an error when the hash
/// is not a lock. A read-write lock's hash has a `mode` field (`read` or
/// `write`) and its writer's field ends in `:write`.
fn parse_owners(key: &str, hash: Value) -> Result<(Vec<LockOwner>, LockMode)> {
    let not_a_lock = |why: String| Error::Protocol(format!("key `{key}` is not a lock: {why}"));
    let fields: Vec<(String, String)> =
        redis::from_redis_value(hash).map_err(|e| not_a_lock(format!("HGETALL answered {e}")))?;
    let mut owners = Vec::with_capacity(fields.len());
    let mut lock_mode = LockMode::Exclusive;
    for (field, value) in fields {
        if field == "mode" {
            lock_mode = match value.as_str() {
                "read" => LockMode::Read,
                "write" => LockMode::Write,
                other => return Err(not_a_lock(format!("mode `{other}`"))),
            };
            continue;
        }
        let (field, mode) = match field.strip_suffix(":write") {
            Some(owner) if is_owner_id(owner) => (owner.to_string(), LockMode::Write),
            _ => (field, LockMode::Read),
        };
        if !is_owner_id(&field) {
            return Err(not_a_lock(format!("field `{field}` is not an owner id")));
        }
        let count = value
            .parse::<u32>()
            .ok()
            .filter(|c| *c > 0)
            .ok_or_else(|| not_a_lock(format!("hold count `{value}` of `{field}`")))?;
        owners.push(LockOwner {
            owner: field,
            count,
            mode,
        });
    }
    if lock_mode == LockMode::Exclusive {
        for owner in &mut owners {
            if owner.mode == LockMode::Write {
                return Err(not_a_lock(format!(
                    "field `{}:write` without a mode field",
                    owner.owner
                )));
            }
            owner.mode = LockMode::Exclusive;
        }
    }
    owners.sort_by(|a, b| a.owner.cmp(&b.owner));
    Ok((owners, lock_mode))
}

/// `<id>:<n>`: a non-empty id, a colon, a decimal number.
fn is_owner_id(field: &str) -> bool {
    match field.rsplit_once(':') {
        Some((id, n)) => !id.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

/// `s` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Runs a pipeline on the inspection lane (its own connection: a big
/// reply there never holds up lock commands or renewals) within the
/// client's time-outs.
pub(crate) async fn run_pipeline(core: &Core, pipe: &Pipeline) -> Result<Vec<Value>> {
    core.on_lane(Lane::Inspect, core.command_bound(), |mut conn| async move {
        Ok(conn.query_pipeline(pipe).await?)
    })
    .await
}

impl Lock {
    /// Who holds the lock, how many times each, and for how much longer, read
    /// in one `MULTI`/`EXEC` (`TYPE`, `HGETALL`, `PTTL`). A free lock has no
    /// owners and no TTL. Fails with [`Error::Protocol`] when the key holds
    /// something that is not a lock.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let lock = client.lock("stock:sku-42")?;
    /// let guard = lock.acquire().await?;
    /// let status = lock.status().await?;
    /// assert_eq!(status.owners[0].owner, guard.owner_id());
    /// assert_eq!(status.owners[0].count, 1);
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<LockStatus> {
        let key = self.keys.lock.as_str();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .ignore_errors()
            .cmd("TYPE")
            .arg(key)
            .cmd("HGETALL")
            .arg(key)
            .cmd("PTTL")
            .arg(key);
        let replies = run_pipeline(&self.client.inner.core, &pipe).await?;
        let [kind, hash, pttl]: [Value; 3] = replies
            .try_into()
            .map_err(|r| Error::Protocol(format!("status read answered {r:?}")))?;
        let kind: String = redis::from_redis_value(kind)
            .map_err(|e| Error::Protocol(format!("TYPE answered {e}")))?;
        match kind.as_str() {
            "none" => Ok(LockStatus {
                name: self.keys.name.clone(),
                key: key.to_string(),
                owners: Vec::new(),
                mode: None,
                ttl: None,
            }),
            "hash" => LockStatus::from_replies(&self.keys.name, key, hash, &pttl),
            other => Err(Error::Protocol(format!(
                "key `{key}` is not a lock: it holds a {other}"
            ))),
        }
    }
}

impl LockClient {
    /// The locks that exist now whose names match the glob `pattern` (`*`
    /// for all; the client's key prefix is added, and stripped from the
    /// names), sorted by name.
    ///
    /// Iterates with `SCAN … TYPE hash` (never `KEYS`, so Redis is not
    /// blocked; needs Redis 6 or later) and reads each batch of candidates
    /// in two pipelined round trips: `HLEN` first, then `HGETALL` and `PTTL`
    /// of the hashes small enough to be locks (a user's million-field hash
    /// matching the pattern is never read whole). Keeps only hashes whose
    /// fields are owner ids with positive hold counts, so other hashes and
    /// the locks' helper keys (`redisson_lock_token:…`, …) are skipped. Runs
    /// on the client's inspection lane: its own connection, so a slow scan
    /// never holds up lock commands or renewals. Locks released during the
    /// scan are left out; like `SCAN`, a lock created during the scan may or
    /// may not be listed.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// for status in client.scan_locks("stock:*").await? {
    ///     println!("{} held by {:?}", status.name, status.owners);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn scan_locks(&self, pattern: &str) -> Result<Vec<LockStatus>> {
        if pattern.is_empty() {
            return Err(Error::InvalidArgument(
                "pattern is empty (use `*` for every lock)".into(),
            ));
        }
        let core = &self.inner.core;
        let prefix = core.config.key_prefix.as_str();
        let matcher = format!("{}{pattern}", glob_escape(prefix));
        let mut found = Vec::new();
        // On a cluster every primary holds its own keys: scan each.
        let targets: Vec<Option<(String, u16)>> = if core.cluster {
            cluster_primaries(core)
                .await?
                .into_iter()
                .map(Some)
                .collect()
        } else {
            vec![None]
        };
        for target in targets {
            let mut cursor: u64 = 0;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(&matcher)
                    .arg("COUNT")
                    .arg(SCAN_COUNT)
                    .arg("TYPE")
                    .arg("hash");
                let reply = match &target {
                    None => core.run_cmd_on(Lane::Inspect, &scan).await?,
                    Some((host, port)) => run_on_node(core, &scan, host, *port).await?,
                };
                let (next, keys): (u64, Vec<String>) = redis::from_redis_value(reply)
                    .map_err(|e| Error::Protocol(format!("SCAN answered {e}")))?;
                let keys: Vec<String> = keys
                    .into_iter()
                    .filter(|k| k.starts_with(prefix))
                    .filter(|k| !HELPER_PREFIXES.iter().any(|h| k.starts_with(h)))
                    .collect();
                if !keys.is_empty() {
                    found.extend(read_keys(core, prefix, &keys).await?);
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        found.sort_by(|a, b| a.name.cmp(&b.name));
        // SCAN may return a key more than once.
        found.dedup_by(|a, b| a.key == b.key);
        Ok(found)
    }
}

/// The primaries of a cluster that serve slots (`CLUSTER NODES`).
async fn cluster_primaries(core: &Core) -> Result<Vec<(String, u16)>> {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("NODES");
    let reply = core.run_cmd_on(Lane::Inspect, &cmd).await?;
    let text: String = redis::from_redis_value(reply)
        .map_err(|e| Error::Protocol(format!("CLUSTER NODES answered {e}")))?;
    let mut primaries = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
            continue;
        };
        let serves_slots = fields.len() > 8;
        if !flags.split(',').any(|f| f == "master") || flags.contains("fail") || !serves_slots {
            continue;
        }
        // `ip:port@bus-port[,hostname]`
        let addr = addr.split(['@', ',']).next().unwrap_or_default();
        if let Some((host, port)) = addr.rsplit_once(':') {
            if let Ok(port) = port.parse::<u16>() {
                primaries.push((host.to_owned(), port));
            }
        }
    }
    if primaries.is_empty() {
        return Err(Error::Protocol(format!(
            "CLUSTER NODES named no primary: {text}"
        )));
    }
    Ok(primaries)
}

/// Runs `cmd` on the cluster node at `host:port`.
async fn run_on_node(core: &Core, cmd: &redis::Cmd, host: &str, port: u16) -> Result<Value> {
    use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
    core.on_lane(Lane::Inspect, core.command_bound(), |mut conn| async move {
        let Some(cluster) = conn.cluster() else {
            return Err(Error::Protocol("not a cluster connection".into()));
        };
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: host.to_owned(),
            port,
        });
        Ok(cluster.route_command(cmd.clone(), route).await?)
    })
    .await
}

/// Reads the locks at `keys`: one pipeline, or on a cluster one per hash
/// slot (a pipeline goes to one node).
async fn read_keys(core: &Core, prefix: &str, keys: &[String]) -> Result<Vec<LockStatus>> {
    if !core.cluster {
        return read_batch(core, prefix, keys).await;
    }
    let mut by_slot: std::collections::HashMap<_, Vec<String>> = std::collections::HashMap::new();
    for key in keys {
        by_slot
            .entry(redis::cluster_routing::Slot::for_key(key))
            .or_default()
            .push(key.clone());
    }
    let mut out = Vec::new();
    for group in by_slot.values() {
        out.extend(read_batch(core, prefix, group).await?);
    }
    Ok(out)
}

/// Reads `HGETALL` and `PTTL` of every key that may be a lock, in one
/// pipeline; keeps the locks. A first pipeline of `HLEN` leaves out hashes
/// with more fields than a lock can have ([`MAX_LOCK_FIELDS`]): a user's
/// big hash matching the pattern is never read whole.
async fn read_batch(core: &Core, prefix: &str, keys: &[String]) -> Result<Vec<LockStatus>> {
    let mut sizes = redis::pipe();
    sizes.ignore_errors();
    for key in keys {
        sizes.cmd("HLEN").arg(key);
    }
    let sizes = run_pipeline(core, &sizes).await?;
    if sizes.len() != keys.len() {
        return Err(Error::Protocol(format!(
            "a batch of {} HLEN answered {} replies",
            keys.len(),
            sizes.len()
        )));
    }
    let keys: Vec<&String> = keys
        .iter()
        .zip(sizes)
        .filter(|(_, size)| match size {
            Value::Int(n) => (1..=MAX_LOCK_FIELDS).contains(n),
            // A user whose ACL predates `+hlen` (README, "Restricted Redis
            // users"): read it unchecked, as before, and say so once.
            Value::ServerError(e) if e.code() == "NOPERM" => {
                if !HLEN_DENIED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!("HLEN refused (ACL): scan_locks reads every matching hash whole; add +hlen to the user's ACL (see the README)");
                }
                true
            }
            _ => false,
        })
        .map(|(key, _)| key)
        .collect();
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for key in &keys {
        pipe.cmd("HGETALL").arg(*key).cmd("PTTL").arg(*key);
    }
    let replies = run_pipeline(core, &pipe).await?;
    if replies.len() != keys.len() * 2 {
        return Err(Error::Protocol(format!(
            "a batch of {} reads answered {} replies",
            keys.len() * 2,
            replies.len()
        )));
    }
    let mut out = Vec::new();
    let mut replies = replies.into_iter();
    for key in keys {
        let (Some(hash), Some(pttl)) = (replies.next(), replies.next()) else {
            break;
        };
        for reply in [&hash, &pttl] {
            if let Value::ServerError(e) = reply {
                // WRONGTYPE: the key stopped being a hash since the scan.
                if e.code() != "WRONGTYPE" {
                    return Err(Error::Protocol(format!("reading `{key}`: {e:?}")));
                }
            }
        }
        let name = &key[prefix.len()..];
        // Not a lock (another hash, or no longer a hash): skip it.
        if let Ok(status) = LockStatus::from_replies(name, key, hash, &pttl) {
            if status.is_locked() {
                out.push(status);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::keys::LockKeys;

    #[test]
    fn helper_prefixes_match_the_key_layout() -> Result<()> {
        let keys = LockKeys::new("", "a", 100)?;
        for key in [keys.channel.as_str(), keys.token.as_str(), &keys.latch("r")] {
            assert!(
                HELPER_PREFIXES.iter().any(|p| key.starts_with(p)),
                "{key} is a helper key"
            );
        }
        assert!(!HELPER_PREFIXES.iter().any(|p| keys.lock.starts_with(p)));
        Ok(())
    }

    #[test]
    fn owner_ids_are_id_colon_number() {
        assert!(is_owner_id("0b6a4c1e-58f4-4c5e-9a3e-1f2d3c4b5a69:7"));
        assert!(is_owner_id("a:b:12"));
        for bad in ["", "7", ":7", "abc:", "abc:x1", "mode", "uuid:1:write"] {
            assert!(!is_owner_id(bad), "{bad}");
        }
    }

    #[test]
    fn glob_characters_in_the_prefix_are_escaped() {
        assert_eq!(glob_escape("app:"), "app:");
        assert_eq!(glob_escape(r"a*b?[c]\"), r"a\*b\?\[c\]\\");
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn statuses_are_built_from_replies() -> Result<()> {
        let hash = Value::Array(vec![bulk("u:2"), bulk("1"), bulk("u:1"), bulk("3")]);
        let s = LockStatus::from_replies("n", "p:n", hash, &Value::Int(1500))?;
        assert_eq!(
            s.owners,
            vec![
                LockOwner {
                    owner: "u:1".into(),
                    count: 3,
                    mode: LockMode::Exclusive,
                },
                LockOwner {
                    owner: "u:2".into(),
                    count: 1,
                    mode: LockMode::Exclusive,
                }
            ]
        );
        assert_eq!(s.mode, Some(LockMode::Exclusive));
        assert_eq!(s.ttl, Some(Duration::from_millis(1500)));
        // a read-write lock: its mode, readers and a downgrading writer
        let rw = Value::Array(vec![
            bulk("mode"),
            bulk("read"),
            bulk("u:2:write"),
            bulk("1"),
            bulk("u:2"),
            bulk("2"),
        ]);
        let s = LockStatus::from_replies("n", "n", rw, &Value::Int(900))?;
        assert_eq!(s.mode, Some(LockMode::Read));
        let seen: Vec<_> = s
            .owners
            .iter()
            .map(|o| (o.owner.as_str(), o.count, o.mode))
            .collect();
        assert_eq!(
            seen,
            [("u:2", 1, LockMode::Write), ("u:2", 2, LockMode::Read)]
        );
        // a writer's field without a mode is no lock
        let odd = Value::Array(vec![bulk("u:2:write"), bulk("1")]);
        assert!(LockStatus::from_replies("n", "n", odd, &Value::Int(900)).is_err());
        let no_expiry = Value::Array(vec![bulk("u:1"), bulk("1")]);
        let s = LockStatus::from_replies("n", "n", no_expiry, &Value::Int(-1))?;
        assert_eq!(s.ttl, Some(Duration::MAX));
        let gone = Value::Array(vec![bulk("u:1"), bulk("1")]);
        let s = LockStatus::from_replies("n", "n", gone, &Value::Int(-2))?;
        assert!(!s.is_locked());
        assert_eq!(s.ttl, None);
        Ok(())
    }

    #[test]
    fn hashes_that_are_not_locks_are_rejected() {
        for (field, value) in [("name", "x"), ("u:1", "zero"), ("u:1", "0"), ("u:1", "-1")] {
            let hash = Value::Array(vec![bulk(field), bulk(value)]);
            let err =
                LockStatus::from_replies("n", "n", hash, &Value::Int(10)).expect_err("not a lock");
            assert!(err.to_string().contains("is not a lock"), "{err}");
        }
    }
}
