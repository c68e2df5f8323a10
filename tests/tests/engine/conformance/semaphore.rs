//! The conformance table's cases of the semaphores' and the count-down
//! latch's scripts (`sem_acquire.lua`, `sem_add.lua`, `sem_release.lua`,
//! `sem_cancel.lua`, `sem_leave.lua`, `sem_set.lua`,
//! `latch_count_down.lua`, and `renew.lua` with a permit field), each
//! called with the argument shapes lock-core's typed calls send
//! (`lock-core/src/protocol/semaphore.rs`): the same keys, in the same
//! order, request latches `lockcore_sem_req:{<name>}:<client>:<seq>`,
//! line members `<n>:<request>`, permit ids of 16 bytes (printable here,
//! so that the table's text steps can name them), a plain grant in
//! `lockcore_sem_grants:{<name>}`.
//!
//! Times drawn from the servers' clocks: a refused acquire's time to the
//! nearest expiry ([`Rule::LastTtl`]), a permit's expiry read by `ZSCORE`
//! ([`Rule::ClockMs`]); in the keyspace, expiries and arrival times are
//! compared as whole seconds from now.

use super::{cmd, ruled, script, step, step_as, Rule, Step, K, LATCH_MS, LEASE};

/// How long a cancelled acquisition's latch refuses a late copy (ms).
const REFUSE_MS: &str = "60000";
/// How long a waiter counts as alive in the line (ms), as lock-core's
/// `alive_ms` with its default time-outs.
const ALIVE_MS: &str = "4000";

/// A permit id of 16 bytes, as the set keeps them (lock-core draws random
/// bytes; these are digits, so that a text step can name them).
fn id(n: u32) -> String {
    format!("{n:016}")
}

/// The 32 hex digits of a permit id (renew.lua's field).
fn hex(id: &str) -> String {
    id.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The Redis names of one semaphore (lock-core's `SemKeys`).
struct S {
    counter: String,
    timeout: String,
    channel: String,
    line: String,
    alive: String,
    grants: String,
    request_prefix: String,
}

impl S {
    fn new(name: &str) -> S {
        S {
            counter: name.to_string(),
            timeout: format!("{{{name}}}:timeout"),
            channel: format!("redisson_sc:{{{name}}}"),
            line: format!("lockcore_sem_line:{{{name}}}"),
            alive: format!("lockcore_sem_alive:{{{name}}}"),
            grants: format!("lockcore_sem_grants:{{{name}}}"),
            request_prefix: format!("lockcore_sem_req:{{{name}}}:"),
        }
    }

    /// The latch of request `r` (a request id `<client>:<seq>`).
    fn req(&self, r: &str) -> String {
        format!("{}c1:{r}", self.request_prefix)
    }

    /// `SemAcquireCall`: lease "0" is the plain kind (no ids).
    fn acquire(
        &self,
        r: &str,
        n: u32,
        lease: &str,
        member: &str,
        join: bool,
        ids: &[String],
    ) -> Vec<String> {
        let latch = self.req(r);
        let request = format!("c1:{r}");
        let n = n.to_string();
        let mut args: Vec<&str> = vec![
            &n,
            lease,
            member,
            ALIVE_MS,
            if join { "1" } else { "0" },
            REFUSE_MS,
            "publish",
            &request,
        ];
        args.extend(ids.iter().map(String::as_str));
        script(
            "sem_acquire",
            &[
                &self.counter,
                &self.timeout,
                &self.channel,
                &self.line,
                &self.alive,
                &latch,
                &self.grants,
            ],
            &args,
        )
    }

    /// A plain acquisition that never waits.
    fn take(&self, r: &str, n: u32) -> Vec<String> {
        self.acquire(r, n, "0", "", false, &[])
    }

    /// `SemAddCall` (add_permits or a look); `acquisition`, when given,
    /// names a plain acquisition whose release follows (a plain release
    /// is `sem_cancel.lua`: see [`S::cancel`]).
    fn add(&self, r: &str, acquisition: Option<&str>, n: i64, expirable: bool) -> Vec<String> {
        if let Some(acquired) = acquisition {
            return self.cancel(acquired, 0, false, "", &[]);
        }
        let latch = self.req(r);
        script(
            "sem_add",
            &[&self.counter, &self.timeout, &self.channel, &latch],
            &[
                &n.to_string(),
                if expirable { "1" } else { "0" },
                LATCH_MS,
                "publish",
            ],
        )
    }

    /// `PermitReleaseCall`.
    fn release(&self, ids: &[String]) -> Vec<String> {
        let mut args = vec!["publish"];
        args.extend(ids.iter().map(String::as_str));
        script(
            "sem_release",
            &[&self.counter, &self.timeout, &self.channel],
            &args,
        )
    }

    /// `SemCancelCall` (ids: the expirable kind's).
    fn cancel(
        &self,
        r: &str,
        n: u32,
        expirable: bool,
        member: &str,
        ids: &[String],
    ) -> Vec<String> {
        let _ = n; // the plain kind's n comes from its grant
        let latch = self.req(r);
        let request = format!("c1:{r}");
        let mut args: Vec<&str> = vec![
            if expirable { "1" } else { "0" },
            member,
            REFUSE_MS,
            "publish",
            &request,
        ];
        args.extend(ids.iter().map(String::as_str));
        script(
            "sem_cancel",
            &[
                &self.counter,
                &self.timeout,
                &self.channel,
                &self.line,
                &self.alive,
                &latch,
                &self.grants,
            ],
            &args,
        )
    }

    /// `leave_cmd`.
    fn leave(&self, member: &str) -> Vec<String> {
        script(
            "sem_leave",
            &[&self.counter, &self.line, &self.alive, &self.channel],
            &[member, "publish"],
        )
    }

    /// `set_cmd` of a semaphore: the message is the value.
    fn set(&self, permits: &str) -> Vec<String> {
        script(
            "sem_set",
            &[&self.counter, &self.channel],
            &[permits, permits, "publish"],
        )
    }

    fn subscribe(&self) -> Step {
        Step::Subscribe {
            channel: self.channel.clone(),
            sharded: false,
        }
    }
}

/// The Redis names of one count-down latch (lock-core's `LatchKeys`).
struct L {
    counter: String,
    channel: String,
    request_prefix: String,
}

impl L {
    fn new(name: &str) -> L {
        L {
            counter: name.to_string(),
            channel: format!("redisson_countdownlatch__channel__{{{name}}}"),
            request_prefix: format!("lockcore_latch_req:{{{name}}}:"),
        }
    }

    fn req(&self, r: &str) -> String {
        format!("{}c1:{r}", self.request_prefix)
    }

    /// `set_cmd` of a latch: the message is '1'.
    fn set(&self, count: &str) -> Vec<String> {
        script(
            "sem_set",
            &[&self.counter, &self.channel],
            &[count, "1", "publish"],
        )
    }

    /// `count_down_cmd`.
    fn count_down(&self, r: &str) -> Vec<String> {
        let latch = self.req(r);
        script(
            "latch_count_down",
            &[&self.counter, &self.channel, &latch],
            &[LATCH_MS, "publish"],
        )
    }
}

/// The cases, each on its own semaphore (latch, lock) name from `name`.
pub(super) fn cases(name: &mut dyn FnMut() -> String) -> Vec<(&'static str, Vec<Step>)> {
    let mut table: Vec<(&'static str, Vec<Step>)> = Vec::new();

    // ---- sem_set.lua ----
    let (s, l) = (S::new(&name()), L::new(&name()));
    table.push((
        "sem_set: permits set once (message: the value), a latch's count (message '1'); 0 when it exists",
        vec![
            s.subscribe(),
            Step::Subscribe {
                channel: l.channel.clone(),
                sharded: false,
            },
            step(s.set("3")),
            step(s.set("5")),
            step(l.set("2")),
            step(l.set("7")),
            Step::Messages,
            cmd(&["GET", &s.counter]),
            cmd(&["GET", &l.counter]),
        ],
    ));

    // ---- sem_acquire.lua, the plain kind ----
    let s = S::new(&name());
    table.push((
        "sem_acquire plain: granted → {1, left}, the request latch set; a repeat → {1, available}; refused → {0, available, -1}; a cancelled request → {-2, 0}",
        vec![
            step(s.take("1", 1)),
            cmd(&["SET", &s.counter, "3"]),
            step(s.take("2", 2)),
            cmd(&["GET", &s.counter]),
            cmd(&["GET", &s.req("2")]),
            ruled(Rule::Ttl, &["PTTL", &s.req("2")]),
            step(s.take("2", 2)),
            step(s.take("3", 2)),
            cmd(&["EXISTS", &s.req("3")]),
            cmd(&["SET", &s.req("4"), "cancelled", "PX", REFUSE_MS]),
            step(s.take("4", 1)),
            step(s.take("5", 1)),
            cmd(&["GET", &s.counter]),
            // a plain acquire never touches the permit set
            cmd(&["EXISTS", &s.timeout]),
        ],
    ));
    let s = S::new(&name());
    table.push((
        "sem_acquire line: a refused waiter joins once, one asking for 3 blocks those behind it, its own turn comes first, a waiter that stopped asking leaves",
        vec![
            Step::Subscribe {
                channel: s.channel.clone(),
                sharded: false,
            },
            cmd(&["SET", &s.counter, "2"]),
            // c1 has waited since long ago (members of one millisecond
            // would sort by name)
            cmd(&["ZADD", &s.line, "1", "3:c1:1"]),
            cmd(&["ZADD", &s.alive, "9999999999999", "3:c1:1"]),
            step(s.acquire("1", 3, "0", "3:c1:1", true, &[])),
            step(s.acquire("2", 1, "0", "1:c2:1", true, &[])),
            // one that never waits is behind the line too
            step(s.take("3", 1)),
            // asking again keeps the place (ZADD NX)
            step(s.acquire("4", 3, "0", "3:c1:1", true, &[])),
            cmd(&["ZRANGE", &s.line, "0", "-1"]),
            ruled(Rule::Ttl, &["PTTL", &s.line]),
            ruled(Rule::Ttl, &["PTTL", &s.alive]),
            // a refused attempt that does not join stays out
            step(s.acquire("5", 1, "0", "1:c3:1", false, &[])),
            cmd(&["ZCARD", &s.line]),
            step(s.add("6", None, 1, false)),
            step(s.acquire("7", 1, "0", "1:c2:1", true, &[])),
            step(s.acquire("8", 3, "0", "3:c1:1", true, &[])),
            cmd(&["ZRANGE", &s.line, "0", "-1"]),
            cmd(&["EXISTS", &s.req("8")]),
            // c2's place lapsed: its alive time is past
            cmd(&["ZADD", &s.alive, "XX", "1000", "1:c2:1"]),
            step(s.take("9", 1)),
            cmd(&["ZCARD", &s.line]),
            cmd(&["ZCARD", &s.alive]),
            Step::Messages,
        ],
    ));
    let s = S::new(&name());
    let mut full = vec!["ZADD".to_string(), s.line.clone()];
    for i in 0..64 {
        full.push(i.to_string());
        full.push(format!("0:c9:{i}"));
    }
    table.push((
        "sem_acquire line: 64 waiters ahead (asking for 0) keep a newcomer out, 63 do not",
        vec![
            cmd(&["SET", &s.counter, "1"]),
            step(full),
            step(s.take("1", 1)),
            cmd(&["ZREM", &s.line, "0:c9:63"]),
            step(s.take("2", 1)),
            cmd(&["GET", &s.counter]),
        ],
    ));

    // ---- sem_acquire.lua, the expirable kind ----
    let s = S::new(&name());
    table.push((
        "sem_acquire expirable: ids with their expiry, the set takes the counter's TTL, refused → ms to the nearest expiry, expired permits come back first (waiters told)",
        vec![
            s.subscribe(),
            cmd(&["SET", &s.counter, "2"]),
            step(s.acquire("1", 1, "30000", "", false, &[id(1)])),
            cmd(&["PTTL", &s.timeout]),
            ruled(Rule::ClockMs, &["ZSCORE", &s.timeout, &id(1)]),
            cmd(&["PEXPIRE", &s.counter, "50000"]),
            step(s.acquire("2", 1, "10000", "", false, &[id(2)])),
            ruled(Rule::Ttl, &["PTTL", &s.timeout]),
            ruled(Rule::ClockMs, &["ZSCORE", &s.timeout, &id(2)]),
            step_as(
                Rule::LastTtl,
                s.acquire("3", 1, "30000", "", false, &[id(3)]),
            ),
            // id 1 expired: back first, so 1 is there, 2 are asked for
            cmd(&["ZADD", &s.timeout, "XX", "1000", &id(1)]),
            step_as(
                Rule::LastTtl,
                s.acquire("4", 2, "30000", "2:c1:4", true, &[id(4), id(5)]),
            ),
            Step::Messages,
            cmd(&["ZRANGE", &s.timeout, "0", "-1"]),
            cmd(&["ZRANGE", &s.line, "0", "-1"]),
            // id 2 expired too: the waiter's turn, with both
            cmd(&["ZADD", &s.timeout, "XX", "1000", &id(2)]),
            step(s.acquire("5", 2, "30000", "2:c1:4", true, &[id(4), id(5)])),
            cmd(&["EXISTS", &s.line]),
            step_as(
                Rule::LastTtl,
                s.acquire("6", 1, "30000", "", false, &[id(6)]),
            ),
            cmd(&["GET", &s.counter]),
            cmd(&["ZRANGE", &s.timeout, "0", "-1"]),
            Step::Messages,
            // refused with nothing held: no expiry to wait for
            cmd(&["DEL", &s.timeout]),
            step(s.acquire("7", 1, "30000", "", false, &[id(7)])),
        ],
    ));
    let s = S::new(&name());
    let mut expired = vec!["ZADD".to_string(), s.timeout.clone()];
    for i in 0..20 {
        expired.push("1".to_string());
        expired.push(id(100 + i));
    }
    table.push((
        "sem_acquire expirable: expired permits come back at most max(n, 16) at a time",
        vec![
            s.subscribe(),
            step(expired),
            step(s.acquire("1", 1, "30000", "", false, &[id(1)])),
            cmd(&["GET", &s.counter]),
            cmd(&["ZCARD", &s.timeout]),
            step(s.acquire("2", 1, "30000", "", false, &[id(2)])),
            cmd(&["GET", &s.counter]),
            cmd(&["ZCARD", &s.timeout]),
            Step::Messages,
        ],
    ));
    let s = S::new(&name());
    table.push((
        "sem_acquire: a counter that is not an integer → the script's error reply (also inside a repeat's reply); of another type → WRONGTYPE",
        vec![
            cmd(&["SET", &s.counter, "many"]),
            step(s.take("1", 1)),
            step(s.acquire("2", 1, "30000", "", false, &[id(1)])),
            cmd(&["SET", &s.req("3"), "1", "PX", LATCH_MS]),
            step(s.take("3", 1)),
            cmd(&["DEL", &s.counter]),
            cmd(&["HSET", &s.counter, "f", "v"]),
            step(s.take("4", 1)),
            cmd(&["EXISTS", &s.req("4")]),
        ],
    ));

    // ---- sem_add.lua ----
    let s = S::new(&name());
    table.push((
        "sem_add: a plain release → {1, after} (waiters told, the acquisition's latch marked); a retry → {0, v}; below zero → {-1, v}; n = 0 looks, and of the expirable kind reclaims",
        vec![
            s.subscribe(),
            cmd(&["SET", &s.counter, "1"]),
            step(s.take("1", 1)),
            step(s.add("2", Some("1"), 1, false)),
            cmd(&["GET", &s.req("1")]),
            ruled(Rule::Ttl, &["PTTL", &s.req("1")]),
            ruled(Rule::Ttl, &["PTTL", &s.req("2")]),
            step(s.add("2", Some("1"), 1, false)),
            step(s.take("1", 1)),
            step(s.add("3", None, 2, false)),
            step(s.add("4", None, -5, false)),
            cmd(&["EXISTS", &s.req("4")]),
            step(s.add("5", None, -3, false)),
            step(s.add("6", None, 0, false)),
            cmd(&["EXISTS", &s.req("6")]),
            cmd(&[
                "ZADD",
                &s.timeout,
                "1",
                &id(1),
                "2",
                &id(2),
                "9999999999999",
                &id(3),
            ]),
            step(s.add("7", None, 0, true)),
            step(s.add("8", None, -2, true)),
            // a fresh semaphore: the counter is made
            cmd(&["DEL", &s.counter]),
            step(s.add("9", None, 2, true)),
            Step::Messages,
        ],
    ));
    let s = S::new(&name());
    table.push((
        "sem_add: a counter that is not an integer → the script's error; a fraction → INCRBY's error",
        vec![
            cmd(&["SET", &s.counter, "x"]),
            step(s.add("1", None, 1, false)),
            step(s.add("2", None, 0, true)),
            cmd(&["SET", &s.counter, "1.5"]),
            step(s.add("3", None, 1, false)),
            step(s.add("4", None, 0, false)),
            cmd(&["EXISTS", &s.req("3")]),
        ],
    ));

    // ---- sem_release.lua ----
    let s = S::new(&name());
    table.push((
        "sem_release: ids given back once each; expired ids come back but are not counted released; a retry → {0, v}",
        vec![
            s.subscribe(),
            cmd(&["SET", &s.counter, "0"]),
            cmd(&[
                "ZADD",
                &s.timeout,
                "9999999999999",
                &id(1),
                "9999999999999",
                &id(2),
                "1",
                &id(3),
            ]),
            step(s.release(&[id(1), id(3)])),
            step(s.release(&[id(1), id(3)])),
            step(s.release(&[id(2), id(9)])),
            step(s.release(&[id(2)])),
            cmd(&["GET", &s.counter]),
            cmd(&["EXISTS", &s.timeout]),
            Step::Messages,
        ],
    ));

    // ---- sem_cancel.lua ----
    let s = S::new(&name());
    table.push((
        "sem_cancel: never applied → 0, a late copy refused; applied (plain) → n back; applied (expirable) → the ids still there; a waiter's place goes",
        vec![
            s.subscribe(),
            cmd(&["SET", &s.counter, "2"]),
            step(s.cancel("1", 1, false, "", &[])),
            cmd(&["GET", &s.req("1")]),
            ruled(Rule::Ttl, &["PTTL", &s.req("1")]),
            step(s.take("1", 1)),
            step(s.take("2", 2)),
            step(s.cancel("2", 2, false, "", &[])),
            step(s.cancel("2", 2, false, "", &[])),
            cmd(&["GET", &s.counter]),
            step(s.acquire("3", 2, "30000", "", false, &[id(1), id(2)])),
            cmd(&["ZREM", &s.timeout, &id(1)]),
            step(s.cancel("3", 2, true, "", &[id(1), id(2)])),
            cmd(&["GET", &s.counter]),
            cmd(&["ZADD", &s.line, "5", "1:c1:4"]),
            cmd(&["ZADD", &s.alive, "9999999999999", "1:c1:4"]),
            step(s.cancel("4", 1, false, "1:c1:4", &[])),
            cmd(&["EXISTS", &s.line, &s.alive]),
            Step::Messages,
        ],
    ));

    // ---- sem_leave.lua ----
    let s = S::new(&name());
    table.push((
        "sem_leave: in the line → 1 (waiters told when permits are there); not in it → 0",
        vec![
            s.subscribe(),
            cmd(&["ZADD", &s.line, "1", "1:c1:1", "2", "2:c2:1"]),
            cmd(&[
                "ZADD",
                &s.alive,
                "9999999999999",
                "1:c1:1",
                "9999999999999",
                "2:c2:1",
            ]),
            step(s.leave("1:c1:1")),
            cmd(&["SET", &s.counter, "2"]),
            step(s.leave("2:c2:1")),
            step(s.leave("2:c2:1")),
            cmd(&["EXISTS", &s.line, &s.alive]),
            Step::Messages,
        ],
    ));

    // ---- latch_count_down.lua ----
    let l = L::new(&name());
    table.push((
        "latch_count_down: once per request; at zero the key goes and '0' is told; below zero no message",
        vec![
            Step::Subscribe {
                channel: l.channel.clone(),
                sharded: false,
            },
            step(l.set("2")),
            step(l.count_down("1")),
            step(l.count_down("1")),
            ruled(Rule::Ttl, &["PTTL", &l.req("1")]),
            step(l.count_down("2")),
            cmd(&["EXISTS", &l.counter]),
            step(l.count_down("2")),
            step(l.count_down("3")),
            cmd(&["EXISTS", &l.counter]),
            Step::Messages,
        ],
    ));

    // ---- renew.lua with permit fields ----
    let (s, a) = (S::new(&name()), K::new(&name()));
    let field = |ids: &[String]| format!("\0{}", ids.iter().map(|i| hex(i)).collect::<String>());
    table.push((
        "renew: permit ids (NUL + ids) live → '1', extended to now + lease and never shortened; an expired or missing id → '0'; beside a lock's field",
        vec![
            cmd(&["SET", &s.counter, "5"]),
            step(s.acquire("1", 2, "1000", "", false, &[id(1), id(2)])),
            step(s.acquire("2", 1, "100000", "", false, &[id(3)])),
            step_as(Rule::Token, a.new_hold("c1:1", "c1")),
            step(script(
                "renew",
                &[&s.timeout, &s.timeout, &a.lock, &s.timeout],
                &[
                    LEASE,
                    &field(&[id(1), id(2)]),
                    &field(&[id(3)]),
                    "c1:1",
                    &field(&[id(1), id(9)]),
                ],
            )),
            ruled(Rule::ClockMs, &["ZSCORE", &s.timeout, &id(1)]),
            ruled(Rule::ClockMs, &["ZSCORE", &s.timeout, &id(3)]),
            cmd(&["ZADD", &s.timeout, "XX", "1", &id(2)]),
            step(script(
                "renew",
                &[&s.timeout, "conf:none"],
                &["50000", &field(&[id(2), id(1)]), &field(&[id(1)])],
            )),
            cmd(&["ZSCORE", &s.timeout, &id(2)]),
            ruled(Rule::ClockMs, &["ZSCORE", &s.timeout, &id(1)]),
            cmd(&["EXISTS", "conf:none"]),
        ],
    ));
    table
}
