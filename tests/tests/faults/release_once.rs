//! A release is applied exactly once, however late a copy of it arrives,
//! and a failed release of one count never ends the others.
//!
//! A re-entered hold (count 2) releases its inner count; the first copy of
//! that release is held up in the network past the command time-out and
//! past the latch lifetime, the client retries on a new connection, then the
//! first copy arrives. An independent observer (another client, straight to
//! the server) tries to take the lock the whole time and reads the hash:
//! it must never get in while the outer guard says held.

use std::time::{Duration, Instant};

use crate::support::{self, cmd, raw, release_sha, within};
use lock_core::{in_context, LockClient};
use lock_tests::{CommandMatch, Fault, FaultProxy};

const COMMAND_MS: u64 = 100;

/// A client through `proxy` with `command` as its command and connect
/// time-outs.
fn client_with(proxy: &FaultProxy, command: Duration) -> LockClient {
    LockClient::builder(proxy.url())
        .command_timeout(command)
        .connect_timeout(command)
        .watchdog_timeout(Duration::from_secs(6))
        .build()
        .expect("client")
}

/// A server, a fault proxy in front of it, a client through the proxy with
/// the lock's scripts loaded, an observer client and a raw connection
/// straight to the server.
struct Rig {
    server: lock_tests::RedisServer,
    proxy: FaultProxy,
    observer: LockClient,
    conn: redis::aio::MultiplexedConnection,
    lock: lock_core::Lock,
}

async fn rig(key: &str) -> Rig {
    rig_with(key, Duration::from_millis(COMMAND_MS)).await
}

/// [`rig`] with `command` as the client's command and connect time-outs.
async fn rig_with(key: &str, command: Duration) -> Rig {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let client = client_with(&proxy, command);
    let observer = support::client_for(&server, 6_000);
    let conn = raw(&server).await;
    let lock = client.lock(key).expect("name");
    lock.acquire()
        .await
        .expect("warm")
        .release()
        .await
        .expect("warm");
    Rig {
        server,
        proxy,
        observer,
        conn,
        lock,
    }
}

/// Tries to take `name` every 10 ms for `window`, as another client; returns
/// how many times it got in.
async fn observer_gets_in(observer: &LockClient, name: &str, window: Duration) -> usize {
    let lock = observer.lock(name).expect("name");
    let until = Instant::now() + window;
    let mut got_in = 0;
    while Instant::now() < until {
        if let Some(g) = lock.try_acquire().await.expect("observer") {
            got_in += 1;
            g.release().await.expect("observer release");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    got_in
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_first_copy_of_an_inner_release_never_frees_the_outer_hold() {
    let Rig {
        server: _server,
        proxy,
        observer,
        mut conn,
        lock,
    } = rig("late-release").await;
    let key = "late-release";
    // Past the command time-out (the client retries) and past the longest
    // latch this client writes (1 s at these settings): the fix must not
    // rely on a latch outliving the delay.
    let delay = Duration::from_millis(1_300);
    let rounds = 20;
    let mut retried = 0;
    for round in 0..rounds {
        // Odd rounds re-enter again before the late copy lands, so that it
        // finds the count it names (2) once more.
        let again = round % 2 == 1;
        let seen: usize = in_context(async {
            let outer = lock.acquire().await.expect("outer");
            let inner = lock.acquire().await.expect("inner");
            assert_eq!(inner.owner_id(), outer.owner_id(), "re-entered");
            let held_up = proxy.fault_next(
                CommandMatch::name("EVALSHA")
                    .with_exact_arg(release_sha())
                    .with_exact_arg(key),
                Fault::DelayCommand(delay),
            );
            let started = Instant::now();
            within(Duration::from_secs(5), "inner release", inner.release())
                .await
                .expect("the inner release succeeds on its retry");
            assert!(held_up.wait_fired(Duration::from_secs(1)), "round {round}");
            if started.elapsed() < delay {
                retried += 1;
            }
            let second = if again {
                Some(lock.acquire().await.expect("re-entered again"))
            } else {
                None
            };
            // The late copy lands inside this window.
            let seen = observer_gets_in(&observer, key, delay + Duration::from_millis(400)).await;
            assert!(
                outer.is_held(),
                "round {round}: the outer guard still holds"
            );
            let owner: Option<String> = cmd(&mut conn, &["HGET", key, outer.owner_id()]).await;
            assert!(owner.is_some(), "round {round}: the hold is in Redis");
            if let Some(g) = second {
                g.release().await.expect("second inner release");
            }
            outer.release().await.expect("outer release");
            seen
        })
        .await;
        assert_eq!(
            seen, 0,
            "round {round}: another client got in while the outer guard held"
        );
        let exists: i64 = cmd(&mut conn, &["EXISTS", key]).await;
        assert_eq!(exists, 0, "round {round}: the last release freed the lock");
    }
    eprintln!("{rounds} rounds, {retried} inner releases retried before their first copy landed; the observer never got in");
    assert!(retried > rounds / 2, "the fault forced a retry: {retried}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_inner_release_leaves_the_outer_hold_in_place() {
    let Rig {
        server: _server,
        proxy,
        observer,
        mut conn,
        lock,
    } = rig("failed-inner").await;
    let key = "failed-inner";
    // Never sent on (black hole), or applied with its reply lost and every
    // retry unanswered; the held-back copies land after the heal.
    for lost_reply_first in [false, true] {
        let case = if lost_reply_first {
            "applied, reply lost"
        } else {
            "black hole"
        };
        in_context(async {
            let outer = lock.acquire().await.expect("outer");
            let inner = lock.acquire().await.expect("inner");
            let dropped = lost_reply_first.then(|| {
                proxy.fault_next(
                    CommandMatch::name("EVALSHA")
                        .with_exact_arg(release_sha())
                        .with_exact_arg(key),
                    Fault::DropReply,
                )
            });
            if dropped.is_none() {
                proxy.black_hole();
            }
            let release = tokio::spawn(inner.release());
            if let Some(dropped) = dropped {
                assert!(dropped.wait_fired(Duration::from_secs(1)), "{case}");
                proxy.black_hole();
            }
            // Its retry window (3 command time-outs) passes unanswered.
            let failed = within(Duration::from_secs(5), "inner release", release)
                .await
                .expect("task");
            proxy.heal();
            let err = failed.expect_err("the inner release fails");
            eprintln!("{case}: the inner release failed with {err}");
            assert!(outer.is_held(), "{case}: the outer guard still holds");
            assert!(outer.held_lock().is_held(), "{case}: its HeldLock too");
            tokio::time::sleep(Duration::from_millis(200)).await;
            let count: Option<i64> = cmd(&mut conn, &["HGET", key, outer.owner_id()]).await;
            assert_eq!(count, Some(1), "{case}: one count in Redis, as the guards");
            assert_eq!(
                observer_gets_in(&observer, key, Duration::from_millis(300)).await,
                0,
                "{case}: nobody else gets in"
            );
            // The next acquisition in the context re-enters at once.
            let again = within(Duration::from_secs(3), "re-entry", lock.acquire())
                .await
                .expect("re-entered");
            assert_eq!(again.owner_id(), outer.owner_id(), "{case}: same hold");
            let count: Option<i64> = cmd(&mut conn, &["HGET", key, outer.owner_id()]).await;
            assert_eq!(count, Some(2), "{case}");
            again.release().await.expect("release");
            outer.release().await.expect("outer release");
        })
        .await;
        let exists: i64 = cmd(&mut conn, &["EXISTS", key]).await;
        assert_eq!(exists, 0, "{case}: the last release freed the lock");
    }
}

/// Found by lock-sim (seed 24404): a late copy of an inner release lands
/// after a second re-entry made the count it names again (the count drifts
/// one short: the hold stays), and then that re-entry, its reply lost, is
/// cancelled. The cancellation took the last count off and ended the hold
/// under the outer guard; now a cancelled re-entry never ends a hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_reentry_after_a_late_release_copy_never_ends_the_hold() {
    let key = "late-copy-then-cancel";
    let Rig {
        server: _server,
        proxy,
        observer,
        mut conn,
        lock,
    } = rig_with(key, Duration::from_millis(300)).await;
    in_context(async {
        let outer = lock.acquire().await.expect("outer");
        let inner = lock.acquire().await.expect("inner");
        // The first copy lands between the second re-entry (after the
        // retry, ~300 ms) and that re-entry's cancellation (~600 ms).
        let held_up = proxy.fault_next(
            CommandMatch::name("EVALSHA")
                .with_exact_arg(release_sha())
                .with_exact_arg(key),
            Fault::DelayCommand(Duration::from_millis(450)),
        );
        within(Duration::from_secs(5), "inner release", inner.release())
            .await
            .expect("the inner release succeeds on its retry");
        let lost = proxy.fault_next(
            CommandMatch::name("EVALSHA")
                .with_exact_arg(support::acquire_sha())
                .with_exact_arg("re"),
            Fault::DropReply,
        );
        let again = within(Duration::from_secs(5), "re-entry", lock.acquire()).await;
        assert!(
            lost.wait_fired(Duration::from_secs(1)),
            "the re-entry's reply was lost"
        );
        assert!(
            held_up.wait_fired(Duration::from_secs(1)),
            "the first copy was held up"
        );
        if let Ok(g) = again {
            // Sent once more on a fresh connection: a second guard.
            drop(g);
        }
        // The late copy and the cancellation have landed by now.
        let seen = observer_gets_in(&observer, key, Duration::from_millis(800)).await;
        assert!(outer.is_held(), "the outer guard still holds");
        let count: Option<i64> = cmd(&mut conn, &["HGET", key, outer.owner_id()]).await;
        assert!(
            count.is_some_and(|c| c >= 1),
            "the hold is in Redis: {count:?}"
        );
        assert_eq!(seen, 0, "another client got in while the outer guard held");
        outer.release().await.expect("outer release");
    })
    .await;
    let exists: i64 = cmd(&mut conn, &["EXISTS", key]).await;
    assert_eq!(exists, 0, "the last release freed the lock");
}
