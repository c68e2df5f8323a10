//! Traffic lanes: no slow reply of one kind of traffic costs another, no
//! caller ever waits for a connection, and a stalled connection is replaced
//! by the first deadline that passes on it.
//!
//! - a half-open renewal connection (replies held, nothing closed) is
//!   replaced within a renewal period, whatever the ratio of the watchdog
//!   timeout to the command timeout: the hold survives;
//! - a million-field hash matching `scan_locks`'s pattern, polled while 16
//!   tasks lock and unlock: lock commands go on, no watchdog hold is lost;
//! - 64 concurrent acquisitions waiting for a paused replica each fail
//!   with `NotReplicated` on their own bound, none with a pool time-out.

use std::time::{Duration, Instant};

use crate::support::{self, cmd, raw, renew_sha, within};
use lock_core::{Error, LockClient};
use lock_tests::{CommandMatch, Fault, FaultProxy, ReplicatedPair};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_renewal_connection_is_replaced_within_a_period() {
    let server = support::server();
    let observer = support::client_for(&server, 30_000);
    // (watchdog, command time-out): below, at and far above a third.
    for (watchdog_ms, command_ms) in [(1_500, 5_000), (900, 300), (2_700, 2_000)] {
        let proxy = FaultProxy::start(server.addr()).expect("proxy");
        let client = LockClient::builder(proxy.url())
            .watchdog_timeout(Duration::from_millis(watchdog_ms))
            .command_timeout(Duration::from_millis(command_ms))
            .connect_timeout(Duration::from_millis(command_ms))
            .build()
            .expect("client");
        let name = format!("half-open-{watchdog_ms}-{command_ms}");
        let guard = client
            .lock(&name)
            .expect("name")
            .acquire()
            .await
            .expect("hold");
        // The next renewal's reply and everything after it on that
        // connection is swallowed; the connection stays open and silent.
        let silenced = proxy.fault_next(
            CommandMatch::name("EVALSHA").with_exact_arg(renew_sha()),
            Fault::DropReply,
        );
        let period = Duration::from_millis(watchdog_ms / 3);
        assert!(
            silenced.wait_fired(period * 2),
            "{name}: a renewal was sent"
        );
        let connections = proxy.connections();
        // Three watchdog timeouts: the hold lives only if renewals moved to
        // a new connection.
        let until = Instant::now() + Duration::from_millis(3 * watchdog_ms);
        let other = observer.lock(&name).expect("name");
        while Instant::now() < until {
            assert!(
                guard.is_held(),
                "{name}: the hold was lost on a stalled connection"
            );
            assert!(
                other.try_acquire().await.expect("observer").is_none(),
                "{name}: another client got the lock"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "watchdog {watchdog_ms} ms, command {command_ms} ms: hold kept over {} ms with its renewal connection silent ({connections} proxy connections when it went silent, {} after)",
            3 * watchdog_ms,
            proxy.connections()
        );
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_field_hash_matching_scan_locks_never_holds_up_lock_commands() {
    let server = support::server();
    let mut conn = raw(&server).await;
    // A user's hash, matching the pattern `*`: a million fields.
    for chunk in 0..100 {
        let mut hset = redis::cmd("HSET");
        hset.arg("user:big");
        for i in 0..10_000 {
            let field = chunk * 10_000 + i;
            hset.arg(field).arg(field);
        }
        let _: i64 = hset.query_async(&mut conn).await.expect("big hash");
    }
    let fields: i64 = cmd(&mut conn, &["HLEN", "user:big"]).await;
    assert_eq!(fields, 1_000_000);
    let client = LockClient::builder(server.url())
        .watchdog_timeout(Duration::from_millis(1_500))
        .command_timeout(Duration::from_secs(2))
        .build()
        .expect("client");
    let kept = client
        .lock("kept")
        .expect("name")
        .acquire()
        .await
        .expect("hold");

    let run = |with_scan: bool| {
        let client = client.clone();
        async move {
            let stop = Instant::now() + Duration::from_secs(2);
            let poller = with_scan.then(|| {
                let client = client.clone();
                tokio::spawn(async move {
                    let mut scans = 0;
                    while Instant::now() < stop {
                        let found = client.scan_locks("*").await.expect("scan");
                        assert!(
                            found.iter().all(|s| s.key != "user:big"),
                            "the big hash is not a lock"
                        );
                        assert!(found.iter().any(|s| s.name == "kept"), "{found:?}");
                        scans += 1;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    scans
                })
            });
            let tasks: Vec<_> = (0..16)
                .map(|t| {
                    let lock = client.lock(format!("task:{t}")).expect("name");
                    tokio::spawn(async move {
                        let mut took = Vec::new();
                        while Instant::now() < stop && took.len() < 100_000 {
                            let started = Instant::now();
                            let g = lock.acquire().await.expect("acquire");
                            g.release().await.expect("release");
                            took.push(started.elapsed());
                        }
                        took
                    })
                })
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.expect("task"));
            }
            let scans = match poller {
                Some(p) => p.await.expect("poller"),
                None => 0,
            };
            all.sort();
            let p99 = all[all.len() * 99 / 100];
            (all.len(), p99, scans)
        }
    };
    let (cycles, p99, _) = run(false).await;
    let (cycles_scan, p99_scan, scans) = run(true).await;
    eprintln!(
        "16 tasks lock/unlock: {cycles} cycles in 2 s, p99 {p99:?}; with scan_locks every 200 ms beside a 1 M-field hash: {cycles_scan} cycles, p99 {p99_scan:?}, {scans} scans"
    );
    assert!(scans >= 5, "the scans ran: {scans}");
    assert!(kept.is_held(), "the watchdog hold was kept");
    kept.release().await.expect("the hold was never lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_acquisitions_waiting_for_a_paused_replica_each_fail_on_their_own_bound() {
    let p = ReplicatedPair::start().expect("primary and replica");
    let ack = Duration::from_millis(800);
    let client = LockClient::builder(p.primary.url())
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(1))
        .wait_for_replicas(1, ack)
        .build()
        .expect("client");
    client
        .lock("warm")
        .expect("name")
        .acquire()
        .await
        .expect("warm")
        .release()
        .await
        .expect("warm");
    p.replica.pause().expect("pause");
    let started = Instant::now();
    let calls: Vec<_> = (0..64)
        .map(|i| {
            let lock = client.lock(format!("replicated:{i}")).expect("name");
            tokio::spawn(async move {
                let began = Instant::now();
                let out = lock.acquire().await.map(|_| ());
                (out, began.elapsed())
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for call in calls {
        let (out, took) = within(Duration::from_secs(10), "acquire", call)
            .await
            .expect("task");
        match out {
            Err(Error::NotReplicated {
                wanted: 1,
                acknowledged: 0,
                ..
            }) => {}
            other => panic!("expected NotReplicated, got {other:?}"),
        }
        assert!(took >= ack, "WAIT waited its time-out: {took:?}");
        slowest = slowest.max(took);
    }
    eprintln!(
        "64 acquisitions, replica paused, WAIT bound {ack:?}: all NotReplicated, slowest {slowest:?}, all done {:?}",
        started.elapsed()
    );
    // No hold left behind on the primary.
    let mut conn = raw(&p.primary).await;
    let left: Vec<String> = cmd(&mut conn, &["KEYS", "replicated:*"]).await;
    assert!(left.is_empty(), "{left:?}");
    p.replica.resume().expect("resume");
}
