//! The semaphores (`client.semaphore`, `client.permit_semaphore`) and the
//! count-down latch (`client.latch`) on a real redis-server, judged by an
//! independent observer: raw reads of the counter and the permit set, and
//! a count of who is inside kept outside the library.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::{AcquireOptions, Error};

use crate::support::redisson_sem::{raw_id, RedissonLatch, RedissonSemaphore};
use crate::support::{self, cmd, raw, within};

async fn get_int(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    let v: Option<i64> = redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET");
    v.unwrap_or(0)
}

async fn zcard(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(conn)
        .await
        .expect("ZCARD")
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[tokio::test]
async fn plain_permits_are_taken_and_given_back_exactly() {
    let env = support::env(1000);
    let mut obs = raw(&env.server).await;
    let sem = env.client.semaphore("sem:a").expect("name");
    assert_eq!(sem.available().await.expect("available"), 0);
    assert!(
        sem.try_acquire(1).await.expect("try").is_none(),
        "no permits yet"
    );
    assert!(sem.try_set_permits(3).await.expect("set"));
    assert!(
        !sem.try_set_permits(9).await.expect("set"),
        "only when absent"
    );
    let two = sem.acquire(2).await.expect("two");
    assert_eq!(two.count(), 2);
    assert_eq!(get_int(&mut obs, "sem:a").await, 1);
    assert!(sem.try_acquire(2).await.expect("try").is_none());
    let one = sem
        .try_acquire(1)
        .await
        .expect("try")
        .expect("the last one");
    assert_eq!(get_int(&mut obs, "sem:a").await, 0);
    two.release().await.expect("release");
    assert_eq!(get_int(&mut obs, "sem:a").await, 2);
    drop(one);
    within(Duration::from_secs(2), "dropped permit back", async {
        while get_int(&mut obs, "sem:a").await != 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let ttl: i64 = cmd(&mut obs, &["PTTL", "sem:a"]).await;
    assert_eq!(ttl, -1, "the counter never gets a TTL");
    // never below zero
    let err = sem.add_permits(-4).await.expect_err("below zero");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert_eq!(sem.add_permits(-3).await.expect("to zero"), 0);
    assert_eq!(sem.add_permits(5).await.expect("add"), 5);
    assert!(matches!(
        sem.acquire(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        sem.acquire_with(1, AcquireOptions::new().lease(Duration::from_secs(1)))
            .await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn a_waiter_is_woken_by_a_release_and_a_bound_ends_a_wait() {
    let env = support::env(1000);
    let sem = env.client.semaphore("sem:w").expect("name");
    sem.try_set_permits(1).await.expect("set");
    let held = sem.acquire(1).await.expect("one");
    let err = sem
        .acquire_timeout(1, Duration::from_millis(200))
        .await
        .expect_err("bounded");
    assert!(err.is_wait_timeout(), "{err:?}");
    let other = support::client_for(&env.server, 1000);
    let sem2 = other.semaphore("sem:w").expect("name");
    let waiter = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let p = sem2.acquire(1).await.expect("woken");
        (started.elapsed(), p.release().await)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.release().await.expect("release");
    let (waited, released) = within(Duration::from_secs(3), "waiter", waiter)
        .await
        .expect("task");
    released.expect("release");
    assert!(
        waited < Duration::from_millis(900),
        "woken by the message, not the re-check: {waited:?}"
    );
}

/// Never more than N inside: 3 clients × 8 tasks on a semaphore of 4,
/// counted by an observer outside the library.
#[tokio::test]
async fn never_more_holders_than_permits() {
    let server = support::server();
    let clients: Vec<_> = (0..3).map(|_| support::client_for(&server, 1000)).collect();
    for kind in ["plain", "expirable"] {
        let name = format!("sem:n:{kind}");
        clients[0]
            .semaphore(&name)
            .expect("name")
            .try_set_permits(4)
            .await
            .expect("set");
        let inside = Arc::new(AtomicI64::new(0));
        let most = Arc::new(AtomicI64::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for (c, client) in clients.iter().enumerate() {
            for t in 0..8 {
                let (inside, most, done) = (inside.clone(), most.clone(), done.clone());
                let client = client.clone();
                let name = name.clone();
                tasks.push(tokio::spawn(async move {
                    for round in 0..5 {
                        let permit = if kind == "plain" {
                            client.semaphore(&name).expect("name").acquire(1).await
                        } else {
                            client
                                .permit_semaphore(&name)
                                .expect("name")
                                .acquire(1)
                                .await
                        }
                        .expect("permit");
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(
                            ((c * 7 + t * 3 + round) % 5) as u64,
                        ))
                        .await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        permit.release().await.expect("release");
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                }));
            }
        }
        within(Duration::from_secs(60), "workers", async {
            for t in tasks {
                t.await.expect("task");
            }
        })
        .await;
        assert_eq!(done.load(Ordering::SeqCst), 3 * 8 * 5);
        let most = most.load(Ordering::SeqCst);
        assert!(most <= 4, "{kind}: {most} inside at once");
        assert!(most >= 2, "{kind}: permits were shared ({most})");
        let mut obs = raw(&server).await;
        assert_eq!(
            get_int(&mut obs, &name).await,
            4,
            "{kind}: all permits back"
        );
        if kind == "expirable" {
            assert_eq!(zcard(&mut obs, &format!("{{{name}}}:timeout")).await, 0);
        }
    }
}

/// A client asking for 3 against a stream of clients asking for 1 is
/// served within a bounded wait (turns), not starved.
#[tokio::test]
async fn asking_for_many_is_not_starved_by_asking_for_one() {
    let server = support::server();
    let a = support::client_for(&server, 1000);
    let b = support::client_for(&server, 1000);
    let sem = a.semaphore("sem:turns").expect("name");
    sem.try_set_permits(3).await.expect("set");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut small = Vec::new();
    for _ in 0..6 {
        let sem = b.semaphore("sem:turns").expect("name");
        let stop = stop.clone();
        small.push(tokio::spawn(async move {
            let mut rounds = 0;
            while !stop.load(Ordering::SeqCst) && rounds < 2000 {
                let p = sem.acquire(1).await.expect("one");
                tokio::time::sleep(Duration::from_millis(3)).await;
                p.release().await.expect("release");
                rounds += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut waits = Vec::new();
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let big = within(Duration::from_secs(10), "three permits", sem.acquire(3))
            .await
            .expect("three");
        waits.push(started.elapsed());
        big.release().await.expect("release");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for t in small {
        within(Duration::from_secs(10), "small", t)
            .await
            .expect("task");
    }
    let longest = waits.iter().max().copied().unwrap_or_default();
    eprintln!("asking for 3 against 6 loops asking for 1: waits {waits:?}");
    assert!(longest < Duration::from_secs(3), "starved: {waits:?}");
}

#[tokio::test]
async fn expirable_permits_are_renewed_and_come_back_after_their_lease() {
    let env = support::env(600);
    let mut obs = raw(&env.server).await;
    let sem = env.client.permit_semaphore("sem:x").expect("name");
    sem.try_set_permits(2).await.expect("set");
    let renewed = sem.acquire(1).await.expect("one");
    assert_eq!(renewed.ids().len(), 1);
    assert_eq!(renewed.ids()[0].len(), 32);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(renewed.is_held(), "the watchdog renews it past its lease");
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg("{sem:x}:timeout")
        .arg(raw_id(&renewed.ids()[0]))
        .query_async(&mut obs)
        .await
        .expect("ZSCORE");
    let left = score.expect("still in the set") as i64 - now_ms();
    assert!(
        left > 0 && left <= 700,
        "expiry ahead by at most a lease: {left} ms"
    );
    // a fixed lease, never released: back after it
    let leased = sem
        .acquire_with(1, AcquireOptions::new().lease(Duration::from_millis(300)))
        .await
        .expect("leased");
    assert_eq!(get_int(&mut obs, "sem:x").await, 0);
    std::mem::forget(leased);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        sem.available().await.expect("available"),
        1,
        "reclaimed after its lease"
    );
    let status = sem.status(10).await.expect("status");
    assert_eq!(status.held_total, 1);
    assert_eq!(status.held[0].id, renewed.ids()[0]);
    renewed.release().await.expect("release");
    assert_eq!(get_int(&mut obs, "sem:x").await, 2);
}

#[tokio::test]
async fn a_lost_permit_is_reported_and_nothing_is_given_back_twice() {
    let env = support::env(600);
    let mut obs = raw(&env.server).await;
    let sem = env.client.permit_semaphore("sem:lost").expect("name");
    sem.try_set_permits(1).await.expect("set");
    let p = sem.acquire(1).await.expect("one");
    // someone removes the id (as an expiry reclaim would) and keeps the count
    let _: i64 = redis::cmd("ZREM")
        .arg("{sem:lost}:timeout")
        .arg(raw_id(&p.ids()[0]))
        .query_async(&mut obs)
        .await
        .expect("ZREM");
    within(Duration::from_secs(3), "lost", p.lost()).await;
    assert!(!p.is_held());
    assert!(matches!(p.release().await, Err(Error::Lost { .. })));
    assert_eq!(
        get_int(&mut obs, "sem:lost").await,
        0,
        "nothing added by a lost release"
    );
}

#[tokio::test]
async fn redisson_clients_share_both_semaphores() {
    let env = support::env(1000);
    let mut obs = raw(&env.server).await;
    // plain: Java takes, we wait, Java releases
    let mut java = RedissonSemaphore::new(raw(&env.server).await, "sem:j");
    assert!(java.try_set_permits(1).await);
    assert!(java.try_acquire(1).await);
    let sem = env.client.semaphore("sem:j").expect("name");
    assert!(sem.try_acquire(1).await.expect("try").is_none());
    let waiter = tokio::spawn(async move { sem.acquire(1).await.map(|p| p.count()) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(java.add(1).await, 1, "Java's release");
    let got = within(Duration::from_secs(3), "woken by Java's release", waiter)
        .await
        .expect("task")
        .expect("acquired");
    assert_eq!(got, 1);
    within(Duration::from_secs(2), "dropped permit back", async {
        while get_int(&mut obs, "sem:j").await != 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // expirable: our permit is a valid Redisson permit, and theirs ours
    let mut java = RedissonSemaphore::new(raw(&env.server).await, "sem:jx");
    let sem = env.client.permit_semaphore("sem:jx").expect("name");
    assert!(sem.try_set_permits(2).await.expect("set"));
    let ours = sem.acquire(1).await.expect("ours");
    let id = ours.ids()[0].clone();
    assert!(
        java.update_lease(now_ms(), &id, now_ms() + 60_000).await,
        "Java renews our live id"
    );
    let theirs = format!("{:032x}", 0xabcdu128);
    assert_eq!(
        java.expirable_acquire(now_ms(), now_ms() + 60_000, std::slice::from_ref(&theirs))
            .await,
        Ok(())
    );
    assert!(
        sem.try_acquire(1).await.expect("try").is_none(),
        "both taken"
    );
    assert!(java.expirable_release(now_ms(), &theirs).await);
    let again = sem.acquire(1).await.expect("Java's permit back");
    // Java releases our permit by id: ours then reports it lost
    assert!(java.expirable_release(now_ms(), &id).await);
    assert!(matches!(ours.release().await, Err(Error::Lost { .. })));
    again.release().await.expect("release");
    assert_eq!(get_int(&mut obs, "sem:jx").await, 2, "conserved");
}

#[tokio::test]
async fn a_latch_counts_down_once_per_call_and_wakes_its_waiters() {
    let env = support::env(1000);
    let latch = env.client.latch("latch:a").expect("name");
    assert!(
        latch
            .wait_timeout(Duration::from_millis(50))
            .await
            .expect("wait"),
        "no count: open"
    );
    assert!(matches!(
        latch.try_set_count(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(latch.try_set_count(2).await.expect("set"));
    assert!(!latch.try_set_count(5).await.expect("set"));
    assert_eq!(latch.count().await.expect("count"), 2);
    let other = support::client_for(&env.server, 1000);
    let waiting = other.latch("latch:a").expect("name");
    let waiter = tokio::spawn(async move { waiting.wait().await });
    assert!(!latch
        .wait_timeout(Duration::from_millis(100))
        .await
        .expect("wait"));
    assert_eq!(latch.count_down().await.expect("down"), 1);
    let mut java = RedissonLatch::new(raw(&env.server).await, "latch:a");
    assert_eq!(java.count_down().await, 0, "Java counts the last one down");
    within(Duration::from_secs(2), "woken", waiter)
        .await
        .expect("task")
        .expect("wait");
    assert_eq!(latch.count_down().await.expect("down"), 0, "stays at zero");
    let mut obs = raw(&env.server).await;
    let exists: i64 = cmd(&mut obs, &["EXISTS", "latch:a"]).await;
    assert_eq!(exists, 0);
}

/// Permits that appear without a message (a lost message, a Redis
/// client that does not publish) reach a waiter by its re-check, and a
/// latch opened without its message too: a lost message never hangs.
#[tokio::test]
async fn a_lost_message_never_hangs_a_waiter() {
    let env = support::env(1000);
    let mut obs = raw(&env.server).await;
    let sem = env.client.semaphore("sem:quiet").expect("name");
    sem.try_set_permits(1).await.expect("set");
    let held = sem.acquire(1).await.expect("one");
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire(1).await.map(|p| p.count()) })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // the permit comes back without any message
    let _: i64 = cmd(&mut obs, &["INCRBY", "sem:quiet", "1"]).await;
    let got = within(Duration::from_secs(3), "re-check", waiter)
        .await
        .expect("task")
        .expect("acquired");
    assert_eq!(got, 1);
    std::mem::forget(held);
    let latch = env.client.latch("latch:quiet").expect("name");
    latch.try_set_count(1).await.expect("set");
    let waiting = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.wait().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _: i64 = cmd(&mut obs, &["DEL", "latch:quiet"]).await;
    within(Duration::from_secs(3), "latch re-check", waiting)
        .await
        .expect("task")
        .expect("opened");
}

/// A shutdown racing guards that are dropped on other threads gives every
/// plain permit back once: whoever takes a guard's record gives it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shutdown_racing_drops_gives_each_permit_back_once() {
    let env = support::env(1000);
    let mut obs = raw(&env.server).await;
    let sem = env.client.semaphore("sem:race").expect("name");
    sem.try_set_permits(400).await.expect("set");
    let mut guards = Vec::new();
    for _ in 0..400 {
        guards.push(sem.try_acquire(1).await.expect("try").expect("free"));
    }
    assert_eq!(get_int(&mut obs, "sem:race").await, 0);
    let mut chunks: Vec<Vec<_>> = Vec::new();
    while !guards.is_empty() {
        let rest = guards.split_off(guards.len().saturating_sub(50));
        chunks.push(rest);
    }
    let droppers: Vec<_> = chunks
        .into_iter()
        .map(|chunk| std::thread::spawn(move || drop(chunk)))
        .collect();
    let report = env.client.shutdown(Duration::from_secs(10)).await;
    for d in droppers {
        d.join().expect("dropper");
    }
    assert!(report.is_complete(), "{report:?}");
    within(Duration::from_secs(5), "settled", async {
        while get_int(&mut obs, "sem:race").await < 400 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        get_int(&mut obs, "sem:race").await,
        400,
        "no permit given back twice"
    );
}

/// Acquisitions cancelled while their first attempt is in flight leave no
/// place in the line behind them: a free permit goes to the next asker.
#[tokio::test]
async fn cancelled_acquisitions_leave_the_line() {
    let env = support::env(1000);
    let mut obs = raw(&env.server).await;
    let sem = env.client.permit_semaphore("sem:cancel").expect("name");
    sem.try_set_permits(1).await.expect("set");
    let held = sem.acquire(1).await.expect("one");
    for i in 0..40u64 {
        let cut = Duration::from_micros(i * 50);
        let _ = tokio::time::timeout(cut, sem.acquire(1)).await;
    }
    held.release().await.expect("release");
    let other = support::client_for(&env.server, 1000);
    let p = other
        .permit_semaphore("sem:cancel")
        .expect("name")
        .acquire_timeout(1, Duration::from_millis(1500))
        .await
        .expect("the free permit, not blocked by dead places");
    p.release().await.expect("release");
    within(Duration::from_secs(3), "line empty", async {
        while zcard(&mut obs, "lockcore_sem_line:{sem:cancel}").await > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(get_int(&mut obs, "sem:cancel").await, 1, "conserved");
}

#[tokio::test]
async fn leases_that_leave_no_time_are_refused() {
    let env = support::env(1000);
    let sem = env.client.permit_semaphore("sem:lease").expect("name");
    sem.try_set_permits(1).await.expect("set");
    for lease in [Duration::from_millis(2), Duration::MAX] {
        let err = sem
            .acquire_with(1, AcquireOptions::new().no_wait().lease(lease))
            .await
            .expect_err("refused");
        assert!(
            matches!(err, Error::InvalidArgument(_)),
            "{lease:?}: {err:?}"
        );
    }
    assert!(matches!(
        sem.try_set_permits(u64::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        sem.available().await.expect("available"),
        1,
        "nothing taken"
    );
}

/// Only positive counts are published (Redisson's listener refuses a
/// negative one): a release that leaves the counter at or below zero
/// (Java took permits away) publishes nothing.
#[tokio::test]
async fn no_count_at_or_below_zero_is_published() {
    use futures_util::StreamExt;
    let env = support::env(1000);
    let sem = env.client.permit_semaphore("sem:neg").expect("name");
    sem.try_set_permits(1).await.expect("set");
    let p = sem.acquire(1).await.expect("one");
    let mut java = RedissonSemaphore::new(raw(&env.server).await, "sem:neg");
    assert_eq!(java.add(-2).await, -2);
    let client = redis::Client::open(env.server.url()).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe("redisson_sc:{sem:neg}")
        .await
        .expect("subscribe");
    p.release().await.expect("release");
    assert_eq!(java.add(3).await, 2);
    let mut stream = pubsub.on_message();
    let first = within(Duration::from_secs(2), "message", stream.next())
        .await
        .expect("message");
    assert_eq!(
        first.get_payload_bytes(),
        b"2",
        "the release's -1 was not published"
    );
}
