//! The conformance table's cases of the fenced write (`fenced.lua` around
//! a caller's body, sent with `EVAL` here: its source depends on the body)
//! and of an election's leader record (`leader_record.lua`,
//! `leader_read.lua`), with the argument shapes lock-core's calls send
//! (`lock-core/src/protocol/fenced.rs`, `election.rs`): the lock first,
//! then the caller's keys; the hold's field first, then the caller's
//! arguments.

use super::{cmd, eval, ruled, script, step, Rule, Step, K};

/// `fenced.lua` around `body`, as lock-core puts it together.
fn fenced(body: &str) -> String {
    include_str!("../../../../lock-core/src/protocol/fenced.lua").replacen("--BODY--", body, 1)
}

/// The record and channel of the election on lock `name`.
struct E {
    k: K,
    record: String,
    channel: String,
}

impl E {
    fn new(name: &str) -> E {
        E {
            k: K::new(name),
            record: format!("lockcore_leader:{{{name}}}"),
            channel: format!("lockcore_leader__channel:{{{name}}}"),
        }
    }

    fn record(&self, field: &str, value: &str, term: &str) -> Vec<String> {
        script(
            "leader_record",
            &[&self.k.lock, &self.record, &self.channel],
            &[field, value, term, "90000", "publish"],
        )
    }

    fn read(&self) -> Vec<String> {
        script("leader_read", &[&self.k.lock, &self.record], &[])
    }
}

pub(super) fn cases(name: &mut dyn FnMut() -> String) -> Vec<(&'static str, Vec<Step>)> {
    let mut table: Vec<(&'static str, Vec<Step>)> = Vec::new();

    // ---- fenced.lua ----
    let k = K::new(&name());
    let key = format!("{}:stock", k.lock);
    let latch = k.latch("f-1");
    let incr = fenced("return redis.call('incrby', KEYS[1], ARGV[1])");
    let echo = fenced("return {KEYS[1], KEYS[2], ARGV[1], #KEYS, #ARGV}");
    table.push((
        "fenced: the body runs with its own KEYS and ARGV while the hold's field is in the lock; refused with LOCKCORE_FENCED (nothing written) when it is not, or when the lock is gone",
        vec![
            cmd(&["HSET", &k.lock, "c1:1", "1"]),
            eval(&incr, &[&k.lock, &latch, &key], &["c1:1", "0", "5"]),
            eval(&incr, &[&k.lock, &latch, &key], &["c1:1", "0", "-2"]),
            eval(&echo, &[&k.lock, &latch, "a", "b"], &["c1:1", "0", "x"]),
            eval(&fenced("return nil"), &[&k.lock, &latch], &["c1:1", "0"]),
            eval(&fenced("return redis.error_reply('MINE no')"), &[&k.lock, &latch], &["c1:1", "0"]),
            eval(&incr, &[&k.lock, &latch, &key], &["c2:1", "0", "100"]),
            cmd(&["GET", &key]),
            cmd(&["EXISTS", &latch]),
            cmd(&["DEL", &k.lock]),
            eval(&incr, &[&k.lock, &latch, &key], &["c1:1", "0", "100"]),
            cmd(&["GET", &key]),
        ],
    ));
    let k = K::new(&name());
    let key = format!("{}:stock", k.lock);
    let (first, second) = (k.latch("f-1"), k.latch("f-2"));
    table.push((
        "fenced with a request latch (a cluster's): the first copy applies and sets the latch, a re-sent copy answers LOCKCORE_FENCED_REPEAT and writes nothing; a refused write sets no latch",
        vec![
            cmd(&["HSET", &k.lock, "c1:1", "1"]),
            eval(&incr, &[&k.lock, &first, &key], &["c1:1", "60000", "5"]),
            ruled(Rule::Ttl, &["PTTL", &first]),
            eval(&incr, &[&k.lock, &first, &key], &["c1:1", "60000", "5"]),
            cmd(&["GET", &key]),
            eval(&incr, &[&k.lock, &second, &key], &["c9:1", "60000", "5"]),
            cmd(&["EXISTS", &second]),
            cmd(&["GET", &key]),
        ],
    ));

    // ---- leader_record.lua, leader_read.lua ----
    let e = E::new(&name());
    table.push((
        "leader: read vacant {0}, held without a record {2, pttl}, recorded {1, pttl, value, term}; a record written (the term published once per holder) only by the lock's holder; a record of a gone holder counts for nothing",
        vec![
            Step::Subscribe {
                channel: e.channel.clone(),
                sharded: false,
            },
            step(e.read()),
            cmd(&["HSET", &e.k.lock, "c1:1", "1"]),
            step(e.read()),
            step(e.record("c1:1", "node-a", "17")),
            step(e.record("c1:1", "node-a", "17")),
            Step::Messages,
            step(e.record("c2:1", "node-b", "18")),
            step(e.read()),
            cmd(&["HGETALL", &e.record]),
            ruled(Rule::Ttl, &["PTTL", &e.record]),
            // the holder changed behind the record's back
            cmd(&["DEL", &e.k.lock]),
            cmd(&["HSET", &e.k.lock, "c3:1", "1"]),
            cmd(&["PEXPIRE", &e.k.lock, "30000"]),
            ruled(Rule::LastTtl, &e.read().iter().map(String::as_str).collect::<Vec<_>>()),
            cmd(&["DEL", &e.k.lock]),
            step(e.read()),
            Step::Messages,
        ],
    ));
    table
}
