//! A Redis user without the right to SUBSCRIBE or to PUBLISH: the refusal
//! is reported once and clearly (error hook, and a distinct error where a
//! call fails), never hidden behind polling; a release whose unlock message
//! is refused still frees the lock and says so.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{cmd, within};
use lock_core::LockClient;
use lock_tests::RedisServer;

fn server_with_users() -> RedisServer {
    RedisServer::builder()
        .args(["--user", "admin", "on", ">adminpw", "~*", "&*", "+@all"])
        .args([
            "--user",
            "nosub",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-subscribe",
        ])
        .args([
            "--user", "nopub", "on", ">pw", "~*", "&*", "+@all", "-publish",
        ])
        .client_auth("admin", "adminpw")
        .start()
        .expect("server")
}

fn client_as(server: &RedisServer, user: &str, reports: Arc<AtomicUsize>) -> LockClient {
    LockClient::builder(format!("redis://{user}:pw@127.0.0.1:{}", server.port()))
        .command_timeout(Duration::from_secs(2))
        .error_hook(move |err| {
            assert!(err.is_no_permission(), "reported: {err}");
            reports.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .expect("client")
}

fn admin(server: &RedisServer) -> LockClient {
    LockClient::builder(format!("redis://admin:adminpw@127.0.0.1:{}", server.port()))
        .build()
        .expect("admin client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_subscribe_gets_a_clear_error_instead_of_polling() {
    let server = server_with_users();
    let reports = Arc::new(AtomicUsize::new(0));
    let client = client_as(&server, "nosub", reports.clone());
    let holder = admin(&server)
        .lock("acl")
        .expect("name")
        .acquire()
        .await
        .expect("hold");
    let lock = client.lock("acl").expect("name");
    let started = Instant::now();
    let err = within(
        Duration::from_secs(5),
        "wait",
        lock.acquire_timeout(Duration::from_secs(3)),
    )
    .await
    .expect_err("cannot wait without SUBSCRIBE");
    eprintln!("no SUBSCRIBE: {err} after {:?}", started.elapsed());
    assert!(err.is_no_permission(), "{err:?}");
    assert!(!err.is_wait_timeout());
    assert!(started.elapsed() < Duration::from_secs(2), "fails promptly");
    // Reported once, however many waits fail.
    let _ = lock.acquire_timeout(Duration::from_secs(1)).await;
    assert_eq!(reports.load(Ordering::SeqCst), 1);
    // The user can still take a free lock (no waiting needed).
    holder.release().await.expect("release");
    let g = lock.try_acquire().await.expect("try").expect("free lock");
    g.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_publish_still_frees_its_locks_and_is_told_once() {
    let server = server_with_users();
    let reports = Arc::new(AtomicUsize::new(0));
    let client = client_as(&server, "nopub", reports.clone());
    let mut conn = {
        let c = redis::Client::open(format!("redis://admin:adminpw@127.0.0.1:{}", server.port()))
            .expect("url");
        c.get_multiplexed_async_connection().await.expect("conn")
    };
    let lock = client.lock("acl-pub").expect("name");
    for _ in 0..3 {
        let g = lock.acquire().await.expect("acquire");
        g.release()
            .await
            .expect("the release freed the lock: no error");
        let exists: i64 = cmd(&mut conn, &["EXISTS", "acl-pub"]).await;
        assert_eq!(exists, 0, "freed in Redis");
    }
    assert!(lock.force_unlock().await.is_ok());
    assert_eq!(reports.load(Ordering::SeqCst), 1, "reported once");
}
