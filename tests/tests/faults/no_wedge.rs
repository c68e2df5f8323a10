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

/// Found by lock-sim (seed 117630): a local waiter of a lock context gives
/// up while the lock is being handed off to it; the releaser gets the
/// hand-off's reply afterwards and must end the new hold itself. A later
/// acquisition of the same context re-entered that hold, and the
/// releaser's release then freed it under the new guard. Now such a hold
/// is waited out: the later acquisition gets a hold of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_its_waiter_abandoned_is_not_re_entered_by_its_context() {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let client = LockClient::builder(proxy.url())
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        // two lock connections, used in turn: the later acquisition does
        // not queue behind the held-up release on one connection
        .pool_size(2)
        .build()
        .expect("client");
    let observer = support::client_for(&server, 30_000);
    let mut conn = raw(&server).await;
    let key = "abandoned-hand-off";
    let lock = client.lock(key).expect("name");
    lock.acquire()
        .await
        .expect("warm")
        .release()
        .await
        .expect("warm");
    // Another client holds the lock while A, then B (in a context) queue
    // in this client: A's hold then counts B as waiting, and A's release
    // hands the lock to B.
    let other = observer
        .lock(key)
        .expect("name")
        .acquire()
        .await
        .expect("other");
    // The hand-off's reply comes back after B gave up; the releaser's
    // release of the abandoned hold lands 300 ms after it is sent: the
    // window in which B's context acquires again.
    let handoff = proxy.fault_next(
        CommandMatch::name("EVALSHA")
            .with_exact_arg(support::handoff_sha())
            .with_exact_arg(key),
        Fault::DelayReply(Duration::from_millis(400)),
    );
    let late_release = proxy.fault_next(
        CommandMatch::name("EVALSHA")
            .with_exact_arg(release_sha())
            .with_exact_arg(key),
        Fault::DelayCommand(Duration::from_millis(300)),
    );
    let a = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let g = lock.acquire_timeout(Duration::from_secs(5)).await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            g.release().await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let freeing = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        other.release().await
    });
    in_context(async {
        // A gets the lock at ~200 ms and hands it to B at ~300 ms; the
        // reply comes at ~700 ms, after B gave up (~500 ms).
        let gave_up = lock.acquire_timeout(Duration::from_millis(450)).await;
        assert!(
            gave_up.as_ref().is_err_and(|e| e.is_wait_timeout()),
            "the waiter gives up before the hand-off's reply: {:?}",
            gave_up.map(|g| g.owner_id().to_string())
        );
        // The abandoned hold's release is on its way (lands at ~1 s).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let guard = within(
            Duration::from_secs(5),
            "a later acquisition of the context",
            lock.acquire_timeout(Duration::from_secs(3)),
        )
        .await
        .expect("a hold of its own");
        assert!(handoff.wait_fired(Duration::from_secs(1)), "handed off");
        assert!(
            late_release.wait_fired(Duration::from_secs(2)),
            "the abandoned hold was released"
        );
        // Whatever landed meanwhile, the guard's hold is in Redis and
        // nobody else gets in while it is valid.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let count: Option<i64> = cmd(&mut conn, &["HGET", key, guard.owner_id()]).await;
        let other = observer
            .lock(key)
            .expect("name")
            .try_acquire()
            .await
            .expect("observer");
        assert!(guard.is_held(), "the guard is valid");
        assert!(count.is_some(), "the guard's hold is in Redis");
        assert!(other.is_none(), "another client got in under a valid guard");
        guard.release().await.expect("release");
    })
    .await;
    for task in [a, freeing] {
        within(Duration::from_secs(5), "task", task)
            .await
            .expect("task")
            .expect("release");
    }
}
