//! lock-core on a Redis Cluster (`redis+cluster://`), against the
//! harness's clusters of loopback `redis-server`s: mutual exclusion across
//! slots and processes, waiting by sharded pub/sub (Redisson's choice on a
//! Redis 7 cluster), watchdog renewals split by slot, a stalled primary
//! costing only its own holds, a slot migrated under load, a killed
//! primary, `{tag}` names, and a Redisson-protocol client on the same
//! locks.
//!
//! Judged from the cluster itself: counters and "inside" markers kept with
//! a redis-rs cluster connection of the test's own, `PUBSUB SHARDNUMSUB`
//! on the slot's primary, `EXISTS` on the node that serves a slot, and
//! other clients taking the lock.

use std::process::Stdio;
use std::time::Duration;

use crate::support::{self, cluster, cmd, env_var, spawn_child, within};
use lock_core::{AcquireOptions, LockClient};
use lock_tests::RedisCluster;
use redis::cluster_async::ClusterConnection;
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;

const ROLE: &str = "LOCK_TESTS_CLUSTER_ROLE";
const URL: &str = "LOCK_TESTS_CLUSTER_URL";
const NAMES: &str = "LOCK_TESTS_CLUSTER_NAMES";
const ROUNDS: &str = "LOCK_TESTS_CLUSTER_ROUNDS";

fn client(url: &str, watchdog: Duration) -> LockClient {
    LockClient::builder(url)
        .watchdog_timeout(watchdog)
        .command_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// The test's own cluster connection (not the library's).
async fn observer(c: &RedisCluster) -> ClusterConnection {
    redis::cluster::ClusterClient::new(c.urls())
        .unwrap_or_else(|e| panic!("{e}"))
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("observer: {e}"))
}

/// Sharded subscribers of `channel` on `node` (`PUBSUB SHARDNUMSUB`).
fn shard_subscribers(node: &lock_tests::RedisServer, channel: &str) -> Option<i64> {
    node.command(&["PUBSUB", "SHARDNUMSUB", channel])
        .unwrap_or_else(|e| panic!("{e}"))
        .as_array()
        .and_then(|a| a.get(1))
        .and_then(|v| v.as_i64())
}

/// Waits (at most 5 s) until `node` has exactly `n` sharded subscribers
/// of `channel`.
async fn until_shard_subscribers(
    node: &lock_tests::RedisServer,
    channel: &str,
    n: i64,
    what: &str,
) {
    within(Duration::from_secs(5), what, async {
        while shard_subscribers(node, channel) != Some(n) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Acquires `lock` in a task of its own; yields the outcome and when it came.
fn spawn_waiter(
    lock: lock_core::Lock,
) -> tokio::task::JoinHandle<(lock_core::Result<lock_core::LockGuard>, Instant)> {
    tokio::spawn(async move {
        let g = lock.acquire().await;
        (g, Instant::now())
    })
}

/// Awaits a [`spawn_waiter`] task (5 s at most), releases what it got;
/// how long after `released` it got the lock.
async fn woken_after(
    waiter: tokio::task::JoinHandle<(lock_core::Result<lock_core::LockGuard>, Instant)>,
    released: Instant,
) -> Duration {
    let (g, at) = within(Duration::from_secs(5), "waiter", waiter)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    g.unwrap_or_else(|e| panic!("{e}"))
        .release()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    at.duration_since(released)
}

/// One critical section on `name`: "inside" must go 0 → 1, the counter is
/// read, then written one higher after a pause (a lost update shows when
/// two are inside). Both keys share the lock's slot through `{name}`.
async fn section(conn: &mut ClusterConnection, name: &str) {
    let inside = format!("observer:inside:{{{name}}}");
    let counter = format!("observer:counter:{{{name}}}");
    let now: i64 = cmd(conn, &["INCR", &inside]).await;
    if now != 1 {
        let _: i64 = cmd(conn, &["INCR", "observer:violations"]).await;
    }
    let value: Option<i64> = cmd(conn, &["GET", &counter]).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let _: () = cmd(
        conn,
        &["SET", &counter, &(value.unwrap_or(0) + 1).to_string()],
    )
    .await;
    let _: i64 = cmd(conn, &["DECR", &inside]).await;
}

/// The child process entry point (`support::spawn_child`).
#[test]
#[ignore = "child process of the cluster suite"]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "increment");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(increment_all(
        env_var(URL),
        env_var(NAMES).split(',').map(str::to_owned).collect(),
        env_var(ROUNDS).parse().unwrap_or(1),
    ));
    println!("DONE");
}

/// Two tasks per lock name, each `rounds` sections under the lock.
async fn increment_all(url: String, names: Vec<String>, rounds: usize) {
    let client = client(&url, Duration::from_secs(5));
    let seeds: Vec<String> = url
        .trim_start_matches("redis+cluster://")
        .split(',')
        .map(|h| format!("redis://{h}"))
        .collect();
    let observer = redis::cluster::ClusterClient::new(seeds)
        .unwrap_or_else(|e| panic!("{e}"))
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut tasks = Vec::new();
    for name in &names {
        for _ in 0..2 {
            let lock = client.lock(name).unwrap_or_else(|e| panic!("{e}"));
            let mut conn = observer.clone();
            let name = name.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
                    section(&mut conn, &name).await;
                    guard.release().await.unwrap_or_else(|e| panic!("{e}"));
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap_or_else(|e| panic!("{e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_slots_and_processes() {
    let c = cluster(3, 0);
    let names: Vec<String> = (0..12).map(|i| format!("sku-{i}")).collect();
    let slots: std::collections::HashSet<u16> = names
        .iter()
        .map(|n| c.key_slot(n).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let primaries: std::collections::HashSet<usize> = slots
        .iter()
        .map(|s| c.primary_for_slot(*s).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert_eq!(primaries.len(), 3, "the names spread over every primary");
    let rounds = 15;
    let processes = 2;
    let mut children = Vec::new();
    for _ in 0..processes {
        children.push(spawn_child(
            module_path!(),
            &[
                (ROLE, "increment".to_owned()),
                (URL, c.url()),
                (NAMES, names.join(",")),
                (ROUNDS, rounds.to_string()),
            ],
            Stdio::null(),
        ));
    }
    // And this process too.
    increment_all(c.url(), names.clone(), rounds).await;
    for mut child in children {
        let status = tokio::task::block_in_place(|| child.wait()).unwrap_or_else(|e| panic!("{e}"));
        assert!(status.success(), "child failed: {status}");
    }
    let mut obs = observer(&c).await;
    let violations: Option<i64> = cmd(&mut obs, &["GET", "observer:violations"]).await;
    assert_eq!(violations.unwrap_or(0), 0, "never two inside");
    for name in &names {
        let counter: Option<i64> =
            cmd(&mut obs, &["GET", &format!("observer:counter:{{{name}}}")]).await;
        assert_eq!(
            counter,
            Some(((processes + 1) * 2 * rounds) as i64),
            "no lost update on {name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_sharded_pub_sub_on_the_slots_primary() {
    let c = cluster(3, 0);
    let holder = client(&c.url(), Duration::from_secs(30));
    let waiter_client = client(&c.url(), Duration::from_secs(30));
    let name = "flash";
    let lock = holder.lock(name).unwrap_or_else(|e| panic!("{e}"));
    // A fixed lease of 20 s: a wake-up by TTL would take that long.
    let guard = lock
        .acquire_with(AcquireOptions::new().lease(Duration::from_secs(20)))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let waiter = spawn_waiter(waiter_client.lock(name).unwrap_or_else(|e| panic!("{e}")));
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let slot_primary = &c.nodes()[c
        .primary_for_slot(c.key_slot(&channel).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"))];
    until_shard_subscribers(slot_primary, &channel, 1, "sharded subscription").await;
    let global = slot_primary
        .command(&["PUBSUB", "NUMSUB", &channel])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        global
            .as_array()
            .and_then(|a| a.get(1))
            .and_then(|v| v.as_i64()),
        Some(0),
        "no classic subscription"
    );
    let released = Instant::now();
    guard.release().await.unwrap_or_else(|e| panic!("{e}"));
    let (got, at) = within(Duration::from_secs(5), "waiter", waiter)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let got = got.unwrap_or_else(|e| panic!("{e}"));
    let woke = at.duration_since(released);
    println!("woken {woke:?} after the release (the holder's lease had ~20 s left)");
    assert!(
        woke < Duration::from_secs(2),
        "woken by the message, not the TTL: {woke:?}"
    );
    got.release().await.unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_watchdog_locks_over_almost_every_slot_are_renewed_without_errors() {
    let c = cluster(3, 0);
    let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    // Renewed every ~2.7 s: room for a debug build on a busy CI machine
    // (with 3 s, a few hundred of 50 000 holds ran out there).
    let watchdog = Duration::from_secs(8);
    let cl = LockClient::builder(c.url())
        .watchdog_timeout(watchdog)
        .command_timeout(Duration::from_secs(5))
        .error_hook({
            let errors = errors.clone();
            move |e| {
                errors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(e.to_string())
            }
        })
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let count = 50_000;
    let mut guards = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let batch = futures_util::future::join_all(chunk.iter().map(|i| {
            let lock = cl
                .lock(format!("many-{i}"))
                .unwrap_or_else(|e| panic!("{e}"));
            async move { lock.acquire().await.unwrap_or_else(|e| panic!("{e}")) }
        }))
        .await;
        guards.extend(batch);
    }
    let slots: std::collections::HashSet<redis::cluster_routing::Slot> = (0..count)
        .map(|i| redis::cluster_routing::Slot::for_key(format!("many-{i}")))
        .collect();
    println!("{count} locks over {} slots", slots.len());
    // Three renewal periods after the last acquisition: past the lease of
    // the first holds, so they live by renewals alone.
    tokio::time::sleep(watchdog + Duration::from_millis(300)).await;
    let held = guards.iter().filter(|g| g.is_held()).count();
    assert_eq!(held, count, "every hold still valid");
    // The cluster says so too: a sample of keys has its TTL pushed back
    // above what is left of the first lease.
    let mut obs = observer(&c).await;
    for i in (0..count).step_by(997) {
        let pttl: i64 = cmd(&mut obs, &["PTTL", &format!("many-{i}")]).await;
        assert!(
            pttl > 0 && pttl <= watchdog.as_millis() as i64,
            "many-{i}: PTTL {pttl}"
        );
    }
    let errors = errors.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        errors.is_empty(),
        "background errors: {:?}",
        &errors[..errors.len().min(3)]
    );
    let mut failed = Vec::new();
    while !guards.is_empty() {
        let chunk: Vec<_> = guards.drain(..guards.len().min(500)).collect();
        let released = futures_util::future::join_all(chunk.into_iter().map(|g| g.release())).await;
        failed.extend(
            released
                .iter()
                .filter_map(|r| r.as_ref().err().map(ToString::to_string)),
        );
    }
    assert!(
        failed.is_empty(),
        "{} releases failed, first: {:?}",
        failed.len(),
        failed.first()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_a_tag_live_in_the_tags_slot() {
    let c = cluster(3, 0);
    let cl = client(&c.url(), Duration::from_secs(30));
    let tag_slot = c.key_slot("user:7").unwrap_or_else(|e| panic!("{e}"));
    let node = &c.nodes()[c
        .primary_for_slot(tag_slot)
        .unwrap_or_else(|e| panic!("{e}"))];
    for name in ["{user:7}:orders", "{user:7}:cart", "profile:{user:7}"] {
        let lock = cl.lock(name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.key_slot(lock.key()).unwrap_or_else(|e| panic!("{e}")),
            tag_slot
        );
        let g = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
        let on_node = node
            .command(&["EXISTS", lock.key()])
            .unwrap_or_else(|e| panic!("{e}"))
            .as_i64();
        assert_eq!(on_node, Some(1), "{name} is on the tag's primary");
        let token_key = format!("redisson_lock_token:{name}");
        assert_eq!(
            c.key_slot(&token_key).unwrap_or_else(|e| panic!("{e}")),
            tag_slot,
            "the fencing counter shares the slot"
        );
        g.release().await.unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Braces that make no hash tag (`order:{7`, `order:{}x`, `x}y`) are
/// refused before any Redis call, on a cluster as on one server: Redisson's
/// helper names for them would hash to other slots (CROSSSLOT). Unusual
/// names that do make a tag work: every key of the lock in one slot (by
/// the cluster's own `CLUSTER KEYSLOT`), two clients never inside at once,
/// and a waiter woken by the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_odd_braces_are_refused_or_kept_in_one_slot() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let c = cluster(3, 0);
    let clients = [
        client(&c.url(), Duration::from_secs(30)),
        client(&c.url(), Duration::from_secs(30)),
    ];
    for name in ["order:{7", "order:{}x", "x}y", "a{}b{c}"] {
        match clients[0].lock(name) {
            Err(e) => assert!(
                matches!(e, lock_core::Error::InvalidName { .. })
                    && e.to_string().contains("CROSSSLOT"),
                "{name}: {e}"
            ),
            Ok(_) => panic!("{name} accepted"),
        }
    }
    for name in ["x}{y}", "{a{b}", "a{b}}c{"] {
        let slot = |key: &str| c.key_slot(key).unwrap_or_else(|e| panic!("{key}: {e}"));
        for kind in [
            "redisson_lock__channel",
            "redisson_lock_token",
            "redisson_unlock_latch",
            "lockcore_waiters",
            "lockcore_turn",
        ] {
            // a name with a tag keeps Redisson's `<kind>:<name>`
            assert_eq!(
                slot(&format!("{kind}:{name}")),
                slot(name),
                "{kind} of {name}"
            );
        }
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for cl in &clients {
            for _ in 0..2 {
                let lock = cl.lock(name).unwrap_or_else(|e| panic!("{name}: {e}"));
                let (inside, most) = (inside.clone(), most.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..10 {
                        let g = within(Duration::from_secs(10), "acquire", lock.acquire())
                            .await
                            .unwrap_or_else(|e| panic!("acquire: {e}"));
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        g.release().await.unwrap_or_else(|e| panic!("release: {e}"));
                    }
                }));
            }
        }
        for t in tasks {
            t.await.unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(most.load(Ordering::SeqCst), 1, "{name}: never two inside");
        // a waiter of the other client is woken by the release, not the lease
        let held = clients[0].lock(name).unwrap_or_else(|e| panic!("{e}"));
        let g = held.acquire().await.unwrap_or_else(|e| panic!("{e}"));
        let waiter = clients[1].lock(name).unwrap_or_else(|e| panic!("{e}"));
        let waiting = tokio::spawn(async move {
            let started = Instant::now();
            let g = waiter.acquire().await.unwrap_or_else(|e| panic!("{e}"));
            let took = started.elapsed();
            g.release().await.unwrap_or_else(|e| panic!("{e}"));
            took
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        g.release().await.unwrap_or_else(|e| panic!("{e}"));
        let took = waiting.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(
            took < Duration::from_secs(2),
            "{name}: woken after {took:?} (lease 30 s)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_protocol_client_and_lock_core_wake_each_other_by_sharded_pub_sub() {
    let c = cluster(3, 0);
    let name = "interop";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let node = &c.nodes()[c
        .primary_for_slot(c.key_slot(&channel).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"))];
    let mut obs = observer(&c).await;
    let java_owner = "8c1e5a0e-0000-4000-8000-000000000001:1";

    // 1. The Redisson-protocol client holds (30 s lease); lock-core waits
    //    and is woken by its SPUBLISH.
    let held: Option<i64> = redis::Script::new(support::REDISSON_ACQUIRE)
        .key(name)
        .arg(30_000)
        .arg(java_owner)
        .invoke_async(&mut obs)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(held, None, "taken by the Redisson-protocol client");
    let cl = client(&c.url(), Duration::from_secs(30));
    let waiter = spawn_waiter(cl.lock(name).unwrap_or_else(|e| panic!("{e}")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    let released = Instant::now();
    let freed: Option<i64> = redis::Script::new(support::REDISSON_RELEASE)
        .key(name)
        .key(&channel)
        .arg(java_owner)
        .arg("spublish")
        .invoke_async(&mut obs)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(freed, Some(1));
    let (g, at) = within(Duration::from_secs(5), "lock-core waiter", waiter)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let g = g.unwrap_or_else(|e| panic!("{e}"));
    let woke = at.duration_since(released);
    println!("lock-core woken {woke:?} after the Redisson-protocol release");
    assert!(woke < Duration::from_secs(2), "{woke:?}");

    // 2. lock-core holds; a Redisson-protocol subscriber (SSUBSCRIBE on the
    //    slot's primary, as Redisson subscribes) hears lock-core's release.
    let mut sub = tokio::net::TcpStream::connect(node.addr())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ssub = format!(
        "*2\r\n$10\r\nSSUBSCRIBE\r\n${}\r\n{channel}\r\n",
        channel.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut sub, ssub.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut reader = tokio::io::BufReader::new(sub);
    let mut lines = Vec::new();
    // The confirmation: *3, $10, ssubscribe, $n, channel, :1
    for _ in 0..6 {
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        lines.push(line.trim_end().to_owned());
    }
    assert_eq!(
        lines.get(2).map(String::as_str),
        Some("ssubscribe"),
        "{lines:?}"
    );
    g.release().await.unwrap_or_else(|e| panic!("{e}"));
    let mut message = Vec::new();
    within(Duration::from_secs(2), "the unlock message", async {
        for _ in 0..7 {
            let mut line = String::new();
            reader
                .read_line(&mut line)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            message.push(line.trim_end().to_owned());
        }
    })
    .await;
    assert_eq!(
        message.get(2).map(String::as_str),
        Some("smessage"),
        "{message:?}"
    );
    assert_eq!(
        message.last().map(String::as_str),
        Some("0"),
        "Redisson's unlock message"
    );
}

/// Sections on one lock from two clients while its slot (lock, helper and
/// observer keys alike) moves to another primary: no lost update, never two
/// inside, every waiter served; afterwards the waiters' sharded
/// subscription lives on the new primary and still wakes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_load_loses_no_update_and_still_wakes_waiters() {
    let c = cluster(3, 0);
    let name = "moving";
    let slot = c.key_slot(name).unwrap_or_else(|e| panic!("{e}"));
    let from = c.primary_for_slot(slot).unwrap_or_else(|e| panic!("{e}"));
    let to = (from + 1) % 3;
    let clients = [
        client(&c.url(), Duration::from_secs(5)),
        client(&c.url(), Duration::from_secs(5)),
    ];
    let obs = observer(&c).await;
    let rounds = 60;
    let mut tasks = Vec::new();
    for cl in &clients {
        for _ in 0..2 {
            let lock = cl.lock(name).unwrap_or_else(|e| panic!("{e}"));
            let mut conn = obs.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
                    section(&mut conn, name).await;
                    guard.release().await.unwrap_or_else(|e| panic!("{e}"));
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    let started = Instant::now();
    tokio::task::block_in_place(|| c.migrate_slot(slot, from, to))
        .unwrap_or_else(|e| panic!("migrate: {e}"));
    println!(
        "slot {slot} moved from node {from} to node {to} in {:?}",
        started.elapsed()
    );
    assert_eq!(
        c.primary_for_slot(slot).unwrap_or_else(|e| panic!("{e}")),
        to
    );
    let all_done = within(Duration::from_secs(60), "every section", async {
        for t in tasks {
            t.await.unwrap_or_else(|e| panic!("{e}"));
        }
    });
    all_done.await;
    let mut obs = obs;
    let violations: Option<i64> = cmd(&mut obs, &["GET", "observer:violations"]).await;
    assert_eq!(violations.unwrap_or(0), 0, "never two inside");
    let counter: Option<i64> =
        cmd(&mut obs, &["GET", &format!("observer:counter:{{{name}}}")]).await;
    assert_eq!(counter, Some((2 * 2 * rounds) as i64), "no lost update");
    let on_new: Option<i64> = c.nodes()[to]
        .command(&["GET", &format!("observer:counter:{{{name}}}")])
        .unwrap_or_else(|e| panic!("{e}"))
        .as_string()
        .and_then(|s| s.parse().ok());
    assert_eq!(on_new, counter, "the slot's keys live on the new primary");

    // A waiter subscribed while the slot moves back: the server ends its
    // shard subscription (`sunsubscribe`), the client subscribes again on
    // the slot's new primary, and the release still wakes it.
    let guard = clients[0]
        .lock(name)
        .unwrap_or_else(|e| panic!("{e}"))
        .acquire_with(AcquireOptions::new().lease(Duration::from_secs(20)))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let waiter = spawn_waiter(clients[1].lock(name).unwrap_or_else(|e| panic!("{e}")));
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let (new_node, old_node) = (&c.nodes()[from], &c.nodes()[to]);
    until_shard_subscribers(old_node, &channel, 1, "subscription on the new primary").await;
    tokio::task::block_in_place(|| c.migrate_slot(slot, to, from))
        .unwrap_or_else(|e| panic!("migrate back: {e}"));
    until_shard_subscribers(
        new_node,
        &channel,
        1,
        "subscribed again where the slot went",
    )
    .await;
    assert_eq!(
        shard_subscribers(old_node, &channel),
        Some(0),
        "nothing left on the old primary"
    );
    assert!(
        !waiter.is_finished(),
        "the 20 s lease still holds the waiter"
    );
    let released = Instant::now();
    guard.release().await.unwrap_or_else(|e| panic!("{e}"));
    let woke = woken_after(waiter, released).await;
    println!("after the move, woken {woke:?} after the release");
    assert!(woke < Duration::from_secs(2), "{woke:?}");
}

/// Holds acknowledged by their replicas (`wait_for_replicas(1, ..)`), then
/// one primary killed: its replica takes over with the holds, the holder
/// keeps and renews them there, and a second client never gets one of
/// them while the holder's guard says it is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primarys_replicated_holds_are_kept_never_double_held() {
    let mut c = cluster(3, 1);
    let watchdog = Duration::from_secs(6);
    let holder = LockClient::builder(c.url())
        .watchdog_timeout(watchdog)
        .wait_for_replicas(1, Duration::from_secs(2))
        .command_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let other = client(&c.url(), watchdog);
    let names: Vec<String> = (0..12).map(|i| format!("kept-{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        let lock = holder.lock(name).unwrap_or_else(|e| panic!("{e}"));
        guards.push(
            lock.acquire()
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}")),
        );
    }
    let victim = c
        .primary_for_slot(c.key_slot(&names[0]).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let on_victim: Vec<usize> = names
        .iter()
        .enumerate()
        .filter(|(_, n)| {
            c.primary_for_slot(c.key_slot(n).unwrap_or_else(|e| panic!("{e}")))
                .ok()
                == Some(victim)
        })
        .map(|(i, _)| i)
        .collect();
    if let Some(node) = c.node_mut(victim) {
        node.kill();
    }
    let killed = Instant::now();
    // The other client keeps trying every lock meanwhile.
    let mut double = Vec::new();
    let deadline = killed + Duration::from_secs(8);
    while Instant::now() < deadline {
        for (i, name) in names.iter().enumerate() {
            let lock = other.lock(name).unwrap_or_else(|e| panic!("{e}"));
            if let Ok(Some(g)) = lock.try_acquire().await {
                if guards[i].is_held() {
                    double.push(name.clone());
                }
                let _ = g.release().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        double.is_empty(),
        "taken while the holder's guard said held: {double:?}"
    );
    tokio::task::block_in_place(|| c.wait_ok(Duration::from_secs(20)))
        .unwrap_or_else(|e| panic!("cluster did not recover: {e}"));
    let new_primary = c
        .primary_for_slot(c.key_slot(&names[0]).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(new_primary, victim, "a replica took over");
    let kept = on_victim.iter().filter(|i| guards[**i].is_held()).count();
    println!(
        "{} of {} holds on the killed primary kept (8 s after the kill, renewed on the promoted replica)",
        kept,
        on_victim.len()
    );
    assert_eq!(
        kept,
        on_victim.len(),
        "acknowledged holds survive the failover"
    );
    let mut obs = observer(&c).await;
    for i in &on_victim {
        let owners: Vec<String> = cmd(&mut obs, &["HKEYS", &names[*i]]).await;
        assert_eq!(
            owners,
            vec![guards[*i].owner_id().to_owned()],
            "{} on the new primary",
            names[*i]
        );
    }
    for g in guards {
        g.release().await.unwrap_or_else(|e| panic!("{e}"));
    }
}

/// lock-tower's layer with a cluster client, unchanged: concurrent requests
/// for one key run one at a time (counters kept on the cluster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tower_layer_serializes_requests_per_key_on_a_cluster() {
    use lock_tower::{LockLayer, PathSegment};
    let c = cluster(3, 0);
    let cl = client(&c.url(), Duration::from_secs(10));
    let obs = observer(&c).await;
    let app = axum::Router::new()
        .route(
            "/orders/{id}",
            axum::routing::post(
                move |axum::extract::Path(id): axum::extract::Path<String>| {
                    let mut conn = obs.clone();
                    async move {
                        section(&mut conn, &id).await;
                        "ok"
                    }
                },
            ),
        )
        .layer(LockLayer::new(cl, PathSegment::after("orders")));
    let server = support::layer::HttpServer::start(app).await;
    let http = support::layer::http_client();
    let ids = ["a-1", "b-2", "c-3"];
    let per_id = 8;
    let replies = futures_util::future::join_all((0..per_id).flat_map(|_| {
        ids.iter()
            .map(|id| support::layer::send(&http, "POST", server.url(&format!("/orders/{id}"))))
    }))
    .await;
    assert!(replies.iter().all(|r| r.status == 200));
    let mut obs = observer(&c).await;
    let violations: Option<i64> = cmd(&mut obs, &["GET", "observer:violations"]).await;
    assert_eq!(
        violations.unwrap_or(0),
        0,
        "never two requests inside for one key"
    );
    for id in ids {
        let n: Option<i64> = cmd(&mut obs, &["GET", &format!("observer:counter:{{{id}}}")]).await;
        assert_eq!(n, Some(per_id), "{id}");
    }
}

/// `PubSubMode::Global` on a cluster: classic `SUBSCRIBE` / `PUBLISH`
/// (cluster-wide), no shard subscription; the waiter is still woken by the
/// release, not by the holder's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_pub_sub_mode_uses_classic_channels_on_a_cluster() {
    let c = cluster(3, 0);
    let build = || {
        LockClient::builder(c.url())
            .pubsub_mode(lock_core::PubSubMode::Global)
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let (holder, waiter_client) = (build(), build());
    let name = "classic";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let guard = holder
        .lock(name)
        .unwrap_or_else(|e| panic!("{e}"))
        .acquire_with(AcquireOptions::new().lease(Duration::from_secs(20)))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let waiter = spawn_waiter(waiter_client.lock(name).unwrap_or_else(|e| panic!("{e}")));
    let count = |sub: &str| -> i64 {
        c.nodes()
            .iter()
            .filter_map(|n| n.command(&["PUBSUB", sub, &channel]).ok())
            .filter_map(|r| r.as_array().and_then(|a| a.get(1)).and_then(|v| v.as_i64()))
            .sum()
    };
    within(Duration::from_secs(5), "classic subscription", async {
        while count("NUMSUB") != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(count("SHARDNUMSUB"), 0, "no shard subscription");
    let released = Instant::now();
    guard.release().await.unwrap_or_else(|e| panic!("{e}"));
    let woke = woken_after(waiter, released).await;
    assert!(woke < Duration::from_secs(2), "woken by PUBLISH: {woke:?}");
}

/// The rest of the API on a cluster: ping, inspection, the scan over every
/// primary, and force-unlock (its unlock message wakes a waiter at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_inspection_scan_and_force_unlock_work_on_a_cluster() {
    let c = cluster(3, 0);
    let cl = client(&c.url(), Duration::from_secs(30));
    cl.ping().await.unwrap_or_else(|e| panic!("ping: {e}"));
    let names: Vec<String> = (0..9).map(|i| format!("inspect-{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        let lock = cl.lock(name).unwrap_or_else(|e| panic!("{e}"));
        guards.push(lock.acquire().await.unwrap_or_else(|e| panic!("{e}")));
    }
    let first = cl.lock(&names[0]).unwrap_or_else(|e| panic!("{e}"));
    assert!(first.is_locked().await.unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(
        first.hold_count().await.unwrap_or_else(|e| panic!("{e}")),
        0
    );
    assert!(first
        .remaining_ttl()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .is_some());
    let found = cl
        .scan_locks("inspect-*")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let found: Vec<&str> = found.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(found, names.iter().map(String::as_str).collect::<Vec<_>>());

    let other = client(&c.url(), Duration::from_secs(30));
    let waiter = tokio::spawn({
        let lock = other.lock(&names[0]).unwrap_or_else(|e| panic!("{e}"));
        async move { lock.acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(first.force_unlock().await.unwrap_or_else(|e| panic!("{e}")));
    let g = within(Duration::from_secs(2), "woken by the force-unlock", waiter)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    g.release().await.unwrap_or_else(|e| panic!("{e}"));
    for g in guards.drain(1..) {
        g.release().await.unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The primary of `key` in a fresh harness cluster of `primaries` (the
/// slots split in contiguous ranges in node order, see `RedisCluster::start`).
fn fresh_primary_of(key: &str, primaries: usize) -> usize {
    use redis::cluster_routing::Slot;
    static NUMBERS: std::sync::OnceLock<std::collections::HashMap<Slot, usize>> =
        std::sync::OnceLock::new();
    let numbers = NUMBERS.get_or_init(|| {
        (0..lock_tests::CLUSTER_SLOTS)
            .filter_map(|n| Slot::new(n).map(|s| (s, usize::from(n))))
            .collect()
    });
    let slot = numbers.get(&Slot::for_key(key)).copied().unwrap_or(0);
    let per = usize::from(lock_tests::CLUSTER_SLOTS) / primaries;
    (slot / per).min(primaries - 1)
}

/// No failover, whatever a test stops: node timeout a minute (a stopped
/// primary is never failed, the cluster stays `ok` on the others).
fn without_failover(c: &RedisCluster) {
    for node in c.nodes() {
        let reply = node
            .command(&["CONFIG", "SET", "cluster-node-timeout", "60000"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(reply.as_error().is_none(), "{reply:?}");
    }
}

/// What one stalled-primary run saw.
#[derive(Debug)]
struct StallFigures {
    /// Holds lost per primary (the stalled one included) at the end of the stall.
    lost_per_primary: Vec<usize>,
    /// Of the stalled primary's holds, reported lost this long after the stop (min, max).
    reported_lost_after: Option<(Duration, Duration)>,
    /// Acquire + release probes on a healthy primary during the stall: failed, slowest.
    probes_failed: usize,
    probe_slowest: Duration,
    /// Healthy primaries' holds whose key or owner field the observer did not find.
    missing_in_redis: usize,
    /// Stalled holds an observer client got after SIGCONT while the holder's guard
    /// still said held, or before it was reported lost.
    taken_while_held: usize,
    /// Stalled holds the observer client got after SIGCONT.
    taken_after_resume: usize,
    /// Healthy holds the observer client got (must be none).
    healthy_taken: usize,
}

/// 3 primaries, 1 000 watchdog holds on each; one primary stopped (SIGSTOP)
/// for longer than the lease (so for more than 2 renewal periods), no
/// failover. See the two tests below for the assertions.
async fn one_stalled_primary(command_timeout: Duration) -> StallFigures {
    const PRIMARIES: usize = 3;
    const PER_PRIMARY: usize = 1000;
    let c = cluster(PRIMARIES, 0);
    without_failover(&c);
    let watchdog = Duration::from_secs(3);
    let period = watchdog / 3;
    let holder = LockClient::builder(c.url())
        .watchdog_timeout(watchdog)
        .command_timeout(command_timeout)
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    // 1 000 names on each primary.
    let mut names: Vec<Vec<String>> = vec![Vec::new(); PRIMARIES];
    let mut i = 0;
    while names.iter().any(|n| n.len() < PER_PRIMARY) {
        let name = format!("stall-{i}");
        let p = fresh_primary_of(&name, PRIMARIES);
        if names[p].len() < PER_PRIMARY {
            names[p].push(name);
        }
        i += 1;
    }
    let mut guards: Vec<Vec<lock_core::LockGuard>> = Vec::new();
    for on_primary in &names {
        let mut got = Vec::with_capacity(PER_PRIMARY);
        for chunk in on_primary.chunks(250) {
            got.extend(
                futures_util::future::join_all(chunk.iter().map(|n| {
                    let lock = holder.lock(n).unwrap_or_else(|e| panic!("{e}"));
                    async move { lock.acquire().await.unwrap_or_else(|e| panic!("{e}")) }
                }))
                .await,
            );
        }
        guards.push(got);
    }
    // A period of ordinary renewals first.
    tokio::time::sleep(period + period / 2).await;
    for (p, g) in guards.iter().enumerate() {
        assert_eq!(
            g.iter().filter(|g| g.is_held()).count(),
            PER_PRIMARY,
            "primary {p} before the stall"
        );
    }
    let victim = 2;
    let healthy: Vec<usize> = (0..PRIMARIES).filter(|p| *p != victim).collect();
    // Probed during the stall: a lock on a healthy primary.
    let probe_name = (0..)
        .map(|i| format!("probe-{i}"))
        .find(|n| fresh_primary_of(n, PRIMARIES) == healthy[0])
        .unwrap_or_default();
    let probe = holder.lock(&probe_name).unwrap_or_else(|e| panic!("{e}"));
    // Longer than the lease: every hold of the stopped primary passes its deadline.
    let stall = watchdog + period / 2;

    c.nodes()[victim].pause().unwrap_or_else(|e| panic!("{e}"));
    let stopped = Instant::now();
    let stalled_guards = &guards[victim];
    let lost_watch = futures_util::future::join_all(stalled_guards.iter().map(|g| async move {
        tokio::select! {
            _ = g.lost() => Some(Instant::now()),
            _ = tokio::time::sleep(stall + Duration::from_secs(2)) => None,
        }
    }));
    let probing = async {
        let mut failed = 0;
        let mut slowest = Duration::ZERO;
        while stopped.elapsed() < stall {
            let t = Instant::now();
            let ok = tokio::time::timeout(Duration::from_secs(1), async {
                match probe.try_acquire().await {
                    Ok(Some(g)) => g.release().await.is_ok(),
                    _ => false,
                }
            })
            .await
            .unwrap_or(false);
            slowest = slowest.max(t.elapsed());
            if !ok {
                failed += 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (failed, slowest)
    };
    let (lost_at, (probes_failed, probe_slowest)) = tokio::join!(lost_watch, probing);
    let lost_per_primary: Vec<usize> = guards
        .iter()
        .map(|g| g.iter().filter(|g| !g.is_held()).count())
        .collect();
    // The observer's own connections to the healthy primaries, while the
    // victim is still stopped: every healthy hold is in Redis, owned by
    // its guard's owner id, with a TTL.
    let mut missing_in_redis = 0;
    for p in &healthy {
        let mut conn = support::raw(&c.nodes()[*p]).await;
        let mut pipe = redis::pipe();
        for g in &guards[*p] {
            pipe.cmd("HEXISTS").arg(g.name()).arg(g.owner_id());
            pipe.cmd("PTTL").arg(g.name());
        }
        let replies: Vec<i64> = pipe
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("observer: {e}"));
        missing_in_redis += replies.chunks(2).filter(|r| r[0] != 1 || r[1] <= 0).count();
    }
    c.nodes()[victim].resume().unwrap_or_else(|e| panic!("{e}"));

    // Another client tries every lock once: a stalled hold it gets must
    // have been reported lost before it tried; a healthy one it must not get.
    let observer_client = client(&c.url(), Duration::from_secs(30));
    let mut taken_while_held = 0;
    let mut taken_after_resume = 0;
    let mut healthy_taken = 0;
    for (p, on_primary) in guards.iter().enumerate() {
        for (chunk_i, chunk) in on_primary.chunks(250).enumerate() {
            let tried = Instant::now();
            let got = futures_util::future::join_all(chunk.iter().map(|g| {
                let lock = observer_client
                    .lock(g.name())
                    .unwrap_or_else(|e| panic!("{e}"));
                async move {
                    tokio::time::timeout(Duration::from_secs(5), lock.try_acquire())
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .flatten()
                }
            }))
            .await;
            for (j, got) in got.into_iter().enumerate() {
                let Some(other) = got else { continue };
                let k = chunk_i * 250 + j;
                if p == victim {
                    taken_after_resume += 1;
                    let reported = lost_at[k].is_some_and(|at| at <= tried);
                    if !reported || on_primary[k].is_held() {
                        taken_while_held += 1;
                    }
                } else {
                    healthy_taken += 1;
                }
                let _ = other.release().await;
            }
        }
    }
    let reported: Vec<Duration> = lost_at
        .iter()
        .flatten()
        .map(|at| at.duration_since(stopped))
        .collect();
    let figures = StallFigures {
        lost_per_primary,
        reported_lost_after: reported
            .iter()
            .min()
            .copied()
            .zip(reported.iter().max().copied()),
        probes_failed,
        probe_slowest,
        missing_in_redis,
        taken_while_held,
        taken_after_resume,
        healthy_taken,
    };
    println!(
        "command_timeout {command_timeout:?}, watchdog {watchdog:?}, stall {stall:?}: {figures:?}"
    );
    for g in guards.into_iter().flatten() {
        let _ = g.release().await;
    }
    figures
}

/// Checks one [`one_stalled_primary`] run: the stalled primary costs its
/// own holds only, reported lost by their deadline (the lease after the
/// stop, plus timer slack), before anyone else gets them; single commands to
/// the healthy primaries keep working.
fn assert_isolated(f: &StallFigures, lease: Duration) {
    assert_eq!(
        f.lost_per_primary[0] + f.lost_per_primary[1],
        0,
        "holds lost on the healthy primaries: {f:?}"
    );
    assert_eq!(
        f.missing_in_redis, 0,
        "healthy holds missing in Redis: {f:?}"
    );
    assert_eq!(
        f.healthy_taken, 0,
        "healthy holds taken by another client: {f:?}"
    );
    assert_eq!(
        f.lost_per_primary[2], 1000,
        "every stalled hold is lost (stall > lease): {f:?}"
    );
    let (_, last) = f
        .reported_lost_after
        .unwrap_or_else(|| panic!("no stalled hold reported lost: {f:?}"));
    assert!(
        last <= lease + Duration::from_millis(300),
        "reported lost by the deadline: {f:?}"
    );
    assert_eq!(f.taken_while_held, 0, "taken before reported lost: {f:?}");
    assert!(
        f.taken_after_resume > 0,
        "the observer got none of the lost holds: {f:?}"
    );
    assert_eq!(
        f.probes_failed, 0,
        "single commands to a healthy primary failed: {f:?}"
    );
    assert!(
        f.probe_slowest < Duration::from_millis(500),
        "single commands to a healthy primary held up: {f:?}"
    );
}

/// A stalled primary (SIGSTOP, no failover) with `command_timeout` below
/// the renewal period: redis-rs's response time-outs fire first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_primary_costs_only_its_own_holds_with_a_short_command_timeout() {
    let f = one_stalled_primary(Duration::from_millis(400)).await;
    assert_isolated(&f, Duration::from_secs(3));
}

/// The same with `command_timeout` above the renewal period: the
/// watchdog's own per-call deadlines fire first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_primary_costs_only_its_own_holds_with_a_long_command_timeout() {
    let f = one_stalled_primary(Duration::from_secs(2)).await;
    assert_isolated(&f, Duration::from_secs(3));
}

/// The read-write lock on a cluster: every key of it (the hash, the
/// readers' timeout keys built inside the scripts, the writer's mark, the
/// channel) in the name's slot, plain names and tagged ones; readers of
/// two clients share; a write release wakes a waiting reader of another
/// client by sharded pub/sub on the slot's primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_write_lock_keeps_its_keys_in_one_slot_and_wakes_by_sharded_pub_sub() {
    let c = cluster(3, 0);
    let a = client(&c.url(), Duration::from_secs(30));
    let b = client(&c.url(), Duration::from_secs(30));
    for name in ["catalog", "{tenant:9}:prices"] {
        let slot = c.key_slot(name).unwrap_or_else(|e| panic!("{e}"));
        let node = &c.nodes()[c.primary_for_slot(slot).unwrap_or_else(|e| panic!("{e}"))];
        let rw_a = a.rw_lock(name).unwrap_or_else(|e| panic!("{e}"));
        let rw_b = b.rw_lock(name).unwrap_or_else(|e| panic!("{e}"));
        let r1 = rw_a
            .read()
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let r2 = rw_b
            .read()
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let braced = if name.contains('{') {
            name.to_string()
        } else {
            format!("{{{name}}}")
        };
        for g in [&r1, &r2] {
            let key = format!("{braced}:{}:rwlock_timeout:1", g.owner_id());
            assert_eq!(c.key_slot(&key).unwrap_or_else(|e| panic!("{e}")), slot);
            let on_node = node
                .command(&["EXISTS", &key])
                .unwrap_or_else(|e| panic!("{e}"))
                .as_i64();
            assert_eq!(on_node, Some(1), "{key} on the slot's primary");
        }
        let mode = node
            .command(&["HGET", name, "mode"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mode.as_string().as_deref(), Some("read"), "{name}");
        // a waiting writer leaves its mark in the slot too
        let writer = tokio::spawn({
            let w = rw_b.write();
            async move { w.acquire_timeout(Duration::from_secs(10)).await }
        });
        let mark = if name.contains('{') {
            format!("lockcore_writer:{name}")
        } else {
            format!("lockcore_writer:{{{name}}}")
        };
        assert_eq!(c.key_slot(&mark).unwrap_or_else(|e| panic!("{e}")), slot);
        within(Duration::from_secs(5), "the writer's mark", async {
            while node
                .command(&["EXISTS", &mark])
                .unwrap_or_else(|e| panic!("{e}"))
                .as_i64()
                != Some(1)
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        r1.release().await.unwrap_or_else(|e| panic!("{e}"));
        r2.release().await.unwrap_or_else(|e| panic!("{e}"));
        let w = within(Duration::from_secs(5), "writer", writer)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("{e}"));
        // a reader of the other client waits, woken by the write release
        let reader = spawn_waiter(rw_a.read());
        let channel = if name.contains('{') {
            format!("redisson_rwlock:{name}")
        } else {
            format!("redisson_rwlock:{{{name}}}")
        };
        assert_eq!(c.key_slot(&channel).unwrap_or_else(|e| panic!("{e}")), slot);
        until_shard_subscribers(node, &channel, 1, "sharded subscription").await;
        let released = Instant::now();
        w.release().await.unwrap_or_else(|e| panic!("{e}"));
        let woke = woken_after(reader, released).await;
        assert!(
            woke < Duration::from_secs(2),
            "{name}: woken by the sharded message, not the 30 s lease: {woke:?}"
        );
    }
}
