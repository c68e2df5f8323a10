//! Helpers shared by the end-to-end suites: servers and lock clients,
//! raw commands, polling and time bounds, child processes, an independent
//! "inside" observer, a capturing tracing subscriber, Redisson's scripts;
//! [`layer`] adds what the lock-tower suites need. Not every suite uses
//! every helper.
#![allow(dead_code, unreachable_pub)]

pub mod cut;
pub mod election;
pub mod fair_state;
pub mod layer;
pub mod redisson_fair;
pub mod redisson_rw;
pub mod redisson_sem;
pub mod sem;

use std::collections::HashMap;
use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lock_core::LockClient;
use lock_tests::{RedisCluster, RedisServer, SentinelSet};

/// A private redis-server and a lock client on it.
pub struct Env {
    pub server: RedisServer,
    pub client: LockClient,
}

pub fn server() -> RedisServer {
    match RedisServer::start() {
        Ok(s) => s,
        Err(e) => panic!("cannot start redis-server: {e}"),
    }
}

/// A client with a short watchdog timeout (`watchdog_ms`).
pub fn client_for(server: &RedisServer, watchdog_ms: u64) -> LockClient {
    LockClient::builder(server.url())
        .watchdog_timeout(Duration::from_millis(watchdog_ms))
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

pub fn env(watchdog_ms: u64) -> Env {
    let server = server();
    let client = client_for(&server, watchdog_ms);
    Env { server, client }
}

/// A client whose keys start with `app:`, so that a lock's Redis key (and
/// its token key) differ from its name; `timeouts` is its command and
/// connect time-out (a short one notices a stopped Redis quickly).
pub fn prefixed_client(server: &RedisServer, watchdog: Duration, timeouts: Duration) -> LockClient {
    LockClient::builder(server.url())
        .key_prefix("app:")
        .watchdog_timeout(watchdog)
        .command_timeout(timeouts)
        .connect_timeout(timeouts)
        .build()
        .expect("lock client")
}

/// Runs one acquire on a client built by `builder`; returns the error and
/// how long it took (at most 10 s).
pub async fn failing_acquire(builder: lock_core::ClientBuilder) -> (lock_core::Error, Duration) {
    let client = builder.build().expect("client");
    let lock = client.lock("fails").expect("name");
    let started = Instant::now();
    let err = within(Duration::from_secs(10), "acquire", lock.acquire())
        .await
        .expect_err("must fail");
    (err, started.elapsed())
}

/// The harness's Redis Cluster: `primaries` primaries with `replicas`
/// replicas each.
pub fn cluster(primaries: usize, replicas: usize) -> RedisCluster {
    RedisCluster::start(primaries, replicas).unwrap_or_else(|e| panic!("cluster: {e}"))
}

/// The harness's Sentinel set: a primary, a replica and three sentinels
/// that watch them as `locks`.
pub fn sentinel_set() -> SentinelSet {
    SentinelSet::start("locks").unwrap_or_else(|e| panic!("sentinel set: {e}"))
}

/// The hash `key` (a lock's owners and counts) read straight from `node`,
/// a primary or a replica.
pub fn hash_on(node: &RedisServer, key: &str) -> HashMap<String, String> {
    let reply = node
        .command(&["HGETALL", key])
        .unwrap_or_else(|e| panic!("HGETALL: {e}"));
    reply
        .as_array()
        .unwrap_or_default()
        .chunks(2)
        .filter_map(|kv| Some((kv.first()?.as_string()?, kv.get(1)?.as_string()?)))
        .collect()
}

/// Calls of lock scripts (EVALSHA, and EVAL should a script be re-sent)
/// the server has run so far.
pub fn script_calls(server: &RedisServer) -> u64 {
    let stats = server.info_commandstats().expect("INFO commandstats");
    stats.get("evalsha").copied().unwrap_or(0) + stats.get("eval").copied().unwrap_or(0)
}

/// Every command the server has run so far except the harness's own
/// (`INFO`) and keep-alive `PING`s.
pub fn commands_but_info(server: &RedisServer) -> HashMap<String, u64> {
    let mut stats = server.info_commandstats().expect("INFO commandstats");
    stats.remove("info");
    stats.remove("ping");
    stats
}

/// The SHA1 by which EVALSHA names lock-core's acquire script (to match
/// it in the fault proxy).
pub fn acquire_sha() -> String {
    script_sha(include_str!("../../../lock-core/src/protocol/acquire.lua"))
}

/// The SHA1 of lock-core's release script.
pub fn release_sha() -> String {
    script_sha(include_str!("../../../lock-core/src/protocol/release.lua"))
}

/// The SHA1 of lock-core's hand-off script.
pub fn handoff_sha() -> String {
    script_sha(include_str!("../../../lock-core/src/protocol/handoff.lua"))
}

/// The SHA1 of lock-core's cancel script.
pub fn cancel_sha() -> String {
    script_sha(include_str!("../../../lock-core/src/protocol/cancel.lua"))
}

/// The SHA1 of lock-core's renewal script.
pub fn renew_sha() -> String {
    script_sha(include_str!("../../../lock-core/src/protocol/renew.lua"))
}

/// The SHA1 of lock-core's read-write lock acquire script.
pub fn rw_acquire_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/rw_acquire.lua"
    ))
}

/// The SHA1 of lock-core's read-write lock release script.
pub fn rw_release_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/rw_release.lua"
    ))
}

/// The SHA1 of lock-core's read-write lock cancel script.
pub fn rw_cancel_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/rw_cancel.lua"
    ))
}

/// The SHA1 of the grouped form of lock-core's acquire script (group
/// commit: several acquisitions in one call, see `protocol/group.rs`).
pub fn grouped_acquire_sha() -> String {
    grouped_sha(include_str!("../../../lock-core/src/protocol/acquire.lua"))
}

/// The SHA1 of the grouped form of lock-core's release script.
pub fn grouped_release_sha() -> String {
    grouped_sha(include_str!("../../../lock-core/src/protocol/release.lua"))
}

fn grouped_sha(source: &str) -> String {
    script_sha(&format!(
        "local function one(KEYS, ARGV)\n{source}{}",
        include_str!("../../../lock-core/src/protocol/group.lua")
    ))
}

fn script_sha(source: &str) -> String {
    redis::Script::new(source).get_hash().to_string()
}

/// A raw redis-rs connection for the tests' own reads and writes.
pub async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(server.url()).unwrap_or_else(|e| panic!("{e}"));
    client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("raw connection: {e}"))
}

/// One command on any redis-rs async connection (a server's, a cluster's);
/// panics with the command on error.
pub async fn cmd<T: redis::FromRedisValue, C: redis::aio::ConnectionLike>(
    conn: &mut C,
    args: &[&str],
) -> T {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Polls `check` every 10 ms until it is true or `limit` passes; returns
/// the time it took, or None.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    while start.elapsed() < limit {
        if check().await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Awaits `fut` at most `limit`, panicking with `what` otherwise.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: not done within {limit:?}"),
    }
}

/// A child process's setting: the environment variable `name`; a test
/// failure when it is not set.
pub fn env_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child needs {name}"))
}

/// Re-runs this test binary as a child process that runs only the ignored
/// test `child_process` of the suite whose `module_path!()` is `module`
/// (the suite's child entry point), with `envs` set, stdout piped and
/// `stdin` as given.
pub fn spawn_child(module: &str, envs: &[(&str, String)], stdin: Stdio) -> Child {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let test = child_test(module);
    assert_listed(&exe, &test);
    let mut command = Command::new(exe);
    command
        .args([
            "--ignored",
            "--exact",
            &test,
            "--nocapture",
            "--test-threads=1",
        ])
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in envs {
        command.env(k, v);
    }
    command
        .spawn()
        .unwrap_or_else(|e| panic!("spawn child: {e}"))
}

/// The test harness's name of the test `child_process` in the module whose
/// `module_path!()` is `module`: the path without the crate (the test
/// binary's) name, as `--exact` wants it.
fn child_test(module: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::child_process"),
        None => "child_process".to_string(),
    }
}

/// Panics unless this test binary has the ignored test `test`: a child
/// whose filter selects nothing would run no test and exit successfully.
fn assert_listed(exe: &std::path::Path, test: &str) {
    static LIST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let list = LIST.get_or_init(|| {
        let out = Command::new(exe)
            .args(["--list", "--ignored"])
            .output()
            .unwrap_or_else(|e| panic!("{} --list: {e}", exe.display()));
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    let wanted = format!("{test}: test");
    assert!(
        list.lines().any(|line| line == wanted),
        "no ignored test `{test}` in this binary; its ignored tests:\n{list}"
    );
}

/// An independent observer of "never two inside": a counter in Redis, read
/// and written with its own connection (not the lock library's). Every
/// critical section calls [`Inside::enter`] when it starts and
/// [`Inside::leave`] when it ends; `enter` seeing anyone else inside is a
/// violation, counted in Redis too.
#[derive(Clone)]
pub struct Inside {
    conn: redis::aio::MultiplexedConnection,
    key: String,
}

impl Inside {
    pub async fn new(server: &RedisServer, name: &str) -> Inside {
        let mut conn = raw(server).await;
        let key = format!("observer:inside:{name}");
        let _: () = cmd(&mut conn, &["DEL", &key, &format!("{key}:violations")]).await;
        Inside { conn, key }
    }

    /// Marks one more section inside; false (and a recorded violation) when
    /// another one was inside already.
    pub async fn enter(&mut self) -> bool {
        let key = self.key.clone();
        let now: i64 = cmd(&mut self.conn, &["INCR", &key]).await;
        if now != 1 {
            let _: i64 = cmd(&mut self.conn, &["INCR", &format!("{key}:violations")]).await;
        }
        now == 1
    }

    pub async fn leave(&mut self) {
        let key = self.key.clone();
        let _: i64 = cmd(&mut self.conn, &["DECR", &key]).await;
    }

    /// Violations recorded so far.
    pub async fn violations(&mut self) -> i64 {
        let key = format!("{}:violations", self.key);
        let n: Option<i64> = cmd(&mut self.conn, &["GET", &key]).await;
        n.unwrap_or(0)
    }
}

/// The script of [`RwInside`]: `ARGV[1]` is `r` or `w`, `ARGV[2]` `1`
/// (enter) or `-1` (leave). On entry it checks the read-write rule (a
/// writer alone, readers only without a writer), counts a violation when
/// it is broken, keeps the highest number of readers seen together and
/// counts the entries of each side. Returns the readers and writers inside
/// after the change.
const RW_INSIDE: &str = r"
local side, step = ARGV[1], tonumber(ARGV[2])
redis.call('HINCRBY', KEYS[1], side, step)
local r = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
local w = tonumber(redis.call('HGET', KEYS[1], 'w') or '0')
if step > 0 then
    redis.call('HINCRBY', KEYS[1], side .. ':entries', 1)
    if (side == 'w' and (r > 0 or w > 1)) or (side == 'r' and w > 0) then
        redis.call('HINCRBY', KEYS[1], 'violations', 1)
    end
    if r > tonumber(redis.call('HGET', KEYS[1], 'max_r') or '0') then
        redis.call('HSET', KEYS[1], 'max_r', r)
    end
end
return {r, w}
";

/// An independent observer of the read-write rule: counters in one Redis
/// hash, changed atomically by a script run on its own connection (not
/// the lock library's). Readers call [`RwInside::enter_read`] /
/// [`RwInside::leave_read`] around their section, writers the `write`
/// pair; a writer entering while anyone is inside, or a reader entering
/// while a writer is, is a violation recorded in Redis.
#[derive(Clone)]
pub struct RwInside {
    conn: redis::aio::MultiplexedConnection,
    key: String,
    script: redis::Script,
}

impl RwInside {
    pub async fn new(server: &RedisServer, name: &str) -> RwInside {
        let mut conn = raw(server).await;
        let key = format!("observer:rw:{name}");
        let _: () = cmd(&mut conn, &["DEL", &key]).await;
        RwInside {
            conn,
            key,
            script: redis::Script::new(RW_INSIDE),
        }
    }

    async fn step(&mut self, side: &str, step: i64) -> (i64, i64) {
        self.script
            .key(&self.key)
            .arg(side)
            .arg(step)
            .invoke_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("observer {side} {step}: {e}"))
    }

    /// A reader enters; the readers and writers inside now (itself included).
    pub async fn enter_read(&mut self) -> (i64, i64) {
        self.step("r", 1).await
    }

    pub async fn leave_read(&mut self) {
        self.step("r", -1).await;
    }

    /// A writer enters; the readers and writers inside now (itself included).
    pub async fn enter_write(&mut self) -> (i64, i64) {
        self.step("w", 1).await
    }

    pub async fn leave_write(&mut self) {
        self.step("w", -1).await;
    }

    async fn field(&mut self, field: &str) -> i64 {
        let key = self.key.clone();
        let n: Option<i64> = cmd(&mut self.conn, &["HGET", &key, field]).await;
        n.unwrap_or(0)
    }

    /// Readers inside now.
    pub async fn readers(&mut self) -> i64 {
        self.field("r").await
    }

    /// The most readers seen inside together.
    pub async fn max_readers(&mut self) -> i64 {
        self.field("max_r").await
    }

    /// Sections entered so far: (reads, writes).
    pub async fn entries(&mut self) -> (i64, i64) {
        (self.field("r:entries").await, self.field("w:entries").await)
    }

    /// Violations of the read-write rule recorded so far.
    pub async fn violations(&mut self) -> i64 {
        self.field("violations").await
    }

    /// Polls (every 5 ms, at most `limit`) until at least `n` readers
    /// have been inside at once; whether they were. (Not "are inside now":
    /// the first to see them all may leave before the last one looks.)
    pub async fn await_max_readers(&mut self, n: i64, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.max_readers().await >= n {
                return true;
            }
            if start.elapsed() >= limit {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A tracing subscriber that records every span and event (level and
/// fields as text), for suites that check what the library logs. Install it
/// with `tracing::subscriber::with_default` around a current-thread runtime,
/// so that the library's background tasks log into it too.
#[derive(Clone, Default)]
pub struct Capture(std::sync::Arc<std::sync::Mutex<Vec<(tracing::Level, String)>>>);

struct CaptureText<'a>(&'a mut String);

impl tracing::field::Visit for CaptureText<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl Capture {
    /// Records a line of the test's own (level INFO).
    pub fn push(&self, line: String) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((tracing::Level::INFO, line));
    }

    /// Every recorded line.
    pub fn lines(&self) -> Vec<String> {
        self.records().into_iter().map(|(_, l)| l).collect()
    }

    /// The lines of events at `level` or more severe.
    pub fn at_least(&self, level: tracing::Level) -> Vec<String> {
        self.records()
            .into_iter()
            .filter(|(l, _)| *l <= level)
            .map(|(_, line)| line)
            .collect()
    }

    fn records(&self) -> Vec<(tracing::Level, String)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn record(&self, level: tracing::Level, line: String) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((level, line));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut line = format!("span {}", span.metadata().name());
        span.record(&mut CaptureText(&mut line));
        self.record(*span.metadata().level(), line);
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut line = String::from("record");
        values.record(&mut CaptureText(&mut line));
        self.record(tracing::Level::TRACE, line);
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = format!("event {}", event.metadata().level());
        event.record(&mut CaptureText(&mut line));
        self.record(*event.metadata().level(), line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Redisson's `RLock` acquire, as its Lua does it: a fresh lock or a
/// re-entry by the same owner gets the lease; otherwise the holder's PTTL.
pub const REDISSON_ACQUIRE: &str = "\
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
  redis.call('hincrby', KEYS[1], ARGV[2], 1); \
  redis.call('pexpire', KEYS[1], ARGV[1]); \
  return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// Redisson's `RLock` release: one count; at zero, delete and publish 0
/// with the publish command in ARGV[2] (`publish`, or `spublish` once
/// Redisson found sharded pub/sub on a cluster).
pub const REDISSON_RELEASE: &str = "\
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil; end; \
local n = redis.call('hincrby', KEYS[1], ARGV[1], -1); \
if n > 0 then return 0; end; \
redis.call('del', KEYS[1]); \
redis.call(ARGV[2], KEYS[2], '0'); \
return 1;";
