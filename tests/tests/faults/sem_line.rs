//! Places in the semaphores' line (`lockcore_sem_line:{name}`) that
//! outlive their acquisitions. Such a place blocks every acquisition
//! behind it that does not fit beside it, with permits free, until it
//! lapses (`alive_ms`: 2 s plus the command bound, the connect and command
//! time-outs).
//!
//! Both failed before the fix (found by `sem_cancellation` and
//! `sem_faults`): a dropped acquisition now counts as in the line from its
//! first attempt and leaves after its attempt in flight ended, and the
//! cancellation of an attempt with a lost reply takes its place out too.

use std::time::{Duration, Instant};

use lock_core::LockClient;
use lock_tests::{CommandMatch, Direction, Fault, FaultProxy};

use crate::support::sem::{sem_acquire_sha, sem_cancel_sha, sem_state};
use crate::support::{self, raw, within};

/// A client through `proxy` with short time-outs (its places lapse after
/// 2 s + 400 ms).
fn through(proxy: &FaultProxy) -> LockClient {
    LockClient::builder(proxy.url())
        .command_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(200))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// After `ended`, the line is empty and a waiter of another client gets
/// the permit at once.
async fn nothing_left_in_line(server: &lock_tests::RedisServer, name: &str) {
    let conn = raw(server).await;
    let line = sem_state(&conn, name).await.line;
    let next = support::client_for(server, 30_000);
    let started = Instant::now();
    let p = within(
        Duration::from_secs(10),
        "the next waiter",
        next.semaphore(name).expect("name").acquire(1),
    )
    .await
    .expect("acquire");
    let waited = started.elapsed();
    p.release().await.expect("release");
    assert!(
        line.is_empty() && waited < Duration::from_millis(500),
        "places left in the line: {line:?}; the next waiter, with the permit free, waited {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_during_its_first_attempt_leaves_no_place_in_the_line() {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    proxy.delay(Direction::ToClient, Duration::from_millis(5));
    let other = support::client_for(&server, 30_000);
    let name = "line-dropped";
    other
        .semaphore(name)
        .expect("name")
        .try_set_permits(1)
        .await
        .expect("set");
    let theirs = other
        .semaphore(name)
        .expect("name")
        .acquire(1)
        .await
        .expect("theirs");
    let client = through(&proxy);
    let sem = client.semaphore(name).expect("name");
    sem.available().await.expect("connected");
    // given up while the attempt (refused: the permit is taken) is in
    // flight; it runs to its end in the background and joins the line
    let dropped = tokio::time::timeout(Duration::from_millis(3), sem.acquire(1)).await;
    assert!(dropped.is_err(), "given up");
    tokio::time::sleep(Duration::from_millis(200)).await;
    theirs.release().await.expect("release");
    nothing_left_in_line(&server, name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_copy_of_an_attempt_leaves_no_place_in_the_line() {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let other = support::client_for(&server, 30_000);
    let name = "line-late";
    other
        .semaphore(name)
        .expect("name")
        .try_set_permits(1)
        .await
        .expect("set");
    let theirs = other
        .semaphore(name)
        .expect("name")
        .acquire(1)
        .await
        .expect("theirs");
    let client = through(&proxy);
    let sem = client.semaphore(name).expect("name");
    sem.available().await.expect("connected");
    // the attempt arrives after its acquisition gave up, but before its
    // cancellation
    let late = proxy.fault_next(
        CommandMatch::name("EVALSHA").with_exact_arg(sem_acquire_sha()),
        Fault::DelayCommand(Duration::from_millis(600)),
    );
    let later = proxy.fault_next(
        CommandMatch::name("EVALSHA").with_exact_arg(sem_cancel_sha()),
        Fault::DelayCommand(Duration::from_millis(1_000)),
    );
    let outcome = sem.acquire_timeout(1, Duration::from_millis(300)).await;
    assert!(
        matches!(outcome, Err(ref e) if e.is_wait_timeout()),
        "{outcome:?}"
    );
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(late.fired() && later.fired());
    theirs.release().await.expect("release");
    nothing_left_in_line(&server, name).await;
}
