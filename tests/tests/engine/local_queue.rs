//! Local queues and hand-offs: waiters of one client for the same lock are
//! served in arrival order, only the head asks Redis, a releasing holder hands
//! the lock to the next local waiter in one round trip, and none of that may
//! weaken exclusion, expiry, loss detection or fairness between clients.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{self, env, script_calls, within};
use lock_core::{AcquireOptions, Error, LockClient};

#[tokio::test]
async fn local_waiters_are_served_in_arrival_order() {
    let e = env(30_000);
    let lock = e.client.lock("fifo").expect("name");
    let holder = lock.acquire().await.expect("holder");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..12usize {
        let l = lock.clone();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = l.acquire().await?;
            order.lock().expect("order").push(i);
            g.release().await
        }));
        // Arrivals well apart, so the arrival order is known.
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    holder.release().await.expect("release");
    for t in tasks {
        within(Duration::from_secs(10), "waiter", t)
            .await
            .expect("join")
            .expect("acquire/release");
    }
    let order = order.lock().expect("order").clone();
    assert_eq!(order, (0..12).collect::<Vec<_>>(), "served out of order");
    assert!(!lock.is_locked().await.expect("locked"));
}

#[tokio::test]
async fn contended_cycles_cost_about_one_script_call_each() {
    let e = env(30_000);
    let lock = e.client.lock("handoff").expect("name");
    let counter = Arc::new(AtomicUsize::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    const TASKS: usize = 16;
    const CYCLES: usize = 25;
    let before = script_calls(&e.server);
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let l = lock.clone();
        let (counter, inside, violations) = (counter.clone(), inside.clone(), violations.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..CYCLES {
                let g = l.acquire_with_lease(Duration::from_secs(10)).await?;
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    violations.fetch_add(1, Ordering::SeqCst);
                }
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await?;
            }
            Ok::<(), Error>(())
        }));
    }
    for t in tasks {
        within(Duration::from_secs(30), "task", t)
            .await
            .expect("join")
            .expect("cycles");
    }
    let calls = script_calls(&e.server) - before;
    let cycles = (TASKS * CYCLES) as u64;
    assert_eq!(counter.load(Ordering::SeqCst) as u64, cycles);
    assert_eq!(violations.load(Ordering::SeqCst), 0, "two inside at once");
    // Without local queues every cycle costs an acquire and a release call
    // (2 per cycle) plus retries; with hand-offs about one.
    assert!(
        calls <= cycles * 13 / 10 + 2 * TASKS as u64,
        "{calls} script calls for {cycles} cycles"
    );
    assert!(!lock.is_locked().await.expect("locked"));
}

#[tokio::test]
async fn fencing_tokens_grow_across_hand_offs() {
    let e = env(30_000);
    let lock = e.client.lock("fenced-handoff").expect("name");
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let holder = lock.acquire().await.expect("holder");
    let first = holder.fencing_token();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let l = lock.clone();
        let tokens = tokens.clone();
        tasks.push(tokio::spawn(async move {
            let g = l.acquire().await?;
            tokens.lock().expect("tokens").push(g.fencing_token());
            g.release().await
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.release().await.expect("release");
    for t in tasks {
        within(Duration::from_secs(10), "waiter", t)
            .await
            .expect("join")
            .expect("acquire");
    }
    let tokens = tokens.lock().expect("tokens").clone();
    assert_eq!(tokens.len(), 8);
    let mut prev = first;
    for t in tokens {
        assert!(t > prev, "token {t} after {prev}");
        prev = t;
    }
}

#[tokio::test]
async fn a_local_holders_fixed_lease_still_expires_for_local_waiters() {
    let e = env(30_000);
    let lock = e.client.lock("local-expiry").expect("name");
    let holder = lock
        .acquire_with_lease(Duration::from_millis(300))
        .await
        .expect("holder");
    let started = tokio::time::Instant::now();
    // The holder never releases; its lease must end the wait anyway.
    let g = within(
        Duration::from_secs(3),
        "local waiter after the holder's lease",
        lock.acquire(),
    )
    .await
    .expect("acquire");
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(!holder.is_held());
    assert!(holder.release().await.expect_err("expired").is_lost());
    assert!(g.is_held());
    g.release().await.expect("the new holder is intact");
}

#[tokio::test]
async fn a_force_unlocked_local_holder_lets_local_waiters_in() {
    let e = env(600); // renewal period 200 ms
    let lock = e.client.lock("local-force").expect("name");
    let holder = lock.acquire().await.expect("holder");
    let l = lock.clone();
    let waiter = tokio::spawn(async move { l.acquire().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    assert!(lock.force_unlock().await.expect("force"));
    let g = within(Duration::from_secs(2), "waiter after force unlock", waiter)
        .await
        .expect("join")
        .expect("acquire");
    within(Duration::from_secs(1), "old holder lost", holder.lost()).await;
    drop(holder); // known lost: must not release the new holder's lock
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(g.is_held());
    g.release().await.expect("the new holder is intact");
}

#[tokio::test]
async fn waiters_that_give_up_or_are_dropped_never_strand_the_lock() {
    let e = env(30_000);
    let lock = e.client.lock("churn").expect("name");
    let completed = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..12u64 {
        let l = lock.clone();
        let completed = completed.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..30u64 {
                // Short, varied wait bounds: many waiters give up while a
                // hand-off to them may be in flight.
                let wait = Duration::from_millis(1 + (i * 7 + round * 3) % 9);
                match l.acquire_with(AcquireOptions::new().wait(wait)).await {
                    Ok(g) => {
                        tokio::task::yield_now().await;
                        if round % 3 == 0 {
                            drop(g); // released in the background
                        } else {
                            g.release().await?;
                        }
                        completed.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) if e.is_wait_timeout() => {}
                    Err(e) => return Err(e),
                }
            }
            Ok::<(), Error>(())
        }));
    }
    // Some acquisitions are also aborted mid-wait.
    let l = lock.clone();
    let aborted = tokio::spawn(async move {
        for _ in 0..20 {
            let _ = tokio::time::timeout(Duration::from_millis(2), l.acquire()).await;
        }
    });
    for t in tasks {
        within(Duration::from_secs(30), "task", t)
            .await
            .expect("join")
            .expect("no error but wait timeouts");
    }
    within(Duration::from_secs(10), "aborter", aborted)
        .await
        .expect("join");
    assert!(completed.load(Ordering::SeqCst) > 0);
    // Nothing is left held: a fresh client gets the lock at once.
    let fresh = LockClient::builder(e.server.url()).build().expect("client");
    let g = within(
        Duration::from_secs(2),
        "lock free after the churn",
        fresh.lock("churn").expect("name").acquire(),
    )
    .await
    .expect("acquire");
    g.release().await.expect("release");
}

#[tokio::test]
async fn clients_take_turns_on_a_contended_lock() {
    let e = env(30_000);
    let clients: Vec<LockClient> = (0..3)
        .map(|_| support::client_for(&e.server, 30_000))
        .collect();
    let inside = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let per_client: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for _ in 0..4 {
            let l = client.lock("turns").expect("name");
            let (inside, violations, per_client, stop) = (
                inside.clone(),
                violations.clone(),
                per_client.clone(),
                stop.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..10_000 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let g = l.acquire_with_lease(Duration::from_secs(10)).await?;
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    per_client[c].fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.release().await?;
                }
                Ok::<(), Error>(())
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        within(Duration::from_secs(15), "task", t)
            .await
            .expect("join")
            .expect("cycles");
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0, "two inside at once");
    let counts: Vec<usize> = per_client
        .iter()
        .map(|c| c.load(Ordering::SeqCst))
        .collect();
    let total: usize = counts.iter().sum();
    eprintln!("turns per client: {counts:?}");
    // No client is starved by another's local hand-offs: each gets a fair
    // share of the turns (a third each; at least a tenth here).
    for (c, n) in counts.iter().enumerate() {
        assert!(
            *n * 10 >= total,
            "client {c} got {n} of {total} turns: {counts:?}"
        );
    }
}

#[tokio::test]
async fn a_local_release_failing_with_redis_down_is_not_reported_as_busy() {
    let mut e = env(30_000);
    let lock = e.client.lock("down").expect("name");
    let guard = lock.acquire().await.expect("holder");
    e.server.kill();
    // Released in the background: with Redis gone, the release fails and
    // is retried for a while. A local waiter must not queue behind it and
    // time out as "busy": it asks Redis and gets the Redis failure.
    drop(guard);
    let err = within(
        Duration::from_secs(10),
        "acquire with Redis down",
        lock.acquire_timeout(Duration::from_secs(1)),
    )
    .await
    .expect_err("redis is down");
    assert!(!err.is_wait_timeout(), "reported as busy: {err}");
}
