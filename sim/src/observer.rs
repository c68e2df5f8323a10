//! The observer: it sees every guard the workload holds and reads the
//! in-memory server directly (never through the simulated network), and
//! checks the invariants on every step (see [`Invariant`]).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod sem;

use lock_core::__private::MemoryServerForTests;
use lock_core::{HeldLock, LockGuard, LockMode};
use redis::Value;
use tokio::time::Instant;

/// What the observer checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// Never two holders (different holds) of one lock both valid at one
    /// instant: checked whenever a hold begins, which finds every overlap
    /// (validity only ever ends, so an overlap is one at the later start).
    /// On a read-write lock readers may overlap each other, a writer
    /// nobody (but its own task's downgraded read).
    MutualExclusion,
    /// A new hold's fencing token is greater than every earlier hold's
    /// token of that lock, across restarts that lost every key too (a new
    /// reader's: than every earlier writer's; readers overlap).
    FencingOrder,
    /// A valid hold's guards are counted in Redis on every step: its
    /// owner's field is there (a release taken off twice that ended the
    /// hold, or a hold gone from Redis, while guards still rely on it
    /// breaks it). Redis' count may be lower than the guards after a late
    /// copy of a release landed on a count a re-entry had restored (see
    /// `Activity::count_drift`); the last release ends the hold whatever
    /// the count, so that drift never frees a lock early.
    CountsMatchGuards,
    /// An acquisition with a wait bound returns within that bound
    /// (`try_acquire` within `connect_timeout + command_timeout`).
    WaitWithinBound,
    /// No waiter keeps waiting while the lock is free (no hold, no turn
    /// kept for a client) for longer than the free-lock bound.
    NoWaitWhileFree,
    /// Every hold ends exactly once: once the network is calm, every
    /// released hold is gone from Redis before a lease could have expired
    /// it, no client still renews anything, and in the end nothing is left.
    EveryHoldEnds,
    /// Never more than a semaphore's N permits held validly at one
    /// instant (checked whenever permits are taken), and never more than
    /// N available.
    PermitsWithinLimit,
    /// At the end of a semaphore seed, leases past and the network calm,
    /// every permit is accounted for: counter + permit ids = N (the
    /// expirable kind; the plain kind: counter = N, when no client crashed,
    /// no restart lost the counter and no release failed).
    PermitsConserved,
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Invariant::MutualExclusion => "mutual exclusion",
            Invariant::FencingOrder => "fencing order",
            Invariant::CountsMatchGuards => "counts match guards",
            Invariant::WaitWithinBound => "wait within bound",
            Invariant::NoWaitWhileFree => "no wait while free",
            Invariant::EveryHoldEnds => "every hold ends",
            Invariant::PermitsWithinLimit => "permits within limit",
            Invariant::PermitsConserved => "permits conserved",
        })
    }
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Virtual time since the start of the run.
    pub at: Duration,
    /// Which invariant.
    pub invariant: Invariant,
    /// What the observer saw.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{:?}] {}: {}", self.at, self.invariant, self.detail)
    }
}

/// Counts of what the workload did, as the observer saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Activity {
    /// New holds that began (valid at the start).
    pub holds: u64,
    /// Re-entries (a second guard of a hold).
    pub reentries: u64,
    /// Acquisitions that timed out waiting.
    pub timeouts: u64,
    /// Acquisitions and releases that failed with another error.
    pub errors: u64,
    /// Holds that ended lost while guarded.
    pub lost: u64,
    /// Overlaps after a restart that lost every key (Redis forgot the
    /// lock: the documented limit, where fencing tokens protect).
    pub excused_overlaps: u64,
    /// Steps the observer checked.
    pub steps: u64,
    /// Holds whose count in Redis was seen below their guards (a late
    /// release copy landed on a count a re-entry restored: the count
    /// drifts, the hold stays; see [`Invariant::CountsMatchGuards`]).
    pub count_drift: u64,
    /// Permit acquisitions (semaphore seeds) that filled their semaphore:
    /// with them, N permits were held validly.
    pub at_limit: u64,
}

struct Entry {
    id: u64,
    key: String,
    who: String,
    owner: String,
    mode: LockMode,
    held: HeldLock,
    /// When the acquisition that began this hold was asked for.
    began: Instant,
}

struct Waiter {
    id: u64,
    key: String,
    since: Instant,
    reported: bool,
}

struct Inner {
    next_id: u64,
    inside: Vec<Entry>,
    waiters: Vec<Waiter>,
    /// Per lock: the greatest token seen and its owner.
    max_token: BTreeMap<String, (u64, String)>,
    /// Per lock: the greatest token of an exclusive or write hold seen
    /// (what a new reader's token must be above: readers of a read-write
    /// lock overlap, and their tokens come in any order among themselves).
    max_exclusive: BTreeMap<String, (u64, String)>,
    /// Per hold (owner id): when the acquisition that began it was asked.
    began: BTreeMap<String, Instant>,
    /// Holds whose count was seen drift.
    drifted: std::collections::BTreeSet<String>,
    /// Holds seen gone from Redis while valid (reported once each).
    gone: std::collections::BTreeSet<String>,
    /// Holds whose release failed and was reported: the caller's
    /// `release()` returned the error, or (a dropped guard's background
    /// release) the client's error hook was called. Such a hold may stay
    /// in Redis until its lease runs out.
    release_failed: std::collections::BTreeSet<String>,
    /// Per client: the holds whose guards were dropped.
    dropped: BTreeMap<String, Vec<String>>,
    /// Clients whose error hook reported a background failure.
    hook_called: std::collections::BTreeSet<String>,
    /// (client id, `c<n>`) of every client.
    client_ids: Vec<(String, String)>,
    /// Per lock: since when the observer has seen it free.
    free_since: BTreeMap<String, Instant>,
    /// Restarts: when each began and when the server was back.
    restarts: Vec<(Instant, Instant)>,
    /// Semaphore seeds: who holds permits, the ids seen.
    sem: sem::SemState,
    violations: Vec<Violation>,
    activity: Activity,
    trace: Vec<String>,
    keep_trace: bool,
    digest: std::collections::hash_map::DefaultHasher,
}

/// Bounds the observer holds the library to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// How late an acquisition may return past its wait bound.
    pub(crate) wait_slack: Duration,
    /// How long a lock may stay free while someone waits for it.
    pub(crate) free_lock: Duration,
}

/// The observer (shared by the workload's tasks).
pub(crate) struct Observer {
    inner: Mutex<Inner>,
    server: MemoryServerForTests,
    start: Instant,
    bounds: Bounds,
    keys: Vec<String>,
}

/// A guard the workload holds, as the observer sees it: dropped when the
/// workload stops relying on the guard.
pub(crate) struct Inside {
    observer: Arc<Observer>,
    id: u64,
}

impl Drop for Inside {
    fn drop(&mut self) {
        self.observer.inner().inside.retain(|e| e.id != self.id);
    }
}

/// An acquisition in progress, as the observer sees it.
pub(crate) struct Waiting {
    observer: Arc<Observer>,
    id: u64,
    started: Instant,
    bound: Option<Duration>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.observer.inner().waiters.retain(|w| w.id != self.id);
    }
}

impl Waiting {
    /// The acquisition returned (`what` for the trace).
    pub(crate) fn returned(self, what: &str) {
        let elapsed = self.started.elapsed();
        if let Some(bound) = self.bound {
            if elapsed > bound + self.observer.bounds.wait_slack {
                self.observer.violation(
                    Invariant::WaitWithinBound,
                    format!(
                        "an acquisition bounded by {bound:?} returned {what} after {elapsed:?}"
                    ),
                );
            }
        }
    }
}

fn count_of(value: &Value) -> u64 {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        Value::Int(n) => u64::try_from(*n).unwrap_or(0),
        _ => 0,
    }
}

impl Observer {
    /// An observer of `keys` on `server`.
    pub(crate) fn new(
        server: MemoryServerForTests,
        keys: Vec<String>,
        bounds: Bounds,
        keep_trace: bool,
    ) -> Arc<Self> {
        Arc::new(Observer {
            inner: Mutex::new(Inner {
                next_id: 1,
                inside: Vec::new(),
                waiters: Vec::new(),
                max_token: BTreeMap::new(),
                max_exclusive: BTreeMap::new(),
                began: BTreeMap::new(),
                drifted: std::collections::BTreeSet::new(),
                gone: std::collections::BTreeSet::new(),
                release_failed: std::collections::BTreeSet::new(),
                dropped: BTreeMap::new(),
                hook_called: std::collections::BTreeSet::new(),
                client_ids: Vec::new(),
                free_since: BTreeMap::new(),
                restarts: Vec::new(),
                sem: sem::SemState::default(),
                violations: Vec::new(),
                activity: Activity::default(),
                trace: Vec::new(),
                keep_trace,
                digest: std::collections::hash_map::DefaultHasher::new(),
            }),
            server,
            start: Instant::now(),
            bounds,
            keys,
        })
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Records `line` in the trace (and its digest).
    pub(crate) fn event(&self, line: impl AsRef<str>) {
        let line = format!(
            "{:>10.3}ms {}",
            self.now().as_secs_f64() * 1000.0,
            line.as_ref()
        );
        let mut inner = self.inner();
        line.hash(&mut inner.digest);
        if inner.keep_trace {
            inner.trace.push(line);
        }
    }

    /// Records `line` in the trace only when the trace is kept, and not in
    /// its digest (details a replay prints: every command on the network).
    pub(crate) fn detail(&self, line: impl AsRef<str>) {
        let mut inner = self.inner();
        if inner.keep_trace {
            let line = format!(
                "{:>10.3}ms {}",
                self.now().as_secs_f64() * 1000.0,
                line.as_ref()
            );
            inner.trace.push(line);
        }
    }

    /// Records a broken invariant.
    pub(crate) fn violation(&self, invariant: Invariant, detail: String) {
        let at = self.now();
        self.event(format!("VIOLATION {invariant}: {detail}"));
        self.inner().violations.push(Violation {
            at,
            invariant,
            detail,
        });
    }

    /// Counts one more of something the workload did.
    pub(crate) fn count(&self, what: impl FnOnce(&mut Activity)) {
        what(&mut self.inner().activity);
    }

    /// The server restarted now (every key lost), down for `down`.
    pub(crate) fn restarted(&self, down: Duration) {
        let now = Instant::now();
        self.event(format!("server restart (data lost), down {down:?}"));
        self.inner().restarts.push((now, now + down));
    }

    /// An acquisition of `key` begins; `bound` is its wait bound.
    pub(crate) fn waiting(self: &Arc<Self>, key: &str, bound: Option<Duration>) -> Waiting {
        let mut inner = self.inner();
        let id = inner.next_id;
        inner.next_id += 1;
        let since = Instant::now();
        inner.waiters.push(Waiter {
            id,
            key: key.to_owned(),
            since,
            reported: false,
        });
        Waiting {
            observer: self.clone(),
            id,
            started: since,
            bound,
        }
    }

    /// `who` relies on `guard` from now on (its acquisition was asked for
    /// at `asked`): checks mutual exclusion and the fencing order at this
    /// instant.
    pub(crate) fn enter(self: &Arc<Self>, who: &str, guard: &LockGuard, asked: Instant) -> Inside {
        let held = guard.held_lock();
        let mode = held.mode();
        let key = guard.name().to_owned();
        let owner = guard.owner_id().to_owned();
        let token = guard.fencing_token();
        let now = Instant::now();
        let valid = held.is_held();
        let mut found = Vec::new();
        let id = {
            let mut inner = self.inner();
            let reentry = inner.began.contains_key(&owner);
            let began = *inner.began.entry(owner.clone()).or_insert(asked);
            if valid {
                let task = |w: &str| w.split('/').next().unwrap_or(w).to_owned();
                for e in &inner.inside {
                    let conflict = match (e.mode, mode) {
                        (LockMode::Read, LockMode::Read) => false,
                        // a downgrade: the write's own task reads under it
                        (LockMode::Read, LockMode::Write) | (LockMode::Write, LockMode::Read) => {
                            task(&e.who) != task(who)
                        }
                        _ => true,
                    };
                    if conflict && e.key == key && e.owner != owner && e.held.is_held() {
                        // Redis forgot the other hold in a restart after
                        // it was asked for: the documented limit.
                        let excused = inner
                            .restarts
                            .iter()
                            .any(|(at, _)| *at >= e.began && *at <= now);
                        found.push((e.who.clone(), excused));
                    }
                }
                if !reentry {
                    inner.activity.holds += 1;
                    let above = match mode {
                        LockMode::Read => inner.max_exclusive.get(&key),
                        _ => inner.max_token.get(&key),
                    };
                    if let Some((max, max_owner)) = above {
                        if *max_owner != owner && token <= *max {
                            let detail = format!(
                                "{who} began a {mode} hold of {key} with token {token}, not above {max} (an earlier hold's)"
                            );
                            drop(inner);
                            self.violation(Invariant::FencingOrder, detail);
                            inner = self.inner();
                        }
                    }
                    let entry = inner
                        .max_token
                        .entry(key.clone())
                        .or_insert((0, String::new()));
                    if token > entry.0 {
                        *entry = (token, owner.clone());
                    }
                    if mode != LockMode::Read {
                        let entry = inner
                            .max_exclusive
                            .entry(key.clone())
                            .or_insert((0, String::new()));
                        if token > entry.0 {
                            *entry = (token, owner.clone());
                        }
                    }
                } else {
                    inner.activity.reentries += 1;
                }
            }
            let id = inner.next_id;
            inner.next_id += 1;
            inner.inside.push(Entry {
                id,
                key: key.clone(),
                who: who.to_owned(),
                owner: owner.clone(),
                mode,
                held,
                began,
            });
            id
        };
        self.event(format!("{who} holds {key} as {owner} (valid: {valid})"));
        for (other, excused) in found {
            if excused {
                self.count(|a| a.excused_overlaps += 1);
                self.event(format!(
                    "{who} and {other} both hold {key} after a restart lost it"
                ));
            } else {
                self.violation(
                    Invariant::MutualExclusion,
                    format!(
                        "{who} began a hold of {key} while {other}'s hold of it was still valid"
                    ),
                );
            }
        }
        Inside {
            observer: self.clone(),
            id,
        }
    }

    fn read(&self, args: &[&str]) -> Value {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        self.server.call(&args).unwrap_or(Value::Nil)
    }

    /// One step: Redis' counts against the valid guards, and waiters
    /// against free locks.
    pub(crate) fn step(&self) {
        self.step_semaphores();
        let now = Instant::now();
        // Valid holds: (key, owner) -> guards, earliest since.
        let mut holds: BTreeMap<(String, String), (u64, Instant, String, LockMode)> =
            BTreeMap::new();
        let restarts = {
            let mut inner = self.inner();
            inner.activity.steps += 1;
            for e in &inner.inside {
                if e.held.is_held() {
                    let h = holds.entry((e.key.clone(), e.owner.clone())).or_insert((
                        0,
                        e.began,
                        e.who.clone(),
                        e.mode,
                    ));
                    h.0 += 1;
                }
            }
            inner.restarts.clone()
        };
        for ((key, owner), (guards, began, who, mode)) in &holds {
            if restarts.iter().any(|(at, _)| *at >= *began) {
                continue;
            }
            // A writer's field is `<owner>:write`; a reader's first count
            // has its timeout key (the hash lives only as long as its
            // readers' keys).
            let field = match mode {
                LockMode::Write => format!("{owner}:write"),
                _ => owner.clone(),
            };
            let mut count = count_of(&self.read(&["HGET", key, &field]));
            if *mode == LockMode::Read && count > 0 {
                let timeout = format!("{{{key}}}:{owner}:rwlock_timeout:1");
                if count_of(&self.read(&["EXISTS", &timeout])) == 0 {
                    count = 0;
                }
            }
            if count == 0 {
                if !self.inner().gone.insert(owner.clone()) {
                    continue;
                }
                self.violation(
                    Invariant::CountsMatchGuards,
                    format!("{who}'s valid hold of {key} has {guards} guard(s) but Redis does not have it"),
                );
            } else if count < *guards {
                let mut inner = self.inner();
                if inner.drifted.insert(owner.clone()) {
                    inner.activity.count_drift += 1;
                    drop(inner);
                    self.event(format!(
                        "{who}'s hold of {key} has {guards} guard(s), Redis counts {count}"
                    ));
                }
            }
        }
        // Free locks and waiters.
        let up = restarts.iter().map(|(_, up)| *up).max();
        let down = up.is_some_and(|up| now < up);
        for key in &self.keys {
            let turn = format!("lockcore_turn:{{{key}}}");
            // a waiting writer's mark keeps readers out while it lives
            let mark = format!("lockcore_writer:{{{key}}}");
            let free = !down && count_of(&self.read(&["EXISTS", key, &turn, &mark])) == 0;
            let mut inner = self.inner();
            if !free {
                inner.free_since.remove(key);
                continue;
            }
            let since = *inner.free_since.entry(key.clone()).or_insert(now);
            let since = up.map_or(since, |up| since.max(up));
            if now.saturating_duration_since(since) <= self.bounds.free_lock {
                continue;
            }
            let mut late = Vec::new();
            for w in inner.waiters.iter_mut() {
                if w.key == *key && w.since <= since && !w.reported {
                    w.reported = true;
                    late.push(now.saturating_duration_since(w.since));
                }
            }
            drop(inner);
            for waited in late {
                self.violation(
                    Invariant::NoWaitWhileFree,
                    format!(
                        "a waiter for {key} (waiting {waited:?}) still waits; the lock has been free for {:?}",
                        now.saturating_duration_since(since)
                    ),
                );
            }
        }
    }

    /// `owner`'s release returned an error to its caller.
    pub(crate) fn release_failed(&self, owner: &str) {
        self.inner().release_failed.insert(owner.to_owned());
    }

    /// The guard of `owner` (a hold of `client`) was dropped.
    pub(crate) fn dropped(&self, client: &str, owner: &str) {
        self.inner()
            .dropped
            .entry(client.to_owned())
            .or_default()
            .push(owner.to_owned());
    }

    /// `client`'s error hook was called: a background failure.
    pub(crate) fn hook_called(&self, client: &str, what: &str) {
        self.event(format!("{client} error hook: {what}"));
        self.inner().hook_called.insert(client.to_owned());
    }

    /// Whether `owner`'s hold may stay in Redis until its lease runs out:
    /// its release failed and the failure was reported.
    pub(crate) fn excused_to_stay(&self, owner: &str) -> bool {
        let inner = self.inner();
        inner.release_failed.contains(owner)
            || inner.dropped.iter().any(|(client, owners)| {
                inner.hook_called.contains(client) && owners.iter().any(|o| o == owner)
            })
            // a hold no task ever received (its acquisition's reply was
            // lost, its cancellation failed and was reported)
            || (!inner.began.contains_key(owner)
                && inner.client_ids.iter().any(|(id, client)| {
                    owner.starts_with(id.as_str()) && inner.hook_called.contains(client)
                }))
    }

    /// Client `c<n>` has the client id `id` (owner ids begin with it).
    pub(crate) fn client_id(&self, client: &str, id: &str) {
        self.inner()
            .client_ids
            .push((id.to_owned(), client.to_owned()));
    }

    /// The guards of the tasks whose names start with `prefix` that are
    /// still valid.
    pub(crate) fn valid_guards_of(&self, prefix: &str) -> Vec<String> {
        self.inner()
            .inside
            .iter()
            .filter(|e| e.who.starts_with(prefix) && e.held.is_held())
            .map(|e| format!("{}'s hold of {} as {}", e.who, e.key, e.owner))
            .collect()
    }

    /// The holds still in Redis: (lock, owner); a read-write lock's
    /// `mode` field is not a hold, a writer's `:write` is left out, and a
    /// reader's timeout key left behind counts as its hold.
    pub(crate) fn left_in_redis(&self) -> Vec<(String, String)> {
        let mut left = Vec::new();
        for key in &self.keys {
            if let Value::Array(fields) = self.read(&["HGETALL", key]) {
                for pair in fields.chunks(2) {
                    if let Value::BulkString(b) = &pair[0] {
                        let field = String::from_utf8_lossy(b);
                        if field == "mode" {
                            continue;
                        }
                        let owner = field.strip_suffix(":write").unwrap_or(&field);
                        left.push((key.clone(), owner.to_owned()));
                    }
                }
            }
            let prefix = format!("{{{key}}}:");
            let pattern = format!("{prefix}*:rwlock_timeout:*");
            let mut cursor = "0".to_string();
            for _ in 0..1_000 {
                let Value::Array(reply) =
                    self.read(&["SCAN", &cursor, "MATCH", &pattern, "COUNT", "1000"])
                else {
                    break;
                };
                let [Value::BulkString(next), Value::Array(keys)] = reply.as_slice() else {
                    break;
                };
                for k in keys {
                    if let Value::BulkString(k) = k {
                        let k = String::from_utf8_lossy(k);
                        let owner = k
                            .strip_prefix(&prefix)
                            .and_then(|rest| rest.rsplit_once(":rwlock_timeout:"))
                            .map_or_else(|| k.to_string(), |(owner, _)| owner.to_owned());
                        left.push((format!("{key} (a reader's timeout key)"), owner));
                    }
                }
                cursor = String::from_utf8_lossy(next).into_owned();
                if cursor == "0" {
                    break;
                }
            }
        }
        left
    }

    /// What the observer found.
    pub(crate) fn finish(&self) -> (Vec<Violation>, Activity, Vec<String>, u64) {
        let mut inner = self.inner();
        let digest = inner.digest.clone().finish();
        (
            std::mem::take(&mut inner.violations),
            inner.activity,
            std::mem::take(&mut inner.trace),
            digest,
        )
    }
}
