//! `#[leader_only(election = "...")]` against real Redis: calls from two
//! clients (and several tasks) never run their bodies at once and run one
//! after the other, judged by an independent observer (a script on its own
//! connection, [`Stage`]); a body whose lock is deleted from Redis is
//! cancelled and the call campaigns and runs the body again; the body sees
//! its leadership (`Leadership::current()`) and writes through its fence;
//! campaign failures arrive as the fn's own error type.

use std::time::{Duration, Instant};

use crate::support::{self, cmd, eventually, raw, within};
use lock_core::{leader_only, Leadership, LockClient};

/// A caller's own error type; campaign failures arrive as `Lock`.
#[derive(Debug)]
enum JobError {
    Lock(lock_core::Error),
    Failed(&'static str),
}

impl From<lock_core::Error> for JobError {
    fn from(err: lock_core::Error) -> Self {
        JobError::Lock(err)
    }
}

/// The script of [`Stage`]: `ARGV[1]` `enter` or `leave`, `ARGV[2]` who.
/// Keeps how many are inside, the most seen inside together, a violation
/// count (more than one inside), the number of entries, and a log of
/// `start:<who>` / `end:<who>`. Returns how many are inside after.
const STAGE: &str = r"
local step = (ARGV[1] == 'enter') and 1 or -1
local n = redis.call('HINCRBY', KEYS[1], 'inside', step)
if step > 0 then
    redis.call('HINCRBY', KEYS[1], 'entries', 1)
    if n > tonumber(redis.call('HGET', KEYS[1], 'max') or '0') then
        redis.call('HSET', KEYS[1], 'max', n)
    end
    if n > 1 then
        redis.call('HINCRBY', KEYS[1], 'violations', 1)
    end
    redis.call('RPUSH', KEYS[2], 'start:' .. ARGV[2])
else
    redis.call('RPUSH', KEYS[2], 'end:' .. ARGV[2])
end
return n
";

/// An independent observer of "one body at a time": counters and a log in
/// Redis, changed atomically by a script on its own connection (not the
/// library's).
#[derive(Clone)]
struct Stage {
    conn: redis::aio::MultiplexedConnection,
    key: String,
    log: String,
    script: redis::Script,
}

impl Stage {
    async fn new(server: &lock_tests::RedisServer, name: &str) -> Stage {
        let mut conn = raw(server).await;
        let key = format!("observer:stage:{name}");
        let log = format!("observer:log:{name}");
        let _: () = cmd(&mut conn, &["DEL", &key, &log]).await;
        Stage {
            conn,
            key,
            log,
            script: redis::Script::new(STAGE),
        }
    }

    async fn step(&self, step: &str, who: &str) -> i64 {
        let mut conn = self.conn.clone();
        self.script
            .key(&self.key)
            .key(&self.log)
            .arg(step)
            .arg(who)
            .invoke_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("observer {step}: {e}"))
    }

    async fn field(&self, field: &str) -> i64 {
        let mut conn = self.conn.clone();
        let n: Option<i64> = cmd(&mut conn, &["HGET", &self.key, field]).await;
        n.unwrap_or(0)
    }

    async fn log(&self) -> Vec<String> {
        let mut conn = self.conn.clone();
        cmd(&mut conn, &["LRANGE", &self.log, "0", "-1"]).await
    }

    /// The leader record of `election`, as Redis has it.
    async fn record(&self, election: &str) -> (Option<String>, Option<u64>) {
        let mut conn = self.conn.clone();
        let key = format!("lockcore_leader:{{{election}}}");
        let value: Option<String> = cmd(&mut conn, &["HGET", &key, "value"]).await;
        let term: Option<u64> = cmd(&mut conn, &["HGET", &key, "term"]).await;
        (value, term)
    }
}

/// What one run of [`relay`] saw.
#[derive(Debug)]
struct Run {
    term: u64,
    /// The leader record in Redis while the body ran: (value, term).
    record: (Option<String>, Option<u64>),
}

/// Stays on stage for `hold`; the body's term is its leadership's, and it
/// counts its runs with a fenced write.
#[leader_only(election = "relay:{region}", value = "{who}", client = client)]
async fn relay(
    client: &LockClient,
    region: &str,
    who: &str,
    stage: &Stage,
    hold: Duration,
) -> Result<Run, JobError> {
    let leadership = Leadership::current().ok_or(JobError::Failed("no leadership"))?;
    leadership.ensure_leader()?;
    stage.step("enter", who).await;
    let record = stage.record(&format!("relay:{region}")).await;
    tokio::time::sleep(hold).await;
    leadership.fence().incr_by("relay:runs", 1).await?;
    stage.step("leave", who).await;
    Ok(Run {
        term: leadership.term(),
        record,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_never_run_the_body_at_once_and_the_next_runs_after_the_first_returns() {
    let server = support::server();
    let clients = [
        support::client_for(&server, 1_000),
        support::client_for(&server, 1_000),
    ];
    let stage = Stage::new(&server, "relay").await;
    let hold = Duration::from_millis(300);
    // The first call leads; the others campaign while it runs.
    let first = {
        let (client, stage) = (clients[0].clone(), stage.clone());
        tokio::spawn(async move { relay(&client, "eu", "a", &stage, hold).await })
    };
    let entered = eventually(Duration::from_secs(5), || {
        let stage = stage.clone();
        async move { stage.field("entries").await == 1 }
    })
    .await;
    assert!(entered.is_some(), "the first body runs");
    let mut tasks = vec![("a", first)];
    for (i, who) in ["b", "c", "d"].into_iter().enumerate() {
        let (client, stage) = (clients[(i + 1) % 2].clone(), stage.clone());
        let task = tokio::spawn(async move { relay(&client, "eu", who, &stage, hold).await });
        tasks.push((who, task));
    }
    let mut runs = Vec::new();
    for (who, task) in tasks {
        let run = within(Duration::from_secs(20), "call", task)
            .await
            .expect("task")
            .unwrap_or_else(|e| panic!("{who}: {e:?}"));
        runs.push((who, run));
    }

    assert_eq!(stage.field("violations").await, 0, "two bodies at once");
    assert_eq!(stage.field("max").await, 1);
    assert_eq!(stage.field("entries").await, 4);
    assert_eq!(stage.field("inside").await, 0);
    // Each body started after the one before it ended, "a" first.
    let log = stage.log().await;
    assert_eq!(log.len(), 8, "{log:?}");
    assert_eq!(log[0], "start:a", "{log:?}");
    let mut order = Vec::new();
    for pair in log.chunks(2) {
        let who = pair[0].strip_prefix("start:").expect("a start");
        assert_eq!(pair[1], format!("end:{who}"), "{log:?}");
        order.push(who.to_owned());
    }
    // Terms grow in the order the bodies ran; each body's record in Redis
    // named it, with its term.
    let mut last = 0;
    for who in &order {
        let (_, run) = runs.iter().find(|(w, _)| w == who).expect("a run per call");
        assert!(run.term > last, "{order:?}: {runs:?}");
        last = run.term;
        assert_eq!(run.record, (Some(who.clone()), Some(run.term)), "{who}");
    }
    // Every fenced write was applied; every call resigned.
    let mut conn = raw(&server).await;
    let applied: i64 = cmd(&mut conn, &["GET", "relay:runs"]).await;
    assert_eq!(applied, 4);
    let exists: i64 = cmd(&mut conn, &["EXISTS", "relay:eu"]).await;
    assert_eq!(exists, 0, "resigned after the body returned");
    assert!(Leadership::current().is_none(), "only in a body");
}

/// The first run waits (at most 10 s) to be cancelled; a later run returns
/// its term and how many runs started.
#[leader_only(election = "compactor", value = "compactor-1", client = client)]
async fn compact(client: &LockClient, stage: &Stage) -> Result<(u64, i64), JobError> {
    let mut conn = stage.conn.clone();
    let starts: i64 = cmd(&mut conn, &["HINCRBY", &stage.key, "starts", "1"]).await;
    let term = Leadership::current()
        .ok_or(JobError::Failed("no leadership"))?
        .term();
    if starts == 1 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let _: i64 = cmd(&mut conn, &["HINCRBY", &stage.key, "first_finished", "1"]).await;
        return Err(JobError::Failed("the first run was not cancelled"));
    }
    Ok((term, starts))
}

#[tokio::test]
async fn a_body_whose_lock_is_deleted_is_cancelled_and_runs_again() {
    let env = support::env(900);
    let stage = Stage::new(&env.server, "compactor").await;
    let call = {
        let (client, stage) = (env.client.clone(), stage.clone());
        tokio::spawn(async move { compact(&client, &stage).await })
    };
    let started = eventually(Duration::from_secs(5), || {
        let stage = stage.clone();
        async move { stage.field("starts").await == 1 }
    })
    .await;
    assert!(started.is_some(), "the first run started");
    let (value, first_term) = stage.record("compactor").await;
    assert_eq!(value.as_deref(), Some("compactor-1"));
    let first_term = first_term.expect("a term");

    // An independent connection deletes the lock: the next renewal (every
    // 300 ms) finds it gone, the run is dropped, the call campaigns again.
    let mut conn = raw(&env.server).await;
    let deleted: i64 = cmd(&mut conn, &["DEL", "compactor"]).await;
    assert_eq!(deleted, 1);
    let deleted_at = Instant::now();
    let (term, starts) = within(Duration::from_secs(8), "the second run", call)
        .await
        .expect("task")
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(
        deleted_at.elapsed() < Duration::from_secs(8),
        "not the first run's 10 s"
    );
    assert_eq!(starts, 2, "the body started twice");
    assert_eq!(stage.field("starts").await, 2);
    assert_eq!(
        stage.field("first_finished").await,
        0,
        "the first run was dropped"
    );
    assert!(term > first_term, "{term} > {first_term}");
    let exists: i64 = cmd(&mut conn, &["EXISTS", "compactor"]).await;
    assert_eq!(exists, 0, "resigned after the second run returned");
}

/// Without `client`, the default client (none is installed in this binary).
#[leader_only(election = "nightly")]
async fn without_a_client() -> Result<(), JobError> {
    Err(JobError::Failed("the body ran"))
}

#[leader_only(election = "{name}", client = client)]
async fn named(client: &LockClient, name: &str) -> Result<(), JobError> {
    Err(JobError::Failed("the body ran"))
}

/// The body's own error ends the call (after resigning), unretried.
#[leader_only(election = "fails", client = client)]
async fn failing(client: &LockClient, stage: &Stage) -> Result<(), JobError> {
    stage.step("enter", "f").await;
    stage.step("leave", "f").await;
    Err(JobError::Failed("expected"))
}

#[tokio::test]
async fn failures_arrive_as_the_fns_error_and_a_body_error_is_not_retried() {
    let env = support::env(1_000);
    match without_a_client().await {
        Err(JobError::Lock(e)) => assert!(e.is_no_default_client(), "{e:?}"),
        other => panic!("expected NoDefaultClient, got {other:?}"),
    }
    match named(&env.client, "").await {
        Err(JobError::Lock(e)) => assert!(e.is_invalid_input(), "{e:?}"),
        other => panic!("expected an invalid name, got {other:?}"),
    }
    let stage = Stage::new(&env.server, "fails").await;
    let out = within(
        Duration::from_secs(5),
        "failing",
        failing(&env.client, &stage),
    )
    .await;
    assert!(matches!(out, Err(JobError::Failed("expected"))), "{out:?}");
    assert_eq!(stage.field("entries").await, 1, "run once");
    let mut conn = raw(&env.server).await;
    let exists: i64 = cmd(&mut conn, &["EXISTS", "fails"]).await;
    assert_eq!(exists, 0, "resigned");
}
