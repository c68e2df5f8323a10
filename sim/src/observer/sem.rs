//! The observer's view of semaphore seeds: who is inside each semaphore
//! with how many permits (never more than its N while valid), the ids of
//! a valid expirable permit live in Redis on every step, what is left at
//! the end, and the conservation of permits (counter + ids = N).

use std::collections::BTreeMap;
use std::sync::Arc;

use lock_core::Permits;
use redis::Value;
use tokio::time::Instant;

use super::{count_of, Invariant, Observer};
use crate::scenario::SemSpec;

/// Permits a task relies on, as the observer sees them.
pub(super) struct SemEntry {
    id: u64,
    sem: String,
    who: String,
    n: u32,
    permits: Arc<Permits>,
    began: Instant,
    /// Reported gone from Redis while valid (once).
    reported: bool,
}

/// What the observer keeps of semaphore seeds.
#[derive(Default)]
pub(super) struct SemState {
    specs: Vec<SemSpec>,
    inside: Vec<SemEntry>,
    /// Every expirable permit id entered: (client, the hold's owner: the
    /// acquisition's ids).
    ids: BTreeMap<String, (String, String)>,
    /// Per semaphore: when a `try_set_permits` last answered (the counter
    /// was there then).
    there: BTreeMap<String, Instant>,
}

/// Permits the workload relies on: dropped when it stops relying on them.
pub(crate) struct InsidePermits {
    observer: Arc<Observer>,
    id: u64,
}

impl Drop for InsidePermits {
    fn drop(&mut self) {
        self.observer.inner().sem.inside.retain(|e| e.id != self.id);
    }
}

/// What Redis holds of one semaphore now.
struct Seen {
    /// The counter (None: no key).
    counter: Option<i64>,
    /// Permit ids in the set.
    held: i64,
    /// Ids whose expiry is still ahead of the server's clock.
    live: Vec<String>,
}

impl Observer {
    /// The semaphores of a semaphore seed.
    pub(crate) fn observe_semaphores(&self, specs: Vec<SemSpec>) {
        self.inner().sem.specs = specs;
    }

    fn spec(&self, sem: &str) -> Option<SemSpec> {
        self.inner()
            .sem
            .specs
            .iter()
            .find(|s| s.name == sem)
            .cloned()
    }

    /// Whether a restart happened since `at`.
    fn restarted_since(&self, at: Instant) -> bool {
        self.inner().restarts.iter().any(|(r, _)| *r >= at)
    }

    /// `who` relies on `permits` of `sem` from now on (asked for at
    /// `asked`): checks that, with the valid permits of the others, no
    /// more than the semaphore's N are inside.
    pub(crate) fn enter_permits(
        self: &Arc<Self>,
        who: &str,
        sem: &str,
        client: &str,
        permits: &Arc<Permits>,
        asked: Instant,
    ) -> InsidePermits {
        let n = permits.count();
        let valid = permits.is_held();
        let now = Instant::now();
        let Some(spec) = self.spec(sem) else {
            self.violation(
                Invariant::PermitsWithinLimit,
                format!("{who} holds permits of {sem}, no semaphore of the seed"),
            );
            return self.inside_permits(who, sem, client, permits, asked);
        };
        let (mut all, mut unexcused, mut others) = (0u64, 0u64, Vec::new());
        {
            let inner = self.inner();
            for e in inner.sem.inside.iter().filter(|e| e.sem == sem) {
                if !e.permits.is_held() {
                    continue;
                }
                all += u64::from(e.n);
                // Redis forgot them in a restart after they were asked
                // for (the documented limit); the plain kind's counter is
                // off for good after a restart (its permits are nobody's:
                // releases of permits taken before add to the new count).
                let excused = inner
                    .restarts
                    .iter()
                    .any(|(at, _)| *at <= now && (*at >= e.began || !spec.expirable));
                if !excused {
                    unexcused += u64::from(e.n);
                }
                others.push(format!("{} ({})", e.who, e.n));
            }
        }
        if valid {
            self.count(|a| a.holds += 1);
        }
        self.event(format!(
            "{who} holds {n} permit(s) of {sem} {:?} (valid: {valid}); others inside: {others:?}",
            permits.ids()
        ));
        let limit = u64::from(spec.permits);
        if valid && unexcused + u64::from(n) > limit {
            self.violation(
                Invariant::PermitsWithinLimit,
                format!(
                    "{who} took {n} permit(s) of {sem} (N = {limit}) while {unexcused} were held: {others:?}"
                ),
            );
        } else if valid && all + u64::from(n) == limit {
            self.count(|a| a.at_limit += 1);
        } else if valid && all + u64::from(n) > limit {
            self.count(|a| a.excused_overlaps += 1);
            self.event(format!(
                "{who} and {others:?} hold more than {limit} permits of {sem} after a restart lost them"
            ));
        }
        self.inside_permits(who, sem, client, permits, asked)
    }

    fn inside_permits(
        self: &Arc<Self>,
        who: &str,
        sem: &str,
        client: &str,
        permits: &Arc<Permits>,
        asked: Instant,
    ) -> InsidePermits {
        let mut inner = self.inner();
        let id = inner.next_id;
        inner.next_id += 1;
        let owner = permits.ids().join(",");
        for permit in permits.ids() {
            inner
                .sem
                .ids
                .insert(permit.clone(), (client.to_owned(), owner.clone()));
        }
        inner.sem.inside.push(SemEntry {
            id,
            sem: sem.to_owned(),
            who: who.to_owned(),
            n: permits.count(),
            permits: permits.clone(),
            began: asked,
            reported: false,
        });
        InsidePermits {
            observer: self.clone(),
            id,
        }
    }

    /// A `try_set_permits` of `sem` answered: its counter is there now.
    pub(crate) fn permits_there(&self, sem: &str) {
        self.inner()
            .sem
            .there
            .insert(sem.to_owned(), Instant::now());
    }

    /// `available()` answered `available` for `sem`: never above N (but on
    /// the plain kind after a restart).
    pub(crate) fn available_seen(&self, who: &str, sem: &str, available: u64) {
        let Some(spec) = self.spec(sem) else { return };
        self.event(format!(
            "{who} sees {available} permit(s) of {sem} available"
        ));
        let restarted = !self.inner().restarts.is_empty();
        if available > u64::from(spec.permits) && (spec.expirable || !restarted) {
            self.violation(
                Invariant::PermitsWithinLimit,
                format!(
                    "{who} sees {available} permits of {sem} available, N = {}",
                    spec.permits
                ),
            );
        }
    }

    /// The server's clock in ms (`TIME`).
    fn server_ms(&self) -> Option<u64> {
        match self.read(&["TIME"]) {
            Value::Array(parts) => match parts.as_slice() {
                [secs, micros] => Some(count_of(secs) * 1000 + count_of(micros) / 1000),
                _ => None,
            },
            _ => None,
        }
    }

    fn timeout_key(sem: &str) -> String {
        format!("{{{sem}}}:timeout")
    }

    /// A step of semaphore seeds: every valid expirable permit's ids are in
    /// Redis with an expiry ahead of the server's clock.
    pub(crate) fn step_semaphores(&self) {
        let checks: Vec<(u64, String, String, Vec<String>, Instant)> = {
            let inner = self.inner();
            if inner.sem.inside.is_empty() {
                return;
            }
            inner
                .sem
                .inside
                .iter()
                .filter(|e| !e.reported && !e.permits.ids().is_empty() && e.permits.is_held())
                .map(|e| {
                    (
                        e.id,
                        e.sem.clone(),
                        e.who.clone(),
                        e.permits.ids().to_vec(),
                        e.began,
                    )
                })
                .collect()
        };
        if checks.is_empty() {
            return;
        }
        let Some(now) = self.server_ms() else { return };
        for (id, sem, who, ids, began) in checks {
            if self.restarted_since(began) {
                continue;
            }
            let key = Self::timeout_key(&sem);
            let bad: Vec<String> = ids
                .iter()
                .filter(|permit| {
                    // ids are stored as their 16 raw bytes
                    let Some(raw) = raw_id(permit) else {
                        return true;
                    };
                    let args = [b"ZSCORE".to_vec(), key.as_bytes().to_vec(), raw];
                    let score = match self.server.call(&args).unwrap_or(Value::Nil) {
                        Value::BulkString(b) => std::str::from_utf8(&b)
                            .ok()
                            .and_then(|s| s.parse::<f64>().ok()),
                        Value::Double(d) => Some(d),
                        _ => None,
                    };
                    !score.is_some_and(|s| s > now as f64)
                })
                .cloned()
                .collect();
            if bad.is_empty() {
                continue;
            }
            if let Some(e) = self.inner().sem.inside.iter_mut().find(|e| e.id == id) {
                e.reported = true;
            }
            self.violation(
                Invariant::CountsMatchGuards,
                format!("{who}'s valid permits of {sem}: ids {bad:?} gone or expired in Redis"),
            );
        }
    }

    fn seen(&self, spec: &SemSpec) -> Seen {
        let counter = match self.read(&["GET", &spec.name]) {
            Value::BulkString(b) => std::str::from_utf8(&b).ok().and_then(|s| s.parse().ok()),
            _ => None,
        };
        let key = Self::timeout_key(&spec.name);
        let held = match self.read(&["ZCARD", &key]) {
            Value::Int(n) => n,
            _ => 0,
        };
        let now = self.server_ms().unwrap_or(0);
        let after = format!("({now}");
        let live = match self.read(&["ZRANGEBYSCORE", &key, &after, "+inf"]) {
            Value::Array(ids) => ids
                .iter()
                .filter_map(|v| match v {
                    Value::BulkString(b) => Some(hex_id(b)),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        Seen {
            counter,
            held,
            live,
        }
    }

    /// The ids of permits that are still live in Redis: (semaphore, id,
    /// client `c<n>` or `?` when the workload never held it, the hold's
    /// owner).
    pub(crate) fn permits_left_in_redis(&self) -> Vec<(String, String, String, String)> {
        let specs = self.inner().sem.specs.clone();
        let mut left = Vec::new();
        for spec in specs.iter().filter(|s| s.expirable) {
            for id in self.seen(spec).live {
                let (client, owner) = self
                    .inner()
                    .sem
                    .ids
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| ("?".to_owned(), id.clone()));
                left.push((spec.name.clone(), id, client, owner));
            }
        }
        left
    }

    /// The end of a semaphore seed, leases past and the network calm:
    /// no permit id is live any more, and every permit is accounted for:
    /// counter + ids = N (the expirable kind), counter = N (the plain
    /// kind: only when no client crashed, no restart lost the counter and
    /// no release failed, since its permits are nobody's).
    pub(crate) fn check_conservation(&self, crashed: bool) {
        let (specs, restarted, failures, there) = {
            let inner = self.inner();
            let last_restart = inner.restarts.iter().map(|(at, _)| *at).max();
            // the semaphores whose counter was seen there since the last
            // restart: it must be there at the end
            let there: Vec<String> = inner
                .sem
                .there
                .iter()
                .filter(|(_, at)| last_restart.is_none_or(|r| **at > r))
                .map(|(sem, _)| sem.clone())
                .collect();
            (
                inner.sem.specs.clone(),
                !inner.restarts.is_empty(),
                // a plain permit's release that failed (its owner: none)
                inner.release_failed.contains("") || !inner.hook_called.is_empty(),
                there,
            )
        };
        for spec in &specs {
            let seen = self.seen(spec);
            let n = i64::from(spec.permits);
            self.event(format!(
                "at the end {}: counter {:?}, ids {} ({} live)",
                spec.name,
                seen.counter,
                seen.held,
                seen.live.len()
            ));
            if !seen.live.is_empty() {
                self.violation(
                    Invariant::EveryHoldEnds,
                    format!(
                        "permits of {} still live a lease after the end: {:?}",
                        spec.name, seen.live
                    ),
                );
            }
            if seen.counter.is_none() && !there.contains(&spec.name) {
                // never seen set (every try_set_permits failed), or not
                // set again after a restart lost it
                self.event(format!(
                    "{} not set since the start or the last restart",
                    spec.name
                ));
            } else if spec.expirable {
                if seen.counter.unwrap_or(0) + seen.held != n {
                    self.violation(
                        Invariant::PermitsConserved,
                        format!(
                            "{}: counter {:?} + {} permit ids != N = {n}",
                            spec.name, seen.counter, seen.held
                        ),
                    );
                }
            } else if crashed || restarted || failures {
                self.event(format!(
                    "{}: the plain kind's count is not checked (crashed {crashed}, restarted {restarted}, a release failed {failures})",
                    spec.name
                ));
            } else if seen.counter != Some(n) {
                self.violation(
                    Invariant::PermitsConserved,
                    format!("{}: counter {:?} != N = {n}", spec.name, seen.counter),
                );
            }
        }
    }

    /// Valid permits of tasks whose names start with `prefix`.
    pub(crate) fn valid_permits_of(&self, prefix: &str) -> Vec<String> {
        self.inner()
            .sem
            .inside
            .iter()
            .filter(|e| e.who.starts_with(prefix) && e.permits.is_held())
            .map(|e| format!("{}'s {} permit(s) of {}", e.who, e.n, e.sem))
            .collect()
    }
}

/// A permit id's 16 raw bytes (as stored in the timeout ZSET) from its 32
/// hex digits (as the guard shows it); `None` for anything else.
fn raw_id(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 32 {
        return None;
    }
    (0..16)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// The hex form of a member of the timeout ZSET (lower case, as guards
/// show ids).
fn hex_id(raw: &[u8]) -> String {
    raw.iter().map(|b| format!("{b:02x}")).collect()
}
