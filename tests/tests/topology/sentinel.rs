//! lock-core through Redis Sentinel (`redis+sentinel://`), against the
//! harness's primary / replica / three sentinels: the client reaches the
//! primary the sentinels name, follows a failover (`SENTINEL FAILOVER`, a
//! killed primary), keeps the holds the new primary has and reports lost
//! the ones it does not.
//!
//! Judged from the data nodes themselves (raw reads of the lock hash on
//! each node) and by a second client taking the lock; measured follow-up
//! times are printed (`--nocapture`).

use std::time::Duration;

use crate::support::{hash_on, sentinel_set, within};
use lock_core::{AcquireOptions, LockClient, LockGuard};
use lock_tests::{RedisServer, SentinelSet};
use tokio::time::Instant;

/// The stated bound: once every sentinel names the new primary, the
/// client's next command goes there (it listens for `+switch-master`; a
/// command that meets the demoted primary is retried on the new one).
/// Generous for a loaded CI machine; measured figures are printed.
const FOLLOW_BOUND: Duration = Duration::from_secs(3);

fn client(url: &str, watchdog: Duration) -> LockClient {
    LockClient::builder(url)
        .watchdog_timeout(watchdog)
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

fn owner_on(node: &RedisServer, key: &str, guard: &LockGuard) -> bool {
    hash_on(node, key).contains_key(guard.owner_id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_url_reaches_the_primary_it_names() {
    let s = sentinel_set();
    let c = client(&s.url(), Duration::from_secs(30));
    let lock = c.lock("orders").unwrap_or_else(|e| panic!("{e}"));
    let guard = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        owner_on(&s.data_nodes()[0], lock.key(), &guard),
        "the hold is on the primary"
    );
    guard.release().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(hash_on(&s.data_nodes()[0], lock.key()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_service_or_no_sentinel_fails_with_the_cause() {
    let s = sentinel_set();
    let wrong = s.url().replace("/locks", "/nosuch");
    let err = client(&wrong, Duration::from_secs(30))
        .ping()
        .await
        .expect_err("an unknown service answered");
    assert!(
        err.to_string().contains("no primary named `nosuch`"),
        "{err}"
    );
    let port = lock_tests::free_port().unwrap_or_else(|e| panic!("{e}"));
    let nobody = format!("redis+sentinel://127.0.0.1:{port}/locks");
    let err = client(&nobody, Duration::from_secs(30))
        .ping()
        .await
        .expect_err("no sentinel answered");
    assert!(
        err.to_string().contains("no sentinel named the primary"),
        "{err}"
    );
}

/// `SENTINEL FAILOVER` under a holder and a waiter of another client. The
/// hold was acknowledged by the replica (`wait_for_replicas`), so the new
/// primary has it: the holder keeps it, renews it there, and the waiter
/// gets it only after the holder's release, on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_under_a_holder_and_a_waiter_keeps_the_replicated_hold() {
    let s = sentinel_set();
    // Renewed every 2 s: a failover pauses writes on the old primary for
    // about a second, well inside the lease.
    let watchdog = Duration::from_secs(6);
    let holder_client = LockClient::builder(s.url())
        .watchdog_timeout(watchdog)
        .wait_for_replicas(1, Duration::from_secs(2))
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let waiter_client = client(&s.url(), watchdog);
    let lock = holder_client
        .lock("ledger")
        .unwrap_or_else(|e| panic!("{e}"));
    let guard = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
    let waiter = tokio::spawn({
        let lock = waiter_client
            .lock("ledger")
            .unwrap_or_else(|e| panic!("{e}"));
        async move {
            let g = lock.acquire().await;
            (g, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());

    let started = Instant::now();
    tokio::task::block_in_place(|| s.failover()).unwrap_or_else(|e| panic!("failover: {e}"));
    let failed_over = Instant::now();
    let new_primary = &s.data_nodes()[1];
    // From the moment every sentinel names the new primary: the holder's
    // client sends its next command there (probe locks, observed on the node).
    let probe = holder_client
        .lock("probe")
        .unwrap_or_else(|e| panic!("{e}"));
    let followed = within(FOLLOW_BOUND, "the client follows the new primary", async {
        loop {
            // No replica wait: the demoted primary is not the new one's
            // replica yet.
            let once = AcquireOptions::new().no_wait().skip_replica_wait();
            if let Ok(g) = probe.acquire_with(once).await {
                let there = owner_on(new_primary, probe.key(), &g);
                let _ = g.release().await;
                if there {
                    return Instant::now();
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    println!(
        "sentinel failover took {:?}; the client's commands reached the new primary {:?} after the sentinels agreed",
        failed_over.duration_since(started),
        followed.duration_since(failed_over)
    );
    // The holder's next renewal reaches the new primary too: the lock's
    // PTTL there is pushed back up.
    let pttl = || {
        new_primary
            .command(&["PTTL", lock.key()])
            .ok()
            .and_then(|r| r.as_i64())
            .unwrap_or(-2)
    };
    let first = pttl();
    assert!(
        first > 0,
        "the replicated hold is on the new primary: PTTL {first}"
    );
    within(watchdog, "holder renews on the new primary", async {
        while pttl() <= first {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(guard.is_held(), "the replicated hold survived the failover");
    assert!(owner_on(new_primary, lock.key(), &guard));
    assert!(
        !waiter.is_finished(),
        "the waiter did not get the lock while it was held"
    );

    let released_at = Instant::now();
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("release on the new primary: {e}"));
    let (got, at) = within(Duration::from_secs(10), "waiter", waiter)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let got = got.unwrap_or_else(|e| panic!("waiter: {e}"));
    println!(
        "waiter acquired {:?} after the release",
        at.duration_since(released_at)
    );
    assert!(
        owner_on(new_primary, lock.key(), &got),
        "taken on the new primary"
    );
    got.release().await.unwrap_or_else(|e| panic!("{e}"));
}

/// A hold the replica never received (the primary dropped its replica link
/// while the replica was paused, then the hold was taken), then the
/// primary killed: the sentinels promote the replica,
/// which has no such hold. The holder's next renewal there reports it
/// lost (well before its local deadline), and another client takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_the_new_primary_lacks_is_reported_lost() {
    let mut s = sentinel_set();
    let watchdog = Duration::from_secs(20);
    let c = client(&s.url(), watchdog);
    let lock = c.lock("report").unwrap_or_else(|e| panic!("{e}"));
    // Paused, the replica cannot reconnect; its link dropped, nothing
    // written from now on reaches it (a paused process's socket would
    // still buffer what the primary sends).
    s.data_nodes()[1].pause().unwrap_or_else(|e| panic!("{e}"));
    let killed_links = s.data_nodes()[0]
        .command(&["CLIENT", "KILL", "TYPE", "replica"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(killed_links.as_i64(), Some(1), "the replica link dropped");
    let guard = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
    let acquired = Instant::now();
    let lost = tokio::spawn({
        let held = guard.held_lock();
        async move {
            held.lost().await;
            Instant::now()
        }
    });
    if let Some(primary) = s.data_node_mut(0) {
        primary.kill();
    }
    s.data_nodes()[1].resume().unwrap_or_else(|e| panic!("{e}"));
    let killed = Instant::now();
    tokio::task::block_in_place(|| s.wait_for_primary(1, Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("no failover: {e}"));
    println!("promoted {:?} after the kill", killed.elapsed());
    let lost_at = within(Duration::from_secs(15), "lost signal", lost)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let after = lost_at.duration_since(acquired);
    println!("hold reported lost {after:?} after it was taken (local deadline ~{watchdog:?})");
    assert!(
        after < watchdog / 2,
        "reported by a renewal on the new primary, not by the deadline: {after:?}"
    );
    assert!(hash_on(&s.data_nodes()[1], lock.key()).is_empty());
    let err = guard.release().await.expect_err("released a lost hold");
    assert!(err.is_lost(), "{err}");
    let other = client(&s.url(), watchdog);
    let g = within(
        Duration::from_secs(5),
        "another client",
        other
            .lock("report")
            .unwrap_or_else(|e| panic!("{e}"))
            .acquire(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(owner_on(&s.data_nodes()[1], lock.key(), &g));
    g.release().await.unwrap_or_else(|e| panic!("{e}"));
}

/// Passwords on both sides: the data nodes' in the URL's userinfo, the
/// sentinels' as `sentinel_password`. Wrong ones fail with the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_node_and_sentinel_credentials_come_from_the_url() {
    let s = SentinelSet::start_with_passwords("locks", Some("data-pw"), Some("sentinel-pw"))
        .unwrap_or_else(|e| panic!("sentinel set: {e}"));
    let url = s.url();
    assert!(url.contains(":data-pw@") && url.ends_with("?sentinel_password=sentinel-pw"));
    let c = client(&url, Duration::from_secs(30));
    let lock = c.lock("secured").unwrap_or_else(|e| panic!("{e}"));
    let guard = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(owner_on(&s.data_nodes()[0], lock.key(), &guard));
    guard.release().await.unwrap_or_else(|e| panic!("{e}"));

    let no_data_password = url.replace(":data-pw@", "");
    let err = client(&no_data_password, Duration::from_secs(30))
        .ping()
        .await
        .expect_err("reached the primary without its password");
    assert!(err.is_auth_failure(), "{err}");
    let wrong_sentinel_password = url.replace("sentinel-pw", "nope");
    let err = client(&wrong_sentinel_password, Duration::from_secs(30))
        .ping()
        .await
        .expect_err("asked the sentinels with a wrong password");
    let text = err.to_string();
    assert!(
        err.is_auth_failure() && text.contains("every sentinel refused the credentials"),
        "{text}"
    );
    // The password never shows in the client's Debug output.
    assert!(!format!("{:?}", c.config()).contains("sentinel-pw"));
}
