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

/// A `MemoryServer` and a raw view of the very same server (for an
/// observer that reads the counters without the library): the raw server
/// registered under a name, the public handle made by that name.
fn observed_server(name: &str) -> (MemoryServer, lock_core::__private::MemoryServerForTests) {
    let raw = lock_core::__private::MemoryServerForTests::new();
    raw.alias(name);
    let server = MemoryServer::named(name).unwrap_or_else(|e| panic!("{e}"));
    (server, raw)
}

/// A raw command on the observed server; its integer (a GET or a ZCARD).
fn raw_int(raw: &lock_core::__private::MemoryServerForTests, args: &[&str]) -> i64 {
    let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    match raw.call(&args).unwrap_or_else(|e| panic!("{args:?}: {e}")) {
        redis::Value::Int(n) => n,
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b)
            .parse()
            .unwrap_or_else(|e| panic!("{args:?}: {e}")),
        redis::Value::Nil => 0,
        other => panic!("{args:?}: {other:?}"),
    }
}

/// Both semaphore kinds on a memory server, end to end: 3 clients x 3
/// tasks x 8 rounds on a semaphore of N, never more than N inside (counted
/// outside the library), every permit back in the counter at the end and
/// no permit id left (read from the server directly); a waiter is woken by
/// a release (pub/sub), well before its 1 s re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_never_admit_more_than_their_permits_on_a_memory_server() {
    let (server, raw) = observed_server(&format!("engine-sem-{}", std::process::id()));
    let clients: Vec<LockClient> = (0..3).map(|_| client_of(&server, 1_000)).collect();
    for (kind, permits) in [("plain", 2i64), ("expirable", 3)] {
        let name = format!("mem:sem:{kind}");
        let set = if kind == "plain" {
            clients[0]
                .semaphore(&name)
                .unwrap_or_else(|e| panic!("{e}"))
                .try_set_permits(permits as u64)
                .await
        } else {
            clients[0]
                .permit_semaphore(&name)
                .unwrap_or_else(|e| panic!("{e}"))
                .try_set_permits(permits as u64)
                .await
        };
        assert!(set.unwrap_or_else(|e| panic!("{e}")), "{kind}: set");
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let sections = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for (c, client) in clients.iter().enumerate() {
            for t in 0..3 {
                let (inside, most, sections) = (inside.clone(), most.clone(), sections.clone());
                let (client, name) = (client.clone(), name.clone());
                tasks.push(tokio::spawn(async move {
                    for round in 0..8 {
                        let permit = if kind == "plain" {
                            client
                                .semaphore(&name)
                                .unwrap_or_else(|e| panic!("{e}"))
                                .acquire(1)
                                .await
                        } else {
                            client
                                .permit_semaphore(&name)
                                .unwrap_or_else(|e| panic!("{e}"))
                                .acquire(1)
                                .await
                        }
                        .unwrap_or_else(|e| panic!("{kind}: {e}"));
                        assert_eq!(permit.ids().len(), if kind == "plain" { 0 } else { 1 });
                        assert!(permit.is_held());
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(((c + t + round) % 3) as u64))
                            .await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        sections.fetch_add(1, Ordering::SeqCst);
                        permit
                            .release()
                            .await
                            .unwrap_or_else(|e| panic!("{kind}: {e}"));
                    }
                }));
            }
        }
        let all = tokio::time::timeout(Duration::from_secs(60), join_all(tasks))
            .await
            .unwrap_or_else(|_| panic!("{kind}: 9 tasks x 8 rounds did not finish in 60 s"));
        for task in all {
            task.unwrap_or_else(|e| panic!("task: {e}"));
        }
        let most = most.load(Ordering::SeqCst) as i64;
        assert!(
            most <= permits,
            "{kind}: {most} inside a semaphore of {permits}"
        );
        assert!(most >= 2, "{kind}: permits were shared ({most})");
        assert_eq!(sections.load(Ordering::SeqCst), 3 * 3 * 8);
        assert_eq!(
            raw_int(&raw, &["GET", &name]),
            permits,
            "{kind}: every permit back"
        );
        assert_eq!(
            raw_int(&raw, &["ZCARD", &format!("{{{name}}}:timeout")]),
            0,
            "{kind}: no id left"
        );
    }
    // a waiter woken by the release
    let sem = clients[0]
        .semaphore("mem:sem:plain")
        .unwrap_or_else(|e| panic!("{e}"));
    let held = sem.acquire(2).await.unwrap_or_else(|e| panic!("{e}"));
    let other = clients[1]
        .semaphore("mem:sem:plain")
        .unwrap_or_else(|e| panic!("{e}"));
    let waiter = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let permit = other.acquire(1).await;
        (started.elapsed(), permit)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "no permit is free");
    held.release().await.unwrap_or_else(|e| panic!("{e}"));
    let (waited, permit) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap_or_else(|_| panic!("the waiter was not served"))
        .unwrap_or_else(|e| panic!("task: {e}"));
    let permit = permit.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        waited < Duration::from_millis(900),
        "woken by the release, not the re-check: {waited:?}"
    );
    assert_eq!(raw_int(&raw, &["GET", "mem:sem:plain"]), 1);
    permit.release().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(raw_int(&raw, &["GET", "mem:sem:plain"]), 2);
}

/// On tokio's paused clock: a permit with a fixed lease runs out in the
/// server (another client sees it back, the late release says lost), a
/// watchdog-renewed one outlives many leases; the count-down latch opens
/// at zero for a waiter of another client.
#[tokio::test(start_paused = true)]
async fn leased_permits_run_out_on_tokios_clock_and_the_latch_opens() {
    let (server, raw) = observed_server(&format!("engine-sem-paused-{}", std::process::id()));
    let (a, b) = (client_of(&server, 3_000), client_of(&server, 3_000));
    let sem_a = a
        .permit_semaphore("mem:lease")
        .unwrap_or_else(|e| panic!("{e}"));
    let sem_b = b
        .permit_semaphore("mem:lease")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(sem_a
        .try_set_permits(2)
        .await
        .unwrap_or_else(|e| panic!("{e}")));
    let leased = sem_a
        .acquire_with(
            1,
            lock_core::AcquireOptions::new().lease(Duration::from_secs(10)),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(leased.lease(), Some(Duration::from_secs(10)));
    let renewed = sem_a.acquire(1).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sem_b.available().await.unwrap_or_else(|e| panic!("{e}")), 0);
    assert!(sem_b
        .try_acquire(1)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .is_none());
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(leased.is_held());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!leased.is_held(), "the lease's deadline passed");
    assert!(renewed.is_held(), "renewed by the watchdog");
    // the expired id comes back first
    assert_eq!(sem_b.available().await.unwrap_or_else(|e| panic!("{e}")), 1);
    assert_eq!(raw_int(&raw, &["ZCARD", "{mem:lease}:timeout"]), 1);
    let status = sem_b.status(10).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((status.available, status.held_total), (1, 1));
    assert_eq!(status.held[0].id, renewed.ids()[0]);
    let err = leased
        .release()
        .await
        .expect_err("released after its lease ran out");
    assert!(err.is_lost(), "{err:?}");
    assert_eq!(
        raw_int(&raw, &["GET", "mem:lease"]),
        1,
        "nothing given back twice"
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(renewed.is_held(), "still renewed after 10 of its leases");
    renewed.release().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(raw_int(&raw, &["GET", "mem:lease"]), 2);

    let latch_a = a.latch("mem:boot").unwrap_or_else(|e| panic!("{e}"));
    let latch_b = b.latch("mem:boot").unwrap_or_else(|e| panic!("{e}"));
    assert!(latch_a
        .try_set_count(2)
        .await
        .unwrap_or_else(|e| panic!("{e}")));
    assert!(!latch_b
        .try_set_count(5)
        .await
        .unwrap_or_else(|e| panic!("{e}")));
    let waiter = tokio::spawn({
        let latch = latch_b.clone();
        async move { latch.wait_timeout(Duration::from_secs(20)).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!waiter.is_finished());
    assert_eq!(
        latch_a.count_down().await.unwrap_or_else(|e| panic!("{e}")),
        1
    );
    assert!(!latch_b
        .wait_timeout(Duration::from_millis(50))
        .await
        .unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(
        latch_b.count_down().await.unwrap_or_else(|e| panic!("{e}")),
        0
    );
    let opened = waiter.await.unwrap_or_else(|e| panic!("task: {e}"));
    assert!(opened.unwrap_or_else(|e| panic!("{e}")), "the latch opened");
    assert_eq!(latch_a.count().await.unwrap_or_else(|e| panic!("{e}")), 0);
    assert_eq!(raw_int(&raw, &["EXISTS", "mem:boot"]), 0);
    assert_eq!(
        latch_a.count_down().await.unwrap_or_else(|e| panic!("{e}")),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn an_election_fails_over_on_tokios_clock_and_a_deposed_leaders_fenced_write_is_refused() {
    let server = MemoryServer::new();
    let a = client_of(&server, 300);
    let b = client_of(&server, 300);
    let first = a
        .election("jobs")
        .unwrap_or_else(|e| panic!("{e}"))
        .campaign("a")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first.fence().incr_by("jobs:n", 1).await.ok(), Some(1));
    // The leader's lock goes (as a crash would leave it to expire): the
    // other campaigner leads, and the deposed leader's write is refused.
    // (The flush takes the last token too: the next one comes from the
    // server's clock, which moves here only with tokio's paused clock.)
    server.flush_all();
    tokio::time::advance(Duration::from_millis(1)).await;
    let second = tokio::time::timeout(
        Duration::from_secs(5),
        b.election("jobs")
            .unwrap_or_else(|e| panic!("{e}"))
            .campaign("b"),
    )
    .await
    .unwrap_or_else(|_| panic!("no new leader"))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(second.term() > first.term());
    let refused = first.fence().incr_by("jobs:n", 1).await;
    assert!(
        matches!(refused, Err(Error::FenceRefused { .. })),
        "{refused:?}"
    );
    assert_eq!(second.fence().incr_by("jobs:n", 1).await.ok(), Some(1));
    let leader = b
        .election("jobs")
        .unwrap_or_else(|e| panic!("{e}"))
        .leader()
        .await;
    let leader = leader
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no leader"));
    assert_eq!(
        (leader.value(), leader.term()),
        (Some("b"), Some(second.term()))
    );
}
