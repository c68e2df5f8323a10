//! The conformance table's cases of the fair lock's scripts
//! (`fair_acquire.lua`, `fair_release.lua`, `fair_cancel.lua`,
//! `fair_force_unlock.lua`) with the argument shapes lock-core's calls send
//! (`lock-core/src/protocol/fair.rs`). The callers' clocks are arguments,
//! so the cases pass fixed times and the deadlines compare exactly.

use super::{cmd, ruled, script, step, step_as, Rule, Step, K, LATCH_MS, LEASE, RETENTION};

/// The wait allowance and the liveness lapse the cases use.
const ALLOWANCE: &str = "5000";
const LAPSE: &str = "3000";

/// The fair names of one lock (Redisson's queue and deadlines, lock-core's
/// liveness marks) beside the lock's own.
struct F {
    k: K,
    queue: String,
    timeouts: String,
    alive: String,
}

impl F {
    fn new(name: &str) -> F {
        F {
            k: K::new(name),
            queue: format!("redisson_lock_queue:{{{name}}}"),
            timeouts: format!("redisson_lock_timeout:{{{name}}}"),
            alive: format!("lockcore_fair_alive:{{{name}}}"),
        }
    }

    fn channel(&self, owner: &str) -> String {
        format!("{}:{owner}", self.k.channel)
    }

    /// fair_acquire.lua: `mode` 'once', 'wait' or 're'; `now` the caller's clock.
    fn acquire(&self, owner: &str, mode: &str, now: &str) -> Vec<String> {
        let latch = self.k.latch(owner);
        script(
            "fair_acquire",
            &[
                &self.k.lock,
                &self.k.token,
                &latch,
                &self.queue,
                &self.timeouts,
                &self.alive,
                &self.k.channel,
            ],
            &[
                LEASE, owner, mode, RETENTION, LATCH_MS, ALLOWANCE, now, LAPSE, "0", "publish",
            ],
        )
    }

    fn release(&self, owner: &str, counts: &str, now: &str) -> Vec<String> {
        script(
            "fair_release",
            &[
                &self.k.lock,
                &self.k.channel,
                &self.queue,
                &self.timeouts,
                &self.alive,
            ],
            &[owner, LEASE, "0", now, counts, "publish"],
        )
    }

    fn cancel(&self, owner: &str, mode: &str) -> Vec<String> {
        let latch = self.k.latch(owner);
        script(
            "fair_cancel",
            &[
                &self.k.lock,
                &self.k.channel,
                &latch,
                &self.queue,
                &self.timeouts,
                &self.alive,
            ],
            &[owner, mode, "0", LATCH_MS, "publish", ALLOWANCE],
        )
    }

    fn force_unlock(&self, now: &str) -> Vec<String> {
        script(
            "fair_force_unlock",
            &[
                &self.k.lock,
                &self.k.channel,
                &self.queue,
                &self.timeouts,
                &self.alive,
            ],
            &["0", "publish", now],
        )
    }
}

pub(super) fn cases(name: &mut dyn FnMut() -> String) -> Vec<(&'static str, Vec<Step>)> {
    let mut table: Vec<(&'static str, Vec<Step>)> = Vec::new();
    let now = "1000000000";

    let f = F::new(&name());
    table.push((
        "fair_acquire: a held lock (here without expiry, so the deadlines are exact); waiters queue in order with Redisson's deadlines (holder's PTTL + allowance, then the predecessor's + allowance) and a liveness mark; a queued waiter is told the time to its predecessor's deadline; the release tells the head on its own channel; the head's grant takes the allowance off the deadlines left",
        vec![
            Step::Subscribe {
                channel: f.channel("c2:1"),
                sharded: false,
            },
            // a holder without expiry (a PTTL of -1): deadlines exact
            cmd(&["HSET", &f.k.lock, "c1:1", "1"]),
            step(f.acquire("c2:1", "wait", now)),
            step(f.acquire("c3:1", "wait", now)),
            cmd(&["LRANGE", &f.queue, "0", "-1"]),
            cmd(&["ZSCORE", &f.timeouts, "c2:1"]),
            cmd(&["ZSCORE", &f.timeouts, "c3:1"]),
            cmd(&["ZRANGE", &f.alive, "0", "-1"]),
            ruled(Rule::ClockMs, &["ZSCORE", &f.alive, "c2:1"]),
            ruled(Rule::Ttl, &["PTTL", &f.alive]),
            step(f.acquire("c3:1", "wait", now)),
            cmd(&["LLEN", &f.queue]),
            step(f.release("c1:1", "1", now)),
            Step::Messages,
            cmd(&["EXISTS", &f.k.lock]),
            step(f.acquire("c3:1", "wait", now)),
            step_as(Rule::Token, f.acquire("c2:1", "wait", now)),
            cmd(&["LRANGE", &f.queue, "0", "-1"]),
            cmd(&["ZSCORE", &f.timeouts, "c3:1"]),
            cmd(&["ZRANGE", &f.alive, "0", "-1"]),
            cmd(&["HGETALL", &f.k.lock]),
        ],
    ));

    let f = F::new(&name());
    table.push((
        "fair_acquire: 'once' never queues and is refused a free lock reserved for the head; a repeated copy of a grant answers granted again; 're' re-enters with a latch",
        vec![
            step_as(Rule::Token, f.acquire("c1:1", "once", now)),
            step_as(Rule::PairTtl, f.acquire("c2:1", "once", now)),
            cmd(&["EXISTS", &f.queue, &f.timeouts, &f.alive]),
            step_as(Rule::PairTtl, f.acquire("c2:1", "wait", now)),
            step(f.release("c1:1", "1", now)),
            step(f.acquire("c3:1", "once", now)),
            step_as(Rule::Token, f.acquire("c2:1", "wait", now)),
            step_as(Rule::Token, f.acquire("c2:1", "wait", now)),
            cmd(&["HGETALL", &f.k.lock]),
            step(f.acquire("c2:1", "re", now)),
            cmd(&["HGETALL", &f.k.lock]),
            cmd(&["GET", &f.k.latch("c2:1")]),
            step(f.release("c2:1", "2", now)),
            step(f.release("c2:1", "2", now)),
            cmd(&["HGETALL", &f.k.lock]),
            step(f.release("c2:1", "1", now)),
            step(f.release("c2:1", "1", now)),
            cmd(&["EXISTS", &f.k.lock]),
        ],
    ));

    let f = F::new(&name());
    table.push((
        "fair_acquire: dead heads leave — a Redisson waiter (no mark) when its deadline passed, a lock-core waiter when its mark (server clock) lapsed however far its deadline; a live mark keeps a head whose deadline passed; a grant to an overdue head moves nobody up",
        vec![
            cmd(&["RPUSH", &f.queue, "java:1", "c2:1", "c3:1", "java:4"]),
            cmd(&[
                "ZADD",
                &f.timeouts,
                "999999000",
                "java:1",
                "1000900000",
                "c2:1",
                "999999500",
                "c3:1",
                "1000005000",
                "java:4",
            ]),
            // c2's mark lapsed long ago, c3's lasts (server clock)
            cmd(&["ZADD", &f.alive, "1", "c2:1", "99999999999999", "c3:1"]),
            step(f.acquire("c9:1", "once", now)),
            cmd(&["LRANGE", &f.queue, "0", "-1"]),
            cmd(&["ZRANGE", &f.timeouts, "0", "-1"]),
            cmd(&["ZRANGE", &f.alive, "0", "-1"]),
            // c3, overdue but alive, is granted: java:4 keeps its deadline
            step_as(Rule::Token, f.acquire("c3:1", "wait", now)),
            cmd(&["ZSCORE", &f.timeouts, "java:4"]),
            step(f.release("c3:1", "1", now)),
            step_as(Rule::Token, f.acquire("c9:1", "once", "1000006000")),
            cmd(&["HGETALL", &f.k.lock]),
            cmd(&["EXISTS", &f.queue, &f.timeouts]),
        ],
    ));

    let f = F::new(&name());
    table.push((
        "fair_acquire: a free lock whose head is another waiter (its predecessor just pruned as dead) — an attempt, 'once' or 'wait', is refused and tells the head on its own channel; the head's attempt then takes it",
        vec![
            Step::Subscribe {
                channel: f.channel("c3:1"),
                sharded: false,
            },
            cmd(&["RPUSH", &f.queue, "java:1", "c3:1"]),
            cmd(&[
                "ZADD",
                &f.timeouts,
                "999999000",
                "java:1",
                "1000900000",
                "c3:1",
            ]),
            cmd(&["ZADD", &f.alive, "99999999999999", "c3:1"]),
            step(f.acquire("c9:1", "once", now)),
            Step::Messages,
            cmd(&["LRANGE", &f.queue, "0", "-1"]),
            step(f.acquire("c8:1", "wait", now)),
            Step::Messages,
            cmd(&["LRANGE", &f.queue, "0", "-1"]),
            step_as(Rule::Token, f.acquire("c3:1", "wait", now)),
            Step::Messages,
            cmd(&["LRANGE", &f.queue, "0", "-1"]),
        ],
    ));

    let f = F::new(&name());
    table.push((
        "fair_cancel: a waiter leaving takes the allowance off those behind it and wakes the new head of a free lock; a grant whose reply was lost is undone; a late copy is refused by the latch",
        vec![
            Step::Subscribe {
                channel: f.channel("c3:1"),
                sharded: false,
            },
            cmd(&["HSET", &f.k.lock, "c1:1", "1"]),
            step(f.acquire("c2:1", "wait", now)),
            step(f.acquire("c3:1", "wait", now)),
            step(f.acquire("c4:1", "wait", now)),
            cmd(&["ZSCORE", &f.timeouts, "c3:1"]),
            step(f.cancel("c2:1", "new")),
            cmd(&["LRANGE", &f.queue, "0", "-1"]),
            cmd(&["ZSCORE", &f.timeouts, "c3:1"]),
            cmd(&["ZSCORE", &f.timeouts, "c4:1"]),
            cmd(&["ZRANGE", &f.alive, "0", "-1"]),
            step(f.acquire("c2:1", "wait", now)),
            cmd(&["LLEN", &f.queue]),
            step(f.cancel("c1:1", "new")),
            Step::Messages,
            cmd(&["EXISTS", &f.k.lock]),
            step_as(Rule::Token, f.acquire("c3:1", "wait", now)),
            step(f.cancel("c3:1", "new")),
            cmd(&["EXISTS", &f.k.lock]),
            step(f.acquire("c3:1", "wait", now)),
            cmd(&["LRANGE", &f.queue, "0", "-1"]),
        ],
    ));

    let f = F::new(&name());
    table.push((
        "fair_force_unlock: deletes whoever holds and tells the first live waiter (dead heads leave first); nothing to delete → 0",
        vec![
            Step::Subscribe {
                channel: f.channel("c3:1"),
                sharded: false,
            },
            cmd(&["HSET", &f.k.lock, "c1:1", "1"]),
            cmd(&["RPUSH", &f.queue, "java:2"]),
            cmd(&["ZADD", &f.timeouts, "999999000", "java:2"]),
            step(f.acquire("c3:1", "wait", now)),
            step(f.force_unlock(now)),
            Step::Messages,
            cmd(&["LRANGE", &f.queue, "0", "-1"]),
            step(f.force_unlock(now)),
        ],
    ));
    table
}
