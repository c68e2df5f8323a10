//! Conformance of lock-core's in-memory Redis (feature `memory`) with a
//! real redis-server: one table of cases — every reply shape of every
//! protocol script, and the plain commands the library sends — each run
//! step by step against a fresh in-memory server and a real redis-server
//! (one per test, emptied between cases: `FLUSHALL`, `SCRIPT FLUSH`, and
//! each case on its own lock name, so no subscriber of an earlier case is
//! counted). Every reply is compared (values, and for errors the kind,
//! code and text), then the resulting keyspace (keys, types, values, TTLs
//! as "none" or "within a tolerance"), and what each subscriber received.
//!
//! Values drawn from the servers' clocks are compared by rule: fencing
//! tokens are positive, strictly growing within a case on each server and
//! within a minute of each other; microsecond timestamps in the keyspace
//! (a stored token, a waiter's score) compare as "a clock reading", and
//! millisecond ones (a permit's expiry, a semaphore waiter's arrival) as
//! whole seconds from now; `TIME` within seconds; TTLs, a refused
//! semaphore acquire's time to the nearest expiry and a permit's expiry
//! read by `ZSCORE` within `TTL_TOLERANCE_MS`.
//!
//! Not in the table, by design (see lock-core's `memory` module doc): what
//! the in-memory server refuses with an error naming it (commands, options
//! and Lua libraries — `cjson`, `bit`, `struct`, `cmsgpack` — it does not
//! have, and commands real Redis does not know either: its message differs
//! from Redis' "unknown command"), and `WAIT` for replicas with a time-out
//! (0 at once instead of 0 after the time-out).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::__private::MemoryServerForTests;
use redis::{RedisResult, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::support;

mod election;
mod fair;
mod lists;
mod multi;
mod semaphore;

const LEASE: &str = "30000";
const RETENTION: &str = "60000";
const LATCH_MS: &str = "1000";
const TTL_TOLERANCE_MS: i64 = 1_000;

/// The protocol's scripts, by name, with their sources.
const SCRIPTS: [(&str, &str); 25] = [
    (
        "acquire",
        include_str!("../../../lock-core/src/protocol/acquire.lua"),
    ),
    (
        "release",
        include_str!("../../../lock-core/src/protocol/release.lua"),
    ),
    (
        "handoff",
        include_str!("../../../lock-core/src/protocol/handoff.lua"),
    ),
    (
        "cancel",
        include_str!("../../../lock-core/src/protocol/cancel.lua"),
    ),
    (
        "renew",
        include_str!("../../../lock-core/src/protocol/renew.lua"),
    ),
    (
        "confirm",
        include_str!("../../../lock-core/src/protocol/confirm.lua"),
    ),
    (
        "force_unlock",
        include_str!("../../../lock-core/src/protocol/force_unlock.lua"),
    ),
    (
        "rw_acquire",
        include_str!("../../../lock-core/src/protocol/rw_acquire.lua"),
    ),
    (
        "rw_release",
        include_str!("../../../lock-core/src/protocol/rw_release.lua"),
    ),
    (
        "rw_cancel",
        include_str!("../../../lock-core/src/protocol/rw_cancel.lua"),
    ),
    (
        "sem_acquire",
        include_str!("../../../lock-core/src/protocol/sem_acquire.lua"),
    ),
    (
        "sem_add",
        include_str!("../../../lock-core/src/protocol/sem_add.lua"),
    ),
    (
        "sem_release",
        include_str!("../../../lock-core/src/protocol/sem_release.lua"),
    ),
    (
        "sem_cancel",
        include_str!("../../../lock-core/src/protocol/sem_cancel.lua"),
    ),
    (
        "sem_leave",
        include_str!("../../../lock-core/src/protocol/sem_leave.lua"),
    ),
    (
        "sem_set",
        include_str!("../../../lock-core/src/protocol/sem_set.lua"),
    ),
    (
        "latch_count_down",
        include_str!("../../../lock-core/src/protocol/latch_count_down.lua"),
    ),
    (
        "leader_record",
        include_str!("../../../lock-core/src/protocol/leader_record.lua"),
    ),
    (
        "leader_read",
        include_str!("../../../lock-core/src/protocol/leader_read.lua"),
    ),
    (
        "multi_acquire",
        include_str!("../../../lock-core/src/protocol/multi_acquire.lua"),
    ),
    (
        "rw_leave",
        include_str!("../../../lock-core/src/protocol/rw_leave.lua"),
    ),
    (
        "fair_acquire",
        include_str!("../../../lock-core/src/protocol/fair_acquire.lua"),
    ),
    (
        "fair_release",
        include_str!("../../../lock-core/src/protocol/fair_release.lua"),
    ),
    (
        "fair_cancel",
        include_str!("../../../lock-core/src/protocol/fair_cancel.lua"),
    ),
    (
        "fair_force_unlock",
        include_str!("../../../lock-core/src/protocol/fair_force_unlock.lua"),
    ),
];

fn sha(script: &str) -> String {
    let source = SCRIPTS
        .iter()
        .find(|(name, _)| *name == script)
        .map(|(_, source)| *source)
        .unwrap_or_else(|| panic!("no script {script}"));
    redis::Script::new(source).get_hash().to_string()
}

/// How two replies of one step are compared.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rule {
    /// Equal: values, or error kind, code and text.
    Same,
    /// `{kind, token}`: kinds equal; each token positive, above the
    /// previous token of its server in this case, within a minute of the
    /// other's.
    Token,
    /// `{kind, token}` repeating the last token of each server.
    SameToken,
    /// An integer TTL: equal when negative, else within the tolerance.
    Ttl,
    /// `{kind, pttl}`: kinds equal, the PTTLs as [`Rule::Ttl`].
    PairTtl,
    /// `TIME`: two numbers, the seconds within 5 of each other.
    Time,
    /// An array whose items are equal but the last, an integer time in ms
    /// (a refused acquire's wait for the nearest permit expiry) compared
    /// as [`Rule::Ttl`].
    LastTtl,
    /// A reading of the server clock in ms (a permit's expiry by
    /// `ZSCORE`): numbers within the TTL tolerance.
    ClockMs,
    /// A multi-acquire's reply: `{1, token...}` (as many tokens on each
    /// server, each as [`Rule::Token`] against the last step's, the
    /// running token then their largest), `{0, pttl, i}` (`i` equal, the
    /// PTTLs as [`Rule::Ttl`]), else equal.
    Multi,
}

enum Step {
    /// One command and how its replies compare.
    Cmd(Vec<String>, Rule),
    /// A new subscriber on each server (`sharded`: `SSUBSCRIBE`).
    Subscribe { channel: String, sharded: bool },
    /// The messages each subscriber received since the last check.
    Messages,
    /// A whole `SCAN` with these options: the sets of keys compared.
    ScanAll(Vec<String>),
}

fn cmd(args: &[&str]) -> Step {
    Step::Cmd(args.iter().map(|a| a.to_string()).collect(), Rule::Same)
}

fn ruled(rule: Rule, args: &[&str]) -> Step {
    Step::Cmd(args.iter().map(|a| a.to_string()).collect(), rule)
}

/// `EVALSHA` of a protocol script.
fn script(name: &str, keys: &[&str], args: &[&str]) -> Vec<String> {
    let mut out = vec!["EVALSHA".to_string(), sha(name), keys.len().to_string()];
    out.extend(keys.iter().map(|k| k.to_string()));
    out.extend(args.iter().map(|a| a.to_string()));
    out
}

/// The Redis names of one lock (Redisson's layout, lock-core's helpers).
struct K {
    /// The read-write lock's: its channel, the readers' timeout-key
    /// prefix, the waiting writer's mark.
    rw_channel: String,
    rw_prefix: String,
    writer: String,
    lock: String,
    token: String,
    channel: String,
    queue: String,
    turn: String,
    latch_prefix: String,
}

impl K {
    fn new(name: &str) -> K {
        K {
            rw_channel: format!("redisson_rwlock:{{{name}}}"),
            rw_prefix: format!("{{{name}}}"),
            writer: format!("lockcore_writer:{{{name}}}"),
            lock: name.to_string(),
            token: format!("redisson_lock_token:{{{name}}}"),
            channel: format!("redisson_lock__channel:{{{name}}}"),
            queue: format!("lockcore_waiters:{{{name}}}"),
            turn: format!("lockcore_turn:{{{name}}}"),
            latch_prefix: format!("redisson_unlock_latch:{{{name}}}:"),
        }
    }

    fn latch(&self, id: &str) -> String {
        format!("{}{id}", self.latch_prefix)
    }

    /// acquire.lua: `mode` 'new' or 're', `line` '0', '1' or '2'.
    fn acquire(
        &self,
        owner: &str,
        mode: &str,
        client: &str,
        line: &str,
        lease: &str,
    ) -> Vec<String> {
        let latch = self.latch(&format!("a-{owner}"));
        script(
            "acquire",
            &[&self.lock, &self.token, &latch, &self.queue, &self.turn],
            &[lease, owner, mode, RETENTION, LATCH_MS, client, line],
        )
    }

    fn new_hold(&self, owner: &str, client: &str) -> Vec<String> {
        self.acquire(owner, "new", client, "0", LEASE)
    }

    fn release(&self, owner: &str, counts: &str, client: &str, publish: &str) -> Vec<String> {
        script(
            "release",
            &[&self.lock, &self.channel, &self.queue, &self.turn],
            &[owner, LEASE, "0", client, "20", counts, publish],
        )
    }

    fn handoff(&self, request: &str, owner: &str, next: &str) -> Vec<String> {
        let latch = self.latch(request);
        let next_latch = self.latch(next);
        script(
            "handoff",
            &[&self.lock, &self.token, &latch, &next_latch, &self.channel],
            &[owner, LATCH_MS, next, LEASE, RETENTION, "0", "publish"],
        )
    }

    fn cancel(&self, latch: &str, owner: &str, mode: &str) -> Vec<String> {
        script(
            "cancel",
            &[&self.lock, &self.channel, latch],
            &[owner, mode, "0", LATCH_MS, "publish"],
        )
    }

    /// rw_acquire.lua: `mode` 'read', 'write', 'read-re' or 'write-re'.
    fn rw_acquire(
        &self,
        owner: &str,
        mode: &str,
        line: &str,
        lease: &str,
        downgrade_from: &str,
    ) -> Vec<String> {
        let latch = self.latch(&format!("a-{owner}-{mode}"));
        let client = owner.split(':').next().unwrap_or(owner);
        script(
            "rw_acquire",
            &[
                &self.lock,
                &self.token,
                &latch,
                &self.queue,
                &self.turn,
                &self.writer,
            ],
            &[
                lease,
                owner,
                mode,
                RETENTION,
                LATCH_MS,
                client,
                line,
                &self.rw_prefix,
                downgrade_from,
                "2000",
            ],
        )
    }

    fn rw_release(&self, owner: &str, side: &str, counts: &str) -> Vec<String> {
        let client = owner.split(':').next().unwrap_or(owner);
        script(
            "rw_release",
            &[&self.lock, &self.rw_channel, &self.queue, &self.turn],
            &[
                owner,
                LEASE,
                side,
                client,
                "20",
                counts,
                "publish",
                &self.rw_prefix,
            ],
        )
    }

    fn rw_cancel(&self, latch: &str, owner: &str, mode: &str, side: &str) -> Vec<String> {
        script(
            "rw_cancel",
            &[&self.lock, &self.rw_channel, latch],
            &[owner, mode, side, LATCH_MS, "publish", &self.rw_prefix],
        )
    }

    fn timeout_key(&self, owner: &str, n: u32) -> String {
        format!("{}:{owner}:rwlock_timeout:{n}", self.rw_prefix)
    }

    fn force_unlock(&self, publish: &str) -> Vec<String> {
        script(
            "force_unlock",
            &[&self.lock, &self.channel],
            &["0", publish],
        )
    }
}

/// `EVAL` of the grouped form of `script` (group commit, see
/// `protocol/group.rs`) carrying `elements`, each an `EVALSHA` of it.
fn grouped(script: &str, elements: Vec<Vec<String>>) -> Step {
    let source = SCRIPTS
        .iter()
        .find(|(name, _)| *name == script)
        .map(|(_, source)| *source)
        .unwrap_or_else(|| panic!("no script {script}"));
    let source = format!(
        "local function one(KEYS, ARGV)\n{source}{}",
        include_str!("../../../lock-core/src/protocol/group.lua")
    );
    let (mut keys, mut counts, mut args) = (Vec::new(), Vec::new(), Vec::new());
    for e in &elements {
        let nkeys: usize = e[2].parse().expect("numkeys");
        keys.extend(e[3..3 + nkeys].iter().map(String::as_str));
        args.extend(e[3 + nkeys..].iter().map(String::as_str));
        counts.push(nkeys.to_string());
        counts.push((e.len() - 3 - nkeys).to_string());
    }
    let n = elements.len().to_string();
    let mut all = vec![n.as_str()];
    all.extend(counts.iter().map(String::as_str));
    all.extend(args);
    eval(&source, &keys, &all)
}

/// `EVAL` of an inline script with its keys and arguments.
fn eval(source: &str, keys: &[&str], args: &[&str]) -> Step {
    let mut out = vec![
        "EVAL".to_string(),
        source.to_string(),
        keys.len().to_string(),
    ];
    out.extend(keys.iter().map(|k| k.to_string()));
    out.extend(args.iter().map(|a| a.to_string()));
    Step::Cmd(out, Rule::Same)
}

fn step(args: Vec<String>) -> Step {
    Step::Cmd(args, Rule::Same)
}

fn step_as(rule: Rule, args: Vec<String>) -> Step {
    Step::Cmd(args, rule)
}

/// The table: (name, steps), each case on its own lock name.
fn cases() -> Vec<(&'static str, Vec<Step>)> {
    let mut n = 0;
    let mut k = || {
        n += 1;
        K::new(&format!("conf:{n}"))
    };
    let mut table: Vec<(&'static str, Vec<Step>)> = Vec::new();

    // ---- acquire.lua: every reply shape ----
    let a = k();
    table.push((
        "acquire: a free lock → {1, token}",
        vec![
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            cmd(&["HGETALL", &a.lock]),
            ruled(Rule::Ttl, &["PTTL", &a.lock]),
        ],
    ));
    let a = k();
    table.push((
        "acquire: re-entry → {2, 0}; of a gone hold → {-1, 0}",
        vec![
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step(a.acquire("c1:1", "re", "c1", "0", LEASE)),
            step(a.acquire("c1:9", "re", "c1", "0", LEASE)),
            cmd(&["HGET", &a.lock, "c1:1"]),
        ],
    ));
    let a = k();
    table.push((
        "acquire: re-entry never shortens a longer lease",
        vec![
            step_as(Rule::Token, a.acquire("c1:1", "new", "c1", "0", "100000")),
            step(a.acquire("c1:1", "re", "c1", "0", "5000")),
            ruled(Rule::Ttl, &["PTTL", &a.lock]),
        ],
    ));
    let a = k();
    table.push((
        "acquire: a second copy of one new attempt (run twice) → {1, token} again, count 1",
        vec![
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            cmd(&["HGETALL", &a.lock]),
            ruled(Rule::Ttl, &["PTTL", &a.lock]),
        ],
    ));
    let a = k();
    table.push((
        "acquire: held by another owner → {0, pttl}; a single attempt stays out of the line",
        vec![
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step_as(Rule::PairTtl, a.new_hold("c2:1", "c2")),
            cmd(&["ZCARD", &a.queue]),
        ],
    ));
    let a = k();
    table.push((
        "acquire: held; a waiting head joins the line once",
        vec![
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step_as(Rule::PairTtl, a.acquire("c2:1", "new", "c2", "1", LEASE)),
            step_as(Rule::PairTtl, a.acquire("c2:2", "new", "c2", "1", LEASE)),
            step_as(Rule::PairTtl, a.acquire("c3:1", "new", "c3", "1", LEASE)),
            cmd(&["ZRANGE", &a.queue, "0", "-1"]),
            ruled(Rule::Ttl, &["PTTL", &a.queue]),
        ],
    ));
    let a = k();
    table.push((
        "acquire: a cancelled request → {-2, 0}, new and re-entry",
        vec![
            cmd(&["SET", &a.latch("a-c1:1"), "x", "PX", "1000"]),
            step(a.new_hold("c1:1", "c1")),
            step_as(Rule::Token, a.new_hold("c1:2", "c1")),
            cmd(&["SET", &a.latch("a-c1:2"), "x", "PX", "1000"]),
            step(a.acquire("c1:2", "re", "c1", "0", LEASE)),
            cmd(&["HGET", &a.lock, "c1:2"]),
        ],
    ));
    let a = k();
    table.push((
        "acquire: the turn of another client → {0, pttl of the turn}",
        vec![
            cmd(&["SET", &a.turn, "c9", "PX", "5000"]),
            step_as(Rule::PairTtl, a.acquire("c1:1", "new", "c1", "1", LEASE)),
            cmd(&["ZRANGE", &a.queue, "0", "-1"]),
        ],
    ));
    let a = k();
    table.push((
        "acquire: its own turn, place kept: granted, the turn and its place go",
        vec![
            cmd(&["SET", &a.turn, "c1", "PX", "5000"]),
            cmd(&["ZADD", &a.queue, "1", "c1", "2", "c2"]),
            step_as(Rule::Token, a.acquire("c1:1", "new", "c1", "2", LEASE)),
            cmd(&["EXISTS", &a.turn]),
            cmd(&["ZRANGE", &a.queue, "0", "-1", "WITHSCORES"]),
        ],
    ));
    let a = k();
    table.push((
        "acquire: a last token ahead of the clock → last + 1",
        vec![
            cmd(&["SET", &a.token, "99999999999999999"]),
            step(a.new_hold("c1:1", "c1")),
            cmd(&["GET", &a.token]),
        ],
    ));
    let a = k();
    table.push((
        "acquire: tokens grow strictly across holds",
        vec![
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step(a.release("c1:1", "1", "c1", "publish")),
            step_as(Rule::Token, a.new_hold("c1:2", "c1")),
            step(a.release("c1:2", "1", "c1", "publish")),
            step_as(Rule::Token, a.new_hold("c1:3", "c1")),
        ],
    ));
    let a = k();
    table.push((
        "acquire: a token key of another type → WRONGTYPE, no hold left",
        vec![
            cmd(&["HSET", &a.token, "not", "a string"]),
            step(a.new_hold("c1:1", "c1")),
            cmd(&["EXISTS", &a.lock]),
        ],
    ));
    let a = k();
    table.push((
        "acquire: a lock key of another type → {0, -1}; re-entry → WRONGTYPE",
        vec![
            cmd(&["SET", &a.lock, "x"]),
            step(a.new_hold("c1:1", "c1")),
            step(a.acquire("c1:1", "re", "c1", "0", LEASE)),
        ],
    ));

    // ---- group commit: acquire.lua and release.lua grouped ----
    let (a, b, c) = (k(), k(), k());
    table.push((
        "grouped acquire: elements in order, each its own reply; an element's error stays its own",
        vec![
            cmd(&["HSET", &a.token, "not", "a string"]),
            cmd(&["SET", &c.lock, "x"]),
            step(b.acquire("c1:2", "re", "c1", "0", LEASE)),
            grouped(
                "acquire",
                vec![
                    a.new_hold("c1:1", "c1"),
                    b.acquire("c1:9", "re", "c1", "0", LEASE),
                    c.new_hold("c1:3", "c1"),
                ],
            ),
            cmd(&["EXISTS", &a.lock, &b.lock]),
        ],
    ));
    let (a, b) = (k(), k());
    table.push((
        "grouped release: not held → nil; an element's refused count is its own",
        vec![
            cmd(&["HSET", &b.lock, "c1:2", "3"]),
            grouped(
                "release",
                vec![
                    a.release("c1:1", "1", "c1", "publish"),
                    b.release("c1:2", "3", "c1", "publish"),
                    b.release("c1:2", "3", "c1", "publish"),
                ],
            ),
            cmd(&["HGET", &b.lock, "c1:2"]),
        ],
    ));

    // ---- release.lua ----
    let a = k();
    table.push((
        "release: not held → nil",
        vec![step(a.release("c1:1", "1", "c1", "publish"))],
    ));
    let a = k();
    table.push((
        "release: one of two counts → 0; a copy changes nothing; the lease is kept",
        vec![
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step(a.acquire("c1:1", "re", "c1", "0", LEASE)),
            cmd(&["PEXPIRE", &a.lock, "10000"]),
            step(a.release("c1:1", "2", "c1", "publish")),
            step(a.release("c1:1", "2", "c1", "publish")),
            cmd(&["HGET", &a.lock, "c1:1"]),
            ruled(Rule::Ttl, &["PTTL", &a.lock]),
        ],
    ));
    let a = k();
    table.push((
        "release: the last count, nobody listening → 1",
        vec![
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step(a.acquire("c1:1", "re", "c1", "0", LEASE)),
            step(a.release("c1:1", "1", "c1", "publish")),
            cmd(&["EXISTS", &a.lock]),
        ],
    ));
    let a = k();
    table.push((
        "release: the last count, two subscribers → 3; the turn to the longest waiter",
        vec![
            Step::Subscribe {
                channel: a.channel.clone(),
                sharded: false,
            },
            Step::Subscribe {
                channel: a.channel.clone(),
                sharded: false,
            },
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            cmd(&["ZADD", &a.queue, "1", "c1", "2", "c2", "3", "c3"]),
            step(a.release("c1:1", "1", "c1", "publish")),
            Step::Messages,
            cmd(&["GET", &a.turn]),
            ruled(Rule::Ttl, &["PTTL", &a.turn]),
            cmd(&["ZRANGE", &a.queue, "0", "-1"]),
        ],
    ));
    let a = k();
    table.push((
        "release: sharded pub/sub (SPUBLISH reaches SSUBSCRIBE only)",
        vec![
            Step::Subscribe {
                channel: a.channel.clone(),
                sharded: true,
            },
            Step::Subscribe {
                channel: a.channel.clone(),
                sharded: false,
            },
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step(a.release("c1:1", "1", "c1", "spublish")),
            Step::Messages,
        ],
    ));
    let a = k();
    table.push((
        "release: a refused publish → the lock freed, the refusal as text",
        vec![
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step(a.release("c1:1", "1", "c1", "pttl")),
            cmd(&["EXISTS", &a.lock]),
        ],
    ));

    // ---- handoff.lua ----
    let a = k();
    table.push((
        "handoff: not held → {-1, 0}; given → {3, token}; a retry → the same",
        vec![
            step(a.handoff("r0", "c1:1", "c1:2")),
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step_as(Rule::Token, a.handoff("r1", "c1:1", "c1:2")),
            cmd(&["HGETALL", &a.lock]),
            ruled(Rule::Ttl, &["PTTL", &a.lock]),
            step_as(Rule::SameToken, a.handoff("r1", "c1:1", "c1:2")),
        ],
    ));
    let a = k();
    table.push((
        "handoff: the next owner's hand-off cancelled → {4, 0}, the lock freed",
        vec![
            Step::Subscribe {
                channel: a.channel.clone(),
                sharded: false,
            },
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            cmd(&["SET", &a.latch("c1:2"), "x", "PX", "1000"]),
            step(a.handoff("r1", "c1:1", "c1:2")),
            Step::Messages,
            cmd(&["EXISTS", &a.lock]),
            step(a.handoff("r1", "c1:1", "c1:2")),
        ],
    ));

    // ---- cancel.lua ----
    let a = k();
    let latch = a.latch("a-c1:1");
    table.push((
        "cancel: a new hold never applied → 0, and a late copy is refused",
        vec![
            step(a.cancel(&latch, "c1:1", "new")),
            step(a.new_hold("c1:1", "c1")),
            cmd(&["GET", &latch]),
        ],
    ));
    let a = k();
    let latch = a.latch("a-c1:1");
    table.push((
        "cancel: a new hold applied → 1, waiters told",
        vec![
            Step::Subscribe {
                channel: a.channel.clone(),
                sharded: false,
            },
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step(a.cancel(&latch, "c1:1", "new")),
            Step::Messages,
            cmd(&["EXISTS", &a.lock]),
        ],
    ));
    let a = k();
    let latch = a.latch("a-c1:1");
    table.push((
        "cancel: a re-entry applied → 1 (one count); never applied → 0",
        vec![
            step_as(Rule::Token, a.new_hold("c1:0", "c1")),
            step(a.acquire("c1:0", "re", "c1", "0", LEASE)),
            step(a.cancel(&a.latch("a-c1:0"), "c1:0", "re")),
            cmd(&["HGET", &a.lock, "c1:0"]),
            step(a.cancel(&latch, "c1:0", "re")),
            cmd(&["HGET", &a.lock, "c1:0"]),
        ],
    ));

    let a = k();
    table.push((
        "cancel: a re-entry applied on a count one short → 1, the hold stays at count 1",
        vec![
            step_as(Rule::Token, a.new_hold("c1:0", "c1")),
            step(a.acquire("c1:0", "re", "c1", "0", LEASE)),
            // a late release copy took a count the client still counts
            cmd(&["HINCRBY", &a.lock, "c1:0", "-1"]),
            step(a.cancel(&a.latch("a-c1:0"), "c1:0", "re")),
            cmd(&["HGET", &a.lock, "c1:0"]),
            ruled(Rule::Ttl, &["PTTL", &a.lock]),
        ],
    ));

    // ---- renew.lua, confirm.lua, force_unlock.lua ----
    let (a, b) = (k(), k());
    table.push((
        "renew: per lock '1' renewed, '0' not held; a longer lease is kept",
        vec![
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step_as(Rule::Token, b.acquire("c1:2", "new", "c1", "0", "100000")),
            cmd(&["PEXPIRE", &a.lock, "10"]),
            step(script(
                "renew",
                &[&a.lock, &b.lock, "conf:none"],
                &[LEASE, "c1:1", "c1:2", "c1:3"],
            )),
            ruled(Rule::Ttl, &["PTTL", &a.lock]),
            ruled(Rule::Ttl, &["PTTL", &b.lock]),
            step(script(
                "renew",
                &[&a.lock, &b.lock],
                &[LEASE, "c9:9", "c1:1"],
            )),
        ],
    ));
    let a = k();
    table.push((
        "confirm: held → 1 (an unchanged count written), gone → 0",
        vec![
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step(script("confirm", &[&a.lock], &["c1:1"])),
            step(script("confirm", &[&a.lock], &["c1:2"])),
            cmd(&["HGETALL", &a.lock]),
        ],
    ));
    let (a, b) = (k(), k());
    table.push((
        "force_unlock: deleted → 1 (waiters told), none → 0, refused publish → text",
        vec![
            Step::Subscribe {
                channel: a.channel.clone(),
                sharded: false,
            },
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step(a.force_unlock("publish")),
            Step::Messages,
            step(a.force_unlock("publish")),
            step_as(Rule::Token, b.new_hold("c1:1", "c1")),
            step(b.force_unlock("pttl")),
            cmd(&["EXISTS", &b.lock]),
        ],
    ));

    // ---- the plain commands the library sends ----
    let a = k();
    table.push((
        "library commands: status reads, waiters, server checks",
        vec![
            cmd(&["PING"]),
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            cmd(&["EXISTS", &a.lock]),
            cmd(&["HGET", &a.lock, "c1:1"]),
            cmd(&["HGET", &a.lock, "c1:2"]),
            ruled(Rule::Ttl, &["PTTL", &a.lock]),
            cmd(&["TYPE", &a.lock]),
            cmd(&["TYPE", &a.token]),
            cmd(&["TYPE", "conf:none"]),
            cmd(&["HGETALL", &a.lock]),
            cmd(&["HGETALL", "conf:none"]),
            cmd(&["HLEN", &a.lock]),
            cmd(&["ZADD", &a.queue, "NX", "5", "c2"]),
            cmd(&["ZREM", &a.queue, "c2"]),
            cmd(&["ZREM", &a.queue, "c2"]),
            cmd(&["CONFIG", "GET", "maxmemory-policy"]),
            cmd(&["ROLE"]),
            cmd(&["WAIT", "0", "0"]),
            cmd(&["WAIT", "1", "10"]),
            ruled(Rule::Time, &["TIME"]),
            cmd(&["PUBSUB", "SHARDNUMSUB"]),
            Step::Subscribe {
                channel: a.channel.clone(),
                sharded: false,
            },
            cmd(&["PUBSUB", "NUMSUB", &a.channel, "conf:nobody"]),
            cmd(&["PUBLISH", &a.channel, "0"]),
            cmd(&["SPUBLISH", &a.channel, "0"]),
            Step::Messages,
        ],
    ));
    let mut scan = vec![];
    for i in 0..23 {
        scan.push(cmd(&["HSET", &format!("conf:scan:{i:02}"), "c1:1", "1"]));
    }
    scan.push(cmd(&["SET", "conf:scan:string", "x"]));
    scan.push(cmd(&["ZADD", "conf:scan:zset", "1", "m"]));
    scan.push(cmd(&["HSET", "other:hash", "f", "v"]));
    scan.push(Step::ScanAll(vec![]));
    scan.push(Step::ScanAll(
        ["MATCH", "conf:scan:*", "COUNT", "5", "TYPE", "hash"]
            .map(String::from)
            .to_vec(),
    ));
    scan.push(Step::ScanAll(
        ["MATCH", "conf:scan:?[0-1]", "COUNT", "100"]
            .map(String::from)
            .to_vec(),
    ));
    scan.push(Step::ScanAll(["TYPE", "zset"].map(String::from).to_vec()));
    scan.push(cmd(&["SCAN", "0", "COUNT", "0"]));
    scan.push(cmd(&["SCAN", "x"]));
    scan.push(cmd(&["SCAN", "0", "MATCH"]));
    scan.push(cmd(&["DBSIZE"]));
    table.push((
        "SCAN: MATCH, COUNT, TYPE (as inspect's scan_locks sends it)",
        scan,
    ));
    table.push((
        "strings: SET options, counters and their errors",
        vec![
            cmd(&["SET", "conf:s", "1"]),
            cmd(&["SET", "conf:s", "2", "NX"]),
            cmd(&["SET", "conf:s", "3", "XX", "GET"]),
            cmd(&["SET", "conf:none", "1", "XX"]),
            cmd(&["SET", "conf:none", "1", "GET"]),
            cmd(&["SET", "conf:s", "1", "NX", "XX"]),
            cmd(&["SET", "conf:s", "1", "PX", "0"]),
            cmd(&["SET", "conf:s", "1", "EX", "x"]),
            cmd(&["SET", "conf:s", "1", "PX"]),
            cmd(&["SET", "conf:t", "1", "PX", "5000"]),
            ruled(Rule::Ttl, &["PTTL", "conf:t"]),
            cmd(&["SET", "conf:t", "2", "KEEPTTL"]),
            ruled(Rule::Ttl, &["PTTL", "conf:t"]),
            cmd(&["SET", "conf:t", "3", "EX", "100"]),
            ruled(Rule::Ttl, &["TTL", "conf:t"]),
            cmd(&["SET", "conf:t", "4"]),
            cmd(&["PTTL", "conf:t"]),
            cmd(&["GET", "conf:s"]),
            cmd(&["GET", "conf:none"]),
            cmd(&["INCR", "conf:s"]),
            cmd(&["DECR", "conf:s"]),
            cmd(&["INCRBY", "conf:s", "10"]),
            cmd(&["DECRBY", "conf:s", "100"]),
            cmd(&["INCRBY", "conf:s", "x"]),
            cmd(&["DECR", "conf:new"]),
            cmd(&["SET", "conf:big", "9223372036854775807"]),
            cmd(&["INCR", "conf:big"]),
            cmd(&["SET", "conf:word", "abc"]),
            cmd(&["INCR", "conf:word"]),
            cmd(&["SET", "conf:lead", "01"]),
            cmd(&["INCR", "conf:lead"]),
            cmd(&["HSET", "conf:h", "f", "1"]),
            cmd(&["GET", "conf:h"]),
            cmd(&["INCR", "conf:h"]),
            cmd(&["SET", "conf:h", "x", "GET"]),
            cmd(&["SET", "conf:h", "x"]),
            cmd(&["GET"]),
            cmd(&["DEL", "conf:s", "conf:h", "conf:none"]),
            cmd(&["EXISTS", "conf:t", "conf:t", "conf:none"]),
        ],
    ));
    table.push((
        "hashes: counts and errors",
        vec![
            cmd(&["HSET", "conf:h", "a", "1", "b", "2"]),
            cmd(&["HSET", "conf:h", "a", "5", "c", "3"]),
            cmd(&["HSET", "conf:h", "a", "1", "b"]),
            cmd(&["HINCRBY", "conf:h", "a", "-5"]),
            cmd(&["HINCRBY", "conf:h", "z", "7"]),
            cmd(&["HINCRBY", "conf:h", "a", "x"]),
            cmd(&["HSET", "conf:h", "t", "text"]),
            cmd(&["HINCRBY", "conf:h", "t", "1"]),
            cmd(&["HSET", "conf:h", "m", "9223372036854775807"]),
            cmd(&["HINCRBY", "conf:h", "m", "1"]),
            cmd(&["HGETALL", "conf:h"]),
            cmd(&["HEXISTS", "conf:h", "a"]),
            cmd(&["HEXISTS", "conf:h", "nope"]),
            cmd(&["HDEL", "conf:h", "a", "b", "nope"]),
            cmd(&["HLEN", "conf:h"]),
            cmd(&["HDEL", "conf:h", "c", "z", "t", "m"]),
            cmd(&["EXISTS", "conf:h"]),
            cmd(&["SET", "conf:s", "x"]),
            cmd(&["HGET", "conf:s", "f"]),
            cmd(&["HSET", "conf:s", "f", "v"]),
            cmd(&["HLEN", "conf:s"]),
        ],
    ));
    table.push((
        "expiry: PEXPIRE options, deletion, TTL rounding",
        vec![
            cmd(&["SET", "conf:e", "v"]),
            cmd(&["PTTL", "conf:e"]),
            cmd(&["TTL", "conf:e"]),
            cmd(&["PTTL", "conf:none"]),
            cmd(&["TTL", "conf:none"]),
            cmd(&["PEXPIRE", "conf:e", "5000", "XX"]),
            cmd(&["PEXPIRE", "conf:e", "5000", "NX"]),
            cmd(&["PEXPIRE", "conf:e", "9000", "NX"]),
            cmd(&["PEXPIRE", "conf:e", "4000", "GT"]),
            cmd(&["PEXPIRE", "conf:e", "8000", "GT"]),
            cmd(&["PEXPIRE", "conf:e", "9000", "LT"]),
            cmd(&["PEXPIRE", "conf:e", "3000", "LT"]),
            ruled(Rule::Ttl, &["PTTL", "conf:e"]),
            ruled(Rule::Ttl, &["TTL", "conf:e"]),
            cmd(&["PEXPIRE", "conf:e", "1", "NX", "XX"]),
            cmd(&["PEXPIRE", "conf:e", "1", "GT", "LT"]),
            cmd(&["PEXPIRE", "conf:e", "1", "SOON"]),
            cmd(&["PEXPIRE", "conf:e", "x"]),
            cmd(&["EXPIRE", "conf:e", "100"]),
            ruled(Rule::Ttl, &["PTTL", "conf:e"]),
            cmd(&["PEXPIRE", "conf:none", "100"]),
            cmd(&["PEXPIRE", "conf:e", "0"]),
            cmd(&["EXISTS", "conf:e"]),
            cmd(&["SET", "conf:f", "v"]),
            cmd(&["PEXPIRE", "conf:f", "-5"]),
            cmd(&["EXISTS", "conf:f"]),
        ],
    ));
    table.push((
        "sorted sets: ZADD options, ranges, scores",
        vec![
            cmd(&["ZADD", "conf:z", "2", "b", "1", "a", "2", "aa"]),
            cmd(&["ZADD", "conf:z", "NX", "9", "a", "3", "c"]),
            cmd(&["ZADD", "conf:z", "XX", "CH", "4", "c", "5", "new"]),
            cmd(&["ZADD", "conf:z", "GT", "CH", "1", "c", "9", "b"]),
            cmd(&["ZADD", "conf:z", "LT", "0.5", "a"]),
            cmd(&["ZADD", "conf:z", "1.5", "d", "-inf", "low", "+inf", "high"]),
            cmd(&["ZADD", "conf:z", "x", "a"]),
            cmd(&["ZADD", "conf:z", "nan", "a"]),
            cmd(&["ZADD", "conf:z", "NX", "1"]),
            cmd(&["ZADD", "conf:z", "NX", "XX", "1", "a"]),
            cmd(&["ZADD", "conf:z", "GT", "LT", "1", "a"]),
            cmd(&["ZADD", "conf:none", "XX", "1", "a"]),
            cmd(&["EXISTS", "conf:none"]),
            cmd(&["ZRANGE", "conf:z", "0", "-1", "WITHSCORES"]),
            cmd(&["ZRANGE", "conf:z", "1", "2"]),
            cmd(&["ZRANGE", "conf:z", "-2", "-1"]),
            cmd(&["ZRANGE", "conf:z", "5", "1"]),
            cmd(&["ZRANGE", "conf:z", "-100", "100"]),
            cmd(&["ZRANGE", "conf:z", "0", "x"]),
            cmd(&["ZRANGE", "conf:none", "0", "-1"]),
            cmd(&["ZSCORE", "conf:z", "d"]),
            cmd(&["ZSCORE", "conf:z", "high"]),
            cmd(&["ZSCORE", "conf:z", "nope"]),
            cmd(&["ZCARD", "conf:z"]),
            cmd(&["ZREM", "conf:z", "a", "b", "nope"]),
            cmd(&["SET", "conf:s", "x"]),
            cmd(&["ZADD", "conf:s", "1", "a"]),
            cmd(&["ZCARD", "conf:s"]),
            cmd(&["ZREM", "conf:z", "aa", "c", "d", "low", "high"]),
            cmd(&["EXISTS", "conf:z"]),
        ],
    ));
    table.push((
        "sorted sets by score: ZRANGEBYSCORE and ZRANGE BYSCORE, bounds, LIMIT, errors",
        vec![
            cmd(&[
                "ZADD",
                "conf:z",
                "1",
                "a",
                "1.5",
                "b",
                "2",
                "c",
                "922337203685477",
                "big",
                "1700000000123",
                "ms",
                "-inf",
                "low",
                "+inf",
                "high",
                "0",
                "zero",
            ]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "-inf", "+inf"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "-inf", "+inf", "WITHSCORES"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "(1", "2"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "1", "(2", "WITHSCORES"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "(-inf", "(+inf"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "(1", "(1"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "1.5", "1.5", "withscores"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "3", "1"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "-0", "0"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "1", "+inf", "LIMIT", "0", "2"]),
            cmd(&[
                "ZRANGEBYSCORE",
                "conf:z",
                "1",
                "+inf",
                "WITHSCORES",
                "LIMIT",
                "0",
                "2",
            ]),
            cmd(&[
                "ZRANGEBYSCORE",
                "conf:z",
                "(2",
                "inf",
                "LIMIT",
                "0",
                "-1",
                "WITHSCORES",
            ]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "0", "2", "LIMIT", "2", "5"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "0", "2", "LIMIT", "-1", "2"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "0", "2", "LIMIT", "1", "0"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "0", "2", "LIMIT", "99", "1"]),
            cmd(&[
                "ZRANGEBYSCORE",
                "conf:z",
                "0",
                "2",
                "limit",
                "0",
                "1",
                "LIMIT",
                "1",
                "5",
                "withscores",
                "WITHSCORES",
            ]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "-INF", "Infinity"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "1e1", "1e400"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "", "(1"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", " 2", "2"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "(", "2"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "x", "1"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "1", "nan"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "1 ", "2"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "((1", "2"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "0", "1", "LIMIT", "0"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "0", "1", "LIMIT", "x", "1"]),
            cmd(&[
                "ZRANGEBYSCORE",
                "conf:z",
                "0",
                "1",
                "LIMIT",
                "0",
                "9223372036854775808",
            ]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "x", "1", "LIMIT", "0"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "0", "1", "REV"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "0", "1", "BYSCORE"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "0", "1", "BOGUS"]),
            cmd(&["ZRANGEBYSCORE", "conf:z", "0"]),
            cmd(&["ZRANGEBYSCORE", "conf:none", "0", "1"]),
            cmd(&["ZRANGEBYSCORE", "conf:none", "x", "1"]),
            cmd(&["SET", "conf:s", "x"]),
            cmd(&["ZRANGEBYSCORE", "conf:s", "0", "1"]),
            cmd(&["ZRANGEBYSCORE", "conf:s", "x", "1"]),
            cmd(&[
                "ZRANGE",
                "conf:z",
                "(1",
                "+inf",
                "BYSCORE",
                "LIMIT",
                "1",
                "2",
                "WITHSCORES",
            ]),
            cmd(&["ZRANGE", "conf:z", "-inf", "2", "byscore"]),
            cmd(&["ZRANGE", "conf:z", "0", "1", "BYSCORE", "BYSCORE"]),
            cmd(&["ZRANGE", "conf:z", "0", "-1", "LIMIT", "1", "1"]),
            cmd(&["ZRANGE", "conf:z", "0", "-1", "LIMIT", "5", "-1"]),
            cmd(&["ZRANGE", "conf:z", "(1", "2"]),
            cmd(&["ZRANGE", "conf:z", "0", "-1", "WITHSCORES"]),
        ],
    ));
    table.push((
        "sorted sets as a semaphore keeps them: ZADD NX, XX, GT, LT; ZSCORE, ZCARD, ZREM of several",
        vec![
            cmd(&[
                "ZADD",
                "conf:q",
                "NX",
                "1700000000123",
                "p1",
                "1700000000456",
                "p2",
            ]),
            cmd(&["ZADD", "conf:q", "NX", "5", "p1", "1700000000999", "p3"]),
            cmd(&["ZADD", "conf:q", "XX", "1", "p4"]),
            cmd(&[
                "ZADD",
                "conf:q",
                "XX",
                "GT",
                "CH",
                "0",
                "p1",
                "1700000001000",
                "p2",
                "7",
                "p9",
            ]),
            cmd(&["ZADD", "conf:q", "XX", "GT", "1700000001000", "p2"]),
            cmd(&["ZADD", "conf:q", "XX", "LT", "CH", "1.25", "p3"]),
            cmd(&["ZADD", "conf:q", "GT", "922337203685477", "p5"]),
            cmd(&["ZADD", "conf:q", "XX", "NX", "1", "p1"]),
            cmd(&["ZADD", "conf:q", "GT", "NX", "1", "p1"]),
            cmd(&["ZADD", "conf:q", "XX", "1", "p1", "2"]),
            cmd(&["ZSCORE", "conf:q", "p1"]),
            cmd(&["ZSCORE", "conf:q", "p2"]),
            cmd(&["ZSCORE", "conf:q", "p3"]),
            cmd(&["ZSCORE", "conf:q", "p5"]),
            cmd(&["ZSCORE", "conf:q", "p9"]),
            cmd(&["ZSCORE", "conf:none", "p1"]),
            cmd(&["ZSCORE", "conf:q"]),
            cmd(&["ZCARD", "conf:q"]),
            cmd(&["ZCARD", "conf:none"]),
            cmd(&["ZRANGE", "conf:q", "0", "-1", "WITHSCORES"]),
            cmd(&["ZREM", "conf:q", "p1", "p3", "p9", "p1"]),
            cmd(&["ZCARD", "conf:q"]),
            cmd(&["ZREM", "conf:none", "p1", "p2"]),
            cmd(&["ZREM", "conf:q"]),
            cmd(&["SET", "conf:s", "1"]),
            cmd(&["ZSCORE", "conf:s", "p1"]),
            cmd(&["ZREM", "conf:s", "p1"]),
            cmd(&["ZREM", "conf:q", "p2", "p5"]),
            cmd(&["EXISTS", "conf:q"]),
        ],
    ));
    table.push((
        "counters as a semaphore keeps them: SET NX PX, INCRBY and DECRBY below zero, their errors, DEL and EXISTS of several",
        vec![
            cmd(&["SET", "conf:p", "3", "NX", "PX", "5000"]),
            cmd(&["SET", "conf:p", "4", "NX", "PX", "5000"]),
            ruled(Rule::Ttl, &["PTTL", "conf:p"]),
            cmd(&["GET", "conf:p"]),
            cmd(&["DECRBY", "conf:p", "5"]),
            cmd(&["INCRBY", "conf:p", "-3"]),
            cmd(&["DECRBY", "conf:p", "-10"]),
            cmd(&["DECR", "conf:p"]),
            cmd(&["GET", "conf:p"]),
            ruled(Rule::Ttl, &["PTTL", "conf:p"]),
            cmd(&["INCRBY", "conf:p", "1.5"]),
            cmd(&["DECRBY", "conf:p", "x"]),
            cmd(&["DECRBY", "conf:p", ""]),
            cmd(&["DECRBY", "conf:p", " 1"]),
            cmd(&["DECRBY", "conf:p", "-9223372036854775808"]),
            cmd(&["INCRBY", "conf:p", "9223372036854775808"]),
            cmd(&["SET", "conf:f", "1.5"]),
            cmd(&["INCRBY", "conf:f", "1"]),
            cmd(&["DECR", "conf:f"]),
            cmd(&["DECRBY", "conf:f", "1"]),
            cmd(&["DECRBY", "conf:new", "7"]),
            cmd(&["SET", "conf:min", "-9223372036854775808"]),
            cmd(&["DECR", "conf:min"]),
            cmd(&["DECRBY", "conf:min", "1"]),
            cmd(&["INCRBY", "conf:min", "-1"]),
            cmd(&["HSET", "conf:h", "f", "v"]),
            cmd(&["DECRBY", "conf:h", "1"]),
            cmd(&["INCRBY", "conf:h", "1"]),
            cmd(&["DECR", "conf:h"]),
            cmd(&["DECRBY", "conf:p"]),
            cmd(&["EXISTS", "conf:p", "conf:f", "conf:none", "conf:p"]),
            cmd(&["DEL", "conf:p", "conf:f", "conf:none", "conf:h", "conf:p"]),
            cmd(&["EXISTS", "conf:p", "conf:f"]),
            cmd(&["DEL", "conf:none"]),
            cmd(&["DEL"]),
            cmd(&["EXISTS"]),
        ],
    ));
    let (zkey, counter, text_key) = ("conf:sem:z", "conf:sem:n", "conf:sem:t");
    table.push((
        "a semaphore's commands from scripts: ZRANGEBYSCORE with LIMIT and WITHSCORES, Lua numbers as scores, counters",
        vec![
            eval(
                "return redis.call('zadd', KEYS[1], 'NX', tonumber(ARGV[1]), 'p1', \
                 tonumber(ARGV[1]) + 333, 'p2', 1.5, 'p3', 922337203685477, 'p4', 0.25, 'p5')",
                &[zkey],
                &["1700000000123"],
            ),
            eval(
                "return redis.call('zrangebyscore', KEYS[1], '-inf', '+inf', 'WITHSCORES')",
                &[zkey],
                &[],
            ),
            eval(
                "return redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 2)",
                &[zkey],
                &["1700000000456"],
            ),
            eval(
                "return redis.call('zrangebyscore', KEYS[1], '-inf', tonumber(ARGV[1]), 'WITHSCORES', 'LIMIT', 0, 2)",
                &[zkey],
                &["1700000000456"],
            ),
            eval(
                "return redis.call('zrangebyscore', KEYS[1], '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, 2)",
                &[zkey],
                &["1700000000123"],
            ),
            eval(
                "return redis.call('zrangebyscore', KEYS[1], 1, math.huge, 'LIMIT', 1, -1)",
                &[zkey],
                &[],
            ),
            eval(
                "return redis.call('zrange', KEYS[1], 0, -1, 'WITHSCORES')",
                &[zkey],
                &[],
            ),
            eval(
                "local r = redis.call('zrangebyscore', KEYS[1], '-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, 2)\n\
                 return {r[2], type(r[2]), tonumber(r[4]) * 4, #r}",
                &[zkey],
                &[],
            ),
            eval(
                "local s = redis.call('zscore', KEYS[1], 'p4')\n\
                 return {s, tonumber(s) == 922337203685477, redis.call('zscore', KEYS[1], 'p1'), \
                 redis.call('zcard', KEYS[1]), tostring(redis.call('zscore', KEYS[1], 'nope'))}",
                &[zkey],
                &[],
            ),
            eval(
                "return redis.call('zadd', KEYS[1], 'XX', 'GT', 'CH', 0, 'p1', tonumber(ARGV[1]), 'p2', 1, 'p9')",
                &[zkey],
                &["1700000009999"],
            ),
            eval(
                "return redis.call('zadd', KEYS[1], 'NX', 1, 'p1', 2, 'p6')",
                &[zkey],
                &[],
            ),
            // the expired permits: those with a deadline at or before now, removed together
            eval(
                "local expired = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1])\n\
                 local removed = 0\n\
                 if #expired > 0 then removed = redis.call('zrem', KEYS[1], unpack(expired)) end\n\
                 return {removed, redis.call('zcard', KEYS[1]), unpack(expired)}",
                &[zkey],
                &["1700000000200"],
            ),
            eval(
                "return redis.call('zrem', KEYS[1], 'p2', 'p2', 'nope')",
                &[zkey],
                &[],
            ),
            eval(
                "return redis.pcall('zrangebyscore', KEYS[1], 'x', 1)['err']",
                &[zkey],
                &[],
            ),
            eval(
                "return redis.call('zrangebyscore', KEYS[1], 0, 1, 'LIMIT', 0)",
                &[zkey],
                &[],
            ),
            eval(
                "return redis.pcall('zrangebyscore', KEYS[1], 0, 1, 'LIMIT', 'x', 1)",
                &[zkey],
                &[],
            ),
            eval(
                "return redis.call('zrangebyscore', KEYS[1], 0)",
                &[zkey],
                &[],
            ),
            eval(
                "local ok = redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])\n\
                 local again = redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])\n\
                 return {ok['ok'], tostring(again), redis.call('get', KEYS[1])}",
                &[counter],
                &["2", "5000"],
            ),
            ruled(Rule::Ttl, &["PTTL", counter]),
            eval(
                "local left = redis.call('decrby', KEYS[1], ARGV[1])\n\
                 if left < 0 then return {0, left, redis.call('incrby', KEYS[1], ARGV[1])} end\n\
                 return {1, left}",
                &[counter],
                &["3"],
            ),
            eval(
                "return {redis.call('decrby', KEYS[1], 5), redis.call('incrby', KEYS[1], -1), \
                 redis.call('decr', KEYS[1]), redis.call('incrby', KEYS[1], 10), redis.call('get', KEYS[1])}",
                &[counter],
                &[],
            ),
            eval(
                "return redis.call('decrby', KEYS[1], 1.5)",
                &[counter],
                &[],
            ),
            eval(
                "return redis.pcall('incrby', KEYS[1], 'x')",
                &[counter],
                &[],
            ),
            eval(
                "redis.call('set', KEYS[1], '1.5') return redis.pcall('decr', KEYS[1])['err']",
                &[text_key],
                &[],
            ),
            eval(
                "return redis.call('incrby', KEYS[1], 1)",
                &[text_key],
                &[],
            ),
            eval(
                "return {redis.call('exists', KEYS[1], KEYS[2], KEYS[3], 'conf:none'), \
                 redis.call('del', KEYS[2], KEYS[3], 'conf:none', KEYS[2]), \
                 redis.call('exists', KEYS[1], KEYS[2], KEYS[3])}",
                &[zkey, counter, text_key],
                &[],
            ),
            eval(
                "local t = redis.call('time') return {#t, tonumber(t[1]) > 1600000000, tonumber(t[2]) < 1000000}",
                &[],
                &[],
            ),
        ],
    ));
    let hello = "return 'hello'";
    let hello_sha = redis::Script::new(hello).get_hash().to_string();
    table.push((
        "scripting commands: the cache, NOSCRIPT, argument errors",
        vec![
            cmd(&["SCRIPT", "EXISTS", &hello_sha, &sha("acquire")]),
            cmd(&["EVALSHA", &hello_sha, "0"]),
            cmd(&["EVALSHA", "short", "0"]),
            cmd(&["SCRIPT", "LOAD", hello]),
            cmd(&["EVALSHA", &hello_sha.to_uppercase(), "0"]),
            cmd(&["SCRIPT", "FLUSH"]),
            cmd(&["SCRIPT", "EXISTS", &hello_sha, &sha("acquire")]),
            cmd(&["EVAL", hello, "0"]),
            cmd(&["SCRIPT", "EXISTS", &hello_sha]),
            cmd(&["EVAL", hello, "x"]),
            cmd(&["EVAL", hello, "2", "k"]),
            cmd(&["EVAL", hello, "-1"]),
            cmd(&["EVAL", "retur 1", "0"]),
            cmd(&["SCRIPT", "LOAD", "return {"]),
            cmd(&[
                "EVAL",
                "return {KEYS[1], KEYS[2], ARGV[1], #ARGV}",
                "2",
                "k1",
                "k2",
                "a1",
                "a2",
            ]),
        ],
    ));
    let evals: &[&str] = &[
        "return {1, nil, 3}",
        "return 3.99",
        "return -3.99",
        "return true",
        "return false",
        "return nil",
        "return 'a', 'b'",
        "return {ok='OK'}",
        "return {ok='FINE'}",
        "return redis.status_reply('DONE')",
        "return redis.error_reply('my error')",
        "return redis.error_reply('oops')",
        "return redis.error_reply('-MINE with code')",
        "return {err='CODE text'}",
        "return {1, 2, {3, 'x', false}}",
        "return {}",
        "return redis.sha1hex('')",
        "return redis.sha1hex('lock-core')",
        "return redis.call('ping')",
        "return redis.call('set', 'conf:lua', 'v')",
        "return redis.call('get', 'conf:lua')",
        "return redis.call('get', 'conf:none')",
        "return type(redis.call('get', 'conf:none'))",
        "return redis.call('set', 'conf:lua', 'w', 'get')",
        "return redis.call('time')[3]",
        "return #redis.call('time')",
        "return redis.call('incr', 'conf:n') + 0.5",
        "redis.call('set', 'conf:num', 0.1) return redis.call('get', 'conf:num')",
        "redis.call('set', 'conf:num', 1e17) return redis.call('get', 'conf:num')",
        "redis.call('set', 'conf:num', 12345) return redis.call('get', 'conf:num')",
        "redis.call('hset', 'conf:lh', 'f', 'v') return redis.call('hgetall', 'conf:lh')",
        "return redis.call('type', 'conf:lh')",
        "return redis.call('type', 'conf:lh')['ok']",
        "return redis.pcall('get', 'conf:lh')",
        "return redis.pcall('get', 'conf:lh')['err']",
        "return redis.call('get', 'conf:lh')",
        "\n\nreturn redis.call('get', 'conf:lh')",
        "local function f()\n  return redis.call('get', 'conf:lh')\nend\nreturn f()",
        "return redis.call('hget', 'conf:lh')",
        "return redis.pcall('hget', 'conf:lh')['err']",
        "return redis.call('eval', 'return 1', 0)",
        "return redis.call('wait', 0, 0)",
        "return redis.call('set', {})",
        "return redis.call('set', 'k', true)",
        "return redis.call()",
        "return redis.pcall()['err']",
        "local x = nil; return x + 1",
        "return error('boom')",
        "return error({err='MINE boom'})",
        "foo = 1",
        "return foo",
        "return tonumber('12') + tonumber(ARGV and '1')",
        "return string.format('%.0f', 1764134000123456)",
        "return table.concat({'1', '0', '1'})",
        "return math.floor(7.9)",
    ];
    // ---- the read-write lock's scripts ----
    let a = k();
    table.push((
        "rw: readers share with a timeout key each; a waiting writer's mark keeps new readers out",
        vec![
            step_as(Rule::Token, a.rw_acquire("c1:1", "read", "0", LEASE, "")),
            step_as(Rule::Token, a.rw_acquire("c2:1", "read", "1", "5000", "")),
            cmd(&["HGETALL", &a.lock]),
            ruled(Rule::Ttl, &["PTTL", &a.timeout_key("c2:1", 1)]),
            step_as(Rule::PairTtl, a.rw_acquire("c3:1", "write", "0", LEASE, "")),
            cmd(&["EXISTS", &a.writer]),
            step_as(Rule::PairTtl, a.rw_acquire("c3:2", "write", "1", LEASE, "")),
            cmd(&["GET", &a.writer]),
            cmd(&["ZRANGE", &a.queue, "0", "-1"]),
            step_as(Rule::PairTtl, a.rw_acquire("c4:1", "read", "1", LEASE, "")),
            // a second copy of c1:1's request: acquired again, nothing added
            step_as(Rule::Token, a.rw_acquire("c1:1", "read", "0", LEASE, "")),
            cmd(&["HGETALL", &a.lock]),
        ],
    ));
    let a = k();
    table.push((
        "rw: read re-entry, one of two counts, the last read beside another: TTL from its keys; the last frees and says 0",
        vec![
            Step::Subscribe {
                channel: a.rw_channel.clone(),
                sharded: false,
            },
            step_as(Rule::Token, a.rw_acquire("c1:1", "read", "0", LEASE, "")),
            step(a.rw_acquire("c1:1", "read-re", "0", LEASE, "")),
            step(a.rw_acquire("c1:9", "read-re", "0", LEASE, "")),
            cmd(&["HGETALL", &a.lock]),
            step(a.rw_release("c1:1", "read", "2")),
            step(a.rw_release("c1:1", "read", "2")),
            cmd(&["EXISTS", &a.timeout_key("c1:1", 2)]),
            step_as(Rule::Token, a.rw_acquire("c2:1", "read", "0", "5000", "")),
            step(a.rw_release("c1:1", "read", "1")),
            step(a.rw_release("c1:1", "read", "1")),
            ruled(Rule::Ttl, &["PTTL", &a.lock]),
            step(a.rw_release("c2:1", "read", "1")),
            Step::Messages,
            cmd(&["EXISTS", &a.lock]),
        ],
    ));
    let a = k();
    table.push((
        "rw: write, its re-entry, a downgrade; the write's release leaves the read and says 0",
        vec![
            Step::Subscribe {
                channel: a.rw_channel.clone(),
                sharded: false,
            },
            step_as(Rule::Token, a.rw_acquire("c1:1", "write", "0", LEASE, "")),
            step(a.rw_acquire("c1:1", "write-re", "0", LEASE, "")),
            step_as(Rule::PairTtl, a.rw_acquire("c2:1", "read", "0", LEASE, "")),
            step_as(
                Rule::PairTtl,
                a.rw_acquire("c1:2", "read", "0", LEASE, "c9:9"),
            ),
            step_as(
                Rule::Token,
                a.rw_acquire("c1:2", "read", "0", LEASE, "c1:1"),
            ),
            cmd(&["HGETALL", &a.lock]),
            step(a.rw_release("c1:1", "write", "2")),
            step(a.rw_release("c1:1", "write", "1")),
            cmd(&["HGETALL", &a.lock]),
            Step::Messages,
            step(a.rw_release("c1:1", "write", "1")),
            step(a.rw_release("c1:2", "read", "1")),
            Step::Messages,
            cmd(&["EXISTS", &a.lock]),
        ],
    ));
    let a = k();
    table.push((
        "rw: cancelled new read and write undone, a late copy refused; a cancelled re-entry takes one count",
        vec![
            step_as(Rule::Token, a.rw_acquire("c1:1", "read", "0", LEASE, "")),
            step(a.rw_cancel(&a.latch("a-c1:1-read"), "c1:1", "new", "read")),
            cmd(&["EXISTS", &a.lock, &a.timeout_key("c1:1", 1)]),
            step(a.rw_acquire("c1:1", "read", "0", LEASE, "")),
            step(a.rw_cancel(&a.latch("a-c1:1-read"), "c1:1", "new", "read")),
            step_as(Rule::Token, a.rw_acquire("c2:1", "read", "0", LEASE, "")),
            step(a.rw_acquire("c2:1", "read-re", "0", LEASE, "")),
            step(a.rw_cancel(&a.latch("a-c2:1-read-re"), "c2:1", "re", "read")),
            cmd(&["HGETALL", &a.lock]),
            cmd(&["EXISTS", &a.timeout_key("c2:1", 2)]),
            step(a.rw_release("c2:1", "read", "1")),
            step_as(Rule::Token, a.rw_acquire("c3:1", "write", "0", LEASE, "")),
            step(a.rw_cancel(&a.latch("a-c3:1-write"), "c3:1", "new", "write")),
            cmd(&["EXISTS", &a.lock]),
        ],
    ));
    let a = k();
    let other = k();
    table.push((
        "rw: renewal of a reader renews its own keys only; a writer's field",
        vec![
            step_as(Rule::Token, a.rw_acquire("c1:1", "read", "0", "1000", "")),
            step_as(Rule::Token, a.rw_acquire("c2:1", "read", "0", "1000", "")),
            step_as(
                Rule::Token,
                other.rw_acquire("c3:1", "write", "0", "1000", ""),
            ),
            step(script(
                "renew",
                &[&a.lock, &other.lock, &other.lock],
                &[
                    LEASE,
                    &format!("c1:1\0{}", a.rw_prefix),
                    "c3:1:write",
                    "c3:1",
                ],
            )),
            ruled(Rule::Ttl, &["PTTL", &a.timeout_key("c1:1", 1)]),
            ruled(Rule::Ttl, &["PTTL", &a.timeout_key("c2:1", 1)]),
            ruled(Rule::Ttl, &["PTTL", &a.lock]),
            ruled(Rule::Ttl, &["PTTL", &other.lock]),
            step(a.rw_release("c1:1", "read", "1")),
            step(a.rw_release("c2:1", "read", "1")),
            step(other.rw_release("c3:1", "write", "1")),
        ],
    ));
    // (tokens grow per name: this case has one, the Token rule compares
    // each token with the case's last)
    let a = k();
    table.push((
        "rw: a plain lock's hash is held for both sides; its token above the read-write lock's",
        vec![
            step_as(Rule::Token, a.rw_acquire("c1:1", "read", "0", "1000", "")),
            step(a.rw_release("c1:1", "read", "1")),
            step_as(Rule::Token, a.new_hold("c5:1", "c5")),
            step_as(Rule::PairTtl, a.rw_acquire("c6:1", "read", "0", LEASE, "")),
            step_as(Rule::PairTtl, a.rw_acquire("c6:2", "write", "0", LEASE, "")),
        ],
    ));
    let a = k();
    table.push((
        "rw: a read release that frees the lock gives the turn to the longest-waiting writer; readers wait for the turn",
        vec![
            Step::Subscribe {
                channel: a.rw_channel.clone(),
                sharded: false,
            },
            step_as(Rule::Token, a.rw_acquire("c1:1", "read", "0", LEASE, "")),
            cmd(&["ZADD", &a.queue, "1", "c2", "2", "c3"]),
            step(a.rw_release("c1:1", "read", "1")),
            cmd(&["GET", &a.turn]),
            cmd(&["ZRANGE", &a.queue, "0", "-1"]),
            step_as(Rule::PairTtl, a.rw_acquire("c4:1", "read", "0", LEASE, "")),
            step_as(Rule::PairTtl, a.rw_acquire("c3:1", "write", "2", LEASE, "")),
            step_as(Rule::Token, a.rw_acquire("c2:1", "write", "2", LEASE, "")),
            cmd(&["EXISTS", &a.turn]),
            cmd(&["HGETALL", &a.lock]),
            Step::Messages,
        ],
    ));
    let a = k();
    table.push((
        "rw_leave: the client leaves the line; its own writer's mark goes and the lock's waiters are told; another client's mark stays",
        vec![
            Step::Subscribe {
                channel: a.rw_channel.clone(),
                sharded: false,
            },
            cmd(&["ZADD", &a.queue, "1", "c1", "2", "c2"]),
            cmd(&["SET", &a.writer, "c1", "PX", "2000"]),
            step(script("rw_leave", &[&a.queue, &a.writer, &a.rw_channel], &["c1", "0", "publish"])),
            cmd(&["ZRANGE", &a.queue, "0", "-1"]),
            cmd(&["EXISTS", &a.writer]),
            Step::Messages,
            step(script("rw_leave", &[&a.queue, &a.writer, &a.rw_channel], &["c1", "0", "publish"])),
            cmd(&["SET", &a.writer, "c2", "PX", "2000"]),
            step(script("rw_leave", &[&a.queue, &a.writer, &a.rw_channel], &["c1", "0", "publish"])),
            cmd(&["GET", &a.writer]),
            Step::Messages,
        ],
    ));
    let mut s = 0;
    table.extend(semaphore::cases(&mut || {
        s += 1;
        format!("conf:s{s}")
    }));
    let mut m = 0;
    table.extend(multi::cases(&mut || {
        m += 1;
        format!("conf:m{m}")
    }));
    let mut l = 0;
    table.extend(election::cases(&mut || {
        l += 1;
        format!("conf:e{l}")
    }));
    let mut f = 0;
    table.extend(fair::cases(&mut || {
        f += 1;
        format!("conf:f{f}")
    }));
    let mut q = 0;
    table.extend(lists::cases(&mut || {
        q += 1;
        format!("conf:q{q}")
    }));
    table.push((
        "Lua: conversions both ways, the redis table, errors and their positions",
        evals
            .iter()
            .map(|script| cmd(&["EVAL", script, "0"]))
            .collect(),
    ));
    table
}

/// One subscriber on the real server: SUBSCRIBE or SSUBSCRIBE on its own
/// connection, read by a thread.
struct RealSubscriber {
    stream: TcpStream,
    payloads: mpsc::Receiver<Vec<u8>>,
}

impl Drop for RealSubscriber {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// One RESP array of bulk strings and integers (pub/sub frames).
fn read_frame(reader: &mut impl BufRead) -> std::io::Result<Vec<Vec<u8>>> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let count: usize = line
        .trim_end()
        .strip_prefix('*')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| bad(&line))?;
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        reader.read_line(&mut line)?;
        let head = line.trim_end();
        if let Some(n) = head.strip_prefix(':') {
            items.push(n.as_bytes().to_vec());
        } else if let Some(len) = head.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
            let mut data = vec![0; len + 2];
            reader.read_exact(&mut data)?;
            data.truncate(len);
            items.push(data);
        } else {
            return Err(bad(head));
        }
    }
    Ok(items)
}

fn real_subscribe(
    server: &lock_tests::RedisServer,
    channel: &str,
    sharded: bool,
) -> RealSubscriber {
    let mut stream = TcpStream::connect(server.addr()).expect("connect");
    let command = if sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" };
    let frame = format!(
        "*2\r\n${}\r\n{command}\r\n${}\r\n{channel}\r\n",
        command.len(),
        channel.len()
    );
    stream.write_all(frame.as_bytes()).expect("subscribe");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let confirmation = read_frame(&mut reader).expect("confirmation");
    assert_eq!(
        confirmation.first().map(|c| c.to_ascii_lowercase()),
        Some(command.to_ascii_lowercase().into_bytes()),
        "{confirmation:?}"
    );
    let (tx, payloads) = mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(frame) = read_frame(&mut reader) {
            if let [kind, _, payload] = frame.as_slice() {
                if kind == b"message" || kind == b"smessage" {
                    let _ = tx.send(payload.clone());
                }
            }
        }
    });
    RealSubscriber { stream, payloads }
}

/// A reply as compared: a value, or an error's kind, code and text.
#[derive(Debug, PartialEq)]
enum Seen {
    Value(Value),
    Error {
        kind: String,
        code: Option<String>,
        detail: Option<String>,
    },
}

fn seen(result: RedisResult<Value>) -> Seen {
    match result {
        Ok(v) => Seen::Value(v),
        Err(e) => Seen::Error {
            kind: format!("{:?}", e.kind()),
            code: e.code().map(String::from),
            detail: e.detail().map(String::from),
        },
    }
}

fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn pair(s: &Seen) -> Option<(i64, i64)> {
    match s {
        Seen::Value(Value::Array(items)) => match items.as_slice() {
            [a, b] => Some((as_int(a)?, as_int(b)?)),
            _ => None,
        },
        _ => None,
    }
}

/// A number a reply carries: an integer, or a bulk string of a number
/// (a score).
fn number(s: &Seen) -> Option<f64> {
    match s {
        Seen::Value(Value::Int(n)) => Some(*n as f64),
        Seen::Value(Value::BulkString(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
        Seen::Value(Value::Double(d)) => Some(*d),
        _ => None,
    }
}

fn ttls_agree(a: i64, b: i64) -> bool {
    if a < 0 || b < 0 {
        a == b
    } else {
        (a - b).abs() <= TTL_TOLERANCE_MS
    }
}

/// The last token of each server in the running case.
#[derive(Default)]
struct Tokens {
    memory: i64,
    real: i64,
}

/// Whether the two replies of one step agree under `rule`; why not.
fn compare(rule: Rule, memory: &Seen, real: &Seen, tokens: &mut Tokens) -> Result<(), String> {
    match rule {
        Rule::Same => (memory == real)
            .then_some(())
            .ok_or_else(|| "replies differ".into()),
        Rule::Token | Rule::SameToken => {
            let (Some((mk, mt)), Some((rk, rt))) = (pair(memory), pair(real)) else {
                return Err("not {kind, token} pairs".into());
            };
            if mk != rk {
                return Err("kinds differ".into());
            }
            if rule == Rule::SameToken {
                return (mt == tokens.memory && rt == tokens.real)
                    .then_some(())
                    .ok_or_else(|| "not the last token again".into());
            }
            if mt <= tokens.memory || rt <= tokens.real {
                return Err("a token did not grow".into());
            }
            if (mt - rt).abs() > 60_000_000 {
                return Err("tokens more than a minute apart".into());
            }
            tokens.memory = mt;
            tokens.real = rt;
            Ok(())
        }
        Rule::Multi => compare_multi(memory, real, tokens),
        Rule::Ttl => match (memory, real) {
            (Seen::Value(Value::Int(a)), Seen::Value(Value::Int(b))) if ttls_agree(*a, *b) => {
                Ok(())
            }
            _ => Err("TTLs differ".into()),
        },
        Rule::PairTtl => match (pair(memory), pair(real)) {
            (Some((mk, mt)), Some((rk, rt))) if mk == rk && ttls_agree(mt, rt) => Ok(()),
            _ => Err("{kind, pttl} pairs differ".into()),
        },
        Rule::LastTtl => match (memory, real) {
            (Seen::Value(Value::Array(m)), Seen::Value(Value::Array(r)))
                if m.len() == r.len() && m.len() > 1 && m[..m.len() - 1] == r[..r.len() - 1] =>
            {
                match (m.last().and_then(as_int), r.last().and_then(as_int)) {
                    (Some(a), Some(b)) if ttls_agree(a, b) => Ok(()),
                    _ => Err("the last items (ms) differ".into()),
                }
            }
            _ => Err("not arrays equal but for the last item".into()),
        },
        Rule::ClockMs => match (number(memory), number(real)) {
            (Some(a), Some(b)) if (a - b).abs() <= TTL_TOLERANCE_MS as f64 => Ok(()),
            _ => Err("clock readings (ms) differ".into()),
        },
        Rule::Time => match (pair(memory), pair(real)) {
            (Some((ms, mu)), Some((rs, ru)))
                if (ms - rs).abs() <= 5
                    && (0..1_000_000).contains(&mu)
                    && (0..1_000_000).contains(&ru) =>
            {
                Ok(())
            }
            _ => Err("TIME readings differ".into()),
        },
    }
}

/// [`Rule::Multi`].
fn compare_multi(memory: &Seen, real: &Seen, tokens: &mut Tokens) -> Result<(), String> {
    let ints = |s: &Seen| match s {
        Seen::Value(Value::Array(items)) => items.iter().map(as_int).collect::<Option<Vec<i64>>>(),
        _ => None,
    };
    let (Some(m), Some(r)) = (ints(memory), ints(real)) else {
        return Err("not arrays of integers".into());
    };
    match (m.as_slice(), r.as_slice()) {
        ([1, mt @ ..], [1, rt @ ..]) if mt.len() == rt.len() && !mt.is_empty() => {
            for (a, b) in mt.iter().zip(rt) {
                if *a <= tokens.memory || *b <= tokens.real {
                    return Err("a token did not grow".into());
                }
                if (a - b).abs() > 60_000_000 {
                    return Err("tokens more than a minute apart".into());
                }
            }
            tokens.memory = mt.iter().copied().max().unwrap_or(tokens.memory);
            tokens.real = rt.iter().copied().max().unwrap_or(tokens.real);
            Ok(())
        }
        ([0, mp, mi], [0, rp, ri]) if mi == ri && ttls_agree(*mp, *rp) => Ok(()),
        _ if m == r && m.first() != Some(&1) => Ok(()),
        _ => Err("multi-acquire replies differ".into()),
    }
}

/// One server as the runner drives it.
trait Target {
    fn call(&mut self, args: &[String]) -> RedisResult<Value>;
}

struct Memory(MemoryServerForTests);

impl Target for Memory {
    fn call(&mut self, args: &[String]) -> RedisResult<Value> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        self.0.call(&args)
    }
}

struct Real(redis::Connection);

impl Target for Real {
    fn call(&mut self, args: &[String]) -> RedisResult<Value> {
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a);
        }
        cmd.query(&mut self.0)
    }
}

/// Every key of a server with its type, value and TTL, time readings
/// replaced by a marker.
fn keyspace(target: &mut dyn Target) -> BTreeMap<String, (String, String, Option<i64>)> {
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    let now_ms = now_us / 1000;
    let clock = |text: &str| -> String {
        text.split(':')
            .map(|part| match part.parse::<i64>() {
                Ok(n) if n.abs_diff(now_us) < 86_400_000_000 => "<clock µs>".to_string(),
                // a time in ms (a permit's expiry, a waiter's arrival): as
                // whole seconds from now
                Ok(n) if n.abs_diff(now_ms) < 86_400_000 => {
                    format!("<clock ms {:+} s>", (n - now_ms + 500).div_euclid(1000))
                }
                _ => part.to_string(),
            })
            .collect::<Vec<_>>()
            .join(":")
    };
    let text = |v: &Value| -> String {
        match v {
            Value::BulkString(b) => clock(&String::from_utf8_lossy(b)),
            other => format!("{other:?}"),
        }
    };
    let mut out = BTreeMap::new();
    for key in scan_all(target, &[]) {
        let args = |a: &[&str]| -> Vec<String> { a.iter().map(|s| s.to_string()).collect() };
        let kind = match target.call(&args(&["TYPE", &key])) {
            Ok(Value::SimpleString(s)) => s,
            other => format!("{other:?}"),
        };
        let value = match kind.as_str() {
            "string" => target.call(&args(&["GET", &key])).map(|v| text(&v)),
            "hash" => target.call(&args(&["HGETALL", &key])).map(|v| match v {
                Value::Array(items) => {
                    let mut pairs: Vec<String> = items
                        .chunks(2)
                        .map(|p| p.iter().map(&text).collect::<Vec<_>>().join("="))
                        .collect();
                    pairs.sort();
                    pairs.join(", ")
                }
                other => format!("{other:?}"),
            }),
            "list" => target
                .call(&args(&["LRANGE", &key, "0", "-1"]))
                .map(|v| match v {
                    Value::Array(items) => items.iter().map(&text).collect::<Vec<_>>().join(" "),
                    other => format!("{other:?}"),
                }),
            "zset" => target
                .call(&args(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]))
                .map(|v| match v {
                    Value::Array(items) => items.iter().map(&text).collect::<Vec<_>>().join(" "),
                    other => format!("{other:?}"),
                }),
            other => Ok(format!("a {other}")),
        }
        .unwrap_or_else(|e| format!("error {e}"));
        let ttl = match target.call(&args(&["PTTL", &key])) {
            Ok(Value::Int(-1)) => None,
            Ok(Value::Int(n)) => Some(n),
            _ => Some(i64::MIN),
        };
        out.insert(key, (kind, value, ttl));
    }
    out
}

/// Every key a full SCAN with `options` returns, sorted, once each.
fn scan_all(target: &mut dyn Target, options: &[String]) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    for _ in 0..10_000 {
        let mut args = vec!["SCAN".to_string(), cursor.clone()];
        args.extend(options.iter().cloned());
        let reply = target
            .call(&args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let Value::Array(parts) = reply else {
            panic!("SCAN answered {reply:?}")
        };
        let [Value::BulkString(next), Value::Array(found)] = parts.as_slice() else {
            panic!("SCAN answered {parts:?}")
        };
        for key in found {
            if let Value::BulkString(k) = key {
                keys.push(String::from_utf8_lossy(k).into_owned());
            }
        }
        cursor = String::from_utf8_lossy(next).into_owned();
        if cursor == "0" {
            break;
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// What one run of the table found.
#[derive(Default)]
struct Outcome {
    failures: Vec<String>,
    commands: usize,
    scripts_called: std::collections::BTreeSet<&'static str>,
}

fn run_table(
    real_server: &lock_tests::RedisServer,
    memory_for: impl Fn() -> MemoryServerForTests,
) -> Outcome {
    let client = redis::Client::open(real_server.url()).expect("client");
    let mut real = Real(client.get_connection().expect("connection"));
    let mut outcome = Outcome::default();
    let shas: Vec<(String, &'static str)> =
        SCRIPTS.iter().map(|(name, _)| (sha(name), *name)).collect();
    for (name, steps) in cases() {
        let mut memory = Memory(memory_for());
        for reset in [&["FLUSHALL"][..], &["SCRIPT", "FLUSH"]] {
            let reset: Vec<String> = reset.iter().map(|s| s.to_string()).collect();
            real.call(&reset).expect("reset the real server");
        }
        let mut fail = |what: String| outcome.failures.push(format!("[{name}] {what}"));
        // the scripts are loaded as Script::run loads them
        for (_, source) in SCRIPTS {
            let load = vec!["SCRIPT".to_string(), "LOAD".to_string(), source.to_string()];
            let (m, r) = (seen(memory.call(&load)), seen(real.call(&load)));
            if m != r {
                fail(format!("SCRIPT LOAD: memory {m:?}, real {r:?}"));
            }
        }
        let mut tokens = Tokens::default();
        let mut subscribers: Vec<(UnboundedReceiver<Vec<u8>>, RealSubscriber)> = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            match step {
                Step::Cmd(args, rule) => {
                    outcome.commands += 1;
                    if args[0] == "EVALSHA" {
                        if let Some((_, script)) = shas.iter().find(|(sha, _)| *sha == args[1]) {
                            outcome.scripts_called.insert(script);
                        }
                    }
                    let m = seen(memory.call(args));
                    let r = seen(real.call(args));
                    if let Err(why) = compare(*rule, &m, &r, &mut tokens) {
                        let shown: Vec<&str> = args
                            .iter()
                            .map(|a| if a.len() > 60 { "<script>" } else { a.as_str() })
                            .collect();
                        fail(format!(
                            "step {i} {shown:?}: {why}\n  memory: {m:?}\n  real:   {r:?}"
                        ));
                    }
                }
                Step::Subscribe { channel, sharded } => {
                    let m = if *sharded {
                        memory.0.ssubscribe(channel.as_bytes())
                    } else {
                        memory.0.subscribe(channel.as_bytes())
                    };
                    subscribers.push((m, real_subscribe(real_server, channel, *sharded)));
                }
                Step::Messages => {
                    for (n, (m, r)) in subscribers.iter_mut().enumerate() {
                        let mut got_m = Vec::new();
                        while let Ok(p) = m.try_recv() {
                            got_m.push(p);
                        }
                        let mut got_r = Vec::new();
                        let deadline = std::time::Instant::now() + Duration::from_secs(2);
                        while got_r.len() < got_m.len() && std::time::Instant::now() < deadline {
                            if let Ok(p) = r.payloads.recv_timeout(Duration::from_millis(50)) {
                                got_r.push(p);
                            }
                        }
                        // anything more that arrives soon after
                        while let Ok(p) = r.payloads.recv_timeout(Duration::from_millis(20)) {
                            got_r.push(p);
                        }
                        if got_m != got_r {
                            fail(format!(
                                "step {i}: subscriber {n} received memory {got_m:?}, real {got_r:?}"
                            ));
                        }
                    }
                }
                Step::ScanAll(options) => {
                    outcome.commands += 1;
                    let m = scan_all(&mut memory, options);
                    let r = scan_all(&mut real, options);
                    if m != r {
                        fail(format!(
                            "step {i} SCAN {options:?}: memory {m:?}, real {r:?}"
                        ));
                    }
                }
            }
        }
        let m = keyspace(&mut memory);
        let r = keyspace(&mut real);
        let keys: std::collections::BTreeSet<&String> = m.keys().chain(r.keys()).collect();
        for key in keys {
            match (m.get(key), r.get(key)) {
                (Some((mt, mv, mttl)), Some((rt, rv, rttl))) => {
                    let ttl_ok = match (mttl, rttl) {
                        (None, None) => true,
                        (Some(a), Some(b)) => ttls_agree(*a, *b),
                        _ => false,
                    };
                    if mt != rt || mv != rv || !ttl_ok {
                        fail(format!(
                            "key {key}: memory {mt} {mv} ttl {mttl:?}, real {rt} {rv} ttl {rttl:?}"
                        ));
                    }
                }
                (m, r) => fail(format!("key {key}: memory {m:?}, real {r:?}")),
            }
        }
    }
    outcome
}

#[test]
fn the_memory_server_answers_as_redis_does() {
    let server = support::server();
    let outcome = run_table(&server, MemoryServerForTests::new);
    let cases = cases().len();
    println!(
        "conformance: {cases} cases, {} commands compared, scripts called: {:?}",
        outcome.commands, outcome.scripts_called
    );
    assert!(
        outcome.failures.is_empty(),
        "{} difference(s) between the in-memory server and redis-server:\n{}",
        outcome.failures.len(),
        outcome.failures.join("\n")
    );
    let all: Vec<&str> = SCRIPTS.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        outcome.scripts_called.iter().copied().collect::<Vec<_>>(),
        {
            let mut sorted = all.clone();
            sorted.sort();
            sorted
        },
        "every protocol script is in the table"
    );
}

/// The comparison sees a difference: each rule refuses a pair of replies
/// that differ as it says.
#[test]
fn the_comparison_can_fail() {
    let mut t = Tokens::default();
    let int = |n| Seen::Value(Value::Int(n));
    let two = |a, b| Seen::Value(Value::Array(vec![Value::Int(a), Value::Int(b)]));
    assert!(compare(Rule::Same, &int(1), &int(1), &mut t).is_ok());
    assert!(compare(Rule::Same, &int(1), &int(2), &mut t).is_err());
    let err = |code: &str| Seen::Error {
        kind: "Extension".into(),
        code: Some(code.into()),
        detail: Some("x".into()),
    };
    assert!(compare(Rule::Same, &err("WRONGTYPE"), &err("ERR"), &mut t).is_err());
    assert!(compare(Rule::Ttl, &int(30_000), &int(29_990), &mut t).is_ok());
    assert!(compare(Rule::Ttl, &int(30_000), &int(-1), &mut t).is_err());
    assert!(compare(Rule::Token, &two(1, 100), &two(1, 120), &mut t).is_ok());
    assert!(
        compare(Rule::Token, &two(1, 90), &two(1, 130), &mut t).is_err(),
        "did not grow"
    );
    assert!(
        compare(Rule::Token, &two(1, 200), &two(0, 200), &mut t).is_err(),
        "kinds"
    );
    assert!(compare(Rule::SameToken, &two(1, 100), &two(1, 120), &mut t).is_ok());
    assert!(compare(Rule::PairTtl, &two(0, 5000), &two(0, -1), &mut t).is_err());
    let ints = |v: &[i64]| Seen::Value(Value::Array(v.iter().map(|n| Value::Int(*n)).collect()));
    assert!(compare(
        Rule::Multi,
        &ints(&[1, 300, 301]),
        &ints(&[1, 310, 305]),
        &mut t
    )
    .is_ok());
    assert!(
        compare(
            Rule::Multi,
            &ints(&[1, 302, 200]),
            &ints(&[1, 320, 330]),
            &mut t
        )
        .is_err(),
        "a token did not grow"
    );
    assert!(
        compare(Rule::Multi, &ints(&[1, 400]), &ints(&[1, 400, 401]), &mut t).is_err(),
        "token counts"
    );
    assert!(compare(
        Rule::Multi,
        &ints(&[0, 5000, 2]),
        &ints(&[0, 4990, 2]),
        &mut t
    )
    .is_ok());
    assert!(compare(
        Rule::Multi,
        &ints(&[0, 5000, 2]),
        &ints(&[0, 5000, 1]),
        &mut t
    )
    .is_err());
    assert!(compare(
        Rule::Multi,
        &ints(&[0, 5000, 2]),
        &ints(&[0, -1, 2]),
        &mut t
    )
    .is_err());
    assert!(compare(Rule::Multi, &ints(&[-2, 0, 0]), &ints(&[-2, 0, 0]), &mut t).is_ok());
    assert!(compare(Rule::Multi, &ints(&[-2, 0, 0]), &ints(&[0, 0, 1]), &mut t).is_err());
}
