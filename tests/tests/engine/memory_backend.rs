//! The client on an in-memory server (`memory://`, feature `memory`): the
//! same engine, scripts and replies as on Redis, with nothing installed.
//! Exclusion is judged by an observer of the critical sections (a counter
//! of who is inside), not by the library's view of itself.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use lock_core::{Error, LockClient, MemoryServer};

fn client_of(server: &MemoryServer, watchdog_ms: u64) -> LockClient {
    LockClient::builder(server.url())
        .watchdog_timeout(Duration::from_millis(watchdog_ms))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_one_server_never_overlap_and_all_get_their_turn() {
    let server = MemoryServer::new();
    let clients: Vec<LockClient> = (0..3).map(|_| client_of(&server, 2_000)).collect();
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let sections = Arc::new(AtomicUsize::new(0));
    let tasks = clients.iter().flat_map(|client| {
        (0..4).map(|_| {
            let lock = client
                .lock("stock:sku-42")
                .unwrap_or_else(|e| panic!("{e}"));
            let (inside, overlaps, sections) = (inside.clone(), overlaps.clone(), sections.clone());
            tokio::spawn(async move {
                for _ in 0..25 {
                    let guard = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    sections.fetch_add(1, Ordering::SeqCst);
                    guard.release().await.unwrap_or_else(|e| panic!("{e}"));
                }
            })
        })
    });
    let all = tokio::time::timeout(Duration::from_secs(60), join_all(tasks))
        .await
        .unwrap_or_else(|_| panic!("12 tasks x 25 sections did not finish in 60 s"));
    for task in all {
        task.unwrap_or_else(|e| panic!("task: {e}"));
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders inside at once"
    );
    assert_eq!(sections.load(Ordering::SeqCst), 3 * 4 * 25);
}

#[tokio::test]
async fn a_memory_url_names_one_shared_server_and_names_are_checked() {
    let a = LockClient::builder("memory://engine-suite-shared")
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let b = LockClient::builder("memory://engine-suite-shared")
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let guard = a
        .lock("job")
        .unwrap_or_else(|e| panic!("{e}"))
        .acquire()
        .await;
    let guard = guard.unwrap_or_else(|e| panic!("{e}"));
    let other = b.lock("job").unwrap_or_else(|e| panic!("{e}"));
    assert!(other
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .is_none());
    assert!(other.is_locked().await.unwrap_or_else(|e| panic!("{e}")));
    guard.release().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!other.is_locked().await.unwrap_or_else(|e| panic!("{e}")));
    // A URL a server name cannot be.
    let err = LockClient::builder("memory://a/b")
        .build()
        .expect_err("a name with `/` was taken");
    assert!(
        matches!(err, Error::InvalidArgument(ref m) if m.contains("memory url")),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fixed_lease_runs_out_on_tokios_clock() {
    let server = MemoryServer::new();
    let (a, b) = (client_of(&server, 30_000), client_of(&server, 30_000));
    let lock_a = a.lock("report").unwrap_or_else(|e| panic!("{e}"));
    let lock_b = b.lock("report").unwrap_or_else(|e| panic!("{e}"));
    let guard = lock_a
        .acquire_with_lease(Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(guard.is_held());
    assert!(lock_b
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .is_none());
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(!guard.is_held(), "the guard's deadline passed");
    let taken = lock_b.try_acquire().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(taken.is_some(), "the key expired in the server");
    assert!(guard
        .release()
        .await
        .expect_err("released after it ran out")
        .is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_and_tokens_grow() {
    let server = MemoryServer::new();
    let (a, b) = (client_of(&server, 30_000), client_of(&server, 30_000));
    let first = a
        .lock("invoice")
        .unwrap_or_else(|e| panic!("{e}"))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let token = first.fencing_token();
    let lock_b = b.lock("invoice").unwrap_or_else(|e| panic!("{e}"));
    let waiter = tokio::spawn(async move { lock_b.acquire().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "the lock is held");
    first.release().await.unwrap_or_else(|e| panic!("{e}"));
    // Woken by the unlock message, well before the 30 s lease could run out.
    let second = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap_or_else(|_| panic!("the waiter was not woken"))
        .unwrap_or_else(|e| panic!("task: {e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(second.fencing_token() > token);
    second.release().await.unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_server_makes_the_holder_lose_its_lock() {
    let server = MemoryServer::new();
    let client = client_of(&server, 300);
    let guard = client
        .lock("nightly")
        .unwrap_or_else(|e| panic!("{e}"))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    server.flush_all();
    // The next renewal (every 100 ms) finds the hold gone.
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .unwrap_or_else(|_| panic!("the loss was not noticed"));
    assert!(!guard.is_held());
}

#[tokio::test]
async fn replicas_cannot_acknowledge_on_a_memory_server() {
    let server = MemoryServer::new();
    let client = LockClient::builder(server.url())
        .wait_for_replicas(1, Duration::from_millis(50))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = client
        .lock("replicated")
        .unwrap_or_else(|e| panic!("{e}"))
        .acquire()
        .await
        .expect_err("acknowledged by replicas that do not exist");
    assert!(
        matches!(
            err,
            Error::NotReplicated {
                wanted: 1,
                acknowledged: 0,
                ..
            }
        ),
        "{err:?}"
    );
}
