//! A local queue never wedges: waiters of one client queued behind a local
//! hold get the lock once it is free in Redis, whatever happened to the
//! hold's release (lost reply) or to its guards (released out of order,
//! then lost). The lock's state is read with a raw connection.

use std::time::Duration;

use crate::support::{self, cmd, raw, release_sha, within};
use lock_core::{in_context, LockClient};
use lock_tests::{CommandMatch, Fault, FaultProxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_was_lost_does_not_strand_local_waiters() {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let client = LockClient::builder(proxy.url())
        .command_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .expect("client");
    let lock = client.lock("lost-release").expect("name");
    // Load the release script first, so the fault hits the real release.
    lock.acquire()
        .await
        .expect("warm")
        .release()
        .await
        .expect("warm");

    let holder = lock.acquire().await.expect("holder");
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move {
                let g = lock.acquire_timeout(Duration::from_secs(5)).await?;
                g.release().await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let dropped = proxy.fault_next(
        CommandMatch::name("EVALSHA")
            .with_exact_arg(release_sha())
            .with_exact_arg("lost-release"),
        Fault::DropReply,
    );
    let _ = holder.release().await; // its reply never comes; retried
    assert!(dropped.wait_fired(Duration::from_secs(1)));
    for w in waiters {
        within(Duration::from_secs(6), "local waiter", w)
            .await
            .expect("task")
            .expect("every local waiter gets the lock");
    }
    let mut conn = raw(&server).await;
    let exists: i64 = cmd(&mut conn, &["EXISTS", "lost-release"]).await;
    assert_eq!(exists, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_guards_released_out_of_order_then_lost_do_not_strand_waiters() {
    let e = support::env(600); // renewed every 200 ms
    let lock = e.client.lock("out-of-order").expect("name");
    let mut conn = raw(&e.server).await;
    let (inner, waiter) = in_context(async {
        let outer = lock.acquire().await.expect("outer");
        let inner = lock.acquire().await.expect("inner");
        let l = lock.clone();
        // another owner of the same client queues behind the hold
        let waiter = tokio::spawn(async move {
            let g = l.acquire_timeout(Duration::from_secs(5)).await?;
            g.release().await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        outer.release().await.expect("outer first");
        (inner, waiter)
    })
    .await;
    // Now the hold is lost behind the client's back.
    let _: i64 = cmd(&mut conn, &["DEL", "out-of-order"]).await;
    let started = tokio::time::Instant::now();
    within(Duration::from_secs(3), "local waiter", waiter)
        .await
        .expect("task")
        .expect("the local waiter gets the lock");
    eprintln!(
        "local waiter acquired {:?} after the hold was deleted (renewal period 200 ms)",
        started.elapsed()
    );
    assert!(!inner.is_held());
    assert!(inner.release().await.expect_err("lost").is_lost());
}
