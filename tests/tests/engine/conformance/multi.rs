//! The conformance table's cases of the multi-lock's grant
//! (`multi_acquire.lua`), with the argument shapes lock-core's call sends
//! (`lock-core/src/protocol/multi_acquire.rs`): four keys per lock (the
//! hash, its token key, the request's latch for it, its turn key), then
//! the lease, the token retention, the client id and an owner id per lock.

use super::{cmd, ruled, script, step, Rule, Step, K, LEASE, RETENTION};

/// The locks of one multi-acquire call.
struct M {
    locks: Vec<K>,
}

impl M {
    fn new(names: &[String]) -> M {
        M {
            locks: names.iter().map(|n| K::new(n)).collect(),
        }
    }

    /// A multi-acquire by `client` with one owner id per lock (its latch
    /// named after the owner, as lock-core names it).
    fn acquire(&self, owners: &[&str], client: &str) -> Vec<String> {
        let latches: Vec<String> = self
            .locks
            .iter()
            .zip(owners)
            .map(|(k, o)| k.latch(o))
            .collect();
        let mut keys: Vec<&str> = Vec::new();
        for (k, latch) in self.locks.iter().zip(&latches) {
            keys.extend([
                k.lock.as_str(),
                k.token.as_str(),
                latch.as_str(),
                k.turn.as_str(),
            ]);
        }
        let mut args = vec![LEASE, RETENTION, client];
        args.extend(owners);
        script("multi_acquire", &keys, &args)
    }
}

/// A multi-acquire step, compared by [`Rule::Multi`].
fn multi(args: Vec<String>) -> Step {
    Step::Cmd(args, Rule::Multi)
}

pub(super) fn cases(name: &mut dyn FnMut() -> String) -> Vec<(&'static str, Vec<Step>)> {
    let mut table: Vec<(&'static str, Vec<Step>)> = Vec::new();
    let owners = ["c1:1", "c1:2", "c1:3"];

    let m = M::new(&[name(), name(), name()]);
    let (a, b, c) = (&m.locks[0], &m.locks[1], &m.locks[2]);
    table.push((
        "multi_acquire: free locks all taken, a token each (stored as acquire.lua stores it), each hash Redisson's with the lease; a second copy of the request answers taken again with new tokens, counts unchanged",
        vec![
            multi(m.acquire(&owners, "c1")),
            cmd(&["HGETALL", &a.lock]),
            cmd(&["HGETALL", &b.lock]),
            cmd(&["HGETALL", &c.lock]),
            ruled(Rule::Ttl, &["PTTL", &b.lock]),
            ruled(Rule::Ttl, &["PTTL", &c.token]),
            multi(m.acquire(&owners, "c1")),
            cmd(&["HGETALL", &c.lock]),
            cmd(&["EXISTS", &a.latch("c1:1")]),
        ],
    ));

    let m = M::new(&[name(), name(), name()]);
    let (a, b, c) = (&m.locks[0], &m.locks[1], &m.locks[2]);
    table.push((
        "multi_acquire: one lock held, nothing taken, {0, pttl, i} of the shortest wait; no expiry (-1) is the longest wait; a lock key of another type is held with no expiry",
        vec![
            cmd(&["HSET", &c.lock, "other:1", "1"]),
            step(m.acquire(&owners, "c1")),
            cmd(&["EXISTS", &a.lock, &b.lock]),
            cmd(&["HSET", &b.lock, "other:2", "1"]),
            cmd(&["PEXPIRE", &b.lock, "50000"]),
            multi(m.acquire(&owners, "c1")),
            cmd(&["DEL", &b.lock, &c.lock]),
            cmd(&["SET", &a.lock, "a string"]),
            step(m.acquire(&owners, "c1")),
            cmd(&["EXISTS", &b.lock, &c.lock]),
            cmd(&["GET", &a.lock]),
        ],
    ));

    let m = M::new(&[name(), name()]);
    let (a, b) = (&m.locks[0], &m.locks[1]);
    let two = ["c1:1", "c1:2"];
    table.push((
        "multi_acquire: a request one of whose latches exists (cancelled) takes nothing, {-2, 0, 0}; the other client's turn on a free lock is a wait of the turn's PTTL; this client's turn is taken and used up",
        vec![
            cmd(&["SET", &b.latch("c1:2"), "x", "PX", "10000"]),
            step(m.acquire(&two, "c1")),
            cmd(&["EXISTS", &a.lock, &b.lock]),
            cmd(&["DEL", &b.latch("c1:2")]),
            cmd(&["SET", &a.turn, "c2", "PX", "40000"]),
            multi(m.acquire(&two, "c1")),
            cmd(&["EXISTS", &a.lock, &b.lock]),
            cmd(&["SET", &a.turn, "c1", "PX", "40000"]),
            multi(m.acquire(&two, "c1")),
            cmd(&["EXISTS", &a.turn]),
            cmd(&["HGETALL", &a.lock]),
            cmd(&["HGETALL", &b.lock]),
        ],
    ));

    let m = M::new(&[name(), name()]);
    let (a, b) = (&m.locks[0], &m.locks[1]);
    table.push((
        "multi_acquire: a second copy that finds only part of its holds (the rest expired) removes them and takes nothing, {0, 0, 1}; a later token above a stored one is one above it",
        vec![
            cmd(&["HSET", &a.lock, "c1:1", "1"]),
            step(m.acquire(&two, "c1")),
            cmd(&["EXISTS", &a.lock, &b.lock]),
            cmd(&["SET", &b.token, "8000000000000000", "PX", "60000"]),
            multi(m.acquire(&["c1:5", "c1:6"], "c1")),
            cmd(&["GET", &b.token]),
        ],
    ));
    table
}
