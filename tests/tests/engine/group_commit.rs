//! Group commit (`hold/group_commit.rs`): lock operations a client has
//! ready while one of their kind is in flight go to Redis as one script
//! call, each with its own outcome. Judged from outside: the server's own
//! count of script calls, an observer counting who is inside on its own
//! connection, and the lock hashes read on a raw connection.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{self, cmd, raw, script_calls, within, Inside};
use lock_core::{Error, LockClient};
use lock_tests::RedisServer;

fn client(server: &RedisServer, group_commit: bool) -> LockClient {
    LockClient::builder(server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .group_commit(group_commit)
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// `tasks` tasks, each on a name of its own, `cycles` acquire/release
/// cycles each; after every acquisition a raw connection reads the lock's
/// hash: exactly the guard's owner with one count. Returns the script calls
/// the server ran meanwhile.
async fn own_names(server: &RedisServer, client: &LockClient, tasks: usize, cycles: usize) -> u64 {
    let before = script_calls(server);
    let mut joins = Vec::new();
    for t in 0..tasks {
        let lock = client.lock(format!("gc:own:{t}")).expect("name");
        let mut conn = raw(server).await;
        joins.push(tokio::spawn(async move {
            for _ in 0..cycles {
                let guard = lock.acquire().await.expect("acquire");
                let hash: Vec<String> = cmd(&mut conn, &["HGETALL", &format!("gc:own:{t}")]).await;
                assert_eq!(hash, [guard.owner_id().to_string(), "1".to_string()]);
                guard.release().await.expect("release");
                let exists: i64 = cmd(&mut conn, &["EXISTS", &format!("gc:own:{t}")]).await;
                assert_eq!(exists, 0, "released, the lock is gone");
            }
        }));
    }
    for j in joins {
        within(Duration::from_secs(60), "own-name cycles", j)
            .await
            .expect("task");
    }
    script_calls(server) - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_ready_together_share_script_calls_and_keep_their_outcomes() {
    let server = support::server();
    let (tasks, cycles) = (32, 30);
    let ops = (2 * tasks * cycles) as u64;
    // Off: every operation is its own call (the reference).
    let alone = own_names(&server, &client(&server, false), tasks, cycles).await;
    // (a few more: the first calls of tasks started together each meet
    // NOSCRIPT and are sent again once the script is loaded)
    assert!(
        (ops..=ops + 2 * tasks as u64).contains(&alone),
        "without group commit, one call per operation: {alone} for {ops}"
    );
    // On: fewer calls than operations.
    let grouped = own_names(&server, &client(&server, true), tasks, cycles).await;
    assert!(
        grouped < ops * 3 / 4,
        "group commit sent {grouped} calls for {ops} operations"
    );
    let stats = server.info_commandstats().expect("stats");
    eprintln!("{ops} operations: {alone} calls alone, {grouped} grouped; {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_waiters_of_one_name_never_overlap() {
    let server = support::server();
    let client = client(&server, true);
    let (names, per_name, cycles) = (6, 5, 12);
    let before = script_calls(&server);
    let mut joins = Vec::new();
    let mut observers = Vec::new();
    for n in 0..names {
        let inside = Inside::new(&server, &format!("gc:shared:{n}")).await;
        observers.push(inside.clone());
        for _ in 0..per_name {
            let lock = client.lock(format!("gc:shared:{n}")).expect("name");
            let mut inside = inside.clone();
            joins.push(tokio::spawn(async move {
                for _ in 0..cycles {
                    let guard = lock.acquire().await.expect("acquire");
                    assert!(inside.enter().await, "two inside");
                    tokio::task::yield_now().await;
                    inside.leave().await;
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    for j in joins {
        within(Duration::from_secs(60), "shared-name cycles", j)
            .await
            .expect("task");
    }
    for mut o in observers {
        assert_eq!(o.violations().await, 0);
    }
    let calls = script_calls(&server) - before;
    let ops = (2 * names * per_name * cycles) as u64;
    eprintln!("{ops} operations of {names} names in {calls} script calls");
    let mut conn = raw(&server).await;
    for n in 0..names {
        let exists: i64 = cmd(&mut conn, &["EXISTS", &format!("gc:shared:{n}")]).await;
        assert_eq!(exists, 0, "every lock free at the end");
    }
}

/// One element's error is its own: a name whose fencing-token key is of
/// another type fails with WRONGTYPE (leaving no hold), every other
/// acquisition of the same grouped calls succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_elements_error_stays_with_it() {
    let server = support::server();
    let client = Arc::new(client(&server, true));
    let mut conn = raw(&server).await;
    let _: i64 = cmd(
        &mut conn,
        &["HSET", "redisson_lock_token:{gc:bad}", "f", "v"],
    )
    .await;
    let before = script_calls(&server);
    let rounds = 8;
    let mut attempts = 0u64;
    for _ in 0..rounds {
        let mut joins = Vec::new();
        for t in 0..24 {
            let name = if t % 6 == 3 {
                "gc:bad".to_string()
            } else {
                format!("gc:good:{t}")
            };
            let lock = client.lock(&name).expect("name");
            joins.push(tokio::spawn(
                async move { (name, lock.try_acquire().await) },
            ));
            attempts += 1;
        }
        let mut guards = Vec::new();
        for j in joins {
            let (name, got) = within(Duration::from_secs(10), "try_acquire", j)
                .await
                .expect("task");
            if name == "gc:bad" {
                match got {
                    Err(Error::Redis(e)) => assert_eq!(e.code(), Some("WRONGTYPE"), "{e}"),
                    other => panic!("{name}: {other:?}"),
                }
            } else {
                guards.push(got.expect("a good name").expect("free"));
            }
        }
        let held: i64 = cmd(&mut conn, &["EXISTS", "gc:bad"]).await;
        assert_eq!(held, 0, "a failed element leaves no hold");
        for g in guards {
            g.release().await.expect("release");
        }
    }
    let calls = script_calls(&server) - before;
    // acquisitions + releases of the good ones
    let ops = attempts + attempts * 5 / 6;
    assert!(
        calls < ops,
        "{calls} calls for {ops} operations: nothing grouped"
    );
}

/// A grouped call refused whole (an ACL user may not touch one element's
/// keys) never ran: each element is sent again alone, so only that one
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_whole_is_sent_again_element_by_element() {
    let server = support::server();
    let mut conn = raw(&server).await;
    // May run scripts and publish, on keys of names under `ok:` only.
    let _: () = cmd(
        &mut conn,
        &[
            "ACL", "SETUSER", "grouper", "on", ">pw", "+@all", "~*{ok:*", "~ok:*", "&*",
        ],
    )
    .await;
    let url = format!("redis://grouper:pw@{}", server.addr());
    let client = Arc::new(
        LockClient::builder(url)
            .group_commit(true)
            .build()
            .unwrap_or_else(|e| panic!("client: {e}")),
    );
    let mut refused = 0;
    let mut grouped_ok = 0;
    for _ in 0..6 {
        let mut joins = Vec::new();
        for t in 0..16 {
            let name = if t == 5 {
                "no:x".to_string()
            } else {
                format!("ok:{t}")
            };
            let lock = client.lock(&name).expect("name");
            joins.push(tokio::spawn(
                async move { (name, lock.try_acquire().await) },
            ));
        }
        let mut guards = Vec::new();
        for j in joins {
            let (name, got) = within(Duration::from_secs(10), "try_acquire", j)
                .await
                .expect("task");
            match (name.starts_with("ok:"), got) {
                (true, Ok(Some(g))) => {
                    grouped_ok += 1;
                    guards.push(g)
                }
                (false, Err(Error::Redis(e))) => {
                    assert_eq!(e.code(), Some("NOPERM"), "{e}");
                    refused += 1;
                }
                (_, other) => panic!("{name}: {other:?}"),
            }
        }
        for g in guards {
            g.release().await.expect("release");
        }
    }
    assert_eq!((refused, grouped_ok), (6, 90));
}
