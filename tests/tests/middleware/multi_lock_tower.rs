//! lock-tower's `MultiLockLayer` at the tower level (generic flavour):
//! several locks per request, taken together through lock-core's
//! multi-lock, against private redis-servers. The HTTP and gRPC suites
//! (`multi_lock_tower_http`, `multi_lock_tower_grpc`) run it behind real
//! servers on loopback.
//!
//! Exclusion is checked by [`KeysObserver`], kept outside the library: a
//! count per key inside the handler (in-process and in Redis, through a
//! raw connection of its own), a read-pause-write counter per key (an
//! overlap loses an update), and a raw `EXISTS` of every lock hash of the
//! request while inside.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::layer::{client, lock_error};
use crate::support::{cmd, commands_but_info, eventually, raw, server, within};
use futures_util::future::join_all;
use lock_core::{HeldLock, LockClient};
use lock_tower::{BoxError, LockLayer, MultiLockLayer};
use tokio::time::Instant;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};

/// An independent observer of "never two requests inside one key": every
/// handler section enters it with its keys.
pub(crate) struct KeysObserver {
    /// Sections inside each key now (in-process).
    inside: std::sync::Mutex<HashMap<String, Arc<AtomicI64>>>,
    /// One counter per key, updated with a read, a pause and a write.
    counters: std::sync::Mutex<HashMap<String, Arc<AtomicU64>>>,
    /// Entries that found another section inside one of their keys.
    over: AtomicU64,
    /// Checks that found one of the section's lock hashes missing in Redis.
    missing: AtomicU64,
    entered: AtomicU64,
    running: AtomicI64,
    max_running: AtomicI64,
    conn: redis::aio::MultiplexedConnection,
}

impl KeysObserver {
    /// An observer whose Redis counts are `observer:inside:<key>` and
    /// `observer:over`, for lock clients without a key prefix (the lock
    /// hash of `name` is `name`).
    pub(crate) async fn new(server: &lock_tests::RedisServer) -> Arc<Self> {
        Arc::new(KeysObserver {
            inside: Default::default(),
            counters: Default::default(),
            over: AtomicU64::new(0),
            missing: AtomicU64::new(0),
            entered: AtomicU64::new(0),
            running: AtomicI64::new(0),
            max_running: AtomicI64::new(0),
            conn: raw(server).await,
        })
    }

    fn cell<T: Default>(map: &std::sync::Mutex<HashMap<String, Arc<T>>>, key: &str) -> Arc<T> {
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_string()).or_default().clone()
    }

    /// Whether every lock hash of `keys` exists in Redis now.
    async fn all_exist(&self, keys: &[String]) -> bool {
        let mut conn = self.conn.clone();
        let mut args = vec!["EXISTS"];
        args.extend(keys.iter().map(String::as_str));
        let n: i64 = cmd(&mut conn, &args).await;
        n == keys.len() as i64
    }

    /// One section under the locks `keys` lasting about `work`.
    pub(crate) async fn section(&self, keys: &[String], work: Duration) {
        let mut keys = keys.to_vec();
        keys.sort();
        keys.dedup();
        self.entered.fetch_add(1, Ordering::SeqCst);
        let mut conn = self.conn.clone();
        for key in &keys {
            if Self::cell(&self.inside, key).fetch_add(1, Ordering::SeqCst) != 0 {
                self.over.fetch_add(1, Ordering::SeqCst);
            }
            let in_redis: i64 = cmd(&mut conn, &["INCR", &format!("observer:inside:{key}")]).await;
            if in_redis != 1 {
                let _: i64 = cmd(&mut conn, &["INCR", "observer:over"]).await;
            }
        }
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        if !self.all_exist(&keys).await {
            self.missing.fetch_add(1, Ordering::SeqCst);
        }
        let cells: Vec<_> = keys.iter().map(|k| Self::cell(&self.counters, k)).collect();
        let seen: Vec<u64> = cells.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        tokio::time::sleep(work).await;
        for (cell, seen) in cells.iter().zip(seen) {
            cell.store(seen + 1, Ordering::SeqCst);
        }
        if !self.all_exist(&keys).await {
            self.missing.fetch_add(1, Ordering::SeqCst);
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        for key in &keys {
            let _: i64 = cmd(&mut conn, &["DECR", &format!("observer:inside:{key}")]).await;
            Self::cell(&self.inside, key).fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The counter of `key`: how many sections ran under it.
    pub(crate) fn counter(&self, key: &str) -> u64 {
        Self::cell(&self.counters, key).load(Ordering::SeqCst)
    }

    pub(crate) fn entered(&self) -> u64 {
        self.entered.load(Ordering::SeqCst)
    }

    pub(crate) fn max_running(&self) -> i64 {
        self.max_running.load(Ordering::SeqCst)
    }

    /// Exclusion violations: (in-process overlaps, overlaps Redis saw,
    /// sections that found one of their lock hashes missing).
    pub(crate) async fn violations(&self) -> (u64, i64, u64) {
        let mut conn = self.conn.clone();
        let in_redis: Option<i64> = cmd(&mut conn, &["GET", "observer:over"]).await;
        (
            self.over.load(Ordering::SeqCst),
            in_redis.unwrap_or(0),
            self.missing.load(Ordering::SeqCst),
        )
    }
}

/// A generic-flavour service over `Vec<String>` requests (the request is
/// its own list of keys) whose handler runs one observer section of
/// `work`.
fn observed(
    client: LockClient,
    observer: Arc<KeysObserver>,
    work: Duration,
    wait: Duration,
) -> impl Service<Vec<String>, Response = (), Error = BoxError, Future: Send> + Clone {
    ServiceBuilder::new()
        .layer(MultiLockLayer::generic(client, |keys: &Vec<String>| keys.clone()).wait(wait))
        .service(service_fn(move |keys: Vec<String>| {
            let observer = observer.clone();
            async move {
                observer.section(&keys, work).await;
                Ok::<_, Infallible>(())
            }
        }))
}

fn keys(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// A xorshift generator: the same pairs on every run of a seed.
fn pairs(seed: u64, n: usize, of: usize) -> Vec<(usize, usize)> {
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|_| {
            let a = (next() % of as u64) as usize;
            let b = (a + 1 + (next() % (of as u64 - 1)) as usize) % of;
            if next() % 2 == 0 {
                (a, b)
            } else {
                (b, a)
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_key_sets_in_both_orders_never_overlap_across_two_clients() {
    let server = server();
    let observer = KeysObserver::new(&server).await;
    let wait = Duration::from_secs(30);
    let work = Duration::from_millis(5);
    let a = observed(client(&server), observer.clone(), work, wait);
    let b = observed(client(&server), observer.clone(), work, wait);
    let sets = [keys(&["a", "b"]), keys(&["b", "a"]), keys(&["b", "c"])];
    const N: usize = 30;
    let calls = (0..N).map(|i| {
        let svc = if i % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(svc.oneshot(sets[i % 3].clone()))
    });
    let started = Instant::now();
    for r in within(Duration::from_secs(60), "30 requests", join_all(calls)).await {
        r.expect("task").expect("request");
    }
    println!(
        "{N} requests over [a,b] [b,a] [b,c] in {:?}",
        started.elapsed()
    );
    assert_eq!(
        observer.violations().await,
        (0, 0, 0),
        "overlap or lock missing"
    );
    assert_eq!(observer.entered(), N as u64);
    assert_eq!(observer.counter("a"), 20, "lost updates on a");
    assert_eq!(observer.counter("b"), N as u64, "lost updates on b");
    assert_eq!(observer.counter("c"), 10, "lost updates on c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_pairs_of_six_keys_from_sixteen_concurrent_requests_never_deadlock() {
    let server = server();
    let observer = KeysObserver::new(&server).await;
    // Every request must get through well within its wait bound: a
    // deadlock (or a livelock) fails a request with "busy" at 20 s.
    let wait = Duration::from_secs(20);
    let work = Duration::from_millis(3);
    let services = [
        observed(client(&server), observer.clone(), work, wait),
        observed(client(&server), observer.clone(), work, wait),
    ];
    const CONCURRENT: usize = 16;
    const EACH: usize = 6;
    let names = ["k0", "k1", "k2", "k3", "k4", "k5"];
    let started = Instant::now();
    let tasks = (0..CONCURRENT).map(|t| {
        let svc = services[t % 2].clone();
        let todo = pairs(0x9e37_79b9 + t as u64, EACH, names.len());
        tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            for (x, y) in todo {
                let asked = Instant::now();
                svc.clone()
                    .oneshot(keys(&[names[x], names[y]]))
                    .await
                    .unwrap_or_else(|e| panic!("[{x}, {y}]: {e}"));
                longest = longest.max(asked.elapsed());
            }
            longest
        })
    });
    let longest = within(Duration::from_secs(90), "96 requests", join_all(tasks))
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .max()
        .unwrap_or_default();
    println!(
        "{} requests on random pairs of 6 keys, {CONCURRENT} at once: {:?}, longest {longest:?}, \
         at most {} inside at once",
        CONCURRENT * EACH,
        started.elapsed(),
        observer.max_running()
    );
    assert_eq!(
        observer.violations().await,
        (0, 0, 0),
        "overlap or lock missing"
    );
    assert_eq!(observer.entered(), (CONCURRENT * EACH) as u64);
    let total: u64 = names.iter().map(|n| observer.counter(n)).sum();
    assert_eq!(total, 2 * (CONCURRENT * EACH) as u64, "lost updates");
    // every lock released at the end
    let conn = raw(&server).await;
    let mut args = vec!["EXISTS"];
    args.extend(names);
    let freed = eventually(Duration::from_secs(5), || {
        let (mut conn, args) = (conn.clone(), args.clone());
        async move { cmd::<i64, _>(&mut conn, &args).await == 0 }
    })
    .await;
    assert!(freed.is_some(), "locks left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disjoint_key_sets_run_concurrently() {
    let server = server();
    let client = client(&server);
    // Both handlers must be inside at once for either to pass the barrier.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let svc = ServiceBuilder::new()
        .layer(MultiLockLayer::generic(client, |keys: &Vec<String>| {
            keys.clone()
        }))
        .service(service_fn(move |_: Vec<String>| {
            let barrier = barrier.clone();
            async move {
                tokio::time::timeout(Duration::from_secs(10), barrier.wait())
                    .await
                    .map(|_| ())
                    .map_err(|_| "the other request never came in")
            }
        }));
    let one = tokio::spawn(svc.clone().oneshot(keys(&["d:a", "d:b"])));
    let two = tokio::spawn(svc.clone().oneshot(keys(&["d:d", "d:c"])));
    for r in within(
        Duration::from_secs(20),
        "two disjoint sets",
        join_all([one, two]),
    )
    .await
    {
        r.expect("task").expect("both inside at once");
    }
}

#[tokio::test]
async fn an_empty_key_set_passes_through_without_any_redis_command_or_key() {
    let server = server();
    let client = client(&server);
    let svc = ServiceBuilder::new()
        .layer(MultiLockLayer::generic(client, |keys: &Vec<String>| {
            (!keys.is_empty()).then(|| keys.clone())
        }))
        .service(service_fn(|_: Vec<String>| async {
            Ok::<_, Infallible>("ran")
        }));
    // Warm up: connections made, scripts loaded; then the release lands.
    svc.clone()
        .oneshot(keys(&["warm"]))
        .await
        .expect("keyed request");
    let mut conn = raw(&server).await;
    eventually(Duration::from_secs(5), || {
        let mut conn = conn.clone();
        async move { cmd::<i64, _>(&mut conn, &["EXISTS", "warm"]).await == 0 }
    })
    .await
    .expect("the warm-up lock released");
    let mut keys_before: Vec<String> = cmd(&mut conn, &["KEYS", "*"]).await;
    let before = commands_but_info(&server);
    for _ in 0..20 {
        let out = svc
            .clone()
            .oneshot(Vec::new())
            .await
            .expect("keyless request");
        assert_eq!(out, "ran");
    }
    assert_eq!(
        before,
        commands_but_info(&server),
        "keyless requests sent commands"
    );
    let mut keys_after: Vec<String> = cmd(&mut conn, &["KEYS", "*"]).await;
    keys_before.sort();
    keys_after.sort();
    assert_eq!(
        keys_before, keys_after,
        "a keyless request left a key in Redis"
    );
    assert!(!keys_after.iter().any(|k| k == "warm"));
}

#[tokio::test]
async fn busy_is_a_lock_error_naming_every_key_and_an_invalid_key_is_rejected_before_redis() {
    let server = server();
    let client = client(&server);
    let entered = Arc::new(AtomicU64::new(0));
    let service = |wait: Duration| {
        let entered = entered.clone();
        ServiceBuilder::new()
            .layer(
                MultiLockLayer::generic(client.clone(), |keys: &Vec<String>| keys.clone())
                    .wait(wait),
            )
            .service(service_fn(move |_: Vec<String>| {
                entered.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, Infallible>(()) }
            }))
    };
    let other = crate::support::layer::client(&server);
    let held = other
        .lock("busy:b")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let mut conn = raw(&server).await;

    let started = Instant::now();
    let err = service(Duration::from_millis(300))
        .oneshot(keys(&["busy:c", "busy:b", "busy:a", "busy:c"]))
        .await
        .expect_err("busy:b is held");
    let waited = started.elapsed();
    let err = lock_error(&err);
    assert!(
        err.is_busy() && err.is_multi() && !err.is_redis(),
        "{err:?}"
    );
    assert_eq!(err.keys(), ["busy:a", "busy:b", "busy:c"]);
    assert_eq!(err.key(), "busy:a, busy:b, busy:c");
    assert_eq!(err.reason(), "busy");
    assert!(
        waited >= Duration::from_millis(300),
        "gave up after {waited:?}"
    );
    let n: i64 = cmd(&mut conn, &["EXISTS", "busy:a", "busy:c"]).await;
    assert_eq!(n, 0, "a busy request kept one of its other locks");

    // Zero: one attempt only.
    let started = Instant::now();
    let err = service(Duration::ZERO)
        .oneshot(keys(&["busy:b", "busy:z"]))
        .await
        .expect_err("busy:b is held");
    assert!(lock_error(&err).is_busy());
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(entered.load(Ordering::SeqCst), 0, "a rejected request ran");

    // An invalid key (empty) rejects the whole request, with no Redis call.
    let before = commands_but_info(&server);
    let err = service(Duration::from_secs(1))
        .oneshot(keys(&["ok", ""]))
        .await
        .expect_err("an empty key");
    let err = lock_error(&err);
    assert!(err.is_invalid_key() && err.is_multi(), "{err:?}");
    assert_eq!(err.keys(), ["", "ok"]);
    assert_eq!(before, commands_but_info(&server));

    held.release().await.expect("release");
    service(Duration::from_secs(2))
        .oneshot(keys(&["busy:a", "busy:b", "busy:c"]))
        .await
        .expect("free again");
    assert_eq!(entered.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_runs_in_a_section_of_each_lock_with_the_tokens_in_redis() {
    let server = server();
    let client = client(&server);
    let inner_client = client.clone();
    let observer = raw(&server).await;
    let svc = ServiceBuilder::new()
        .layer(MultiLockLayer::generic(
            client.clone(),
            |keys: &Vec<String>| keys.clone(),
        ))
        .service(service_fn(move |keys: Vec<String>| {
            let (client, mut observer) = (inner_client.clone(), observer.clone());
            async move {
                let mut seen = Vec::new();
                for key in &keys {
                    let lock = client.lock(key)?;
                    let held = HeldLock::current_for(&lock).expect("a section of the lock");
                    let token_key = format!("redisson_lock_token:{{{}}}", held.key());
                    let in_redis: Option<u64> = cmd(&mut observer, &["GET", &token_key]).await;
                    // Taking it again through lock-core re-enters the hold.
                    let again = lock.acquire_timeout(Duration::from_secs(2)).await?;
                    let count = lock.hold_count().await?;
                    again.release().await?;
                    seen.push((held, in_redis, count));
                }
                Ok::<_, lock_core::Error>(seen)
            }
        }));
    let mut last = HashMap::new();
    for _ in 0..3 {
        let seen = within(
            Duration::from_secs(10),
            "a request",
            svc.clone().oneshot(keys(&["t:b", "t:a"])),
        )
        .await
        .expect("the handler ran");
        assert_eq!(seen.len(), 2);
        for (held, in_redis, count) in &seen {
            assert_eq!(*in_redis, Some(held.fencing_token()), "{}", held.name());
            assert_eq!(*count, 2, "{} re-entered", held.name());
            let before = last.insert(held.name().to_string(), held.fencing_token());
            assert!(before < Some(held.fencing_token()), "tokens must grow");
        }
        // The request is over: both locks released.
        for (held, ..) in &seen {
            let released = eventually(Duration::from_secs(5), || async { !held.is_held() }).await;
            assert!(released.is_some(), "{} outlived its request", held.name());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_while_waiting_takes_no_lock_and_runs_nothing() {
    let server = server();
    let client = client(&server);
    let other = crate::support::layer::client(&server);
    let entered = Arc::new(AtomicU64::new(0));
    let entered2 = entered.clone();
    let svc = ServiceBuilder::new()
        .layer(
            MultiLockLayer::generic(client.clone(), |keys: &Vec<String>| keys.clone())
                .wait(Duration::from_secs(30)),
        )
        .service(service_fn(move |_: Vec<String>| {
            entered2.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(()) }
        }));
    let held = other
        .lock("w:b")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let mut conn = raw(&server).await;
    let waiting = tokio::spawn(svc.clone().oneshot(keys(&["w:a", "w:b", "w:c"])));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n: i64 = cmd(&mut conn, &["EXISTS", "w:a", "w:c"]).await;
    assert_eq!(n, 0, "a waiting request holds some of its locks");
    waiting.abort();
    let _ = waiting.await;
    held.release().await.expect("release");
    // Nobody comes for the locks: none of them is taken.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let n: i64 = cmd(&mut conn, &["EXISTS", "w:a", "w:b", "w:c"]).await;
    assert_eq!(n, 0, "a dropped waiter took locks");
    assert_eq!(entered.load(Ordering::SeqCst), 0, "a dropped request ran");
    within(
        Duration::from_secs(5),
        "the next request",
        svc.oneshot(keys(&["w:a", "w:b", "w:c"])),
    )
    .await
    .expect("free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_while_holding_releases_every_lock_promptly() {
    let server = server();
    // A long watchdog lease: only an actual release frees the locks quickly.
    let client = LockClient::builder(server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let svc = ServiceBuilder::new()
        .layer(MultiLockLayer::generic(
            client.clone(),
            |keys: &Vec<String>| keys.clone(),
        ))
        .service(service_fn(|_: Vec<String>| async {
            tokio::time::sleep(Duration::from_secs(120)).await;
            Ok::<_, Infallible>(())
        }));
    let conn = raw(&server).await;
    let exist = |conn: &redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move { cmd::<i64, _>(&mut conn, &["EXISTS", "h:a", "h:b", "h:c"]).await }
    };
    let running = tokio::spawn(svc.oneshot(keys(&["h:c", "h:a", "h:b"])));
    eventually(Duration::from_secs(10), || async {
        exist(&conn).await == 3
    })
    .await
    .expect("the request took its locks");
    running.abort();
    let freed = eventually(Duration::from_secs(5), || async { exist(&conn).await == 0 })
        .await
        .expect("locks stayed held after the request was dropped");
    println!("3 locks freed {freed:?} after the request was dropped (lease 30 s)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_on_lost_stops_the_handler_and_releases_the_other_locks() {
    let server = server();
    let client = crate::support::client_for(&server, 900);
    let mut conn = raw(&server).await;
    let (entered_tx, mut entered_rx) = tokio::sync::mpsc::unbounded_channel();
    let after = Arc::new(AtomicU64::new(0));
    let after2 = after.clone();
    let svc = ServiceBuilder::new()
        .layer(MultiLockLayer::generic(client, |keys: &Vec<String>| keys.clone()).cancel_on_lost())
        .service(service_fn(move |_: Vec<String>| {
            let (entered, after) = (entered_tx.clone(), after2.clone());
            async move {
                let _ = entered.send(());
                tokio::time::sleep(Duration::from_secs(5)).await;
                after.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Infallible>(())
            }
        }));
    let job = tokio::spawn(svc.oneshot(keys(&["l:a", "l:b"])));
    within(
        Duration::from_secs(5),
        "the handler starts",
        entered_rx.recv(),
    )
    .await
    .expect("an entry");
    let removed: i64 = cmd(&mut conn, &["DEL", "l:b"]).await;
    assert_eq!(removed, 1, "the lock was not in Redis");
    let err = within(Duration::from_secs(3), "the lost error after the DEL", job)
        .await
        .expect("task")
        .expect_err("cancelled");
    let err = lock_error(&err);
    assert!(err.is_lost() && err.is_multi(), "{err:?}");
    assert_eq!(err.keys(), ["l:a", "l:b"]);
    assert!(matches!(err.lock_error(), lock_core::Error::Lost { name } if name == "l:b"));
    let freed = eventually(Duration::from_secs(3), || {
        let mut conn = conn.clone();
        async move { cmd::<i64, _>(&mut conn, &["EXISTS", "l:a"]).await == 0 }
    })
    .await;
    assert!(freed.is_some(), "the other lock stayed held");
    assert_eq!(after.load(Ordering::SeqCst), 0, "the handler ran on");
}

#[tokio::test]
async fn nested_in_a_lock_layer_of_one_of_its_keys_it_answers_busy() {
    let server = server();
    let client = client(&server);
    let svc = ServiceBuilder::new()
        .layer(LockLayer::generic(client.clone(), |_: &()| Some("n:a")))
        .layer(
            MultiLockLayer::generic(client.clone(), |_: &()| ["n:a", "n:b"])
                .wait(Duration::from_millis(300)),
        )
        .service(service_fn(|()| async { Ok::<_, Infallible>(()) }));
    let err = within(Duration::from_secs(10), "nested layers", svc.oneshot(()))
        .await
        .expect_err("the multi-lock waits for the outer lock");
    assert!(lock_error(&err).is_busy(), "{err}");
    // The other order works: the outer multi-lock's section is re-entered.
    let svc = ServiceBuilder::new()
        .layer(MultiLockLayer::generic(client.clone(), |_: &()| {
            ["n:a", "n:b"]
        }))
        .layer(
            LockLayer::generic(client.clone(), |_: &()| Some("n:a"))
                .wait(Duration::from_millis(300)),
        )
        .service(service_fn(|()| async {
            Ok::<_, Infallible>("inside both")
        }));
    let out = within(Duration::from_secs(10), "nested layers", svc.oneshot(()))
        .await
        .expect("the inner lock layer re-enters");
    assert_eq!(out, "inside both");
}
