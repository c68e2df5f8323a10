//! What the fair lock's fault suites share: the SHA1s of its scripts (to
//! aim the fault proxy at them), a raw read of a fair lock's state in
//! Redis (the hash, Redisson's queue and deadlines, lock-core's liveness
//! marks), and [`FairInside`], an observer of "never two inside" that also
//! records the order of the grants, kept in Redis by its own script on its
//! own connection (not the lock library's).

use std::collections::BTreeMap;

use lock_tests::RedisServer;

use super::{cmd, raw, script_sha};

/// The SHA1 of lock-core's fair acquire script.
pub fn fair_acquire_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/fair_acquire.lua"
    ))
}

/// The SHA1 of lock-core's fair release script.
pub fn fair_release_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/fair_release.lua"
    ))
}

/// The SHA1 of lock-core's fair cancel script (a waiter leaving, an
/// attempt with a lost reply undone).
pub fn fair_cancel_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/fair_cancel.lua"
    ))
}

/// Redisson's queue of the fair lock `name`.
pub fn queue_key(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

/// Redisson's deadlines of the fair lock `name`.
pub fn timeouts_key(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

/// lock-core's liveness marks of the fair lock `name`.
pub fn alive_key(name: &str) -> String {
    format!("lockcore_fair_alive:{{{name}}}")
}

/// A fair lock (no key prefix) as Redis has it, read with raw commands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FairState {
    /// The lock's hash: owner -> count.
    pub holders: BTreeMap<String, String>,
    /// The queue, first first.
    pub queue: Vec<String>,
    /// The deadlines (ms of the clients' clocks).
    pub deadlines: BTreeMap<String, i64>,
    /// lock-core's liveness marks (ms of the server's clock).
    pub marks: BTreeMap<String, i64>,
}

impl FairState {
    /// Nothing left of the lock: no hold, nobody queued, no deadline, no
    /// mark.
    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
            && self.queue.is_empty()
            && self.deadlines.is_empty()
            && self.marks.is_empty()
    }

    /// Queued or holding entries whose owner id starts with `prefix` (a
    /// client id, or a Redisson owner's prefix).
    pub fn of(&self, prefix: &str) -> Vec<String> {
        self.queue
            .iter()
            .chain(self.holders.keys())
            .filter(|o| o.starts_with(prefix))
            .cloned()
            .collect()
    }
}

/// The replies of [`fair_state`]'s four reads.
type RawFairState = (
    Vec<(String, String)>,
    Vec<String>,
    Vec<(String, f64)>,
    Vec<(String, f64)>,
);

/// The state of the fair lock `name`, read with raw commands on `conn`
/// (one `MULTI`/`EXEC`, so the four reads agree).
pub async fn fair_state(conn: &redis::aio::MultiplexedConnection, name: &str) -> FairState {
    let mut conn = conn.clone();
    let (holders, queue, deadlines, marks): RawFairState = redis::pipe()
        .atomic()
        .cmd("HGETALL")
        .arg(name)
        .cmd("LRANGE")
        .arg(queue_key(name))
        .arg(0)
        .arg(-1)
        .cmd("ZRANGE")
        .arg(timeouts_key(name))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .cmd("ZRANGE")
        .arg(alive_key(name))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("fair state of {name}: {e}"));
    FairState {
        holders: holders.into_iter().collect(),
        queue,
        deadlines: deadlines.into_iter().map(|(m, s)| (m, s as i64)).collect(),
        marks: marks.into_iter().map(|(m, s)| (m, s as i64)).collect(),
    }
}

/// The script of [`FairInside`]: `ARGV[1]` is `enter`, `leave` or
/// `forget` (a killed holder's section ends with it), `ARGV[2]` who. On
/// entry, anyone else inside is a violation (recorded with both names);
/// every entry is appended to the order list. Returns how many others
/// were inside and the server's clock in ms.
const FAIR_INSIDE: &str = r"
local op, who = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if op == 'enter' then
  local others = redis.call('SCARD', KEYS[2])
  if others > 0 then
    redis.call('HINCRBY', KEYS[1], 'violations', 1)
    local inside = redis.call('SMEMBERS', KEYS[2])
    redis.call('RPUSH', KEYS[4], who .. ' entered with ' .. table.concat(inside, ','))
  end
  redis.call('SADD', KEYS[2], who)
  redis.call('HINCRBY', KEYS[1], 'entries', 1)
  redis.call('RPUSH', KEYS[3], who)
  return {others, ms}
end
redis.call('SREM', KEYS[2], who)
return {0, ms}
";

/// An independent observer of "never two inside" for a fair lock, that
/// also records who got in, in which order: a set of who is inside, a
/// list of entries and counters in Redis, changed atomically by a script
/// run on its own connection. Every critical section calls
/// [`FairInside::enter`] when it starts and [`FairInside::leave`] when it
/// ends; a killed holder's section is ended by [`FairInside::forget`].
#[derive(Clone)]
pub struct FairInside {
    conn: redis::aio::MultiplexedConnection,
    key: String,
    script: redis::Script,
}

impl FairInside {
    /// A new observer `name` on `server` (its keys cleared).
    pub async fn new(server: &RedisServer, name: &str) -> FairInside {
        let mut inside = FairInside::attach(raw(server).await, name);
        let keys = inside.keys();
        let _: () = cmd(
            &mut inside.conn,
            &["DEL", &keys[0], &keys[1], &keys[2], &keys[3]],
        )
        .await;
        inside
    }

    /// The observer `name` on `conn`, as it is (a child process's).
    pub fn attach(conn: redis::aio::MultiplexedConnection, name: &str) -> FairInside {
        FairInside {
            conn,
            key: format!("observer:fair:{name}"),
            script: redis::Script::new(FAIR_INSIDE),
        }
    }

    fn keys(&self) -> [String; 4] {
        [
            self.key.clone(),
            format!("{}:inside", self.key),
            format!("{}:order", self.key),
            format!("{}:violations", self.key),
        ]
    }

    async fn step(&mut self, op: &str, who: &str) -> (i64, i64) {
        let mut invocation = self.script.prepare_invoke();
        for k in self.keys() {
            invocation.key(k);
        }
        invocation
            .arg(op)
            .arg(who)
            .invoke_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("observer {op} {who}: {e}"))
    }

    /// `who` enters: whether it was alone, and the server's clock (ms).
    pub async fn enter(&mut self, who: &str) -> (bool, i64) {
        let (others, ms) = self.step("enter", who).await;
        (others == 0, ms)
    }

    /// `who` leaves; the server's clock (ms).
    pub async fn leave(&mut self, who: &str) -> i64 {
        self.step("leave", who).await.1
    }

    /// `who` was killed inside: its section ended with it.
    pub async fn forget(&mut self, who: &str) {
        self.step("forget", who).await;
    }

    /// Violations recorded so far, and what each was.
    pub async fn violations(&mut self) -> (i64, Vec<String>) {
        let keys = self.keys();
        let n: Option<i64> = cmd(&mut self.conn, &["HGET", &keys[0], "violations"]).await;
        let what: Vec<String> = cmd(&mut self.conn, &["LRANGE", &keys[3], "0", "-1"]).await;
        (n.unwrap_or(0), what)
    }

    /// Sections entered so far.
    pub async fn entries(&mut self) -> i64 {
        let key = self.key.clone();
        let n: Option<i64> = cmd(&mut self.conn, &["HGET", &key, "entries"]).await;
        n.unwrap_or(0)
    }

    /// Who entered, in order.
    pub async fn order(&mut self) -> Vec<String> {
        let key = format!("{}:order", self.key);
        cmd(&mut self.conn, &["LRANGE", &key, "0", "-1"]).await
    }

    /// Who is inside now.
    pub async fn inside(&mut self) -> Vec<String> {
        let key = format!("{}:inside", self.key);
        cmd(&mut self.conn, &["SMEMBERS", &key]).await
    }
}
