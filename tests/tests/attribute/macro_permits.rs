//! `#[distributed_lock(key = "...", permits = N)]` against real Redis: at
//! most N bodies at once across clients, judged by an independent observer
//! (a script on its own connection, [`Crowd`]); the semaphore is created
//! with N permits and an existing one keeps its count; a wait bound, a
//! fixed lease, `skip_if_locked` and `cancel_on_lost` on permits; failures
//! arrive as the fn's own error type; permits come back after a return, an
//! error and a dropped call.

use std::time::Duration;

use crate::support::{self, cmd, eventually, raw, within};
use lock_core::{distributed_lock, LockClient};

/// A caller's own error type; failures to take a permit arrive as `Lock`.
#[derive(Debug)]
enum JobError {
    Lock(lock_core::Error),
    Failed,
}

impl From<lock_core::Error> for JobError {
    fn from(err: lock_core::Error) -> Self {
        JobError::Lock(err)
    }
}

/// The script of [`Crowd`]: `ARGV[1]` `1` (enter) or `-1` (leave),
/// `ARGV[2]` the limit. On entry it keeps the most seen inside together
/// and counts a violation when more than the limit are inside. Returns
/// how many are inside after the change.
const CROWD: &str = r"
local n = redis.call('HINCRBY', KEYS[1], 'inside', tonumber(ARGV[1]))
if tonumber(ARGV[1]) > 0 then
    redis.call('HINCRBY', KEYS[1], 'entries', 1)
    if n > tonumber(redis.call('HGET', KEYS[1], 'max') or '0') then
        redis.call('HSET', KEYS[1], 'max', n)
    end
    if n > tonumber(ARGV[2]) then
        redis.call('HINCRBY', KEYS[1], 'violations', 1)
    end
end
return n
";

/// An independent observer of "at most `limit` inside": counters in one
/// Redis hash, changed atomically by a script on its own connection (not
/// the library's).
#[derive(Clone)]
struct Crowd {
    conn: redis::aio::MultiplexedConnection,
    key: String,
    limit: i64,
    script: redis::Script,
}

impl Crowd {
    async fn new(server: &lock_tests::RedisServer, name: &str, limit: i64) -> Crowd {
        let mut conn = raw(server).await;
        let key = format!("observer:crowd:{name}");
        let _: () = cmd(&mut conn, &["DEL", &key]).await;
        Crowd {
            conn,
            key,
            limit,
            script: redis::Script::new(CROWD),
        }
    }

    async fn step(&mut self, step: i64) -> i64 {
        self.script
            .key(&self.key)
            .arg(step)
            .arg(self.limit)
            .invoke_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("observer {step}: {e}"))
    }

    async fn enter(&mut self) -> i64 {
        self.step(1).await
    }

    async fn leave(&mut self) {
        self.step(-1).await;
    }

    async fn field(&mut self, field: &str) -> i64 {
        let key = self.key.clone();
        let n: Option<i64> = cmd(&mut self.conn, &["HGET", &key, field]).await;
        n.unwrap_or(0)
    }

    /// Polls (every 10 ms, at most `limit`) until at least `n` have been
    /// inside at once; whether they were.
    async fn await_max(&mut self, n: i64, limit: Duration) -> bool {
        eventually(limit, || {
            let mut me = self.clone();
            async move { me.field("max").await >= n }
        })
        .await
        .is_some()
    }
}

/// Stays inside until two have been inside together (at most 2 s), or a
/// few milliseconds when that was seen already: calls limited to one at a
/// time would never meet.
#[distributed_lock(key = "exports:{tenant}", permits = 2, client = client)]
async fn export(client: &LockClient, tenant: &str, crowd: &Crowd) -> Result<i64, JobError> {
    let mut crowd = crowd.clone();
    let inside = crowd.enter().await;
    let met = crowd.await_max(2, Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    crowd.leave().await;
    if !met {
        return Err(JobError::Failed);
    }
    Ok(inside)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_callers_never_exceed_two_permits_and_two_run_together() {
    let server = support::server();
    let clients = [
        support::client_for(&server, 1_000),
        support::client_for(&server, 1_000),
    ];
    let crowd = Crowd::new(&server, "exports", 2).await;
    let mut tasks = Vec::new();
    for i in 0..6 {
        let client = clients[i % 2].clone();
        let crowd = crowd.clone();
        tasks.push(tokio::spawn(async move {
            export(&client, "acme", &crowd).await
        }));
    }
    for task in tasks {
        let out = within(Duration::from_secs(20), "caller", task)
            .await
            .expect("task");
        let inside = out.unwrap_or_else(|e| panic!("call failed: {e:?}"));
        assert!((1..=2).contains(&inside), "{inside} inside");
    }
    let mut crowd = crowd;
    assert_eq!(crowd.field("violations").await, 0, "more than 2 inside");
    assert_eq!(crowd.field("max").await, 2, "two ran together");
    assert_eq!(crowd.field("entries").await, 6);
    assert_eq!(crowd.field("inside").await, 0);
    // Created with 2 permits, all given back: Redisson's layout.
    let mut conn = raw(&server).await;
    let counter: i64 = cmd(&mut conn, &["GET", "exports:acme"]).await;
    assert_eq!(counter, 2);
    let held: i64 = cmd(&mut conn, &["ZCARD", "{exports:acme}:timeout"]).await;
    assert_eq!(held, 0);
}

/// Holds its permit for `hold`; the ids held while inside, as another
/// client's `status` reads them.
#[distributed_lock(key = "reports", permits = 3, client = client, wait = "300ms")]
async fn report(client: &LockClient, crowd: &Crowd, hold: Duration) -> Result<u64, JobError> {
    let mut crowd = crowd.clone();
    crowd.enter().await;
    tokio::time::sleep(hold).await;
    let held = client
        .permit_semaphore("reports")?
        .status(10)
        .await?
        .held_total;
    crowd.leave().await;
    Ok(held)
}

#[tokio::test]
async fn an_existing_semaphore_keeps_its_count_and_a_wait_bound_is_the_fns_error() {
    let env = support::env(1_000);
    let crowd = Crowd::new(&env.server, "reports", 1).await;
    // Made elsewhere with 1 permit: `permits = 3` does not change it.
    let sem = env.client.permit_semaphore("reports").expect("name");
    assert!(sem.try_set_permits(1).await.expect("set"));
    let first = {
        let (client, crowd) = (env.client.clone(), crowd.clone());
        tokio::spawn(async move { report(&client, &crowd, Duration::from_millis(800)).await })
    };
    let mut conn = raw(&env.server).await;
    let inside = eventually(Duration::from_secs(5), || {
        let mut crowd = crowd.clone();
        async move { crowd.field("inside").await == 1 }
    })
    .await;
    assert!(inside.is_some(), "the first call runs");
    // The second waits 300 ms for the only permit, then fails with the
    // fn's own error type, without running its body.
    let started = std::time::Instant::now();
    let err = report(&env.client, &crowd, Duration::ZERO)
        .await
        .expect_err("no permit within 300 ms");
    let waited = started.elapsed();
    match err {
        JobError::Lock(e) => assert!(e.is_wait_timeout(), "{e:?}"),
        other => panic!("expected a lock error, got {other:?}"),
    }
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    let counter: i64 = cmd(&mut conn, &["GET", "reports"]).await;
    assert_eq!(counter, 0, "the one permit is held");
    let held = within(Duration::from_secs(5), "first call", first)
        .await
        .expect("task")
        .expect("first call");
    assert_eq!(held, 1);
    let mut crowd = crowd;
    assert_eq!(crowd.field("entries").await, 1, "the second body never ran");
    assert_eq!(crowd.field("violations").await, 0);
    assert_eq!(sem.available().await.expect("available"), 1, "still 1");
}

#[distributed_lock(key = "thumbs", permits = 1, client = client, skip_if_locked)]
async fn thumbnail(client: &LockClient) -> Option<u8> {
    Some(1)
}

#[distributed_lock(key = "thumbs", permits = 1, client = client, skip_if_locked, wait = "100ms")]
async fn thumbnail_result(client: &LockClient) -> Result<Option<u8>, JobError> {
    Ok(Some(1))
}

#[distributed_lock(key = "thumbs", permits = 1, client = client, lease = "2s")]
async fn leased(client: &LockClient) -> Result<Option<Duration>, JobError> {
    let status = client.permit_semaphore("thumbs")?.status(10).await?;
    Ok(status.held.first().and_then(|p| p.expires_in))
}

#[tokio::test]
async fn skip_if_locked_skips_when_no_permit_is_free_and_a_lease_is_fixed() {
    let env = support::env(1_000);
    // Free: the body runs (and creates the semaphore with its 1 permit).
    assert_eq!(thumbnail(&env.client).await, Some(1));
    assert_eq!(thumbnail_result(&env.client).await.ok().flatten(), Some(1));
    let expires_in = leased(&env.client).await.expect("leased").expect("a lease");
    assert!(
        expires_in > Duration::from_millis(1_000) && expires_in <= Duration::from_secs(2),
        "a 2 s lease, not the 1 s watchdog: {expires_in:?}"
    );
    // Taken by another client: both forms skip.
    let other = support::client_for(&env.server, 1_000);
    let permit = other
        .permit_semaphore("thumbs")
        .expect("name")
        .acquire(1)
        .await
        .expect("the only permit");
    assert_eq!(thumbnail(&env.client).await, None);
    assert!(matches!(thumbnail_result(&env.client).await, Ok(None)));
    permit.release().await.expect("release");
    assert_eq!(thumbnail(&env.client).await, Some(1));
}

#[distributed_lock(key = "imports", permits = 2, client = client, cancel_on_lost)]
async fn import(
    client: &LockClient,
    started: tokio::sync::mpsc::Sender<()>,
) -> Result<(), JobError> {
    let _ = started.send(()).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    Err(JobError::Failed)
}

#[distributed_lock(key = "imports", permits = 2, client = client)]
async fn failing(client: &LockClient) -> Result<(), JobError> {
    Err(JobError::Failed)
}

#[tokio::test]
async fn cancel_on_lost_stops_the_body_and_permits_come_back() {
    let env = support::env(900);
    let mut conn = raw(&env.server).await;
    // The body's own error, and the permit back.
    assert!(matches!(failing(&env.client).await, Err(JobError::Failed)));
    let counter: i64 = cmd(&mut conn, &["GET", "imports"]).await;
    assert_eq!(counter, 2);

    // Its permit expired in Redis (score in the past): the next renewal
    // (every 300 ms) finds it gone and the body is stopped.
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let client = env.client.clone();
    let call = tokio::spawn(async move { import(&client, tx).await });
    within(Duration::from_secs(5), "body started", rx.recv()).await;
    // ids are 16 bytes in the set (Redisson's layout)
    let ids: Vec<Vec<u8>> = cmd(&mut conn, &["ZRANGE", "{imports}:timeout", "0", "-1"]).await;
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(ids[0].len(), 16, "{ids:?}");
    let _: i64 = redis::cmd("ZADD")
        .arg("{imports}:timeout")
        .arg("XX")
        .arg(1)
        .arg(&ids[0][..])
        .query_async(&mut conn)
        .await
        .expect("ZADD");
    let started = std::time::Instant::now();
    let out = within(Duration::from_secs(5), "cancelled call", call)
        .await
        .expect("task");
    match out {
        Err(JobError::Lock(e)) => assert!(e.is_lost(), "{e:?}"),
        other => panic!("expected Err(Lost), got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3));
    let sem = env.client.permit_semaphore("imports").expect("name");
    assert_eq!(sem.available().await.expect("available"), 2, "reclaimed");

    // A call dropped mid-body gives its permit back in the background.
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let client = env.client.clone();
    let call = tokio::spawn(async move { import(&client, tx).await });
    within(Duration::from_secs(5), "body started", rx.recv()).await;
    let during: i64 = cmd(&mut conn, &["GET", "imports"]).await;
    assert_eq!(during, 1);
    call.abort();
    let back = eventually(Duration::from_secs(3), || {
        let mut conn = conn.clone();
        async move {
            let n: i64 = cmd(&mut conn, &["GET", "imports"]).await;
            n == 2
        }
    })
    .await;
    assert!(back.is_some(), "the dropped call's permit came back");
}
