//! Acquisitions dropped at every await: an `acquire` future given up after
//! 0 to 18 ms (a tokio time-out, in steps of 150 µs) and after 0 to 20
//! polls (one scheduler turn apart), while another client holds a permit
//! (with one free, or none until it lets go 0 to 3 ms later), every reply
//! held up 2 ms by the fault proxy: drops land before the command left,
//! while it is in flight, between a grant and its return, and while
//! waiting in line. Once the background work settled (no shutdown's help)
//! every permit is back: raw reads find the plain kind's `available +
//! held by live guards == N`, the expirable kind's ids exactly the live
//! guards'; and again after the client's shutdown.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use lock_core::LockClient;
use lock_tests::{Direction, FaultProxy};

use crate::support::sem::{conserved, sem_state, AnySem, Kind};
use crate::support::{self, raw, within};

/// Polls `fut` once per scheduler turn, at most `polls` times; its output,
/// or None when it was dropped unfinished.
async fn drop_after_polls<F: Future>(fut: F, polls: usize) -> Option<F::Output> {
    let mut fut = pin!(fut);
    for _ in 0..polls {
        let polled = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
        if let Poll::Ready(out) = polled {
            return Some(out);
        }
        tokio::task::yield_now().await;
    }
    None
}

/// Where an acquisition is given up.
#[derive(Clone, Copy, Debug)]
enum DropAt {
    /// After this long (a tokio time-out).
    Time(Duration),
    /// After this many polls, one scheduler turn apart.
    Polls(usize),
}

async fn dropped_at_every_await(kind: Kind) {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    proxy.delay(Direction::ToClient, Duration::from_millis(2));
    let client = LockClient::builder(proxy.url())
        .watchdog_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"));
    let other = support::client_for(&server, 1_000);
    let conn = raw(&server).await;
    let points: Vec<DropAt> = (0..=120u64)
        .map(|step| DropAt::Time(Duration::from_micros(step * 150)))
        .chain((0..=20usize).map(DropAt::Polls))
        .collect();
    let started = Instant::now();
    let (mut granted, mut dropped) = (0, 0);
    let mut names = Vec::new();
    // each case on a semaphore of its own: places that dropped waiters
    // leave in the line would block the next case (see `sem_line`)
    for waiting in [false, true] {
        for (i, at) in points.iter().enumerate() {
            let name = format!("sem-cancel-{}-{}-{i:03}", kind.label(), u8::from(waiting));
            let label = format!("{name} dropped at {at:?}");
            // a permit free beside the other client's, or none until the
            // other client lets its one go, 0 to 3 ms later
            let n: i64 = if waiting { 1 } else { 2 };
            let theirs_sem = AnySem::of(&other, kind, &name);
            assert!(theirs_sem.try_set_permits(n as u64).await.expect("set"));
            let theirs = theirs_sem.acquire(1).await.expect("theirs");
            let (theirs, letting_go) = if waiting {
                let after = Duration::from_millis((i % 4) as u64);
                let task = tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    theirs.release().await.expect("release");
                });
                (None, Some(task))
            } else {
                (Some(theirs), None)
            };
            let sem = AnySem::of(&client, kind, &name);
            let outcome = match *at {
                DropAt::Time(d) => tokio::time::timeout(d, sem.acquire(1)).await.ok(),
                DropAt::Polls(k) => drop_after_polls(sem.acquire(1), k).await,
            };
            if kind == Kind::Expirable {
                assert_eq!(sem_state(&conn, &name).await.total(), n, "{label}");
            }
            let held: Vec<&lock_core::Permits> = theirs.iter().collect();
            match outcome {
                Some(p) => {
                    granted += 1;
                    let p = p.expect("acquire");
                    let mut all = held.clone();
                    all.push(&p);
                    conserved(&conn, kind, &name, n, &all, &label).await;
                    p.release().await.expect("release");
                }
                None => dropped += 1,
            }
            if let Some(task) = letting_go {
                within(Duration::from_secs(5), &label, task)
                    .await
                    .expect("join");
            }
            // settled: a grant nobody received was given back
            conserved(&conn, kind, &name, n, &held, &label).await;
            if let Some(theirs) = theirs {
                theirs.release().await.expect("release");
            }
            names.push((name, n));
        }
    }
    let report = client.shutdown(Duration::from_secs(5)).await;
    assert!(report.is_complete(), "{report:?}");
    for (name, n) in &names {
        conserved(&conn, kind, name, *n, &[], "after shutdown").await;
    }
    eprintln!(
        "sem cancellation ({}): {} cases, {granted} granted, {dropped} dropped unfinished; every permit back; {report:?}; {:?}",
        kind.label(),
        names.len(),
        started.elapsed()
    );
    assert!(
        granted > 20 && dropped > 50,
        "{granted} granted, {dropped} dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_acquisitions_dropped_at_every_await_give_every_permit_back() {
    dropped_at_every_await(Kind::Plain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expirable_acquisitions_dropped_at_every_await_give_every_permit_back() {
    dropped_at_every_await(Kind::Expirable).await;
}
