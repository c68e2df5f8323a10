//! `wait_for_replicas`: a fresh acquisition is handed out only once the
//! required replicas acknowledged it (`WAIT` after a confirming write on a
//! connection of its own); with too few, it is released and the acquire
//! fails with `Error::NotReplicated`.
//!
//! Judged from the servers: the replica's own copy of the lock hash (read
//! straight from the replica), the primary's `EXISTS`, and a second client
//! that takes the lock. The replica is paused with SIGSTOP to withhold
//! acknowledgements. Planted check (done once): with the `WAIT` left out
//! of `replicas.rs`, five of these six tests fail.

use std::time::Duration;

use crate::support::layer::{http_client, send, HttpServer};
use crate::support::{hash_on, within};
use lock_core::{AcquireOptions, Error, LockClient};
use lock_tests::{RedisServer, ReplicatedPair};
use lock_tower::{LockLayer, PathSegment};
use tokio::time::Instant;

const SHORT: Duration = Duration::from_millis(300);

fn pair() -> ReplicatedPair {
    ReplicatedPair::start().unwrap_or_else(|e| panic!("primary and replica: {e}"))
}

fn client(server: &RedisServer, ack: Option<(u32, Duration)>) -> LockClient {
    let mut b = LockClient::builder(server.url())
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2));
    if let Some((n, timeout)) = ack {
        b = b.wait_for_replicas(n, timeout);
    }
    b.build().unwrap_or_else(|e| panic!("client: {e}"))
}

fn exists_on(server: &RedisServer, key: &str) -> bool {
    server
        .command(&["EXISTS", key])
        .unwrap_or_else(|e| panic!("EXISTS: {e}"))
        .as_i64()
        == Some(1)
}

fn expect_not_replicated(err: Error, wanted: u32, acknowledged: u32) {
    match err {
        Error::NotReplicated {
            wanted: w,
            acknowledged: a,
            ..
        } => assert_eq!((w, a), (wanted, acknowledged), "counts in the error"),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_is_handed_out_only_once_the_replica_has_it() {
    let p = pair();
    let c = client(&p.primary, Some((1, Duration::from_secs(10))));
    let lock = c.lock("replicated").unwrap_or_else(|e| panic!("{e}"));
    // Withhold acknowledgements: the acquire must not return.
    p.replica.pause().unwrap_or_else(|e| panic!("{e}"));
    let pending = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !pending.is_finished(),
        "handed out before the replica acknowledged"
    );
    assert!(
        exists_on(&p.primary, lock.key()),
        "taken on the primary meanwhile"
    );
    p.replica.resume().unwrap_or_else(|e| panic!("{e}"));
    let guard = within(Duration::from_secs(5), "acquire after the resume", pending)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("acquire: {e}"));
    // The moment the guard exists, the replica's own copy names its owner.
    let on_replica = hash_on(&p.replica, lock.key());
    assert_eq!(
        on_replica.get(guard.owner_id()).map(String::as_str),
        Some("1"),
        "the replica holds the acquisition: {on_replica:?}"
    );
    guard.release().await.unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_fails_the_acquire_with_the_distinct_error_and_leaves_no_hold() {
    let p = pair();
    let c = client(&p.primary, Some((1, SHORT)));
    let lock = c.lock("unacknowledged").unwrap_or_else(|e| panic!("{e}"));
    // Warm up with the replica running: scripts loaded, the exclusive
    // connection open and its last write acknowledged. (On 7.0.15 any
    // command makes a later WAIT on its connection count every write before
    // it; servers that count only the connection's own writes rely on the
    // confirming write.)
    let warm = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
    warm.release().await.unwrap_or_else(|e| panic!("{e}"));
    p.replica.pause().unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    let err = within(Duration::from_secs(5), "acquire", lock.acquire())
        .await
        .map(|_| ())
        .expect_err("acquired without the replica's acknowledgement");
    let took = started.elapsed();
    assert!(err.is_not_replicated() && !err.is_redis(), "{err}");
    expect_not_replicated(err, 1, 0);
    assert!(took >= SHORT, "WAIT waited its time-out: {took:?}");
    // No hold: the primary has no lock key, and another client takes it at once.
    assert!(!exists_on(&p.primary, lock.key()), "the hold was released");
    let other = client(&p.primary, None);
    let g = other
        .lock("unacknowledged")
        .unwrap_or_else(|e| panic!("{e}"))
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(g.is_some(), "another client takes the lock");
    assert_eq!(c.renewing_count(), 0, "nothing left renewing");
    p.replica.resume().unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_acquire_setting_overrides_the_clients() {
    let p = pair();
    let plain = client(&p.primary, None);
    let waiting = client(&p.primary, Some((1, SHORT)));
    p.replica.pause().unwrap_or_else(|e| panic!("{e}"));
    // Client without the setting, acquisition with it: fails.
    let lock = plain.lock("per-acquire").unwrap_or_else(|e| panic!("{e}"));
    let err = lock
        .acquire_with(AcquireOptions::new().wait_for_replicas(1, SHORT))
        .await
        .map(|_| ())
        .expect_err("acquired without the replica");
    expect_not_replicated(err, 1, 0);
    // Neither: no wait, held at once.
    let g = within(SHORT, "plain acquire", lock.acquire())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    g.release().await.unwrap_or_else(|e| panic!("{e}"));
    // Client with the setting, acquisition opting out: held at once.
    let g = within(
        SHORT,
        "skip_replica_wait",
        waiting
            .lock("per-acquire")
            .unwrap_or_else(|e| panic!("{e}"))
            .acquire_with(AcquireOptions::new().skip_replica_wait()),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(exists_on(&p.primary, lock.key()));
    g.release().await.unwrap_or_else(|e| panic!("{e}"));
    p.replica.resume().unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_replicas_than_there_are_is_a_shortfall_with_the_count() {
    let p = pair();
    let c = client(&p.primary, Some((2, SHORT)));
    let lock = c.lock("two-wanted").unwrap_or_else(|e| panic!("{e}"));
    let err = lock
        .acquire()
        .await
        .map(|_| ())
        .expect_err("two replicas acknowledged with one running");
    expect_not_replicated(err, 2, 1);
    assert!(!exists_on(&p.primary, lock.key()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_hand_off_is_confirmed_on_the_replica_too() {
    let p = pair();
    let c = client(&p.primary, Some((1, SHORT)));
    let lock = c.lock("handed-on").unwrap_or_else(|e| panic!("{e}"));
    let first = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
    // A waiter of the same client: it gets the lock by hand-off, which
    // writes its owner into the hash on release.
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    p.replica.pause().unwrap_or_else(|e| panic!("{e}"));
    first.release().await.unwrap_or_else(|e| panic!("{e}"));
    let err = within(Duration::from_secs(5), "waiter", waiter)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|_| ())
        .expect_err("a hand-off was handed out without the replica");
    expect_not_replicated(err, 1, 0);
    assert!(
        !exists_on(&p.primary, lock.key()),
        "the hand-off was released"
    );
    p.replica.resume().unwrap_or_else(|e| panic!("{e}"));
    // With the replica back, the same waits succeed.
    let g = within(Duration::from_secs(5), "acquire", lock.acquire())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    g.release().await.unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn bad_replica_settings_are_refused_before_any_redis_call() {
    // Nothing listens here: a Redis call would fail differently.
    let url = "redis://127.0.0.1:1";
    let err = LockClient::builder(url)
        .wait_for_replicas(0, SHORT)
        .build()
        .expect_err("zero replicas accepted");
    assert!(err.is_invalid_input(), "{err}");
    let err = LockClient::builder(url)
        .wait_for_replicas(1, Duration::ZERO)
        .build()
        .expect_err("WAIT 0 (forever) accepted");
    assert!(err.to_string().contains("block forever"), "{err}");
    let c = LockClient::builder(url)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = c
        .lock("x")
        .unwrap_or_else(|e| panic!("{e}"))
        .acquire_with(AcquireOptions::new().wait_for_replicas(1, Duration::ZERO))
        .await
        .map(|_| ())
        .expect_err("accepted");
    assert!(err.is_invalid_input(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_entry_does_not_wait_for_replicas() {
    let p = pair();
    let c = client(&p.primary, Some((1, Duration::from_secs(10))));
    let lock = c.lock("re-entered").unwrap_or_else(|e| panic!("{e}"));
    lock_core::in_context(async {
        let outer = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
        p.replica.pause().unwrap_or_else(|e| panic!("{e}"));
        // One more count of the same hold: no WAIT, so no 10 s stall.
        let inner = within(SHORT, "re-entry", lock.acquire())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            hash_on(&p.primary, lock.key())
                .get(outer.owner_id())
                .map(String::as_str),
            Some("2"),
            "a re-entry of the outer hold"
        );
        p.replica.resume().unwrap_or_else(|e| panic!("{e}"));
        inner.release().await.unwrap_or_else(|e| panic!("{e}"));
        outer.release().await.unwrap_or_else(|e| panic!("{e}"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_answers_503_when_replicas_do_not_acknowledge_and_the_handler_never_runs() {
    let p = pair();
    let c = client(&p.primary, Some((1, SHORT)));
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let app = axum::Router::new()
        .route(
            "/orders/{id}",
            axum::routing::post({
                let ran = ran.clone();
                move || async move {
                    ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    "ok"
                }
            }),
        )
        .layer(LockLayer::new(c.clone(), PathSegment::after("orders")));
    let server = HttpServer::start(app).await;
    let http = http_client();
    assert_eq!(
        send(&http, "POST", server.url("/orders/1")).await.status,
        200
    );
    p.replica.pause().unwrap_or_else(|e| panic!("{e}"));
    let r = send(&http, "POST", server.url("/orders/1")).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (503, "lock not acknowledged by replicas\n")
    );
    assert_eq!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the handler ran once"
    );
    let key = c
        .lock("1")
        .unwrap_or_else(|e| panic!("{e}"))
        .key()
        .to_owned();
    assert!(!exists_on(&p.primary, &key), "no hold left behind");
    p.replica.resume().unwrap_or_else(|e| panic!("{e}"));
}
