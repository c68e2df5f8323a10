//! The multi-lock (`LockClient::multi_lock`): several locks as one guard.
//!
//! - Transfers: 4 child processes (this test binary, started with
//!   `--ignored --exact <this module>::child_process` and a role in the
//!   environment) move money between 20 accounts, each transfer under a
//!   multi-lock of its two accounts, picked at random in both orders. The
//!   balances are read and written by the children's own raw connections
//!   (a read, a pause, a write: an overlap loses an update), and each
//!   section marks itself inside its accounts in an observer key. The
//!   test reads the balances with its own raw connection: the sum is
//!   conserved, nobody was ever inside an account with another, and every
//!   child finished its transfers in bounded time (no deadlock: every
//!   acquire has a wait bound, and a child that hits it fails). On one
//!   server, and on a 3-primary cluster with the accounts in many slots
//!   (there also: names in one slot and in several in one multi-lock, and
//!   a Redisson holder of the later slot's name: the earlier slot's lock is
//!   not held while the multi-lock waits, and DEL + SPUBLISH wakes it).
//! - A Redisson-style `RLock` holder (HINCRBY + PEXPIRE by a raw
//!   connection) on one of the names blocks the multi-lock, which takes
//!   none of the others meanwhile; its unlock (DEL + PUBLISH 0 on the
//!   lock's channel) wakes it at once. And the multi-lock's locks exclude
//!   a Redisson-style attempt.
//! - The guard: one fencing token per lock, `is_held`, `lost` when one of
//!   the locks is deleted, release and drop free every lock; a shutdown
//!   gives every lock of a multi-guard back; the in-memory server runs it.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use lock_core::LockClient;
use lock_tests::RedisCluster;

use crate::support::{self, cmd, env_var, raw, spawn_child};

const ROLE: &str = "LOCK_TEST_MULTI_ROLE";
const URL: &str = "LOCK_TEST_MULTI_URL";
const RAW: &str = "LOCK_TEST_MULTI_RAW";
const SEED: &str = "LOCK_TEST_MULTI_SEED";
const TRANSFERS: &str = "LOCK_TEST_MULTI_TRANSFERS";

const ACCOUNTS: usize = 20;
const OPENING: i64 = 1_000;
const PROCESSES: usize = 4;
/// Tasks per child process, each with its own transfers.
const TASKS: usize = 2;

/// The lock of account `i`: its own hash tag, so that on a cluster the
/// accounts spread over the slots; its balance and observer keys share
/// the tag (and the slot).
fn account(i: usize) -> String {
    format!("account:{{{i}}}")
}

fn balance(i: usize) -> String {
    format!("balance:{{{i}}}")
}

fn inside(i: usize) -> String {
    format!("inside:{{{i}}}")
}

/// A raw connection (not the library's): one server's, or a cluster's.
#[derive(Clone)]
enum Raw {
    One(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Raw {
    async fn open(urls: &str) -> Raw {
        let urls: Vec<&str> = urls.split(',').collect();
        if urls.len() == 1 {
            let client = redis::Client::open(urls[0]).unwrap_or_else(|e| panic!("{e}"));
            Raw::One(
                client
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap_or_else(|e| panic!("raw: {e}")),
            )
        } else {
            Raw::Cluster(
                redis::cluster::ClusterClient::new(urls)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .get_async_connection()
                    .await
                    .unwrap_or_else(|e| panic!("raw cluster: {e}")),
            )
        }
    }

    async fn cmd<T: redis::FromRedisValue>(&mut self, args: &[&str]) -> T {
        match self {
            Raw::One(c) => cmd(c, args).await,
            Raw::Cluster(c) => cmd(c, args).await,
        }
    }
}

/// Entry point of the child processes; does nothing unless started by a
/// test below with a role.
#[test]
#[ignore = "entry point of child processes started by the multi-lock tests"]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(async {
        match role.as_str() {
            "transfer" => child_transfers().await,
            other => panic!("unknown role {other}"),
        }
    });
}

/// `TASKS` tasks, each `TRANSFERS` transfers between two random accounts
/// (`from` and `to` in either order), each under a multi-lock of both
/// (wait bound 20 s: a deadlock fails the child). Prints `DONE <n>
/// <longest wait in ms>` per task.
async fn child_transfers() {
    let client = LockClient::builder(env_var(URL))
        .watchdog_timeout(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"));
    let transfers: usize = env_var(TRANSFERS).parse().unwrap_or(1);
    let seed: u64 = env_var(SEED).parse().unwrap_or(1);
    let raw = Raw::open(&env_var(RAW)).await;
    let mut handles = Vec::new();
    for t in 0..TASKS as u64 {
        let (client, mut raw) = (client.clone(), raw.clone());
        let mut rng =
            seed.wrapping_mul(6_364_136_223_846_793_005) ^ ((t + 1) * 1_442_695_040_888_963_407);
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        handles.push(tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            for _ in 0..transfers {
                let from = next(ACCOUNTS as u64) as usize;
                let to = (from + 1 + next(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
                let amount = 1 + next(50) as i64;
                let both = client
                    .multi_lock([account(from), account(to)])
                    .unwrap_or_else(|e| panic!("{e}"));
                let asked = Instant::now();
                let guard = both
                    .acquire_timeout(Duration::from_secs(20))
                    .await
                    .unwrap_or_else(|e| panic!("transfer {from} -> {to}: {e}"));
                longest = longest.max(asked.elapsed());
                for i in [from, to] {
                    let n: i64 = raw.cmd(&["INCR", &inside(i)]).await;
                    if n != 1 {
                        let _: i64 = raw.cmd(&["INCR", "inside:violations"]).await;
                    }
                }
                let a: i64 = raw.cmd(&["GET", &balance(from)]).await;
                let b: i64 = raw.cmd(&["GET", &balance(to)]).await;
                // a pause between the read and the write: a second holder
                // of either account would lose an update
                tokio::time::sleep(Duration::from_millis(1 + next(3))).await;
                let _: () = raw
                    .cmd(&["SET", &balance(from), &(a - amount).to_string()])
                    .await;
                let _: () = raw
                    .cmd(&["SET", &balance(to), &(b + amount).to_string()])
                    .await;
                for i in [from, to] {
                    let _: i64 = raw.cmd(&["DECR", &inside(i)]).await;
                }
                guard
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("release: {e}"));
            }
            println!("DONE {transfers} {}", longest.as_millis());
        }));
    }
    for h in handles {
        h.await.unwrap_or_else(|e| panic!("task: {e}"));
    }
}

/// Child processes, killed when the test ends (also when it fails).
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs the transfer children against `url` (the library's) with `raw`
/// (their raw connections' node URLs, comma-separated) and checks the
/// invariants with `observer`; returns (transfers, longest wait ms, run time).
async fn transfers(
    url: &str,
    raw_urls: &str,
    observer: &mut Raw,
    per_task: usize,
) -> (usize, u64, Duration) {
    for i in 0..ACCOUNTS {
        let _: () = observer
            .cmd(&["SET", &balance(i), &OPENING.to_string()])
            .await;
    }
    let started = Instant::now();
    let mut kids = Kids(
        (0..PROCESSES)
            .map(|p| {
                spawn_child(
                    module_path!(),
                    &[
                        (ROLE, "transfer".to_string()),
                        (URL, url.to_string()),
                        (RAW, raw_urls.to_string()),
                        (SEED, (p as u64 * 7_919 + 17).to_string()),
                        (TRANSFERS, per_task.to_string()),
                    ],
                    Stdio::null(),
                )
            })
            .collect(),
    );
    // bounded: a deadlocked child would fail its own wait bound (20 s)
    let mut outputs = Vec::new();
    for child in kids.0.iter_mut() {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    assert!(status.success(), "a transfer child failed: {status}");
                    break;
                }
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => panic!("a transfer child did not finish in 90 s: {other:?}"),
            }
        }
        let mut out = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            use std::io::Read;
            let _ = stdout.read_to_string(&mut out);
        }
        outputs.push(out);
    }
    let elapsed = started.elapsed();
    let mut done = 0;
    let mut longest = 0u64;
    for out in &outputs {
        for line in out.lines() {
            let line = match line.rfind("DONE ") {
                Some(at) => &line[at..],
                None => continue,
            };
            let mut parts = line.split_whitespace().skip(1);
            done += parts
                .next()
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            longest = longest.max(parts.next().and_then(|n| n.parse().ok()).unwrap_or(0));
        }
    }
    assert_eq!(
        done,
        PROCESSES * TASKS * per_task,
        "every task reported its transfers done: {outputs:?}"
    );
    // the independent observer: the balances and the marks, read raw
    let mut sum = 0;
    for i in 0..ACCOUNTS {
        let b: i64 = observer.cmd(&["GET", &balance(i)]).await;
        sum += b;
        let n: i64 = observer.cmd(&["GET", &inside(i)]).await;
        assert_eq!(n, 0, "account {i}: nobody left inside");
    }
    let violations: Option<i64> = observer.cmd(&["GET", "inside:violations"]).await;
    assert_eq!(violations.unwrap_or(0), 0, "two holders inside one account");
    assert_eq!(
        sum,
        OPENING * ACCOUNTS as i64,
        "the sum of the balances is conserved"
    );
    // and no lock is left behind
    for i in 0..ACCOUNTS {
        let held: i64 = observer.cmd(&["EXISTS", &account(i)]).await;
        assert_eq!(held, 0, "account {i}'s lock was released");
    }
    (done, longest, elapsed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_transferring_between_twenty_accounts_never_deadlock_nor_lose_an_update() {
    let server = support::server();
    let mut observer = Raw::One(raw(&server).await);
    let per_task = 60;
    let (done, longest, elapsed) =
        transfers(&server.url(), &server.url(), &mut observer, per_task).await;
    eprintln!(
        "multi-lock transfers, one server: {done} transfers by {PROCESSES} processes x {TASKS} tasks in {elapsed:?} ({:.0}/s), longest wait {longest} ms; sum conserved, no overlap",
        done as f64 / elapsed.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_transfers_across_slots_never_deadlock_nor_lose_an_update() {
    let c: RedisCluster = support::cluster(3, 0);
    let slots: std::collections::BTreeSet<u16> = (0..ACCOUNTS)
        .map(|i| c.key_slot(&account(i)).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let primaries: std::collections::BTreeSet<usize> = slots
        .iter()
        .map(|s| c.primary_for_slot(*s).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert_eq!(slots.len(), ACCOUNTS, "every account in a slot of its own");
    assert_eq!(primaries.len(), 3, "the accounts spread over every primary");
    let raw_urls = c.urls().join(",");
    let mut observer = Raw::open(&raw_urls).await;
    let per_task = 40;
    let (done, longest, elapsed) = transfers(&c.url(), &raw_urls, &mut observer, per_task).await;
    eprintln!(
        "multi-lock transfers, 3-primary cluster ({} slots): {done} transfers by {PROCESSES} processes x {TASKS} tasks in {elapsed:?} ({:.0}/s), longest wait {longest} ms; sum conserved, no overlap",
        slots.len(),
        done as f64 / elapsed.as_secs_f64()
    );
    // also a multi-lock of names in several slots and in one slot at once
    let client = LockClient::builder(c.url())
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let names = ["m:{1}:a", "m:{1}:b", "m:{2}", "m:{3}"];
    let guard = client
        .multi_lock(names)
        .expect("names")
        .acquire_timeout(Duration::from_secs(5))
        .await
        .expect("acquire");
    for name in names {
        let fields: std::collections::HashMap<String, String> =
            observer.cmd(&["HGETALL", name]).await;
        let owner = guard
            .guards()
            .iter()
            .find(|g| g.name() == name)
            .map(|g| g.owner_id().to_string())
            .expect("a guard per name");
        assert_eq!(fields, [(owner, "1".to_string())].into(), "{name}");
    }
    guard.release().await.expect("release");
    for name in names {
        let n: i64 = observer.cmd(&["EXISTS", name]).await;
        assert_eq!(n, 0, "{name} released");
    }
    // A Redisson holder (DEL + SPUBLISH 0 to unlock, as Redisson does on a
    // cluster with sharded pub/sub) of the name in the later slot: the
    // group of the earlier slot is taken, released, and not held while the
    // multi-lock waits; the unlock wakes it.
    let (early, late) = {
        let (x, y) = ("w:{1}", "w:{2}");
        let (sx, sy) = (
            c.key_slot(x).unwrap_or_else(|e| panic!("{e}")),
            c.key_slot(y).unwrap_or_else(|e| panic!("{e}")),
        );
        if sx < sy {
            (x, y)
        } else {
            (y, x)
        }
    };
    let _: i64 = observer.cmd(&["HINCRBY", late, "java-uuid:1", "1"]).await;
    let _: i64 = observer.cmd(&["PEXPIRE", late, "30000"]).await;
    let both = client.multi_lock([early, late]).expect("names");
    assert_eq!(both.names(), [early, late], "taken in slot order");
    let waiter = tokio::spawn(async move {
        let guard = both
            .acquire_timeout(Duration::from_secs(20))
            .await
            .expect("acquire");
        (guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "blocked by the holder of {late}");
    let held: i64 = observer.cmd(&["EXISTS", early]).await;
    assert_eq!(held, 0, "{early} is not held while the multi-lock waits");
    let unlocked = Instant::now();
    let _: i64 = observer.cmd(&["DEL", late]).await;
    let channel = format!("redisson_lock__channel:{late}");
    let _: i64 = observer.cmd(&["SPUBLISH", &channel, "0"]).await;
    let (guard, got_at) = crate::support::within(Duration::from_secs(5), "woken", waiter)
        .await
        .expect("task");
    let woke = got_at.duration_since(unlocked);
    assert!(
        woke < Duration::from_secs(2),
        "woken by the unlock: {woke:?}"
    );
    assert!(guard.is_held());
    guard.release().await.expect("release");
    eprintln!(
        "multi-lock across two slots woken {woke:?} after a Redisson unlock (DEL + SPUBLISH)"
    );
}

/// A Redisson `RLock.tryLock` by a raw connection (its lock script's
/// grant rule): `None` when taken, the PTTL when held by another.
async fn redisson_try_lock(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    field: &str,
) -> Option<i64> {
    redis::Script::new(
        "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
           redis.call('hincrby', KEYS[1], ARGV[2], 1); \
           redis.call('pexpire', KEYS[1], ARGV[1]); \
           return nil; \
         end; \
         return redis.call('pttl', KEYS[1]);",
    )
    .key(name)
    .arg(30_000)
    .arg(field)
    .invoke_async(conn)
    .await
    .unwrap_or_else(|e| panic!("redisson tryLock: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_holder_blocks_the_multi_lock_and_its_unlock_wakes_it() {
    let server = support::server();
    let client = support::client_for(&server, 30_000);
    let mut conn = raw(&server).await;
    let java = "5f0c7a3e-6b8d-4c21-9a57-0e4f1b2c3d4e:1";
    // a Java RLock holds `acct-b` (30 s lease)
    assert_eq!(redisson_try_lock(&mut conn, "acct-b", java).await, None);
    let both = client.multi_lock(["acct-b", "acct-a"]).expect("names");
    assert_eq!(both.names(), ["acct-a", "acct-b"]);
    // one attempt: busy, nothing taken
    assert!(both.try_acquire().await.expect("try").is_none());
    let a: i64 = cmd(&mut conn, &["EXISTS", "acct-a"]).await;
    assert_eq!(a, 0, "a busy multi-lock takes none of its locks");
    let waiter = tokio::spawn({
        let both = both.clone();
        async move {
            let guard = both
                .acquire_timeout(Duration::from_secs(20))
                .await
                .expect("acquire");
            (guard, Instant::now())
        }
    });
    // it waits, holding nothing
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!waiter.is_finished(), "blocked by the Redisson holder");
    let a: i64 = cmd(&mut conn, &["EXISTS", "acct-a"]).await;
    assert_eq!(a, 0, "a waiting multi-lock holds none of its locks");
    // Redisson's unlock: the hash deleted, `0` published on its channel
    let unlocked = Instant::now();
    let _: i64 = cmd(&mut conn, &["DEL", "acct-b"]).await;
    let _: i64 = cmd(
        &mut conn,
        &["PUBLISH", "redisson_lock__channel:{acct-b}", "0"],
    )
    .await;
    let (guard, got_at) = support::within(Duration::from_secs(5), "woken by the unlock", waiter)
        .await
        .expect("task");
    let woke = got_at.duration_since(unlocked);
    assert!(
        woke < Duration::from_secs(2),
        "woken by the unlock message, not the 30 s PTTL: {woke:?}"
    );
    // held as two normal RLock holds: the Java client is excluded now
    assert!(guard.is_held());
    for g in guard.guards() {
        let fields: std::collections::HashMap<String, String> =
            cmd(&mut conn, &["HGETALL", g.name()]).await;
        assert_eq!(fields, [(g.owner_id().to_string(), "1".to_string())].into());
        assert!(g.owner_id().starts_with(client.client_id()));
        let pttl: i64 = cmd(&mut conn, &["PTTL", g.name()]).await;
        assert!(pttl > 20_000, "the watchdog's lease: {pttl}");
    }
    let busy = redisson_try_lock(&mut conn, "acct-a", java).await;
    assert!(
        busy.is_some_and(|p| p > 0),
        "a Java RLock is excluded: {busy:?}"
    );
    guard.release().await.expect("release");
    assert_eq!(redisson_try_lock(&mut conn, "acct-a", java).await, None);
    eprintln!("multi-lock woken {woke:?} after a Redisson unlock (its PTTL was 30 s)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_has_a_token_per_lock_one_lost_signal_and_frees_every_lock() {
    let server = support::server();
    // a 1.5 s watchdog: renewals every 500 ms keep it through a loaded
    // machine's stalls (900 ms failed once under two concurrent builds)
    let client = support::client_for(&server, 1_500);
    let mut conn = raw(&server).await;
    let names = ["g:c", "g:a", "g:b", "g:a"];
    let multi = client.multi_lock(names).expect("names");
    assert_eq!(multi.names(), ["g:a", "g:b", "g:c"], "sorted, deduplicated");
    // empty and bad names are refused
    let none: [&str; 0] = [];
    assert!(client
        .multi_lock(none)
        .expect_err("an error")
        .is_invalid_input());
    assert!(client
        .multi_lock(["ok", ""])
        .expect_err("an error")
        .is_invalid_input());

    let first = multi.acquire().await.expect("acquire");
    let tokens: Vec<u64> = first.guards().iter().map(|g| g.fencing_token()).collect();
    assert_eq!(first.fencing_token("g:b"), Some(tokens[1]));
    assert_eq!(first.fencing_token("nope"), None);
    assert!(first.is_held() && first.ensure_held().is_ok());
    assert!(first.remaining() > Duration::from_millis(800));
    // another client's multi-lock over an overlapping set waits, and a
    // single lock of one of the names is excluded
    let other = support::client_for(&server, 1_500);
    assert!(other
        .multi_lock(["g:c", "g:z"])
        .expect("names")
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    assert!(other
        .lock("g:b")
        .expect("name")
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    // renewed past a lease
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(first.is_held(), "renewed by the watchdog");
    first.release().await.expect("release");
    for name in ["g:a", "g:b", "g:c"] {
        let n: i64 = cmd(&mut conn, &["EXISTS", name]).await;
        assert_eq!(n, 0, "{name} released");
    }
    // tokens grow with every new hold of each lock
    let second = multi.acquire().await.expect("again");
    for (g, before) in second.guards().iter().zip(&tokens) {
        assert!(g.fencing_token() > *before, "{}'s token grew", g.name());
    }
    // one lock deleted under it: lost (by the next renewal, a third of 1.5 s)
    let _: i64 = cmd(&mut conn, &["DEL", "g:b"]).await;
    support::within(Duration::from_secs(4), "lost after a DEL", second.lost()).await;
    assert!(!second.is_held());
    let err = second.ensure_held().expect_err("an error");
    assert!(err.is_lost(), "{err}");
    let err = second.release().await.expect_err("an error");
    assert!(err.is_lost(), "{err}");
    for name in ["g:a", "g:c"] {
        let n: i64 = cmd(&mut conn, &["EXISTS", name]).await;
        assert_eq!(n, 0, "{name} released all the same");
    }
    // a dropped guard frees every lock in the background
    let third = multi.acquire().await.expect("third");
    drop(third);
    let freed = support::eventually(Duration::from_secs(3), || {
        let mut c = conn.clone();
        async move { cmd::<i64, _>(&mut c, &["EXISTS", "g:a", "g:b", "g:c"]).await == 0 }
    })
    .await;
    assert!(freed.is_some(), "a dropped guard frees every lock");
    assert_eq!(client.renewing_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_gives_back_every_lock_of_a_multi_guard() {
    let server = support::server();
    let client = support::client_for(&server, 30_000);
    let mut conn = raw(&server).await;
    let guard = client
        .multi_lock(["s:a", "s:b"])
        .expect("names")
        .acquire()
        .await
        .expect("acquire");
    let report = client.shutdown(Duration::from_secs(5)).await;
    assert!(report.is_complete(), "{report:?}");
    let n: i64 = cmd(&mut conn, &["EXISTS", "s:a", "s:b"]).await;
    assert_eq!(n, 0, "both locks given back by the shutdown");
    assert!(!guard.is_held());
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_memory_server_runs_the_multi_lock() {
    let server = lock_core::MemoryServer::new();
    let client = LockClient::builder(server.url())
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .expect("client");
    let other = LockClient::builder(server.url()).build().expect("client");
    let both = client.multi_lock(["m:x", "m:y"]).expect("names");
    let guard = both.acquire().await.expect("acquire");
    assert!(other
        .multi_lock(["m:y", "m:z"])
        .expect("names")
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    assert!(other
        .lock("m:x")
        .expect("name")
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    // a waiter is woken by the release (before the 600 ms lease runs out)
    let waiter = tokio::spawn({
        let m = other.multi_lock(["m:y", "m:x"]).expect("names");
        async move { m.acquire_timeout(Duration::from_secs(5)).await }
    });
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!waiter.is_finished(), "renewed: still held");
    guard.release().await.expect("release");
    let theirs = support::within(Duration::from_secs(2), "woken", waiter)
        .await
        .expect("task")
        .expect("acquire");
    theirs.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_wait_that_passes_while_a_lock_is_held_is_a_wait_timeout() {
    let server = support::server();
    let client = support::client_for(&server, 30_000);
    let other = support::client_for(&server, 30_000);
    let mut conn = raw(&server).await;
    let multi = client.multi_lock(["w:a", "w:b"]).expect("names");
    // held by another client, then by this client's own single lock
    for holder in [&other, &client] {
        let held = holder
            .lock("w:b")
            .expect("name")
            .acquire()
            .await
            .expect("acquire");
        for wait_ms in [50, 200, 700] {
            let wait = Duration::from_millis(wait_ms);
            let started = Instant::now();
            let err = support::within(
                Duration::from_secs(10),
                "bounded multi-lock wait",
                multi.acquire_timeout(wait),
            )
            .await
            .expect_err("w:b is held");
            let took = started.elapsed();
            assert!(err.is_wait_timeout(), "waited {wait:?}: {err:?}");
            assert!(took >= wait, "gave up after {took:?} of {wait:?}");
            let n: i64 = cmd(&mut conn, &["EXISTS", "w:a"]).await;
            assert_eq!(n, 0, "w:a held while waiting");
        }
        held.release().await.expect("release");
    }
    let guard = multi
        .acquire_timeout(Duration::from_secs(2))
        .await
        .expect("both free");
    guard.release().await.expect("release");
}
