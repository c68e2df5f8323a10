//! One identity per hold, re-entry for nested calls only, Redisson's naming
//! rule and fencing tokens, against real redis-servers. Safety is judged by
//! an independent observer (`support::Inside`: a counter in Redis written
//! by the sections themselves over their own connection) and by reading
//! the lock hash with a raw connection.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{self, cmd, env, raw, within, Inside};
use lock_core::{distributed_lock, in_context, Error, LockClient, LockContext};
use tokio::sync::Mutex;

// ------------------------------------------------------------ the observer

#[tokio::test]
async fn the_observer_catches_a_planted_violation() {
    let e = env(30_000);
    let mut a = Inside::new(&e.server, "planted").await;
    let mut b = a.clone();
    // Two sections that skip the lock and overlap: the observer must see it.
    assert!(a.enter().await);
    assert!(!b.enter().await, "the second one inside is a violation");
    b.leave().await;
    a.leave().await;
    assert_eq!(a.violations().await, 1);
    // ...and sections that do not overlap are fine.
    assert!(a.enter().await);
    a.leave().await;
    assert_eq!(a.violations().await, 1);
}

// ------------------------------------------- stale guards and newer holds

/// The scenario of the issue: the lock of a context holder is taken away
/// behind its back (force-unlock); the context drops its stale guard and
/// re-acquires while another client contends. The stale guard's release
/// must never delete the newer hold.
#[tokio::test]
async fn a_stale_guard_of_a_context_never_releases_its_newer_hold() {
    let e = env(30_000);
    let other = support::client_for(&e.server, 30_000);
    let name = "stale-ctx";
    let lock = e.client.lock(name).expect("name");
    let observer = Inside::new(&e.server, name).await;
    let rounds = 200;
    let stop = Arc::new(tokio::sync::Notify::new());

    // Another client contends all the time.
    let contender = {
        let lock = other.lock(name).expect("name");
        let mut inside = observer.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut sections = 0u32;
            for _ in 0..100_000 {
                let guard = tokio::select! {
                    g = lock.acquire_timeout(Duration::from_secs(5)) => g.expect("contender acquires"),
                    _ = stop.notified() => break,
                };
                inside.enter().await;
                tokio::time::sleep(Duration::from_micros(300)).await;
                inside.leave().await;
                let _ = guard.release().await;
                sections += 1;
                // A breath between sections: this suite is about safety;
                // fairness under a tight loop is another suite's subject.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            sections
        })
    };

    let ctx = LockContext::new();
    let mut inside = observer.clone();
    let mut raw_conn = raw(&e.server).await;
    for round in 0..rounds {
        ctx.clone()
            .scope(async {
                let stale = within(Duration::from_secs(10), "first acquire", lock.acquire())
                    .await
                    .expect("acquire");
                // Taken away behind the holder's back.
                if round % 2 == 0 {
                    lock.force_unlock().await.expect("force unlock");
                } else {
                    let _: i64 = cmd(&mut raw_conn, &["DEL", name]).await;
                }
                drop(stale); // released in the background, as its own hold
                let fresh =
                    match tokio::time::timeout(Duration::from_secs(10), lock.acquire()).await {
                        Ok(g) => g.expect("re-acquire"),
                        Err(_) => {
                            let f: HashMap<String, String> =
                                cmd(&mut raw_conn, &["HGETALL", name]).await;
                            let p: i64 = cmd(&mut raw_conn, &["PTTL", name]).await;
                            panic!(
                                "round {round}: re-acquire hangs; redis: {f:?} pttl {p}; A {} B {}",
                                e.client.client_id(),
                                other.client_id()
                            );
                        }
                    };
                inside.enter().await;
                tokio::time::sleep(Duration::from_micros(500)).await;
                assert!(fresh.is_held());
                inside.leave().await;
                fresh.release().await.expect("fresh release");
            })
            .await;
    }
    stop.notify_one();
    let sections = within(Duration::from_secs(10), "contender stops", contender)
        .await
        .expect("contender task");
    let mut check = observer.clone();
    assert_eq!(
        check.violations().await,
        0,
        "two holders at once ({sections} contender sections)"
    );
    assert!(sections > 0, "the other client took part");
}

#[tokio::test]
async fn after_a_loss_the_old_guard_reports_lost_and_the_new_hold_survives() {
    for how in ["force_unlock", "DEL"] {
        let e = env(30_000);
        let lock = e.client.lock("survive").expect("name");
        let mut conn = raw(&e.server).await;
        let ctx = LockContext::new();
        let (old, new) = ctx
            .scope(async {
                let old = lock.acquire().await.expect("old");
                match how {
                    "force_unlock" => assert!(lock.force_unlock().await.expect("force")),
                    _ => {
                        let _: i64 = cmd(&mut conn, &["DEL", "survive"]).await;
                    }
                }
                // Re-acquired in the same context while the old guard lives:
                // the old hold is gone, so this is a new hold, not a re-entry.
                let new = lock.acquire().await.expect("new");
                (old, new)
            })
            .await;
        assert_ne!(old.owner_id(), new.owner_id(), "{how}: a new identity");
        assert!(new.fencing_token() > old.fencing_token(), "{how}");
        let err = old.release().await.expect_err("old guard");
        assert!(matches!(err, Error::Lost { .. }), "{how}: {err:?}");
        let fields: HashMap<String, String> = cmd(&mut conn, &["HGETALL", "survive"]).await;
        assert_eq!(
            fields,
            HashMap::from([(new.owner_id().to_string(), "1".to_string())]),
            "{how}: the new hold is untouched"
        );
        assert!(new.is_held());
        new.release().await.expect("new release");
        let exists: i64 = cmd(&mut conn, &["EXISTS", "survive"]).await;
        assert_eq!(exists, 0);
    }
}

#[tokio::test]
async fn a_short_fixed_lease_reentry_inside_a_longer_hold_gives_back_its_count() {
    let e = env(600); // the outer hold is renewed every 200 ms
    let lock = e.client.lock("short-inner").expect("name");
    let mut conn = raw(&e.server).await;
    in_context(async {
        let outer = lock.acquire().await.expect("outer");
        // released explicitly, after its own lease would have run out
        let inner = lock
            .acquire_with_lease(Duration::from_millis(100))
            .await
            .expect("inner");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            inner.is_held(),
            "the hold is alive: renewed by the outer guard"
        );
        inner
            .release()
            .await
            .expect("inner release gives back its count");
        let count: Option<u32> = cmd(&mut conn, &["HGET", "short-inner", outer.owner_id()]).await;
        assert_eq!(count, Some(1));
        // dropped, after its own lease would have run out
        let inner = lock
            .acquire_with_lease(Duration::from_millis(100))
            .await
            .expect("inner 2");
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(inner);
        let back = support::eventually(Duration::from_secs(2), || {
            let mut conn = conn.clone();
            let owner = outer.owner_id().to_string();
            async move {
                let count: Option<u32> = cmd(&mut conn, &["HGET", "short-inner", &owner]).await;
                count == Some(1)
            }
        })
        .await;
        assert!(back.is_some(), "a dropped re-entry gives back its count");
        outer.release().await.expect("outer");
    })
    .await;
    let exists: i64 = cmd(&mut conn, &["EXISTS", "short-inner"]).await;
    assert_eq!(exists, 0, "no count left behind");
}

// ------------------------------------------------ re-entry: nested calls only

#[distributed_lock(key = "sib:{id}", client = client)]
async fn section(client: &LockClient, id: u32, inside: &Mutex<Inside>) -> Result<(), Error> {
    let entered = inside.lock().await.enter().await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    inside.lock().await.leave().await;
    assert!(entered, "two sections of sib:{id} at once");
    Ok(())
}

#[distributed_lock(key = "sib:{id}", client = client)]
async fn outer_section(client: &LockClient, id: u32, inside: &Mutex<Inside>) -> Result<(), Error> {
    // Nested: re-enters instead of waiting for itself.
    section(client, id, inside).await
}

#[tokio::test]
async fn sibling_macro_calls_in_one_task_exclude_each_other() {
    let e = env(30_000);
    let inside = Mutex::new(Inside::new(&e.server, "sib").await);
    let c = &e.client;
    // Without a context, inside an explicit context, and inside another
    // locked section (a different key): siblings never share a hold.
    let (a, b) = tokio::join!(section(c, 1, &inside), section(c, 1, &inside));
    a.expect("a");
    b.expect("b");
    in_context(async {
        let (a, b) = tokio::join!(section(c, 1, &inside), section(c, 1, &inside));
        a.expect("a in context");
        b.expect("b in context");
    })
    .await;
    let lock = c.lock("other-key").expect("name");
    in_context(async {
        let g = lock.acquire().await.expect("other key");
        let runs = futures_util::future::join_all((0..4).map(|_| section(c, 1, &inside))).await;
        for r in runs {
            r.expect("join_all section");
        }
        g.release().await.expect("release");
    })
    .await;
    assert_eq!(inside.lock().await.violations().await, 0);
}

#[tokio::test]
async fn a_nested_macro_call_re_enters() {
    let e = env(30_000);
    let inside = Mutex::new(Inside::new(&e.server, "nested").await);
    within(
        Duration::from_secs(2),
        "nested call re-enters",
        outer_section(&e.client, 2, &inside),
    )
    .await
    .expect("nested");
    // Nested inside a layer-like section opened by hand, too.
    let lock = e.client.lock("sib:3").expect("name");
    let ctx = LockContext::new();
    let guard = ctx
        .clone()
        .scope(lock.acquire_with(lock_core::AcquireOptions::new().for_section()))
        .await
        .expect("section");
    within(
        Duration::from_secs(2),
        "call nested in a section re-enters",
        ctx.enter(&guard).scope(section(&e.client, 3, &inside)),
    )
    .await
    .expect("nested in section");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn sibling_requests_through_the_layer_in_one_task_exclude_each_other() {
    use tower::{service_fn, ServiceBuilder, ServiceExt};
    let e = env(30_000);
    let inside = Arc::new(Mutex::new(Inside::new(&e.server, "layer-sib").await));
    let observer = inside.clone();
    let svc = ServiceBuilder::new()
        .layer(
            lock_tower::LockLayer::generic(e.client.clone(), |key: &String| Some(key.clone()))
                .wait(Duration::from_secs(5)),
        )
        .service(service_fn(move |_key: String| {
            let inside = observer.clone();
            async move {
                let entered = inside.lock().await.enter().await;
                tokio::time::sleep(Duration::from_millis(30)).await;
                inside.lock().await.leave().await;
                Ok::<bool, std::convert::Infallible>(entered)
            }
        }));
    // Two requests driven from one task, inside one lock context (as a
    // handler calling a layered client twice would): never both inside.
    in_context(async {
        let (a, b) = within(Duration::from_secs(5), "joined requests", async {
            tokio::join!(
                svc.clone().oneshot("acct:1".to_string()),
                svc.clone().oneshot("acct:1".to_string())
            )
        })
        .await;
        assert!(a.expect("a") && b.expect("b"), "both entered alone");
    })
    .await;
    // A request nested in a section of its key re-enters instead of waiting.
    let lock = e.client.lock("acct:2").expect("name");
    let ctx = LockContext::new();
    let guard = ctx
        .clone()
        .scope(lock.acquire_with(lock_core::AcquireOptions::new().for_section()))
        .await
        .expect("section");
    let nested = within(
        Duration::from_secs(2),
        "nested request re-enters",
        ctx.enter(&guard)
            .scope(svc.clone().oneshot("acct:2".to_string())),
    )
    .await;
    assert!(nested.expect("nested"));
    guard.release().await.expect("release");
    assert_eq!(inside.lock().await.violations().await, 0);
}

#[tokio::test]
async fn manual_acquisitions_in_one_context_re_enter_even_when_joined() {
    // The documented manual-API behaviour: a context is like a Java thread.
    let e = env(30_000);
    let lock = e.client.lock("manual-join").expect("name");
    in_context(async {
        let (a, b) = within(
            Duration::from_secs(2),
            "joined manual acquisitions",
            async { tokio::join!(lock.acquire(), lock.acquire()) },
        )
        .await;
        let (a, b) = (a.expect("a"), b.expect("b"));
        assert_eq!(a.owner_id(), b.owner_id());
        assert_eq!(lock.hold_count().await.expect("count"), 2);
        a.release().await.expect("a");
        b.release().await.expect("b");
    })
    .await;
}

// ---------------------------------------------------------- Redisson names

#[tokio::test]
async fn names_with_a_brace_get_redissons_helper_names() {
    let e = env(30_000);
    let mut conn = raw(&e.server).await;
    let lock = e.client.lock("{tenant}:order").expect("name");

    let redis_client = redis::Client::open(e.server.url()).expect("url");
    let mut pubsub = redis_client.get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe("redisson_lock__channel:{tenant}:order")
        .await
        .expect("subscribe");

    let guard = lock.acquire().await.expect("acquire");
    let token: Option<String> =
        cmd(&mut conn, &["GET", "redisson_lock_token:{tenant}:order"]).await;
    assert_eq!(token, Some(guard.fencing_token().to_string()));
    let doubled: i64 = cmd(
        &mut conn,
        &["EXISTS", "redisson_lock_token:{{tenant}:order}"],
    )
    .await;
    assert_eq!(doubled, 0, "no second pair of braces");
    guard.release().await.expect("release");
    use futures_util::StreamExt;
    let msg = within(
        Duration::from_secs(2),
        "unlock message",
        pubsub.on_message().next(),
    )
    .await
    .expect("message");
    assert_eq!(
        msg.get_channel_name(),
        "redisson_lock__channel:{tenant}:order"
    );
    assert_eq!(msg.get_payload_bytes(), b"0");

    // A Redisson holder's unlock on that channel wakes our waiter at once.
    let java_owner = "6f1c2d3e-0000-4000-8000-000000000001:9";
    let _: i64 = cmd(&mut conn, &["HINCRBY", "{tenant}:order", java_owner, "1"]).await;
    let _: i64 = cmd(&mut conn, &["PEXPIRE", "{tenant}:order", "20000"]).await;
    let l = lock.clone();
    let waiter = tokio::spawn(async move { l.acquire_timeout(Duration::from_secs(5)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _: i64 = cmd(&mut conn, &["DEL", "{tenant}:order"]).await;
    let _: i64 = cmd(
        &mut conn,
        &["PUBLISH", "redisson_lock__channel:{tenant}:order", "0"],
    )
    .await;
    let started = tokio::time::Instant::now();
    let guard = within(Duration::from_secs(2), "woken by the message", waiter)
        .await
        .expect("task")
        .expect("acquired");
    assert!(started.elapsed() < Duration::from_secs(1));
    guard.release().await.expect("release");
}

#[tokio::test]
async fn helper_key_names_cannot_be_locked() {
    let e = env(30_000);
    for name in [
        "redisson_lock_token:{orders}",
        "redisson_lock__channel:{orders}",
        "redisson_unlock_latch:{orders}:1",
    ] {
        let err = e.client.lock(name).expect_err(name);
        assert!(matches!(err, Error::InvalidName { .. }), "{err:?}");
    }
}

// ---------------------------------------------------------- fencing tokens

#[tokio::test]
async fn tokens_grow_strictly_across_holders_and_a_restart_that_lost_the_data() {
    let mut e = env(30_000);
    let lock = e.client.lock("tokens").expect("name");
    let seen = Arc::new(Mutex::new(Vec::with_capacity(1000)));
    // 1 000 holders: 4 tasks contending (fresh acquisitions and local
    // hand-offs), each recording its token inside the section.
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let lock = lock.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                for _ in 0..250 {
                    let g = lock.acquire().await.expect("acquire");
                    seen.lock().await.push(g.fencing_token());
                    g.release().await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        within(Duration::from_secs(60), "holders", t)
            .await
            .expect("task");
    }
    let seen = seen.lock().await.clone();
    assert_eq!(seen.len(), 1000);
    for w in seen.windows(2) {
        assert!(w[1] > w[0], "tokens went {} -> {}", w[0], w[1]);
    }
    let last = seen[seen.len() - 1];

    // A restart of a redis-server without persistence: every key is gone.
    e.server.restart().expect("restart");
    let after = within(Duration::from_secs(20), "acquire after restart", async {
        loop {
            match lock.acquire_timeout(Duration::from_secs(2)).await {
                Ok(g) => break g,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    assert!(
        after.fencing_token() > last,
        "after the restart: {} <= {last}",
        after.fencing_token()
    );
    eprintln!(
        "tokens: 1 000 holders from {} to {last}, strictly increasing; after a restart that lost every key: {}",
        seen[0],
        after.fencing_token()
    );
    after.release().await.expect("release");
}

#[tokio::test]
async fn names_no_longer_used_leave_no_keys_behind() {
    let server = support::server();
    let client = LockClient::builder(server.url())
        .token_retention(Duration::from_millis(300))
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let mut conn = raw(&server).await;
    let names: Vec<String> = (0..1000).map(|i| format!("account:{i}")).collect();
    for chunk in names.chunks(50) {
        let runs = futures_util::future::join_all(chunk.iter().map(|n| {
            let lock = client.lock(n).expect("name");
            async move {
                let g = lock.acquire().await.expect("acquire");
                g.release().await.expect("release");
            }
        }))
        .await;
        assert_eq!(runs.len(), chunk.len());
    }
    // Every key left has a TTL: nothing stays forever. A key may expire
    // between KEYS and PTTL: -2 ("no such key") is not -1 ("no TTL").
    let keys: Vec<String> = cmd(&mut conn, &["KEYS", "*"]).await;
    assert!(!keys.is_empty());
    for key in &keys {
        let ttl: i64 = cmd(&mut conn, &["PTTL", key]).await;
        assert_ne!(ttl, -1, "{key} has no TTL");
    }
    // Token keys go after the retention; latches after their own window
    // (bounded by the client's time-outs).
    let gone = support::eventually(Duration::from_secs(5), || {
        let mut conn = conn.clone();
        async move {
            let left: Vec<String> = cmd(&mut conn, &["KEYS", "redisson_lock_token:*"]).await;
            left.is_empty()
        }
    })
    .await;
    assert!(gone.is_some(), "token keys expire after the retention");
    let all_gone = support::eventually(Duration::from_secs(15), || {
        let mut conn = conn.clone();
        async move {
            let size: i64 = cmd(&mut conn, &["DBSIZE"]).await;
            size == 0
        }
    })
    .await;
    assert!(all_gone.is_some(), "every key of the 1 000 locks is gone");
}
