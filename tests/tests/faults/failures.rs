//! Failures are fast and say what failed: a refused connection, a wrong
//! password, a DB index out of range fail the call within a second with
//! default settings (connect time-out 5 s) and an error naming the cause;
//! after a restart of Redis the next call succeeds at once.

use std::time::{Duration, Instant};

use crate::support::{self, failing_acquire, within};
use lock_core::LockClient;
use lock_tests::RedisServer;

#[tokio::test]
async fn a_refused_connection_fails_at_once_and_says_so() {
    let port = lock_tests::free_port().expect("port");
    let (err, took) =
        failing_acquire(LockClient::builder(format!("redis://127.0.0.1:{port}"))).await;
    eprintln!("refused: {err} after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(err.is_connection_refused(), "{err:?}");
    assert!(err.to_string().to_lowercase().contains("refused"), "{err}");
}

/// The host and port refused are in the message, once; the cause is said
/// once too (nothing repeats it through `source()`).
#[tokio::test]
async fn a_refused_connection_names_the_address() {
    let port = lock_tests::free_port().expect("port");
    let (err, _) = failing_acquire(LockClient::builder(format!("redis://127.0.0.1:{port}"))).await;
    assert!(err.is_connection_refused(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "redis error: cannot connect to 127.0.0.1:{port}: "
        )),
        "{text}"
    );
    #[cfg(target_os = "linux")]
    assert_eq!(
        text,
        format!(
            "redis error: cannot connect to 127.0.0.1:{port}: Connection refused (os error 111)"
        )
    );
    assert!(std::error::Error::source(&err).is_none(), "{err:?}");
}

/// A cluster whose seeds refuse: the message names the seeds.
#[tokio::test]
async fn a_refused_cluster_names_its_seeds() {
    let (a, b) = (
        lock_tests::free_port().expect("port"),
        lock_tests::free_port().expect("port"),
    );
    let url = format!("redis+cluster://127.0.0.1:{a},127.0.0.1:{b}");
    let (err, took) = failing_acquire(LockClient::builder(url)).await;
    eprintln!("refused cluster: {err} after {took:?}");
    assert!(err.is_connection_refused(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "redis error: cannot connect to the cluster at 127.0.0.1:{a}, 127.0.0.1:{b}: "
        )),
        "{text}"
    );
    assert_eq!(text.matches("Connection refused").count(), 1, "{text}");
}

#[tokio::test]
async fn a_wrong_password_fails_at_once_and_says_so() {
    let server = RedisServer::builder()
        .args(["--requirepass", "right"])
        .client_auth("default", "right")
        .start()
        .expect("server");
    let url = format!("redis://:wrong@127.0.0.1:{}", server.port());
    let (err, took) = failing_acquire(LockClient::builder(url)).await;
    eprintln!("wrong password: {err} after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(err.is_auth_failure(), "{err:?}");
    assert!(
        !err.to_string().contains("wrong"),
        "no password in the message: {err}"
    );
}

#[tokio::test]
async fn a_db_index_out_of_range_fails_at_once_and_says_so() {
    let server = support::server();
    let url = format!("redis://127.0.0.1:{}/99", server.port());
    let (err, took) = failing_acquire(LockClient::builder(url)).await;
    eprintln!("DB 99: {err} after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(err.to_string().contains("DB index"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_next_call_succeeds_at_once() {
    let mut server = support::server();
    let client = LockClient::builder(server.url()).build().expect("client");
    let lock = client.lock("restart").expect("name");
    lock.acquire()
        .await
        .expect("before")
        .release()
        .await
        .expect("release");
    server.restart().expect("restart");
    // The server answers again (restart() waited for it): the next call must
    // not wait for a time-out on the pool's dead connection.
    let started = Instant::now();
    let guard = lock.acquire().await.expect("after restart");
    let took = started.elapsed();
    eprintln!("first acquire after the restart: {took:?}");
    assert!(took < Duration::from_millis(100), "{took:?}");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_rides_out_a_restart_and_gets_the_lock_soon_after() {
    let mut server = support::server();
    let holder = support::client_for(&server, 30_000);
    let waiter = LockClient::builder(server.url()).build().expect("client");
    let held = holder
        .lock("ride")
        .expect("name")
        .acquire()
        .await
        .expect("hold");
    let lock = waiter.lock("ride").expect("name");
    let wait = tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(15)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The restart loses the holder's lock; the waiter must not fail, and
    // must get the lock soon after Redis answers again.
    server.restart().expect("restart");
    let back = Instant::now();
    let guard = within(Duration::from_secs(10), "waiter", wait)
        .await
        .expect("task")
        .expect("the waiter rides out the restart");
    let took = back.elapsed();
    eprintln!("waiter got the lock {took:?} after Redis answered again");
    assert!(took < Duration::from_secs(1), "{took:?}");
    guard.release().await.expect("release");
    drop(held);
}
