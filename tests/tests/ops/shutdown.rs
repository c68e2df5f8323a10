//! `LockClient::shutdown` and the flush of pending releases when the last
//! client handle is dropped: a deploy leaves no lock behind. Judged by a
//! raw connection reading Redis, never by the library's own view.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support;
use lock_core::{AcquireOptions, LockClient};

const ROLE: &str = "LOCK_TESTS_SHUTDOWN_ROLE";
const URL: &str = "LOCK_TESTS_SHUTDOWN_URL";
const NAME: &str = "LOCK_TESTS_SHUTDOWN_NAME";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_every_hold_and_takes_no_new_locks() {
    let env = support::env(30_000);
    let mut raw = support::raw(&env.server).await;
    let client = env.client.clone();

    // A watchdog hold, a fixed-lease hold, and a hold re-entered twice.
    let a = client.lock("sd:a").unwrap_or_else(|e| panic!("{e:?}"));
    let b = client.lock("sd:b").unwrap_or_else(|e| panic!("{e:?}"));
    let c = client.lock("sd:c").unwrap_or_else(|e| panic!("{e:?}"));
    let guard_a = a.acquire().await.unwrap_or_else(|e| panic!("{e:?}"));
    let guard_b = b
        .acquire_with_lease(Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let (outer_c, inner_c) = lock_core::in_context(async {
        let outer = c.acquire().await.unwrap_or_else(|e| panic!("{e:?}"));
        let inner = c.acquire().await.unwrap_or_else(|e| panic!("{e:?}"));
        (outer, inner)
    })
    .await;
    assert_eq!(
        c.hold_count().await.unwrap_or_else(|e| panic!("{e:?}")),
        0,
        "not this task's context"
    );
    let field_count: i64 = support::cmd(&mut raw, &["HGET", "sd:c", outer_c.owner_id()]).await;
    assert_eq!(field_count, 2);

    // Another client waits for sd:a; a waiter of this client waits for a
    // lock the other client holds.
    let other = support::client_for(&env.server, 30_000);
    let d = other.lock("sd:d").unwrap_or_else(|e| panic!("{e:?}"));
    let other_holds_d = d.acquire().await.unwrap_or_else(|e| panic!("{e:?}"));
    let other_a = other.lock("sd:a").unwrap_or_else(|e| panic!("{e:?}"));
    let other_waits = tokio::spawn(async move {
        let started = Instant::now();
        let guard = other_a.acquire_timeout(Duration::from_secs(20)).await;
        (guard.map(|g| g.fencing_token()), started.elapsed())
    });
    let ours_d = client.lock("sd:d").unwrap_or_else(|e| panic!("{e:?}"));
    let our_waiter = tokio::spawn(async move { ours_d.acquire().await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let report = client.shutdown(Duration::from_secs(5)).await;
    let took = started.elapsed();
    println!("shutdown: {report:?} in {took:?}");
    assert_eq!(report.released, 3, "{report:?}");
    assert_eq!((report.not_held, report.failed), (0, 0), "{report:?}");
    assert!(report.is_complete(), "{report:?}");

    // Redis, read by a raw connection: none of our holds remains (sd:a
    // may already be the other client's, which waited for it).
    for (key, owner) in [
        ("sd:a", guard_a.owner_id()),
        ("sd:b", guard_b.owner_id()),
        ("sd:c", outer_c.owner_id()),
    ] {
        let ours: i64 = support::cmd(&mut raw, &["HEXISTS", key, owner]).await;
        assert_eq!(ours, 0, "{key} left behind by shutdown");
    }
    for key in ["sd:b", "sd:c"] {
        let exists: i64 = support::cmd(&mut raw, &["EXISTS", key]).await;
        assert_eq!(exists, 0, "{key} left behind by shutdown");
    }
    // Our waiter ended with Closed; new acquisitions are refused.
    let waited = support::within(Duration::from_secs(2), "our waiter", our_waiter).await;
    assert!(
        matches!(waited, Ok(Err(ref e)) if e.is_closed()),
        "{waited:?}"
    );
    let refused = client
        .lock("sd:e")
        .unwrap_or_else(|e| panic!("{e:?}"))
        .acquire()
        .await;
    assert!(
        matches!(refused, Err(ref e) if e.is_closed()),
        "{refused:?}"
    );
    let refused = client
        .lock("sd:e")
        .unwrap_or_else(|e| panic!("{e:?}"))
        .try_acquire()
        .await;
    assert!(
        matches!(refused, Err(ref e) if e.is_closed()),
        "{refused:?}"
    );
    // The other client got sd:a at once, not after a 30 s lease.
    let (got, waited) = support::within(Duration::from_secs(5), "other client", other_waits)
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(got.is_ok(), "{got:?}");
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");

    // The guards know: not held, lost() ready, release makes no Redis call.
    for guard in [&guard_a, &guard_b, &outer_c, &inner_c] {
        assert!(!guard.is_held());
        support::within(Duration::from_millis(100), "lost()", guard.lost()).await;
    }
    // The other client's hold of sd:d was not touched.
    let d_holder: i64 = support::cmd(&mut raw, &["HGET", "sd:d", other_holds_d.owner_id()]).await;
    assert_eq!(d_holder, 1);
    other_holds_d
        .release()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    drop(other);
    let scripts_before = script_calls(&mut raw).await;
    let released = guard_a.release().await;
    assert!(
        matches!(released, Err(ref e) if e.is_lost()),
        "{released:?}"
    );
    drop((guard_b, outer_c, inner_c));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let scripts_after = script_calls(&mut raw).await;
    assert_eq!(
        scripts_after, scripts_before,
        "guards of given-up holds ran scripts in Redis"
    );
}

/// EVALSHA and EVAL calls the server has run (INFO commandstats).
async fn script_calls(raw: &mut redis::aio::MultiplexedConnection) -> i64 {
    let info: String = support::cmd(raw, &["INFO", "commandstats"]).await;
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| l.split("calls=").nth(1))
        .filter_map(|v| v.split(',').next())
        .filter_map(|v| v.parse::<i64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_redis_unreachable_is_bounded_and_says_so() {
    let env = support::env(30_000);
    let guard = env
        .client
        .lock("sd:down")
        .unwrap_or_else(|e| panic!("{e:?}"))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    env.server.pause().unwrap_or_else(|e| panic!("{e:?}"));
    let started = Instant::now();
    let report = env.client.shutdown(Duration::from_millis(800)).await;
    let took = started.elapsed();
    env.server.resume().unwrap_or_else(|e| panic!("{e:?}"));
    println!("shutdown with Redis paused: {report:?} in {took:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert!(!report.is_complete(), "{report:?}");
    assert_eq!(report.released, 0);
    assert!(!guard.is_held());
}

/// The case: a guard dropped just before `main` returns. The child
/// runs a multi-threaded runtime (as `#[tokio::main]` does), acquires,
/// drops the guard and returns; the release must have reached Redis
/// before the process ended. 10 runs, every one checked.
#[test]
fn a_guard_dropped_at_the_end_of_main_is_released() {
    let server = support::server();
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e:?}"));
    let mut raw = rt.block_on(support::raw(&server));
    for run in 0..10 {
        let name = format!("sd:end-of-main:{run}");
        let child = support::spawn_child(
            module_path!(),
            &[
                (ROLE, "drop-at-end".into()),
                (URL, server.url()),
                (NAME, name.clone()),
            ],
            Stdio::null(),
        );
        let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e:?}"));
        assert!(out.status.success(), "child failed: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("held"),
            "child did not take the lock: {stdout}"
        );
        let exists: i64 = rt.block_on(support::cmd(&mut raw, &["EXISTS", &name]));
        assert_eq!(exists, 0, "run {run}: the lock outlived the process");
    }
}

/// Planted violation for the check above: a child that exits without
/// letting its runtime finish (`process::exit` right after the drop)
/// leaves the lock behind, and the same check sees it.
#[test]
fn the_end_of_main_check_sees_a_lock_left_behind() {
    let server = support::server();
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e:?}"));
    let mut raw = rt.block_on(support::raw(&server));
    let name = "sd:end-of-main:planted";
    let child = support::spawn_child(
        module_path!(),
        &[
            (ROLE, "exit-at-once".into()),
            (URL, server.url()),
            (NAME, name.into()),
        ],
        Stdio::null(),
    );
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e:?}"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("held"));
    let exists: i64 = rt.block_on(support::cmd(&mut raw, &["EXISTS", name]));
    assert_eq!(exists, 1, "the planted leftover must be seen");
}

#[test]
#[ignore = "child process entry point; run by the tests above"]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let url = std::env::var(URL).unwrap_or_default();
    let name = std::env::var(NAME).unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e:?}"));
    runtime.block_on(async move {
        let client = LockClient::builder(url)
            .build()
            .unwrap_or_else(|e| panic!("{e:?}"));
        let lock = client.lock(&name).unwrap_or_else(|e| panic!("{e:?}"));
        let guard = lock
            .acquire_with(AcquireOptions::new().lease(Duration::from_secs(60)))
            .await
            .unwrap_or_else(|e| panic!("{e:?}"));
        println!("held {}", guard.fencing_token());
        drop(guard);
        if role == "exit-at-once" {
            std::process::exit(0);
        }
        // `main` returns: `lock` and `client` drop here, the runtime after.
    });
}

fn proxied_client(proxy: &lock_tests::FaultProxy) -> LockClient {
    LockClient::builder(proxy.url())
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

fn proxy_for(server: &lock_tests::RedisServer) -> lock_tests::FaultProxy {
    lock_tests::FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"))
}

/// An acquisition whose request is in Redis when shutdown starts (its
/// reply held back 1.5 s by the proxy): the caller gets `Closed` at once,
/// and the hold Redis grants meanwhile is given back by the shutdown (it
/// used to stay for its 30 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_in_flight_at_shutdown_is_given_back() {
    use lock_tests::{CommandMatch, Fault};
    let server = support::server();
    let proxy = proxy_for(&server);
    let client = proxied_client(&proxy);
    let mut raw = support::raw(&server).await;
    client.ping().await.unwrap_or_else(|e| panic!("{e}"));
    let slow = proxy.fault_next(
        CommandMatch::name("EVALSHA").with_arg("sd:in-flight"),
        Fault::DelayReply(Duration::from_millis(1500)),
    );
    let lock = client
        .lock("sd:in-flight")
        .unwrap_or_else(|e| panic!("{e}"));
    let acquire = tokio::spawn(async move { lock.acquire().await.map(|g| g.fencing_token()) });
    support::eventually(Duration::from_secs(2), || {
        let matched = slow.matched();
        async move { matched }
    })
    .await
    .unwrap_or_else(|| panic!("the acquire never reached the proxy"));
    let report = client.shutdown(Duration::from_secs(5)).await;
    println!("in-flight acquisition: {report:?}");
    let got = support::within(Duration::from_secs(1), "the acquire", acquire).await;
    assert!(matches!(got, Ok(Err(ref e)) if e.is_closed()), "{got:?}");
    assert!(report.is_complete(), "{report:?}");
    let exists: i64 = support::cmd(&mut raw, &["EXISTS", "sd:in-flight"]).await;
    assert_eq!(
        exists, 0,
        "the hold granted during shutdown was left behind"
    );
}

/// A `try_acquire` whose reply is held back longer than the shutdown's
/// time-out must not keep the shutdown from releasing the holds it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_acquisition_does_not_keep_the_holds_from_being_released() {
    use lock_tests::{CommandMatch, Fault};
    let server = support::server();
    let proxy = proxy_for(&server);
    let client = proxied_client(&proxy);
    let mut raw = support::raw(&server).await;
    let held = client
        .lock("sd:held")
        .unwrap_or_else(|e| panic!("{e}"))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let slow = proxy.fault_next(
        CommandMatch::name("EVALSHA").with_arg("sd:slow"),
        Fault::DelayReply(Duration::from_millis(1800)),
    );
    let other = client.lock("sd:slow").unwrap_or_else(|e| panic!("{e}"));
    let attempt = tokio::spawn(async move { other.try_acquire().await.map(|g| g.is_some()) });
    support::eventually(Duration::from_secs(2), || {
        let matched = slow.matched();
        async move { matched }
    })
    .await
    .unwrap_or_else(|| panic!("the try_acquire never reached the proxy"));
    let report = client.shutdown(Duration::from_millis(1500)).await;
    println!("slow acquisition: {report:?}");
    assert!(report.released >= 1, "{report:?}");
    assert!(!held.is_held());
    let ours: i64 = support::cmd(&mut raw, &["HEXISTS", "sd:held", held.owner_id()]).await;
    assert_eq!(ours, 0, "the hold was not released");
    let _ = support::within(Duration::from_secs(5), "the try_acquire", attempt).await;
    // The late grant is given up too (its guard finds it gone; the lease ends it).
}

/// Guards hear of the shutdown before the lock is free in Redis: when
/// another client gets the lock, our handle already says "not held".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_hear_of_shutdown_before_another_client_gets_the_lock() {
    use lock_tests::{CommandMatch, Fault};
    let server = support::server();
    let proxy = proxy_for(&server);
    let client = proxied_client(&proxy);
    let other = support::client_for(&server, 30_000);
    let guard = client
        .lock("sd:gh")
        .unwrap_or_else(|e| panic!("{e}"))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let held = guard.held_lock();
    let theirs = other.lock("sd:gh").unwrap_or_else(|e| panic!("{e}"));
    let watched = held.clone();
    let waiter = tokio::spawn(async move {
        let got = theirs.acquire_timeout(Duration::from_secs(10)).await;
        // The moment the other client holds it: do we still say "held"?
        let ours_says_held = watched.is_held();
        (got.map(|g| g.fencing_token()), ours_says_held)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The shutdown's release reply is held back 800 ms: the lock is free
    // in Redis long before this client hears back.
    let _slow = proxy.fault_next(
        CommandMatch::name("EVALSHA").with_arg("sd:gh"),
        Fault::DelayReply(Duration::from_millis(800)),
    );
    let report = client.shutdown(Duration::from_secs(5)).await;
    let (got, ours_says_held) = support::within(Duration::from_secs(5), "the other client", waiter)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(got.is_ok(), "{got:?}");
    assert!(
        !ours_says_held,
        "our handle said held while the other client held the lock"
    );
    assert_eq!(report.released, 1, "{report:?}");
}

/// The last client handle dropped by a runtime that is shutting down,
/// with releases pending whose replies are held back: dropping the runtime
/// must not hang (one worker and two).
#[test]
fn dropping_the_runtime_with_releases_pending_does_not_hang() {
    use lock_tests::{CommandMatch, Fault};
    for workers in [1, 2] {
        let server = support::server();
        let proxy = proxy_for(&server);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(async {
            let client = proxied_client(&proxy);
            let mut guards = Vec::new();
            for i in 0..6 {
                let lock = client
                    .lock(format!("sd:f:{i}"))
                    .unwrap_or_else(|e| panic!("{e}"));
                guards.push(lock.acquire().await.unwrap_or_else(|e| panic!("{e}")));
            }
            let last = client
                .lock("sd:f:last")
                .unwrap_or_else(|e| panic!("{e}"))
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            for i in 0..6 {
                let _ = proxy.fault_next(
                    CommandMatch::name("EVALSHA").with_arg(format!("sd:f:{i}")),
                    Fault::DelayReply(Duration::from_secs(4)),
                );
            }
            drop(guards); // background releases, replies held back
                          // The last handle lives in a task the runtime drops at shutdown.
            tokio::spawn(async move {
                let _last = last;
                std::future::pending::<()>().await
            });
            drop(client);
            tokio::time::sleep(Duration::from_millis(100)).await;
        });
        let started = Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(rt);
            let _ = tx.send(());
        });
        let dropped = rx.recv_timeout(Duration::from_secs(15));
        println!(
            "{workers} worker(s): runtime dropped in {:?}",
            started.elapsed()
        );
        assert!(
            dropped.is_ok(),
            "{workers} worker(s): dropping the runtime hung"
        );
    }
}
