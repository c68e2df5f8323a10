//! `LockClient::shutdown` and the semaphores: every permit the client
//! holds is given back (plain and expirable, exactly once: a guard
//! released or dropped after it gives nothing back again), waiting
//! acquisitions and latch waits end with `Error::Closed` and leave the
//! line, and a shutdown whose releases lose their replies still gives
//! back exactly once. Judged by raw reads of the counters and permit sets.

use std::time::{Duration, Instant};

use lock_core::{Error, LockClient};
use lock_tests::{CommandMatch, CutKind, Fault, FaultProxy};

use crate::support::sem::{sem_cancel_sha, sem_release_sha, sem_state, AnySem, Kind};
use crate::support::{self, raw, within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_every_permit_back_and_ends_waiters_with_closed() {
    let env = support::env(1_000);
    let conn = raw(&env.server).await;
    let client = &env.client;
    let other = support::client_for(&env.server, 1_000);
    let plain = client.semaphore("shut:plain").expect("name");
    let expirable = client.permit_semaphore("shut:exp").expect("name");
    assert!(plain.try_set_permits(5).await.expect("set"));
    assert!(expirable.try_set_permits(4).await.expect("set"));
    // every permit taken: 2 + 3 plain, 1 + 3 expirable
    let p2 = plain.acquire(2).await.expect("2");
    let p3 = plain.acquire(3).await.expect("3");
    let x1 = expirable.acquire(1).await.expect("1");
    let x3 = expirable.acquire(3).await.expect("3");
    assert!(plain.try_acquire(1).await.expect("try").is_none());
    // waiters of this client (and a latch wait), which the shutdown ends
    let waiters = vec![
        tokio::spawn({
            let s = plain.clone();
            async move { s.acquire(1).await.map(|p| p.count()) }
        }),
        tokio::spawn({
            let s = plain.clone();
            async move { s.acquire(4).await.map(|p| p.count()) }
        }),
        tokio::spawn({
            let s = expirable.clone();
            async move {
                s.acquire_timeout(2, Duration::from_secs(30))
                    .await
                    .map(|p| p.count())
            }
        }),
    ];
    let latch = client.latch("shut:latch").expect("name");
    assert!(latch.try_set_count(1).await.expect("set"));
    let latch_wait = tokio::spawn(async move { latch.wait().await });
    // a waiter of another client, served once the permits come back
    let theirs = tokio::spawn({
        let s = other.permit_semaphore("shut:exp").expect("name");
        async move { s.acquire_timeout(4, Duration::from_secs(10)).await }
    });
    let plain_line = support::eventually(Duration::from_secs(3), || async {
        sem_state(&conn, "shut:plain").await.line.len() == 2
    })
    .await;
    assert!(plain_line.is_some(), "both plain waiters in line");
    assert_eq!(sem_state(&conn, "shut:exp").await.ids.len(), 4);

    let started = Instant::now();
    let report = client.shutdown(Duration::from_secs(5)).await;
    let took = started.elapsed();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.released, 4, "four acquisitions: {report:?}");
    for w in waiters {
        let outcome = within(Duration::from_secs(2), "waiter", w)
            .await
            .expect("join");
        assert!(matches!(outcome, Err(Error::Closed)), "{outcome:?}");
    }
    let outcome = within(Duration::from_secs(2), "latch wait", latch_wait)
        .await
        .expect("join");
    assert!(matches!(outcome, Err(Error::Closed)), "{outcome:?}");
    // every permit back, the line left
    let plain_now = sem_state(&conn, "shut:plain").await;
    assert_eq!(
        (
            plain_now.available,
            plain_now.line.len(),
            plain_now.grants.len()
        ),
        (5, 0, 0),
        "{plain_now:?}"
    );
    let got = within(Duration::from_secs(5), "their waiter", theirs)
        .await
        .expect("join")
        .expect("all four expirable permits came back");
    let exp_now = sem_state(&conn, "shut:exp").await;
    assert_eq!(exp_now.available, 0, "{exp_now:?}");
    assert_eq!(
        exp_now.ids,
        got.ids().iter().cloned().collect(),
        "only the other client's ids"
    );
    // the guards know, and give nothing back again
    for p in [&p2, &p3, &x1, &x3] {
        assert!(!p.is_held());
    }
    // (as a lock guard's after a shutdown: lost, nothing sent)
    let released = p2.release().await;
    assert!(
        matches!(released, Err(ref e) if e.is_lost()),
        "{released:?}"
    );
    drop((p3, x1));
    let released = x3.release().await;
    assert!(
        matches!(released, Err(ref e) if e.is_lost()),
        "{released:?}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let plain_after = sem_state(&conn, "shut:plain").await;
    assert_eq!(
        (plain_after.available, plain_after.grants.len()),
        (5, 0),
        "{plain_after:?}"
    );
    let exp_after = sem_state(&conn, "shut:exp").await;
    assert_eq!((exp_after.available, exp_after.ids.len()), (0, 4));
    // and the client takes nothing new
    assert!(matches!(plain.acquire(1).await, Err(Error::Closed)));
    assert!(matches!(expirable.try_acquire(1).await, Err(Error::Closed)));
    got.release().await.expect("release");
    assert_eq!(sem_state(&conn, "shut:exp").await.total(), 4);
    eprintln!("sem shutdown: {report:?} in {took:?}");
}

/// The shutdown's releases lose their replies (the connection is reset
/// after the script ran): retried, still given back exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_whose_releases_lose_their_replies_gives_back_exactly_once() {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let conn = raw(&server).await;
    for kind in [Kind::Plain, Kind::Expirable] {
        let client = LockClient::builder(proxy.url())
            .watchdog_timeout(Duration::from_secs(1))
            .command_timeout(Duration::from_millis(300))
            .connect_timeout(Duration::from_millis(300))
            .build()
            .unwrap_or_else(|e| panic!("client: {e}"));
        let name = format!("shut-lost-{}", kind.label());
        let sem = AnySem::of(&client, kind, &name);
        assert!(sem.try_set_permits(3).await.expect("set"));
        let guard = sem.acquire(2).await.expect("2");
        let sha = match kind {
            Kind::Plain => sem_cancel_sha(),
            Kind::Expirable => sem_release_sha(),
        };
        let lost = proxy.fault_next(
            CommandMatch::name("EVALSHA")
                .with_exact_arg(sha)
                .with_exact_arg(&name),
            Fault::CutReply {
                after: 0,
                how: CutKind::Rst,
            },
        );
        let report = client.shutdown(Duration::from_secs(5)).await;
        assert!(lost.fired(), "{kind:?}: the reply was lost");
        assert!(report.is_complete(), "{kind:?}: {report:?}");
        assert_eq!(report.released, 1, "{kind:?}: {report:?}");
        let now = sem_state(&conn, &name).await;
        assert_eq!(
            (now.available, now.ids.len(), now.grants.len()),
            (3, 0, 0),
            "{kind:?}: {now:?}"
        );
        drop(guard);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = sem_state(&conn, &name).await;
        assert_eq!(
            (now.available, now.ids.len(), now.grants.len()),
            (3, 0, 0),
            "{kind:?}: {now:?}"
        );
    }
}
