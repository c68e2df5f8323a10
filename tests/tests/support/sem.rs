//! What the semaphore and latch fault suites share: the SHA1s of the
//! scripts (to aim the fault proxy at them), a raw read of a semaphore's
//! state in Redis, a bounded wait for it to settle, the conservation
//! checks, and [`SemInside`], an observer of "never more than N inside"
//! kept in Redis by its own script on its own connection.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use lock_tests::RedisServer;

use super::redisson_sem::hex_id;
use super::{cmd, raw, script_sha};

/// The SHA1 of lock-core's semaphore acquire script.
pub fn sem_acquire_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/sem_acquire.lua"
    ))
}

/// The SHA1 of lock-core's semaphore add script (`add_permits`, the
/// expirable kind's `available`).
pub fn sem_add_sha() -> String {
    script_sha(include_str!("../../../lock-core/src/protocol/sem_add.lua"))
}

/// The SHA1 of lock-core's expirable permit release script.
pub fn sem_release_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/sem_release.lua"
    ))
}

/// The SHA1 of lock-core's semaphore cancel script (the cancellation of an
/// acquire whose reply was lost, and a plain release).
pub fn sem_cancel_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/sem_cancel.lua"
    ))
}

/// The SHA1 of lock-core's script that takes a waiter out of the line.
pub fn sem_leave_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/sem_leave.lua"
    ))
}

/// The SHA1 of lock-core's count-down script.
pub fn latch_count_down_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/latch_count_down.lua"
    ))
}

/// A semaphore (no key prefix) as Redis has it, read with raw commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemState {
    /// The counter (0 when absent).
    pub available: i64,
    /// The expirable kind's permit ids (`{name}:timeout`, 16 bytes each
    /// there), in hex as `Permits::ids` shows them.
    pub ids: BTreeSet<String>,
    /// The plain kind's grants (`lockcore_sem_grants:{name}`): request id
    /// -> permits.
    pub grants: BTreeMap<String, i64>,
    /// Members of lock-core's line of waiting acquisitions.
    pub line: Vec<String>,
}

impl SemState {
    /// Permits in Redis: available plus held by id.
    pub fn total(&self) -> i64 {
        self.available + self.ids.len() as i64
    }
}

/// The expirable kind's set of permit ids of `name`.
pub fn timeout_key(name: &str) -> String {
    format!("{{{name}}}:timeout")
}

/// The plain kind's hash of grants of `name`.
pub fn grants_key(name: &str) -> String {
    format!("lockcore_sem_grants:{{{name}}}")
}

/// Reads `name`'s counter, permit ids, grants and line, atomically
/// (MULTI/EXEC: no script runs between the reads).
pub async fn sem_state(conn: &redis::aio::MultiplexedConnection, name: &str) -> SemState {
    let mut c = conn.clone();
    type Read = (
        Option<i64>,
        Vec<Vec<u8>>,
        BTreeMap<String, i64>,
        Vec<String>,
    );
    let (available, ids, grants, line): Read = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg(name)
        .cmd("ZRANGE")
        .arg(timeout_key(name))
        .arg(0)
        .arg(-1)
        .cmd("HGETALL")
        .arg(grants_key(name))
        .cmd("ZRANGE")
        .arg(format!("lockcore_sem_line:{{{name}}}"))
        .arg(0)
        .arg(-1)
        .query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("state of {name}: {e}"));
    SemState {
        available: available.unwrap_or(0),
        ids: ids.iter().map(|id| hex_id(id)).collect(),
        grants,
        line,
    }
}

/// Polls `name`'s state (every 5 ms, at most `limit`) until `ok` holds;
/// panics with `what` and the last state otherwise.
pub async fn settles(
    conn: &redis::aio::MultiplexedConnection,
    name: &str,
    limit: Duration,
    what: &str,
    ok: impl Fn(&SemState) -> bool,
) -> SemState {
    let deadline = Instant::now() + limit;
    loop {
        let now = sem_state(conn, name).await;
        if ok(&now) {
            return now;
        }
        if Instant::now() > deadline {
            panic!("{what}: not conserved within {limit:?}: {now:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The plain kind settled: the grants in Redis are exactly `live` (the
/// request ids and permits of live guards), `available + held` equals `n`
/// (`held`: the permits of live guards), no ids.
pub async fn plain_conserved(
    conn: &redis::aio::MultiplexedConnection,
    name: &str,
    n: i64,
    live: &BTreeMap<String, i64>,
    what: &str,
) -> SemState {
    let held: i64 = live.values().sum();
    settles(conn, name, Duration::from_secs(5), what, |s| {
        s.available + held == n && &s.grants == live && s.ids.is_empty()
    })
    .await
}

/// The expirable kind settled: the ids in Redis are exactly `live` (the
/// ids of live guards) and `available + ZCARD == n`.
pub async fn expirable_conserved(
    conn: &redis::aio::MultiplexedConnection,
    name: &str,
    n: i64,
    live: &BTreeSet<String>,
    what: &str,
) -> SemState {
    settles(conn, name, Duration::from_secs(5), what, |s| {
        &s.ids == live && s.total() == n && s.grants.is_empty()
    })
    .await
}

/// The request id of a plain guard: its grant's field in
/// `lockcore_sem_grants:{name}`. Not public API; read from the guard's
/// `Debug` (`request: "<id>"`), and checked against Redis by every
/// conservation check.
pub fn request_of(p: &lock_core::Permits) -> String {
    let shown = format!("{p:?}");
    let marker = " request: \"";
    let at = shown
        .find(marker)
        .unwrap_or_else(|| panic!("no request id in {shown}"))
        + marker.len();
    let len = shown[at..]
        .find('"')
        .unwrap_or_else(|| panic!("no end of the request id in {shown}"));
    shown[at..at + len].to_string()
}

/// The observer's script. KEYS[1] its hash: `in` (permits inside now),
/// `max`, `violations` (entries that made `in` exceed the limit),
/// `entries`, and `o:<owner>` (permits inside per owner). ARGV[1] `enter`,
/// `leave` or `forget`, ARGV[2] the owner, ARGV[3] permits, ARGV[4] the
/// limit. Returns the permits inside after the step.
const SEM_INSIDE: &str = r"
local op, field = ARGV[1], 'o:' .. ARGV[2]
if op == 'forget' then
  local had = tonumber(redis.call('hget', KEYS[1], field) or '0')
  redis.call('hdel', KEYS[1], field)
  return redis.call('hincrby', KEYS[1], 'in', -had)
end
local step = tonumber(ARGV[3])
if op == 'leave' then
  step = -step
end
redis.call('hincrby', KEYS[1], field, step)
local now = redis.call('hincrby', KEYS[1], 'in', step)
if step > 0 then
  redis.call('hincrby', KEYS[1], 'entries', 1)
  if now > tonumber(redis.call('hget', KEYS[1], 'max') or '0') then
    redis.call('hset', KEYS[1], 'max', now)
  end
  if now > tonumber(ARGV[4]) then
    redis.call('hincrby', KEYS[1], 'violations', 1)
  end
end
return now
";

/// An independent observer of "never more than `limit` permits inside":
/// counters in one Redis hash, changed atomically by its own script on its
/// own connection (not the lock library's). A holder of `n` permits calls
/// [`enter`](Self::enter) when its section starts and
/// [`leave`](Self::leave) when it ends; an entry that makes the permits
/// inside exceed the limit is a violation recorded in Redis. The highest
/// number inside is kept. Child processes use it on their own connection.
#[derive(Clone)]
pub struct SemInside {
    conn: redis::aio::MultiplexedConnection,
    key: String,
    limit: i64,
    script: redis::Script,
}

impl SemInside {
    /// A fresh observer `name` of a semaphore of `limit` permits.
    pub async fn new(server: &RedisServer, name: &str, limit: i64) -> SemInside {
        let mut inside = SemInside::attach(raw(server).await, name, limit);
        let key = inside.key.clone();
        let _: () = cmd(&mut inside.conn, &["DEL", &key]).await;
        inside
    }

    /// The observer `name` on `conn`, as it is (a child process's).
    pub fn attach(conn: redis::aio::MultiplexedConnection, name: &str, limit: i64) -> SemInside {
        SemInside {
            conn,
            key: format!("observer:sem:{name}"),
            limit,
            script: redis::Script::new(SEM_INSIDE),
        }
    }

    async fn step(&mut self, op: &str, owner: &str, n: i64) -> i64 {
        self.script
            .key(&self.key)
            .arg(op)
            .arg(owner)
            .arg(n)
            .arg(self.limit)
            .invoke_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("observer {op} {owner} {n}: {e}"))
    }

    /// `owner` enters with `n` permits; the permits inside now.
    pub async fn enter(&mut self, owner: &str, n: i64) -> i64 {
        self.step("enter", owner, n).await
    }

    /// `owner` leaves with `n` permits.
    pub async fn leave(&mut self, owner: &str, n: i64) {
        self.step("leave", owner, n).await;
    }

    /// `owner` is gone (a killed process): its sections end now. The
    /// permits inside after.
    pub async fn forget(&mut self, owner: &str) -> i64 {
        self.step("forget", owner, 0).await
    }

    async fn field(&mut self, field: &str) -> i64 {
        let key = self.key.clone();
        let n: Option<i64> = cmd(&mut self.conn, &["HGET", &key, field]).await;
        n.unwrap_or(0)
    }

    /// Permits inside now.
    pub async fn inside(&mut self) -> i64 {
        self.field("in").await
    }

    /// `owner`'s permits inside now.
    pub async fn inside_of(&mut self, owner: &str) -> i64 {
        self.field(&format!("o:{owner}")).await
    }

    /// The most permits seen inside together.
    pub async fn max(&mut self) -> i64 {
        self.field("max").await
    }

    /// Entries that took the permits inside past the limit.
    pub async fn violations(&mut self) -> i64 {
        self.field("violations").await
    }

    /// Sections entered so far.
    pub async fn entries(&mut self) -> i64 {
        self.field("entries").await
    }
}

/// Which semaphore: Redisson's `RSemaphore` or `RPermitExpirableSemaphore`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Plain,
    Expirable,
}

impl Kind {
    /// `plain` or `expirable`, for names and labels.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Expirable => "expirable",
        }
    }
}

/// Either semaphore, behind the methods both have.
#[derive(Clone)]
pub enum AnySem {
    Plain(lock_core::Semaphore),
    Expirable(lock_core::PermitSemaphore),
}

impl AnySem {
    /// The semaphore `name` of `kind` on `client`.
    pub fn of(client: &lock_core::LockClient, kind: Kind, name: &str) -> AnySem {
        match kind {
            Kind::Plain => AnySem::Plain(client.semaphore(name).expect("name")),
            Kind::Expirable => AnySem::Expirable(client.permit_semaphore(name).expect("name")),
        }
    }

    pub async fn try_set_permits(&self, n: u64) -> lock_core::Result<bool> {
        match self {
            AnySem::Plain(s) => s.try_set_permits(n).await,
            AnySem::Expirable(s) => s.try_set_permits(n).await,
        }
    }

    pub async fn add_permits(&self, delta: i64) -> lock_core::Result<u64> {
        match self {
            AnySem::Plain(s) => s.add_permits(delta).await,
            AnySem::Expirable(s) => s.add_permits(delta).await,
        }
    }

    pub async fn available(&self) -> lock_core::Result<u64> {
        match self {
            AnySem::Plain(s) => s.available().await,
            AnySem::Expirable(s) => s.available().await,
        }
    }

    pub async fn acquire(&self, n: u32) -> lock_core::Result<lock_core::Permits> {
        match self {
            AnySem::Plain(s) => s.acquire(n).await,
            AnySem::Expirable(s) => s.acquire(n).await,
        }
    }

    pub async fn acquire_timeout(
        &self,
        n: u32,
        wait: Duration,
    ) -> lock_core::Result<lock_core::Permits> {
        match self {
            AnySem::Plain(s) => s.acquire_timeout(n, wait).await,
            AnySem::Expirable(s) => s.acquire_timeout(n, wait).await,
        }
    }

    pub async fn try_acquire(&self, n: u32) -> lock_core::Result<Option<lock_core::Permits>> {
        match self {
            AnySem::Plain(s) => s.try_acquire(n).await,
            AnySem::Expirable(s) => s.try_acquire(n).await,
        }
    }
}

/// `kind` settled with `guards` the live guards on `name` of `n` permits:
/// the plain kind's grants exactly the guards' and `available + held ==
/// n`, the expirable kind's ids exactly the guards' and `available + ZCARD
/// == n`.
pub async fn conserved(
    conn: &redis::aio::MultiplexedConnection,
    kind: Kind,
    name: &str,
    n: i64,
    guards: &[&lock_core::Permits],
    what: &str,
) -> SemState {
    match kind {
        Kind::Plain => {
            let live: BTreeMap<String, i64> = guards
                .iter()
                .map(|g| (request_of(g), i64::from(g.count())))
                .collect();
            assert_eq!(live.len(), guards.len(), "{what}: one grant per guard");
            plain_conserved(conn, name, n, &live, what).await
        }
        Kind::Expirable => {
            let live: BTreeSet<String> = guards
                .iter()
                .flat_map(|g| g.ids().iter().cloned())
                .collect();
            expirable_conserved(conn, name, n, &live, what).await
        }
    }
}
