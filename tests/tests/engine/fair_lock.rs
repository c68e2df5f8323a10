//! The fair lock (`LockClient::fair_lock`) against a real redis-server,
//! beside a client speaking Redisson's `RFairLock` protocol
//! (`support/redisson_fair.rs`) on the same names: Redisson's layout and
//! deadlines exactly, one queue served in arrival order whoever waits,
//! waiters that give up or go away leaving it, and `try_acquire` never
//! joining it. Redis is read with raw connections, never through the
//! library.

use std::time::Duration;

use lock_core::LockClient;
use lock_tests::RedisServer;

use crate::support::redisson_fair::{now_ms, RedissonFairLock};
use crate::support::{self, cmd, eventually, raw, within, Inside};

/// A client whose fair locks use the allowance `allowance_ms`.
fn fair_client(server: &RedisServer, allowance_ms: u64) -> LockClient {
    LockClient::builder(server.url())
        .watchdog_timeout(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .fair_lock_wait_timeout(Duration::from_millis(allowance_ms))
        .build()
        .expect("client")
}

async fn queue_of(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<String> {
    cmd(
        conn,
        &[
            "LRANGE",
            &format!("redisson_lock_queue:{{{name}}}"),
            "0",
            "-1",
        ],
    )
    .await
}

async fn deadline_of(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    owner: &str,
) -> Option<i64> {
    let score: Option<f64> = cmd(
        conn,
        &[
            "ZSCORE",
            &format!("redisson_lock_timeout:{{{name}}}"),
            owner,
        ],
    )
    .await;
    score.map(|s| s as i64)
}

/// Waits until the queue of `name` has `n` entries; returns them.
async fn queue_reaches(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    n: usize,
) -> Vec<String> {
    let mut last = Vec::new();
    for _ in 0..400 {
        last = queue_of(conn, name).await;
        if last.len() >= n {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("queue of {name} never reached {n}: {last:?}");
}

#[tokio::test]
async fn the_queue_and_its_deadlines_are_redissons_and_both_clients_wake_each_other() {
    let server = support::server();
    let allowance = 5_000;
    let client = fair_client(&server, allowance as u64);
    let name = "fair:layout";
    let lock = client.fair_lock(name).expect("lock");
    assert!(lock.is_fair());
    let mut conn = raw(&server).await;
    let mut java = RedissonFairLock::new(raw(&server).await, &server.url(), name, allowance);

    // ours holds; a Redisson waiter queues, then one of ours
    let held = lock.acquire().await.expect("acquire");
    let hash: Vec<String> = cmd(&mut conn, &["HKEYS", name]).await;
    assert_eq!(
        hash,
        vec![held.owner_id().to_string()],
        "RLock's hash, our owner id"
    );
    let pttl: i64 = cmd(&mut conn, &["PTTL", name]).await;
    let before = now_ms();
    let waited = java.attempt("java-uuid:1", 10_000).await.expect("queued");
    assert!(
        (0..=pttl).contains(&waited),
        "told the holder's time: {waited} of {pttl}"
    );
    let java_deadline = deadline_of(&mut conn, name, "java-uuid:1")
        .await
        .expect("deadline");
    assert!(
        (before + waited + allowance..=now_ms() + waited + allowance).contains(&java_deadline),
        "first deadline: now + holder's PTTL + allowance ({java_deadline})"
    );
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(10)).await })
    };
    let queue = queue_reaches(&mut conn, name, 2).await;
    assert_eq!(queue[0], "java-uuid:1");
    let ours = queue[1].clone();
    assert!(
        ours.starts_with(client.client_id()),
        "our waiter's owner id: {ours}"
    );
    assert_eq!(
        deadline_of(&mut conn, name, &ours).await,
        Some(java_deadline + allowance),
        "behind a waiter: its deadline plus the allowance"
    );
    let listed = lock.fair_queue().await.expect("fair_queue");
    assert_eq!(
        listed.iter().map(|w| w.owner.as_str()).collect::<Vec<_>>(),
        vec!["java-uuid:1", ours.as_str()]
    );

    // our release tells the Redisson waiter on its own channel
    let client_r = redis::Client::open(server.url()).expect("url");
    let mut pubsub = client_r.get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe(java.channel("java-uuid:1"))
        .await
        .expect("subscribe");
    held.release().await.expect("release");
    {
        use futures_util::StreamExt;
        let mut messages = pubsub.on_message();
        let message = within(
            Duration::from_secs(2),
            "the head's message",
            messages.next(),
        )
        .await
        .expect("a message");
        assert_eq!(message.get_payload_bytes(), b"0");
    }
    assert_eq!(
        java.attempt("java-uuid:1", 10_000).await,
        None,
        "the head's turn"
    );
    assert_eq!(
        deadline_of(&mut conn, name, &ours).await,
        Some(java_deadline),
        "a grant takes one allowance off every deadline left"
    );
    // the Redisson holder's unlock wakes ours on its channel, well before
    // its 1 s re-check
    let released_at = std::time::Instant::now();
    assert_eq!(java.unlock("java-uuid:1", 10_000).await, Some(1));
    let guard = within(Duration::from_secs(3), "our waiter", waiter)
        .await
        .expect("join")
        .expect("acquired");
    assert!(
        released_at.elapsed() < Duration::from_millis(800),
        "woken by the message, not the re-check: {:?}",
        released_at.elapsed()
    );
    assert_eq!(
        guard.owner_id(),
        ours,
        "the waiter holds under its queued id"
    );
    assert!(queue_of(&mut conn, name).await.is_empty());
    let left: i64 = cmd(
        &mut conn,
        &["ZCARD", &format!("redisson_lock_timeout:{{{name}}}")],
    )
    .await;
    assert_eq!(left, 0, "no deadline left behind");
    guard.release().await.expect("release");
    let exists: i64 = cmd(&mut conn, &["EXISTS", name]).await;
    assert_eq!(exists, 0);
}

/// Who got the lock in which order, and how many were inside at once,
/// recorded in Redis by the holders themselves.
async fn record_turn(conn: &mut redis::aio::MultiplexedConnection, who: &str) {
    let _: i64 = cmd(conn, &["RPUSH", "observer:fair:order", who]).await;
}

#[tokio::test]
async fn a_mixed_queue_is_served_in_arrival_order() {
    let server = support::server();
    let allowance = 2_000;
    let name = "fair:order";
    let a = fair_client(&server, allowance as u64);
    let b = fair_client(&server, allowance as u64);
    let mut conn = raw(&server).await;
    let inside = Inside::new(&server, name).await;
    let first = a
        .fair_lock(name)
        .expect("lock")
        .acquire()
        .await
        .expect("first");

    // 12 waiters arrive one after another: Redisson's, ours on two clients
    let mut tasks = Vec::new();
    let mut arrivals = Vec::new();
    for i in 0..12usize {
        let who = format!("w{i:02}");
        let inside = inside.clone();
        let mut observer = raw(&server).await;
        let task = match i % 3 {
            0 => {
                let mut java =
                    RedissonFairLock::new(raw(&server).await, &server.url(), name, allowance);
                let owner = format!("java-{i}:1");
                arrivals.push(owner.clone());
                tokio::spawn(async move {
                    assert!(
                        java.lock_within(&owner, 10_000, Duration::from_secs(20))
                            .await
                    );
                    let mut inside = inside;
                    assert!(inside.enter().await, "{who}: two inside");
                    record_turn(&mut observer, &who).await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    inside.leave().await;
                    assert_eq!(java.unlock(&owner, 10_000).await, Some(1));
                })
            }
            k => {
                let client = if k == 1 { a.clone() } else { b.clone() };
                arrivals.push(format!("ours-{i}"));
                tokio::spawn(async move {
                    let lock = client.fair_lock(name).expect("lock");
                    let guard = lock
                        .acquire_timeout(Duration::from_secs(20))
                        .await
                        .expect("turn");
                    let mut inside = inside;
                    assert!(inside.enter().await, "{who}: two inside");
                    record_turn(&mut observer, &who).await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    inside.leave().await;
                    guard.release().await.expect("release");
                })
            }
        };
        tasks.push(task);
        queue_reaches(&mut conn, name, i + 1).await;
    }
    let queue = queue_of(&mut conn, name).await;
    for (i, owner) in queue.iter().enumerate() {
        if i % 3 == 0 {
            assert_eq!(owner, &arrivals[i], "Redisson waiter {i} in its place");
        } else {
            let client = if i % 3 == 1 { &a } else { &b };
            assert!(
                owner.starts_with(client.client_id()),
                "waiter {i} is ours: {owner}"
            );
        }
    }
    first.release().await.expect("release");
    for task in tasks {
        within(Duration::from_secs(30), "a waiter", task)
            .await
            .expect("waiter");
    }
    let order: Vec<String> = cmd(&mut conn, &["LRANGE", "observer:fair:order", "0", "-1"]).await;
    let expected: Vec<String> = (0..12).map(|i| format!("w{i:02}")).collect();
    assert_eq!(order, expected, "served in arrival order");
    let mut inside = inside;
    assert_eq!(inside.violations().await, 0);
    assert!(queue_of(&mut conn, name).await.is_empty());
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_and_those_behind_move_up() {
    let server = support::server();
    let allowance = 4_000;
    let name = "fair:give-up";
    let client = fair_client(&server, allowance as u64);
    let mut conn = raw(&server).await;
    let mut java = RedissonFairLock::new(raw(&server).await, &server.url(), name, allowance);
    let lock = client.fair_lock(name).expect("lock");
    let held = lock.acquire().await.expect("held");
    // ours queues first (and gives up after 300 ms), Redisson's behind it
    let giving_up = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire_timeout(Duration::from_millis(300)).await })
    };
    let queue = queue_reaches(&mut conn, name, 1).await;
    let ours = queue[0].clone();
    assert!(java.attempt("java:7", 10_000).await.is_some());
    let behind = java.deadline("java:7").await.expect("queued");
    let err = giving_up.await.expect("join").expect_err("timed out");
    assert!(err.is_wait_timeout(), "{err}");
    assert_eq!(
        queue_of(&mut conn, name).await,
        vec!["java:7".to_string()],
        "ours left"
    );
    assert_eq!(deadline_of(&mut conn, name, &ours).await, None);
    assert_eq!(
        java.deadline("java:7").await,
        Some(behind - allowance),
        "the waiter behind moved one place up"
    );
    // a dropped acquire leaves too
    let dropped = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire().await })
    };
    queue_reaches(&mut conn, name, 2).await;
    dropped.abort();
    let left = eventually(Duration::from_secs(2), || {
        let mut conn = conn.clone();
        async move { queue_of(&mut conn, name).await == vec!["java:7".to_string()] }
    })
    .await;
    assert!(left.is_some(), "a dropped waiter leaves the queue");
    held.release().await.expect("release");
    assert!(
        java.lock_within("java:7", 10_000, Duration::from_secs(3))
            .await
    );
    assert_eq!(java.unlock("java:7", 10_000).await, Some(1));
}

#[tokio::test]
async fn try_acquire_never_queues_and_respects_the_queue() {
    let server = support::server();
    let allowance = 5_000;
    let name = "fair:try";
    let client = fair_client(&server, allowance as u64);
    let mut conn = raw(&server).await;
    let mut java = RedissonFairLock::new(raw(&server).await, &server.url(), name, allowance);
    let lock = client.fair_lock(name).expect("lock");
    assert!(java.try_once("java:1", 10_000).await);
    assert!(
        lock.try_acquire().await.expect("try").is_none(),
        "held by Redisson's"
    );
    assert!(
        queue_of(&mut conn, name).await.is_empty(),
        "a try never queues"
    );
    assert!(
        java.attempt("java:2", 10_000).await.is_some(),
        "java:2 waits"
    );
    assert_eq!(java.unlock("java:1", 10_000).await, Some(1));
    // free, but java:2 is the head: a try must not jump the queue
    assert!(
        lock.try_acquire().await.expect("try").is_none(),
        "reserved for the head"
    );
    assert!(lock
        .acquire_timeout(Duration::from_millis(100))
        .await
        .is_err());
    assert_eq!(queue_of(&mut conn, name).await, vec!["java:2".to_string()]);
    assert_eq!(
        java.attempt("java:2", 10_000).await,
        None,
        "the head's turn"
    );
    assert_eq!(java.unlock("java:2", 10_000).await, Some(1));
    let guard = lock
        .try_acquire()
        .await
        .expect("try")
        .expect("free, nobody queued");
    // a plain lock of the same name is the same hash: excluded, no queue
    let plain = client.lock(name).expect("plain");
    assert!(plain.try_acquire().await.expect("try").is_none());
    guard.release().await.expect("release");
}

#[tokio::test]
async fn a_fair_hold_re_enters_in_its_context_and_counts_in_redisons_hash() {
    let server = support::server();
    let client = fair_client(&server, 5_000);
    let name = "fair:reentry";
    let lock = client.fair_lock(name).expect("lock");
    let mut conn = raw(&server).await;
    let ctx = lock_core::LockContext::new();
    let (outer, inner) = ctx
        .clone()
        .scope(async {
            let outer = lock.acquire().await.expect("outer");
            let inner = lock
                .acquire_timeout(Duration::from_millis(200))
                .await
                .expect("re-entered, not queued behind itself");
            (outer, inner)
        })
        .await;
    let count: String = cmd(&mut conn, &["HGET", name, outer.owner_id()]).await;
    assert_eq!(count, "2", "Redisson's re-entry count");
    assert_eq!(inner.fencing_token(), outer.fencing_token(), "one hold");
    assert!(
        queue_of(&mut conn, name).await.is_empty(),
        "a re-entry never queues"
    );
    // another context queues behind it
    let other = lock_core::LockContext::new()
        .scope(lock.acquire_timeout(Duration::from_millis(150)))
        .await;
    assert!(other.expect_err("busy").is_wait_timeout());
    inner.release().await.expect("inner");
    let count: String = cmd(&mut conn, &["HGET", name, outer.owner_id()]).await;
    assert_eq!(count, "1");
    outer.release().await.expect("outer");
    let exists: i64 = cmd(&mut conn, &["EXISTS", name]).await;
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn shutdown_takes_waiters_out_of_the_queue_and_gives_the_lock_back() {
    let server = support::server();
    let holder = fair_client(&server, 5_000);
    let waiting = fair_client(&server, 5_000);
    let name = "fair:shutdown";
    let mut conn = raw(&server).await;
    let held = holder
        .fair_lock(name)
        .expect("lock")
        .acquire()
        .await
        .expect("held");
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let lock = waiting.fair_lock(name).expect("lock");
        waiters.push(tokio::spawn(async move { lock.acquire().await }));
    }
    queue_reaches(&mut conn, name, 3).await;
    let _report = within(
        Duration::from_secs(10),
        "shutdown",
        waiting.shutdown(Duration::from_secs(5)),
    )
    .await;
    for waiter in waiters {
        let err = waiter.await.expect("join").expect_err("shut down");
        assert!(matches!(err, lock_core::Error::Closed), "{err}");
    }
    assert!(
        queue_of(&mut conn, name).await.is_empty(),
        "every waiter left"
    );
    let marks: i64 = cmd(
        &mut conn,
        &["ZCARD", &format!("lockcore_fair_alive:{{{name}}}")],
    )
    .await;
    assert_eq!(marks, 0, "no liveness mark left");
    // the holder's own shutdown releases its hold
    drop(held);
    let _report = within(
        Duration::from_secs(10),
        "shutdown",
        holder.shutdown(Duration::from_secs(5)),
    )
    .await;
    let exists: i64 = cmd(&mut conn, &["EXISTS", name]).await;
    assert_eq!(exists, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_memory_server_runs_the_fair_lock_in_arrival_order() {
    let server = lock_core::MemoryServer::new();
    let client = LockClient::builder(server.url())
        .watchdog_timeout(Duration::from_secs(2))
        .build()
        .expect("client");
    let name = "fair:memory";
    let lock = client.fair_lock(name).expect("lock");
    let first = lock.acquire().await.expect("first");
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6usize {
        let (waiter, order) = (lock.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let guard = waiter
                .acquire_timeout(Duration::from_secs(10))
                .await
                .expect("turn");
            order.lock().expect("order").push(i);
            guard.release().await.expect("release");
        }));
        // each arrives after the last one queued
        for _ in 0..400 {
            if lock.fair_queue().await.expect("queue").len() > i {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    assert_eq!(lock.fair_queue().await.expect("queue").len(), 6);
    first.release().await.expect("release");
    for task in tasks {
        within(Duration::from_secs(15), "a waiter", task)
            .await
            .expect("waiter");
    }
    assert_eq!(*order.lock().expect("order"), vec![0, 1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn the_head_waits_for_its_message_without_spinning_through_a_long_hold() {
    // review: the head's wait was the holder's time at its arrival minus
    // the time since; past it, the waiter re-asked every millisecond
    let server = support::server();
    let client = LockClient::builder(server.url())
        .watchdog_timeout(Duration::from_millis(600))
        .fair_lock_wait_timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let name = "fair:no-spin";
    let lock = client.fair_lock(name).expect("lock");
    let held = lock.acquire().await.expect("held");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire().await })
    };
    let mut conn = raw(&server).await;
    queue_reaches(&mut conn, name, 1).await;
    let before = support::script_calls(&server);
    // held 5 leases long (renewed by the watchdog every 200 ms)
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls = support::script_calls(&server) - before;
    // renewals (~15) and a re-check at most every 600 ms or less: tens, not thousands
    assert!(calls < 80, "{calls} script calls in 3 s of waiting");
    held.release().await.expect("release");
    let guard = within(Duration::from_secs(2), "the head", waiter)
        .await
        .expect("join")
        .expect("acquired");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn siblings_of_one_context_joined_re_enter_instead_of_waiting_for_each_other() {
    let server = support::server();
    let client = fair_client(&server, 5_000);
    let name = "fair:join";
    let lock = client.fair_lock(name).expect("lock");
    let mut conn = raw(&server).await;
    let (a, b) = within(
        Duration::from_secs(5),
        "both siblings",
        lock_core::LockContext::new().scope(async {
            tokio::join!(
                lock.acquire_timeout(Duration::from_secs(4)),
                lock.acquire_timeout(Duration::from_secs(4))
            )
        }),
    )
    .await;
    let (a, b) = (a.expect("first"), b.expect("second re-enters"));
    assert_eq!(a.owner_id(), b.owner_id(), "one hold");
    let count: String = cmd(&mut conn, &["HGET", name, a.owner_id()]).await;
    assert_eq!(count, "2");
    assert!(
        queue_of(&mut conn, name).await.is_empty(),
        "the sibling left the queue"
    );
    a.release().await.expect("release");
    b.release().await.expect("release");
}

/// Runs `script` (a fair script's source) raw on `conn`.
async fn raw_script(
    conn: &mut redis::aio::MultiplexedConnection,
    source: &str,
    keys: &[&str],
    args: &[&str],
) -> redis::Value {
    let script = redis::Script::new(source);
    let mut invocation = script.prepare_invoke();
    for k in keys {
        invocation.key(*k);
    }
    for a in args {
        invocation.arg(*a);
    }
    invocation.invoke_async(conn).await.expect("script")
}

#[tokio::test]
async fn queue_rules_the_review_asked_for_hold_on_a_real_server() {
    let server = support::server();
    let mut conn = raw(&server).await;
    let acquire = include_str!("../../../lock-core/src/protocol/fair_acquire.lua");
    let cancel = include_str!("../../../lock-core/src/protocol/fair_cancel.lua");
    let name = "fair:rules";
    let (queue, timeouts, alive) = (
        format!("redisson_lock_queue:{{{name}}}"),
        format!("redisson_lock_timeout:{{{name}}}"),
        format!("lockcore_fair_alive:{{{name}}}"),
    );
    let (token, latch) = (
        format!("redisson_lock_token:{{{name}}}"),
        format!("redisson_unlock_latch:{{{name}}}:x"),
    );
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let keys = [name, &token, &latch, &queue, &timeouts, &alive, &channel];
    let now = now_ms();
    let far = (now + 3_600_000).to_string();
    // 1. a live mark is read on the server's clock: a caller whose clock
    //    runs 10 s ahead does not take a live waiter for dead
    let _: () = cmd(&mut conn, &["RPUSH", &queue, "c1:1", "java:2"]).await;
    let _: () = cmd(
        &mut conn,
        &[
            "ZADD",
            &timeouts,
            &(now - 1_000).to_string(),
            "c1:1",
            &far,
            "java:2",
        ],
    )
    .await;
    let _: () = cmd(
        &mut conn,
        &["ZADD", &alive, &(now + 2_000).to_string(), "c1:1"],
    )
    .await;
    let ahead = (now + 10_000).to_string();
    let _ = raw_script(
        &mut conn,
        acquire,
        &keys,
        &[
            "30000", "c9:1", "once", "60000", "1000", "5000", &ahead, "3000", "0", "publish",
        ],
    )
    .await;
    assert_eq!(
        queue_of(&mut conn, name).await,
        ["c1:1", "java:2"],
        "c1 is alive"
    );
    // 2. c1, overdue but alive, is granted: java:2 keeps its deadline
    //    (Redisson's clients would have dropped c1 without moving anyone up)
    let latch_c1 = format!("redisson_unlock_latch:{{{name}}}:c1:1");
    let keys_c1 = [name, &token, &latch_c1, &queue, &timeouts, &alive, &channel];
    let now_s = now_ms().to_string();
    let granted = raw_script(
        &mut conn,
        acquire,
        &keys_c1,
        &[
            "30000", "c1:1", "wait", "60000", "1000", "5000", &now_s, "3000", "0", "publish",
        ],
    )
    .await;
    assert!(
        matches!(&granted, redis::Value::Array(v) if v.first() == Some(&redis::Value::Int(1))),
        "{granted:?}"
    );
    assert_eq!(
        deadline_of(&mut conn, name, "java:2").await,
        Some(now + 3_600_000)
    );
    // 3. a waiter leaving a free lock tells the first LIVE waiter: a dead
    //    lock-core head (lapsed mark) leaves first
    let _: i64 = cmd(&mut conn, &["DEL", name]).await;
    let _: () = cmd(&mut conn, &["DEL", &queue, &timeouts, &alive]).await;
    let _: () = cmd(&mut conn, &["RPUSH", &queue, "c1:2", "c3:1", "java:4"]).await;
    let _: () = cmd(
        &mut conn,
        &[
            "ZADD", &timeouts, &far, "c1:2", &far, "c3:1", &far, "java:4",
        ],
    )
    .await;
    let _: () = cmd(
        &mut conn,
        &[
            "ZADD",
            &alive,
            &(now + 60_000).to_string(),
            "c1:2",
            "1",
            "c3:1",
        ],
    )
    .await;
    let client_r = redis::Client::open(server.url()).expect("url");
    let mut pubsub = client_r.get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe(format!("redisson_lock__channel:{{{name}}}:java:4"))
        .await
        .expect("subscribe");
    let latch_leave = format!("redisson_unlock_latch:{{{name}}}:c1:2");
    let _ = raw_script(
        &mut conn,
        cancel,
        &[name, &channel, &latch_leave, &queue, &timeouts, &alive],
        &[
            "c1:2",
            "new",
            "0",
            "1000",
            "publish",
            "5000",
            &now_ms().to_string(),
        ],
    )
    .await;
    assert_eq!(
        queue_of(&mut conn, name).await,
        ["java:4"],
        "the dead head left too"
    );
    use futures_util::StreamExt;
    let mut messages = pubsub.on_message();
    let told = within(Duration::from_secs(2), "java:4 told", messages.next()).await;
    assert!(told.is_some());
    // 4. the lock is free and java:4 is the head: an attempt by another
    //    ('once' or 'wait') is refused and tells java:4 again (its message
    //    may have been lost, or it was just made head by a pruning)
    for (owner, mode) in [("c9:2", "once"), ("c8:1", "wait")] {
        let latch_o = format!("redisson_unlock_latch:{{{name}}}:{owner}");
        let keys_o = [name, &token, &latch_o, &queue, &timeouts, &alive, &channel];
        let refused = raw_script(
            &mut conn,
            acquire,
            &keys_o,
            &[
                "30000",
                owner,
                mode,
                "60000",
                "1000",
                "5000",
                &now_ms().to_string(),
                "3000",
                "0",
                "publish",
            ],
        )
        .await;
        assert!(
            matches!(&refused, redis::Value::Array(v) if v.first() == Some(&redis::Value::Int(0))),
            "{owner} refused: {refused:?}"
        );
        let told = within(
            Duration::from_secs(2),
            "java:4 told of the free lock",
            messages.next(),
        )
        .await;
        assert!(told.is_some(), "{owner}'s attempt told java:4");
    }
    assert_eq!(queue_of(&mut conn, name).await, ["java:4", "c8:1"]);
}
