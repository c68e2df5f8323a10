//! End-to-end behaviour of lock-core against real redis-server processes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{self, cmd, env, eventually, raw, within};
use lock_core::{in_context, AcquireOptions, Error, LockClient, LockContext};
use tokio::time::Instant;

// ---------------------------------------------------------------- reentrancy

#[tokio::test]
async fn nested_acquire_in_one_context_reenters_and_counts_holds() {
    let e = env(30_000);
    let lock = e.client.lock("reentrant").expect("name");
    in_context(async {
        let outer = lock.acquire().await.expect("outer");
        let inner = within(Duration::from_secs(1), "re-entry waits", lock.acquire())
            .await
            .expect("inner");
        assert_eq!(lock.hold_count().await.expect("count"), 2);
        assert_eq!(
            inner.fencing_token(),
            outer.fencing_token(),
            "re-entry keeps the token"
        );
        inner.release().await.expect("inner release");
        assert_eq!(lock.hold_count().await.expect("count"), 1);
        assert!(
            lock.is_locked().await.expect("locked"),
            "still held after inner release"
        );
        outer.release().await.expect("outer release");
        assert_eq!(lock.hold_count().await.expect("count"), 0);
        assert!(!lock.is_locked().await.expect("locked"));
    })
    .await;
}

#[tokio::test]
async fn different_contexts_do_not_share_ownership() {
    let e = env(30_000);
    let lock = e.client.lock("ctx-exclusive").expect("name");
    let a = LockContext::new();
    let b = LockContext::new();
    let held = a.clone().scope(lock.acquire()).await.expect("a acquires");
    let other = b.clone().scope(lock.try_acquire()).await.expect("b tries");
    assert!(other.is_none(), "another context must not re-enter");
    assert_eq!(b.scope(lock.hold_count()).await.expect("count"), 0);
    assert_eq!(a.scope(lock.hold_count()).await.expect("count"), 1);
    held.release().await.expect("release");
}

#[tokio::test]
async fn outside_a_context_every_acquisition_is_a_new_owner() {
    let e = env(30_000);
    let lock = e.client.lock("no-ctx").expect("name");
    let first = lock.acquire().await.expect("first");
    assert!(lock.try_acquire().await.expect("try").is_none());
    assert_eq!(
        lock.hold_count().await.expect("count"),
        0,
        "no context: no holds"
    );
    first.release().await.expect("release");
}

#[tokio::test]
async fn spawned_task_is_another_owner_unless_the_context_is_carried() {
    let e = env(30_000);
    let lock = e.client.lock("spawned").expect("name");
    let ctx = LockContext::new();
    let guard = ctx.clone().scope(lock.acquire()).await.expect("acquire");

    let l2 = lock.clone();
    let plain = ctx
        .clone()
        .scope(async move { tokio::spawn(async move { l2.try_acquire().await }).await })
        .await
        .expect("join")
        .expect("try");
    assert!(plain.is_none(), "a spawned task starts without the context");

    let l3 = lock.clone();
    let carried = tokio::spawn(ctx.clone().scope(async move { l3.try_acquire().await }))
        .await
        .expect("join")
        .expect("try");
    let carried = carried.expect("a carried context re-enters");
    assert_eq!(
        ctx.clone().scope(lock.hold_count()).await.expect("count"),
        2
    );
    carried.release().await.expect("release carried");
    guard.release().await.expect("release");
}

// ---------------------------------------------------------- release / owner

#[tokio::test]
async fn release_by_a_non_owner_is_refused_and_changes_nothing() {
    let e = env(30_000);
    let lock = e.client.lock("non-owner").expect("name");
    let guard = LockContext::new()
        .scope(lock.acquire())
        .await
        .expect("acquire");

    let err = LockContext::new()
        .scope(lock.unlock())
        .await
        .expect_err("a non-owner must not release");
    assert!(
        matches!(err, Error::NotHeld { ref name } if name == "non-owner"),
        "{err:?}"
    );
    let err = lock.unlock().await.expect_err("no context");
    assert!(err.is_not_held());

    assert!(lock.is_locked().await.expect("locked"));
    assert!(guard.is_held());
    guard.release().await.expect("the owner still releases");
    assert!(!lock.is_locked().await.expect("locked"));
}

#[tokio::test]
async fn releasing_a_lost_lock_reports_lost() {
    let e = env(30_000);
    let lock = e.client.lock("lost-release").expect("name");
    let guard = lock.acquire().await.expect("acquire");
    assert!(lock.force_unlock().await.expect("force"));
    let err = guard.release().await.expect_err("it was taken away");
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
}

// ---------------------------------------------------------------- watchdog

#[tokio::test]
async fn watchdog_keeps_a_lock_for_three_timeouts_and_refreshes_its_ttl() {
    let e = env(600);
    let lock = e.client.lock("watchdog").expect("name");
    let guard = lock.acquire().await.expect("acquire");
    let mut conn = raw(&e.server).await;
    let start = Instant::now();
    let mut samples = Vec::new();
    while start.elapsed() < Duration::from_millis(1900) {
        let pttl: i64 = cmd(&mut conn, &["PTTL", "watchdog"]).await;
        samples.push(pttl);
        assert!(pttl > 0, "lock expired under the watchdog: {samples:?}");
        assert!(guard.is_held(), "guard reported lost");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Had nobody renewed, the key would be gone after 600 ms; seeing high
    // values late shows it was refreshed.
    let late_max = samples[samples.len() - 8..]
        .iter()
        .copied()
        .max()
        .unwrap_or(0);
    assert!(
        late_max > 300,
        "ttl not refreshed late in the hold: {samples:?}"
    );
    assert_eq!(e.client.renewing_count(), 1);
    guard.release().await.expect("release");
    assert_eq!(e.client.renewing_count(), 0, "release stops the renewal");
}

#[tokio::test]
async fn explicit_lease_expires_and_is_not_renewed() {
    let e = env(600);
    let lock = e.client.lock("lease").expect("name");
    let guard = lock
        .acquire_with_lease(Duration::from_millis(300))
        .await
        .expect("acquire");
    assert_eq!(guard.lease(), Some(Duration::from_millis(300)));
    assert_eq!(e.client.renewing_count(), 0, "a fixed lease is not renewed");
    within(Duration::from_secs(2), "lost() at lease end", guard.lost()).await;
    assert!(!guard.is_held());
    let gone = eventually(Duration::from_secs(1), || async {
        !lock.is_locked().await.expect("locked")
    })
    .await;
    assert!(gone.is_some(), "key still there after its lease");
    let err = guard.release().await.expect_err("expired");
    assert!(err.is_lost());
}

// ------------------------------------------------------------- lost locks

#[tokio::test]
async fn force_unlock_under_a_holder_is_noticed_within_one_renewal_period() {
    let e = env(600); // renewal period 200 ms
    let lock = e.client.lock("lost").expect("name");
    let guard = lock.acquire().await.expect("acquire");
    assert!(guard.is_held());
    assert!(lock.force_unlock().await.expect("force"));
    let took = Instant::now();
    within(
        Duration::from_millis(450),
        "lost() after force unlock",
        guard.lost(),
    )
    .await;
    assert!(took.elapsed() <= Duration::from_millis(450));
    assert!(!guard.is_held());
    assert!(guard.ensure_held().expect_err("lost").is_lost());
}

#[tokio::test]
async fn deleting_the_key_under_a_holder_is_noticed() {
    let e = env(600);
    let lock = e.client.lock("deleted").expect("name");
    let guard = lock.acquire().await.expect("acquire");
    let mut conn = raw(&e.server).await;
    let n: i64 = cmd(&mut conn, &["DEL", "deleted"]).await;
    assert_eq!(n, 1);
    within(Duration::from_millis(450), "lost() after DEL", guard.lost()).await;
    assert!(!guard.is_held());
}

// ------------------------------------------------------------- drop / cancel

#[tokio::test]
async fn dropping_a_guard_frees_the_lock_promptly() {
    let e = env(30_000);
    let lock = e.client.lock("dropped").expect("name");
    let guard = lock.acquire().await.expect("acquire");
    drop(guard);
    let freed = eventually(Duration::from_secs(2), || async {
        !lock.is_locked().await.expect("locked")
    })
    .await;
    let freed = freed.expect("lock still held long after drop (lease is 30 s)");
    assert!(freed < Duration::from_secs(1), "freed after {freed:?}");
}

#[tokio::test]
async fn a_panicking_holder_frees_the_lock() {
    let e = env(30_000);
    let lock = e.client.lock("panic").expect("name");
    let l = lock.clone();
    let task = tokio::spawn(async move {
        let _guard = l.acquire().await.expect("acquire");
        panic!("boom inside the critical section");
    });
    assert!(task.await.is_err(), "the task panicked");
    let g = within(
        Duration::from_secs(2),
        "acquire after panic",
        lock.acquire(),
    )
    .await
    .expect("acquire");
    g.release().await.expect("release");
}

#[tokio::test]
async fn cancelled_acquires_never_leave_the_lock_held() {
    let e = env(30_000);
    let lock = e.client.lock("cancel").expect("name");
    // Drop acquire futures at many points in their life: before the script
    // is sent, while it is in flight, after the reply arrived.
    for i in 0..60u64 {
        let cut = Duration::from_micros(i * 25);
        let _ = tokio::time::timeout(cut, lock.acquire()).await;
    }
    // Whatever was granted to a cancelled acquire is released in the
    // background: the lock must be free again, promptly.
    let freed = eventually(Duration::from_secs(2), || async {
        !lock.is_locked().await.expect("locked")
    })
    .await;
    assert!(freed.is_some(), "a cancelled acquire left the lock held");
    let g = lock.try_acquire().await.expect("try").expect("free");
    g.release().await.expect("release");
}

#[tokio::test]
async fn cancelled_waiters_never_leave_the_lock_held() {
    let e = env(30_000);
    let lock = e.client.lock("cancel-wait").expect("name");
    let holder = lock.acquire().await.expect("holder");
    let mut waiters = Vec::new();
    for _ in 0..10 {
        let l = lock.clone();
        waiters.push(tokio::spawn(async move { l.acquire().await }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.release().await.expect("release");
    // Abort the waiters around the moment one of them is granted the lock.
    tokio::time::sleep(Duration::from_micros(300)).await;
    for w in &waiters {
        w.abort();
    }
    let mut granted = 0;
    for w in waiters {
        if let Ok(Ok(g)) = w.await {
            granted += 1;
            g.release().await.expect("release");
        }
    }
    assert!(granted <= 1, "two waiters held the lock at once");
    let freed = eventually(Duration::from_secs(2), || async {
        !lock.is_locked().await.expect("locked")
    })
    .await;
    assert!(freed.is_some(), "an aborted waiter left the lock held");
}

#[tokio::test]
async fn a_dropped_release_still_completes() {
    let e = env(30_000);
    let lock = e.client.lock("dropped-release").expect("name");
    for i in 0..20u64 {
        let g = lock.acquire().await.expect("acquire");
        let _ = tokio::time::timeout(Duration::from_micros(i * 20), g.release()).await;
        let freed = eventually(Duration::from_secs(2), || async {
            !lock.is_locked().await.expect("locked")
        })
        .await;
        assert!(
            freed.is_some(),
            "release dropped after {}us left the lock held",
            i * 20
        );
    }
}

// ------------------------------------------------------------------ waiting

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_not_by_the_lease() {
    let e = env(30_000);
    let lock = e.client.lock("wake").expect("name");
    let holder = lock
        .acquire_with_lease(Duration::from_secs(10))
        .await
        .expect("holder");
    let l = lock.clone();
    let waiter = tokio::spawn(async move {
        let g = l.acquire().await;
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter got in while the lock was held"
    );
    let released_at = Instant::now();
    holder.release().await.expect("release");
    let (acquired_at, g) = within(Duration::from_secs(3), "waiter", waiter)
        .await
        .expect("join");
    let g = g.expect("acquired");
    let delay = acquired_at.duration_since(released_at);
    assert!(
        delay < Duration::from_secs(1),
        "woke {delay:?} after release (lease 10 s)"
    );
    g.release().await.expect("release");
}

#[tokio::test]
async fn a_wait_bound_gives_wait_timeout_and_not_before_the_bound() {
    let e = env(30_000);
    let lock = e.client.lock("bounded").expect("name");
    let holder = lock.acquire().await.expect("holder");
    let bound = Duration::from_millis(300);
    let start = Instant::now();
    let err = lock.acquire_timeout(bound).await.expect_err("held");
    let took = start.elapsed();
    assert!(
        matches!(err, Error::WaitTimeout { ref name, waited } if name == "bounded" && waited == bound),
        "{err:?}"
    );
    assert!(took >= bound, "gave up after {took:?}, before the bound");
    assert!(
        took < bound + Duration::from_secs(1),
        "gave up late: {took:?}"
    );
    let err = lock
        .acquire_with(AcquireOptions::new().no_wait())
        .await
        .expect_err("no wait");
    assert!(err.is_wait_timeout());
    assert!(lock.try_acquire().await.expect("try").is_none());
    holder.release().await.expect("release");
}

#[tokio::test]
async fn fifty_waiters_each_acquire_exactly_once() {
    let e = env(30_000);
    let lock = e.client.lock("fifty").expect("name");
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let holder = lock.acquire().await.expect("holder");
    let mut tasks = Vec::new();
    for i in 0..50usize {
        let l = lock.clone();
        let inside = inside.clone();
        let max_inside = max_inside.clone();
        tasks.push(tokio::spawn(async move {
            let g = l.acquire().await?;
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            max_inside.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(1)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            g.release().await?;
            Ok::<usize, Error>(i)
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.release().await.expect("release");
    let mut done = Vec::new();
    for t in tasks {
        let i = within(Duration::from_secs(20), "waiter", t)
            .await
            .expect("join")
            .expect("acquire");
        done.push(i);
    }
    done.sort_unstable();
    assert_eq!(
        done,
        (0..50).collect::<Vec<_>>(),
        "each waiter exactly once"
    );
    assert_eq!(max_inside.load(Ordering::SeqCst), 1, "two inside at once");
    assert!(!lock.is_locked().await.expect("locked"));
}

// ------------------------------------------------------------------ fencing

#[tokio::test]
async fn fencing_tokens_strictly_increase_across_holders_and_clients() {
    let e = env(30_000);
    let other = support::client_for(&e.server, 30_000);
    let mut last = 0u64;
    for round in 0..10 {
        let client = if round % 2 == 0 { &e.client } else { &other };
        let g = client
            .lock("fenced")
            .expect("name")
            .acquire()
            .await
            .expect("acquire");
        assert!(
            g.fencing_token() > last,
            "round {round}: {} after {last}",
            g.fencing_token()
        );
        last = g.fencing_token();
        g.release().await.expect("release");
    }
    let mut conn = raw(&e.server).await;
    let stored: u64 = cmd(&mut conn, &["GET", "redisson_lock_token:{fenced}"]).await;
    assert_eq!(stored, last);
}

#[tokio::test]
async fn fenced_writes_apply_while_held_and_are_refused_once_the_hold_is_gone() {
    let e = env(30_000);
    let mut conn = raw(&e.server).await;
    let guard = e
        .client
        .lock("fence:{a}")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let fence = guard.fence();
    assert_eq!(fence.token(), guard.fencing_token());
    fence.set("fence:{a}:s", "v1").await.expect("set");
    assert_eq!(fence.incr_by("fence:{a}:n", 5).await.expect("incr"), 5);
    fence.hset("fence:{a}:h", "f", "x").await.expect("hset");
    let body = lock_core::FencedScript::new("return {KEYS[1], ARGV[1], #KEYS, #ARGV}");
    let echoed: Vec<String> = fence
        .eval(&body, &["fence:{a}:k"], &["arg"])
        .await
        .expect("eval");
    assert_eq!(echoed, ["fence:{a}:k", "arg", "1", "1"]);
    assert!(fence.del("fence:{a}:s").await.expect("del"));
    // The independent view: what Redis holds.
    let n: i64 = cmd(&mut conn, &["GET", "fence:{a}:n"]).await;
    assert_eq!(n, 5);
    let h: String = cmd(&mut conn, &["HGET", "fence:{a}:h", "f"]).await;
    assert_eq!(h, "x");
    // The lock goes behind the holder's back (as an expiry would): every
    // fenced write is refused and nothing is written.
    let _: i64 = cmd(&mut conn, &["DEL", "fence:{a}"]).await;
    let err = fence.incr_by("fence:{a}:n", 1).await.expect_err("refused");
    assert!(
        matches!(err, Error::FenceRefused { ref name } if name == "fence:{a}"),
        "{err:?}"
    );
    let n: i64 = cmd(&mut conn, &["GET", "fence:{a}:n"]).await;
    assert_eq!(n, 5, "a refused write changed nothing");
    // Redis said the hold is gone: the guard knows it too.
    assert!(!guard.is_held());
    let err = fence
        .set("fence:{a}:s", "late")
        .await
        .expect_err("refused here");
    assert!(err.is_fence_refused());
    let s: Option<String> = cmd(&mut conn, &["GET", "fence:{a}:s"]).await;
    assert_eq!(s, None);
}

#[tokio::test]
async fn an_election_has_one_leader_whose_record_redis_shows_and_terms_grow() {
    let e = env(30_000);
    let other = support::client_for(&e.server, 30_000);
    let mut conn = raw(&e.server).await;
    let ours = e.client.election("elect:a").expect("name");
    let theirs = other.election("elect:a").expect("name");
    assert_eq!(ours.leader().await.expect("read"), None);
    let mut watch = theirs.observe();
    assert_eq!(
        within(Duration::from_secs(5), "first view", watch.changed())
            .await
            .expect("view"),
        None
    );
    let first = ours.campaign("node-a").await.expect("campaign");
    assert!(first.is_leader());
    assert_eq!(first.value(), "node-a");
    assert!(theirs.try_campaign("node-b").await.expect("try").is_none());
    // Redis, read independently: the lock's holder and its record.
    let record: HashMap<String, String> =
        cmd(&mut conn, &["HGETALL", "lockcore_leader:{elect:a}"]).await;
    assert_eq!(record.get("value").map(String::as_str), Some("node-a"));
    assert_eq!(record.get("term"), Some(&first.term().to_string()));
    let lock: HashMap<String, String> = cmd(&mut conn, &["HGETALL", "elect:a"]).await;
    assert!(lock.contains_key(&record["owner"]), "{lock:?} {record:?}");
    let seen = within(Duration::from_secs(5), "new leader", watch.changed())
        .await
        .expect("view");
    let seen = seen.expect("a leader");
    assert_eq!(
        (seen.value(), seen.term()),
        (Some("node-a"), Some(first.term()))
    );
    let term = first.term();
    first.clone().resign().await.expect("resign");
    assert!(!first.is_leader());
    let seen = within(Duration::from_secs(5), "vacancy", watch.changed())
        .await
        .expect("view");
    assert_eq!(seen, None);
    let second = theirs.campaign("node-b").await.expect("campaign");
    assert!(second.term() > term);
    let seen = ours.leader().await.expect("read").expect("leader");
    assert_eq!(
        (seen.value(), seen.term()),
        (Some("node-b"), Some(second.term()))
    );
    // A lock gone behind the leader's back: its fenced writes are refused.
    let _: i64 = cmd(&mut conn, &["DEL", "elect:a"]).await;
    assert!(second
        .fence()
        .set("elect:a:x", "1")
        .await
        .expect_err("refused")
        .is_fence_refused());
    assert!(!second.is_leader());
    // run_as_leader: the work runs as leader and its output comes back.
    let out = ours
        .run_as_leader("node-a", |l| async move { l.term() })
        .await
        .expect("run");
    assert!(out > second.term());
    assert_eq!(
        ours.leader().await.expect("read"),
        None,
        "resigned after the work"
    );
}

#[tokio::test]
async fn a_campaign_inside_a_lock_context_never_re_enters_a_leadership() {
    let e = env(30_000);
    let election = e.client.election("elect:ctx").expect("name");
    let lock = e.client.lock("elect:ctx").expect("name");
    in_context(async {
        let first = election.campaign("a").await.expect("campaign");
        // A second campaign in the same context is a campaigner like any
        // other: no second leadership sharing the first one's hold.
        assert!(election.try_campaign("b").await.expect("try").is_none());
        let waited = election
            .campaign_timeout("b", Duration::from_millis(200))
            .await
            .expect_err("waits for the first");
        assert!(waited.is_wait_timeout(), "{waited:?}");
        // nor does the context's manual acquisition share it
        assert!(lock.try_acquire().await.expect("try").is_none());
        first.resign().await.expect("resign");
        let second = election
            .try_campaign("b")
            .await
            .expect("try")
            .expect("free");
        second.resign().await.expect("resign");
    })
    .await;
}

#[tokio::test]
async fn run_as_leader_campaigns_again_when_its_work_ends_on_a_refused_fenced_write() {
    let e = env(30_000);
    let mut conn = raw(&e.server).await;
    let election = e.client.election("elect:refused").expect("name");
    let runs = Arc::new(AtomicUsize::new(0));
    let job = tokio::spawn({
        let (election, runs) = (election.clone(), runs.clone());
        async move {
            election
                .run_as_leader("a", move |leadership| {
                    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    async move {
                        if run > 1 {
                            return "second run";
                        }
                        // the first run writes until a write is refused
                        for _ in 0..500 {
                            if leadership
                                .fence()
                                .incr_by("elect:refused:n", 1)
                                .await
                                .is_err()
                            {
                                return "refused";
                            }
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        "never refused"
                    }
                })
                .await
        }
    });
    eventually(Duration::from_secs(5), || {
        let runs = runs.clone();
        async move { runs.load(Ordering::SeqCst) == 1 }
    })
    .await
    .expect("the first run started");
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The lock goes behind the leader's back (long before its next renewal).
    let _: i64 = cmd(&mut conn, &["DEL", "elect:refused"]).await;
    let out = within(Duration::from_secs(10), "run_as_leader", job)
        .await
        .expect("task")
        .expect("run");
    assert_eq!(out, "second run", "the deposed work's output is dropped");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

// ------------------------------------------------------- Redis under a holder

#[tokio::test]
async fn redis_restart_under_a_holder_is_reported_lost_and_the_client_recovers() {
    let mut e = env(600);
    let lock = e.client.lock("restart").expect("name");
    let guard = lock.acquire().await.expect("acquire");
    e.server.restart().expect("restart");
    within(Duration::from_secs(3), "lost() after restart", guard.lost()).await;
    assert!(!guard.is_held());
    drop(guard);
    // New acquisitions work on fresh connections.
    let g = acquire_when_redis_is_back(&lock, "acquire after restart", Error::is_redis).await;
    assert!(g.is_held());
    g.release().await.expect("release");
}

/// Acquires `lock`, retrying (for at most 5 s) the errors `retry_on`
/// accepts while Redis comes back.
async fn acquire_when_redis_is_back(
    lock: &lock_core::Lock,
    what: &str,
    retry_on: fn(&Error) -> bool,
) -> lock_core::LockGuard {
    within(Duration::from_secs(5), what, async {
        loop {
            match lock.acquire_timeout(Duration::from_secs(1)).await {
                Ok(g) => break g,
                Err(err) if retry_on(&err) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(err) => panic!("{err:?}"),
            }
        }
    })
    .await
}

#[tokio::test]
async fn redis_down_gives_a_redis_error_not_a_hang() {
    let mut e = env(30_000);
    let lock = e.client.lock("down").expect("name");
    e.server.kill();
    let err = within(
        Duration::from_secs(10),
        "acquire with redis down",
        lock.acquire(),
    )
    .await
    .expect_err("redis is down");
    assert!(err.is_redis(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_wait_is_one_attempt() {
    let e = support::env(30_000);
    let lock = e.client.lock("ok").expect("name");
    // A zero wait is one attempt (Redisson's tryLock(0)): taken when free,
    // WaitTimeout at once when held.
    let first = lock
        .acquire_timeout(Duration::ZERO)
        .await
        .expect("zero wait, free lock");
    let other = e.client.lock("ok").expect("name");
    let started = std::time::Instant::now();
    let err = tokio::spawn(async move { other.acquire_timeout(Duration::ZERO).await })
        .await
        .expect("task")
        .expect_err("zero wait, held lock");
    assert!(err.is_wait_timeout(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(1), "one attempt");
    first.release().await.expect("release");
}

// ---------------------------------------------------------------- bad input

#[tokio::test]
async fn bad_input_is_rejected_before_any_redis_call() {
    // Nothing listens here: any Redis call would fail with a Redis error,
    // so an invalid-input error proves the check came first.
    let port = lock_tests::free_port().expect("port");
    let client = LockClient::builder(format!("redis://127.0.0.1:{port}"))
        .max_name_len(32)
        .build()
        .expect("building makes no connection");

    let err = client.lock("").expect_err("empty");
    assert!(matches!(err, Error::InvalidName { .. }), "{err:?}");
    let err = client.lock("x".repeat(33)).expect_err("long");
    assert!(matches!(err, Error::InvalidName { .. }), "{err:?}");
    assert!(client.lock("x".repeat(32)).is_ok());

    let lock = client.lock("ok").expect("name");
    let err = lock
        .acquire_with_lease(Duration::ZERO)
        .await
        .expect_err("zero lease");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let err = lock
        .acquire_with_lease(Duration::from_micros(500))
        .await
        .expect_err("sub-ms lease");
    assert!(err.is_invalid_input(), "{err:?}");

    for builder in [
        LockClient::builder("not a url"),
        LockClient::builder(""),
        LockClient::builder("redis://h").pool_size(0),
        LockClient::builder("redis://h").watchdog_timeout(Duration::ZERO),
        LockClient::builder("redis://h").connect_timeout(Duration::ZERO),
        LockClient::builder("redis://h").command_timeout(Duration::ZERO),
    ] {
        let err = builder.build().expect_err("invalid config");
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    }
    // and now the Redis call itself fails as a Redis error
    let err = lock.try_acquire().await.expect_err("nothing listens");
    assert!(err.is_redis(), "{err:?}");
}

#[tokio::test]
async fn passwords_and_acl_users_in_the_url_work() {
    let server = lock_tests::RedisServer::builder()
        .arg("--user")
        .arg("alice")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("--user")
        .arg("default")
        .arg("off")
        .client_auth("alice", "pw")
        .start()
        .expect("server");
    let client = LockClient::connect(server.url_with_auth())
        .await
        .expect("connect");
    let g = client
        .lock("acl")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    g.release().await.expect("release");
    let err = LockClient::connect(format!("redis://alice:wrong@127.0.0.1:{}", server.port()))
        .await
        .expect_err("wrong password");
    assert!(err.is_redis(), "{err:?}");
}

// ------------------------------------------------------ Redisson wire layout

#[tokio::test]
async fn data_layout_matches_redisson_rlock() {
    let e = env(30_000);
    let mut conn = raw(&e.server).await;
    let lock = e.client.lock("layout").expect("name");
    let ctx = LockContext::new();
    let (g1, g2) = ctx
        .clone()
        .scope(async { (lock.acquire().await, lock.acquire().await) })
        .await;
    let (g1, g2) = (g1.expect("g1"), g2.expect("g2"));
    let kind: String = cmd(&mut conn, &["TYPE", "layout"]).await;
    assert_eq!(kind, "hash");
    let fields: HashMap<String, String> = cmd(&mut conn, &["HGETALL", "layout"]).await;
    // One field per hold: "<client-uuid>:<n>", n a number of this hold's
    // own; the re-entry shares it.
    let owner = g1.owner_id().to_string();
    assert_eq!(g2.owner_id(), owner);
    let (uuid, n) = owner.rsplit_once(':').expect("uuid:n");
    assert_eq!(uuid, e.client.client_id());
    assert!(n.parse::<u64>().is_ok(), "{owner}");
    assert_eq!(fields, HashMap::from([(owner.clone(), "2".to_string())]));
    let pttl: i64 = cmd(&mut conn, &["PTTL", "layout"]).await;
    assert!(
        pttl > 25_000 && pttl <= 30_000,
        "lease is the watchdog timeout: {pttl}"
    );

    // The unlock message is "0" on redisson_lock__channel:{layout}.
    let redis_client = redis::Client::open(e.server.url()).expect("url");
    let mut pubsub = redis_client.get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe("redisson_lock__channel:{layout}")
        .await
        .expect("subscribe");
    g2.release().await.expect("release inner");
    g1.release().await.expect("release outer");
    use futures_util::StreamExt;
    let msg = within(
        Duration::from_secs(2),
        "unlock message",
        pubsub.on_message().next(),
    )
    .await
    .expect("message");
    assert_eq!(msg.get_payload_bytes(), b"0");
}

#[tokio::test]
async fn a_foreign_redisson_style_holder_excludes_and_its_unlock_wakes_us() {
    let e = env(30_000);
    let mut conn = raw(&e.server).await;
    // What a Java Redisson client writes when it takes the lock.
    let java_owner = "6f1c2d3e-0000-4000-8000-000000000001:77";
    let _: i64 = cmd(&mut conn, &["HINCRBY", "shared", java_owner, "1"]).await;
    let _: i64 = cmd(&mut conn, &["PEXPIRE", "shared", "10000"]).await;

    let lock = e.client.lock("shared").expect("name");
    assert!(
        lock.try_acquire().await.expect("try").is_none(),
        "the Java holder excludes us"
    );
    let l = lock.clone();
    let waiter = tokio::spawn(async move { l.acquire().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    // What Redisson's unlock does at hold count zero: DEL, PUBLISH 0.
    let _: i64 = cmd(&mut conn, &["DEL", "shared"]).await;
    let _: i64 = cmd(
        &mut conn,
        &["PUBLISH", "redisson_lock__channel:{shared}", "0"],
    )
    .await;
    let g = within(Duration::from_secs(1), "woken by the Java unlock", waiter)
        .await
        .expect("join")
        .expect("acquire");
    g.release().await.expect("release");
}

#[tokio::test]
async fn key_prefix_is_part_of_every_key() {
    let server = support::server();
    let client = LockClient::builder(server.url())
        .key_prefix("app:")
        .build()
        .expect("client");
    let g = client
        .lock("x")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let mut conn = raw(&server).await;
    let n: i64 = cmd(&mut conn, &["EXISTS", "app:x"]).await;
    assert_eq!(n, 1);
    let token: Option<u64> = cmd(&mut conn, &["GET", "redisson_lock_token:{app:x}"]).await;
    assert_eq!(token, Some(g.fencing_token()));
    g.release().await.expect("release");
}

#[tokio::test]
async fn remaining_ttl_and_is_locked_report_the_state() {
    let e = env(30_000);
    let lock = e.client.lock("ttl").expect("name");
    assert_eq!(lock.remaining_ttl().await.expect("ttl"), None);
    assert!(!lock.is_locked().await.expect("locked"));
    let g = lock
        .acquire_with_lease(Duration::from_secs(5))
        .await
        .expect("acquire");
    let ttl = lock.remaining_ttl().await.expect("ttl").expect("locked");
    assert!(
        ttl > Duration::from_secs(4) && ttl <= Duration::from_secs(5),
        "{ttl:?}"
    );
    assert!(lock.is_locked().await.expect("locked"));
    g.release().await.expect("release");
    assert_eq!(lock.remaining_ttl().await.expect("ttl"), None);
}

// ------------------------------------------------- re-entry and lost guards

#[tokio::test]
async fn a_short_reentrant_lease_never_shortens_the_outer_lease() {
    let e = env(30_000);
    let lock = e.client.lock("mixed-lease").expect("name");
    let ctx = LockContext::new();
    let outer = ctx.clone().scope(lock.acquire()).await.expect("outer");
    let inner = ctx
        .clone()
        .scope(lock.acquire_with_lease(Duration::from_millis(100)))
        .await
        .expect("inner");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        lock.is_locked().await.expect("locked"),
        "the inner lease expired the outer hold"
    );
    let ttl = lock.remaining_ttl().await.expect("ttl").expect("locked");
    assert!(ttl > Duration::from_secs(20), "{ttl:?}");
    drop(inner);
    assert!(outer.is_held());
    outer.release().await.expect("outer release");
}

#[tokio::test]
async fn a_lost_guard_never_releases_a_newer_hold_of_its_context() {
    let e = env(600);
    let lock = e.client.lock("stale").expect("name");
    let ctx = LockContext::new();
    let old = ctx.clone().scope(lock.acquire()).await.expect("old");
    assert!(lock.force_unlock().await.expect("force"));
    within(Duration::from_secs(1), "old lost", old.lost()).await;
    let new = ctx.clone().scope(lock.acquire()).await.expect("new");
    drop(old); // must not release the new hold of the same owner
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        ctx.clone().scope(lock.hold_count()).await.expect("count"),
        1
    );
    assert!(new.is_held());
    new.release().await.expect("the new hold is intact");
}

#[tokio::test]
async fn too_long_leases_are_rejected() {
    let e = env(30_000);
    let lock = e.client.lock("huge").expect("name");
    let err = lock
        .acquire_with_lease(Duration::from_secs(400 * 24 * 3600))
        .await
        .expect_err("too long");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(
        !lock.is_locked().await.expect("locked"),
        "nothing was written"
    );
    let err = LockClient::builder(e.server.url())
        .watchdog_timeout(Duration::from_secs(400 * 24 * 3600))
        .build()
        .expect_err("too long");
    assert!(err.is_invalid_input());
}

#[tokio::test]
async fn waiters_survive_a_killed_pubsub_connection() {
    let e = env(30_000);
    let lock = e.client.lock("pubsub-kill").expect("name");
    // The holder is another client (process): waiters of the holder's own
    // client queue locally and need no unlock message.
    let other = support::client_for(&e.server, 30_000);
    let holder = other
        .lock("pubsub-kill")
        .expect("name")
        .acquire_with_lease(Duration::from_secs(10))
        .await
        .expect("holder");
    let l = lock.clone();
    let waiter = tokio::spawn(async move { l.acquire().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed = e
        .server
        .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .expect("client kill");
    assert_eq!(
        killed.as_i64(),
        Some(1),
        "one pub/sub connection per client"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    holder.release().await.expect("release");
    let g = within(Duration::from_secs(3), "waiter after pubsub kill", waiter)
        .await
        .expect("join")
        .expect("acquire");
    assert!(
        released_at.elapsed() < Duration::from_secs(2),
        "waiter relied on the 10 s lease, not on the reconnected subscription"
    );
    g.release().await.expect("release");
}

#[tokio::test]
async fn renewals_failing_until_the_lease_runs_out_mark_the_lock_lost() {
    let e = env(600);
    let lock = e.client.lock("paused").expect("name");
    let guard = lock.acquire().await.expect("acquire");
    // Redis stops answering: renewals time out and are retried, and once
    // the lease (600 ms) has run out since the last success the guard is lost.
    e.server.pause().expect("pause");
    let paused_at = Instant::now();
    within(
        Duration::from_secs(3),
        "lost() while redis is paused",
        guard.lost(),
    )
    .await;
    let took = paused_at.elapsed();
    e.server.resume().expect("resume");
    assert!(!guard.is_held());
    assert!(
        took >= Duration::from_millis(350),
        "declared lost after {took:?}, before the lease could have run out"
    );
    drop(guard);
    // The client works again after the pause.
    let g = acquire_when_redis_is_back(&lock, "acquire after resume", |err| {
        err.is_redis() || err.is_wait_timeout()
    })
    .await;
    g.release().await.expect("release");
}
