//! What the body of a `#[distributed_lock]` fn sees of its lock, against
//! real Redis: `HeldLock::current()` is the hold Redis issued (its fencing
//! token is the one in the lock's token key), it says when the lock is
//! deleted behind the body, nested sections each see their own lock, and
//! `cancel_on_lost` stops a body whose lock is lost (while without it the
//! body runs to its end and the call returns `Err(Lost)` afterwards).

use std::sync::Mutex;
use std::time::Duration;

use crate::support::{self, cmd, within};
use lock_core::{distributed_lock, HeldLock, LockClient};
use redis::aio::MultiplexedConnection;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A caller's own error type; lock failures arrive as `Lock`.
#[derive(Debug)]
enum ShopError {
    Lock(lock_core::Error),
}

impl From<lock_core::Error> for ShopError {
    fn from(err: lock_core::Error) -> Self {
        ShopError::Lock(err)
    }
}

fn is_lost<T: std::fmt::Debug>(result: &Result<T, ShopError>) -> bool {
    matches!(result, Err(ShopError::Lock(e)) if e.is_lost())
}

/// The hold of the innermost section the caller runs in; a test failure
/// outside one.
fn current() -> HeldLock {
    HeldLock::current().unwrap_or_else(|| panic!("no HeldLock inside the body"))
}

/// The last fencing token Redis drew for the lock whose full key is `key`
/// (lock-core's naming rule: `redisson_lock_token:{<key>}`).
async fn issued_token(conn: &mut MultiplexedConnection, key: &str) -> Option<u64> {
    cmd(conn, &["GET", &format!("redisson_lock_token:{{{key}}}")]).await
}

// ---------------------------------------------------------------------------
// The body's hold and its fencing token

/// What the body saw: its hold, the token in Redis at that moment, and what
/// a task spawned from the body sees.
#[derive(Debug)]
struct Seen {
    held: HeldLock,
    issued: Option<u64>,
    held_in_spawned_task: bool,
}

#[distributed_lock(key = "acct:{id}", client = client)]
async fn read_hold(
    client: &LockClient,
    mut conn: MultiplexedConnection,
    id: u32,
) -> Result<Seen, ShopError> {
    let held = current();
    held.ensure_held()?;
    let issued = issued_token(&mut conn, held.key()).await;
    let spawned = tokio::spawn(async { HeldLock::current().is_some() });
    let held_in_spawned_task = spawned.await.unwrap_or_else(|e| panic!("task: {e}"));
    Ok(Seen {
        held,
        issued,
        held_in_spawned_task,
    })
}

#[tokio::test]
async fn the_body_reads_the_fencing_token_redis_issued_without_asking_redis() {
    let server = support::server();
    let client = LockClient::builder(server.url())
        .key_prefix("shop:")
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"));
    let conn = support::raw(&server).await;
    assert!(HeldLock::current().is_none(), "a hold outside any section");

    let first = within(
        Duration::from_secs(10),
        "read_hold",
        read_hold(&client, conn.clone(), 7),
    )
    .await
    .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(first.held.name(), "acct:7");
    assert_eq!(
        first.held.key(),
        "shop:acct:7",
        "the full key, prefix included"
    );
    assert_eq!(
        first.issued,
        Some(first.held.fencing_token()),
        "the body's token is not the one Redis drew"
    );
    assert!(
        !first.held_in_spawned_task,
        "a spawned task is not in the section"
    );
    // Released when the call returned: the handle says so for good.
    assert!(!first.held.is_held());
    assert!(first.held.ensure_held().is_err_and(|e| e.is_lost()));
    assert!(
        HeldLock::current().is_none(),
        "the section outlived the call"
    );

    let second = read_hold(&client, conn, 7)
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(second.issued, Some(second.held.fencing_token()));
    assert!(
        second.held.fencing_token() > first.held.fencing_token(),
        "tokens must grow: {} then {}",
        first.held.fencing_token(),
        second.held.fencing_token()
    );
}

// ---------------------------------------------------------------------------
// The lost signal

/// Waits (bounded) for its lock to be lost; records when that was seen.
#[distributed_lock(key = "watched:{id}", client = client)]
async fn wait_for_loss(
    client: &LockClient,
    id: u32,
    entered: &Notify,
    lost_at: &Mutex<Option<(Instant, bool)>>,
) -> Result<(), ShopError> {
    let held = current();
    let stop = held.cancellation_token();
    entered.notify_one();
    within(Duration::from_secs(10), "held.lost()", held.lost()).await;
    let now = Instant::now();
    let still_held = held.is_held() || held.ensure_held().is_ok();
    // The token handed to spawned work is cancelled too.
    within(
        Duration::from_secs(2),
        "cancellation token",
        stop.cancelled(),
    )
    .await;
    *lost_at.lock().unwrap_or_else(|p| p.into_inner()) = Some((now, still_held));
    Ok(())
}

#[tokio::test]
async fn the_body_is_told_when_its_key_is_deleted_behind_it() {
    // Watchdog 900 ms: renewals every 300 ms notice the deletion.
    let env = support::env(900);
    let mut conn = support::raw(&env.server).await;
    let entered = Notify::new();
    let lost_at = Mutex::new(None);

    let call = wait_for_loss(&env.client, 1, &entered, &lost_at);
    let delete = async {
        within(Duration::from_secs(10), "body entered", entered.notified()).await;
        // Longer than a renewal period: the hold is renewed, not fresh.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let deleted: i64 = cmd(&mut conn, &["DEL", "watched:1"]).await;
        assert_eq!(deleted, 1, "the lock key was not there to delete");
        Instant::now()
    };
    let (result, deleted_at) = within(Duration::from_secs(20), "the call", async {
        tokio::join!(call, delete)
    })
    .await;

    let Some((seen_at, still_held)) = *lost_at.lock().unwrap_or_else(|p| p.into_inner()) else {
        panic!("the body never saw the loss: {result:?}");
    };
    let delay = seen_at.saturating_duration_since(deleted_at);
    assert!(
        delay < Duration::from_secs(2),
        "the loss was seen {delay:?} after the deletion"
    );
    assert!(!still_held, "lost() resolved while the hold said held");
    // The body returned Ok, but its lock was gone before it ended.
    assert!(is_lost(&result), "expected Err(Lost), got {result:?}");
}

// ---------------------------------------------------------------------------
// cancel_on_lost

/// Sleeps, then increments `counter` with its own Redis connection: the
/// effect a cancelled body must never make.
async fn slow_increment(
    mut conn: MultiplexedConnection,
    counter: &str,
    sleep: Duration,
) -> Result<(), ShopError> {
    tokio::time::sleep(sleep).await;
    let _: i64 = cmd(&mut conn, &["INCR", counter]).await;
    Ok(())
}

#[distributed_lock(key = "job:{name}", client = client, cancel_on_lost)]
async fn job_cancel_on_lost(
    client: &LockClient,
    conn: MultiplexedConnection,
    name: &str,
    entered: &Notify,
    sleep: Duration,
) -> Result<(), ShopError> {
    entered.notify_one();
    slow_increment(conn, &format!("counter:{name}"), sleep).await
}

#[distributed_lock(key = "job:{name}", client = client)]
async fn job_runs_on(
    client: &LockClient,
    conn: MultiplexedConnection,
    name: &str,
    entered: &Notify,
    sleep: Duration,
) -> Result<(), ShopError> {
    entered.notify_one();
    slow_increment(conn, &format!("counter:{name}"), sleep).await
}

/// Runs `call`, deleting `key` 200 ms after the body entered; returns the
/// call's result, when the key was deleted and when the call returned.
async fn delete_behind<F>(
    conn: &mut MultiplexedConnection,
    key: &str,
    entered: &Notify,
    call: F,
) -> (Result<(), ShopError>, Instant, Instant)
where
    F: std::future::Future<Output = Result<(), ShopError>>,
{
    let call = async {
        let result = call.await;
        (result, Instant::now())
    };
    let delete = async {
        within(Duration::from_secs(10), "body entered", entered.notified()).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let deleted: i64 = cmd(conn, &["DEL", key]).await;
        assert_eq!(deleted, 1, "the lock key was not there to delete");
        Instant::now()
    };
    let ((result, returned_at), deleted_at) = within(Duration::from_secs(20), "the call", async {
        tokio::join!(call, delete)
    })
    .await;
    (result, deleted_at, returned_at)
}

async fn counter(conn: &mut MultiplexedConnection, name: &str) -> i64 {
    let value: Option<i64> = cmd(conn, &["GET", &format!("counter:{name}")]).await;
    value.unwrap_or(0)
}

#[tokio::test]
async fn cancel_on_lost_stops_the_body_when_its_key_is_deleted() {
    let env = support::env(900);
    let mut conn = support::raw(&env.server).await;
    let entered = Notify::new();

    let call = job_cancel_on_lost(
        &env.client,
        conn.clone(),
        "a",
        &entered,
        Duration::from_secs(10),
    );
    let (result, deleted_at, returned_at) = delete_behind(&mut conn, "job:a", &entered, call).await;
    assert!(is_lost(&result), "expected Err(Lost), got {result:?}");
    let delay = returned_at.saturating_duration_since(deleted_at);
    assert!(
        delay < Duration::from_secs(3),
        "the call returned {delay:?} after the deletion"
    );
    // The body was dropped in its sleep: its increment never happens.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(counter(&mut conn, "a").await, 0, "a cancelled body wrote");
    assert_eq!(env.client.renewing_count(), 0);

    // A body whose lock stays is not disturbed: it runs and returns Ok.
    let entered = Notify::new();
    within(
        Duration::from_secs(10),
        "undisturbed call",
        job_cancel_on_lost(
            &env.client,
            conn.clone(),
            "b",
            &entered,
            Duration::from_millis(700),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(counter(&mut conn, "b").await, 1);
    let lock = env.client.lock("job:b").unwrap_or_else(|e| panic!("{e}"));
    assert!(!lock.is_locked().await.unwrap_or_else(|e| panic!("{e}")));
}

#[tokio::test]
async fn without_cancel_on_lost_the_body_runs_to_its_end_and_the_call_returns_lost() {
    let env = support::env(900);
    let mut conn = support::raw(&env.server).await;
    let entered = Notify::new();
    let sleep = Duration::from_millis(1_500);

    let started = Instant::now();
    let call = job_runs_on(&env.client, conn.clone(), "c", &entered, sleep);
    let (result, _, returned_at) = delete_behind(&mut conn, "job:c", &entered, call).await;
    // The body made its change, and still the call reports the loss: the
    // case the docs warn retrying callers about.
    assert_eq!(counter(&mut conn, "c").await, 1, "the body did not finish");
    assert!(is_lost(&result), "expected Err(Lost), got {result:?}");
    assert!(returned_at.saturating_duration_since(started) >= sleep);
}

#[distributed_lock(key = "report:{id}", client = client, lease = "500ms", cancel_on_lost)]
async fn outlive_lease(
    client: &LockClient,
    conn: MultiplexedConnection,
    id: u32,
) -> Result<(), ShopError> {
    slow_increment(
        conn,
        &format!("counter:lease-{id}"),
        Duration::from_secs(10),
    )
    .await
}

#[tokio::test]
async fn cancel_on_lost_stops_a_body_that_outlives_its_lease() {
    let env = support::env(5_000);
    let mut conn = support::raw(&env.server).await;
    let started = Instant::now();
    let result = within(
        Duration::from_secs(5),
        "a body past its lease",
        outlive_lease(&env.client, conn.clone(), 1),
    )
    .await;
    assert!(is_lost(&result), "expected Err(Lost), got {result:?}");
    // Stopped at the lease's deadline (the lease minus a drift margin).
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "stopped after {took:?}");
    assert_eq!(counter(&mut conn, "lease-1").await, 0);
}

// ---------------------------------------------------------------------------
// Nested sections

/// The holds the inner body saw.
#[derive(Debug)]
struct InnerSeen {
    current: HeldLock,
    outer: Option<HeldLock>,
    issued: Option<u64>,
}

/// The holds the outer body saw, before and after its nested call.
#[derive(Debug)]
struct OuterSeen {
    before: HeldLock,
    issued: Option<u64>,
    inner_before: bool,
    inner: InnerSeen,
    after: HeldLock,
    inner_after: bool,
}

#[distributed_lock(key = "outer:{id}", client = client)]
async fn outer(
    client: &LockClient,
    mut conn: MultiplexedConnection,
    id: u32,
) -> Result<OuterSeen, ShopError> {
    let inner_lock = client.lock(format!("inner:{id}"))?;
    let before = current();
    let issued = issued_token(&mut conn, before.key()).await;
    let inner_before = HeldLock::current_for(&inner_lock).is_some();
    let inner = inner(client, conn, id).await?;
    let after = current();
    let inner_after = HeldLock::current_for(&inner_lock).is_some();
    Ok(OuterSeen {
        before,
        issued,
        inner_before,
        inner,
        after,
        inner_after,
    })
}

#[distributed_lock(key = "inner:{id}", client = client)]
async fn inner(
    client: &LockClient,
    mut conn: MultiplexedConnection,
    id: u32,
) -> Result<InnerSeen, ShopError> {
    let current = current();
    let outer = HeldLock::current_for(&client.lock(format!("outer:{id}"))?);
    let issued = issued_token(&mut conn, current.key()).await;
    Ok(InnerSeen {
        current,
        outer,
        issued,
    })
}

#[tokio::test]
async fn nested_sections_each_see_their_own_lock() {
    let env = support::env(5_000);
    let conn = support::raw(&env.server).await;
    let seen = within(
        Duration::from_secs(10),
        "nested calls",
        outer(&env.client, conn, 3),
    )
    .await
    .unwrap_or_else(|e| panic!("{e:?}"));

    assert_eq!(seen.before.name(), "outer:3");
    assert_eq!(seen.issued, Some(seen.before.fencing_token()));
    assert!(
        !seen.inner_before,
        "the inner lock's section before its call"
    );

    // Inside the inner body: the inner lock is current, the outer one is
    // found by its lock, and they are different holds.
    assert_eq!(seen.inner.current.name(), "inner:3");
    assert_eq!(seen.inner.issued, Some(seen.inner.current.fencing_token()));
    let Some(outer) = &seen.inner.outer else {
        panic!("current_for(outer) is None inside the inner body");
    };
    assert_eq!(outer.name(), "outer:3");
    assert_eq!(outer.fencing_token(), seen.before.fencing_token());
    assert_eq!(outer.owner_id(), seen.before.owner_id());

    // Back in the outer body: the outer lock is current again.
    assert_eq!(seen.after.name(), "outer:3");
    assert_eq!(seen.after.fencing_token(), seen.before.fencing_token());
    assert!(!seen.inner_after, "the inner section outlived its call");
    assert!(HeldLock::current().is_none());
}
