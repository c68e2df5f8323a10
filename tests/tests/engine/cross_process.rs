//! Several real processes contend for one lock.
//!
//! The child processes are this test binary itself, started with
//! `--ignored --exact <this module>::child_process` (`support::spawn_child`)
//! and a role in the environment.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::{self, cmd, env_var, raw};
use lock_core::LockClient;
use tokio::time::Instant;

const ROLE: &str = "LOCK_TEST_CHILD_ROLE";
const URL: &str = "LOCK_TEST_URL";
const NAME: &str = "LOCK_TEST_NAME";
const TASKS: &str = "LOCK_TEST_TASKS";
const ROUNDS: &str = "LOCK_TEST_ROUNDS";
const WATCHDOG_MS: &str = "LOCK_TEST_WATCHDOG_MS";

fn spawn_child(envs: &[(&str, String)]) -> Child {
    support::spawn_child(module_path!(), envs, Stdio::null())
}

/// Entry point of the child processes; does nothing unless started by a
/// test below with a role.
#[test]
#[ignore = "entry point of child processes started by the cross-process tests"]
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
            "increment" => child_increment().await,
            "hold" => child_hold(false).await,
            "hold-read" => child_hold(true).await,
            other => panic!("unknown role {other}"),
        }
    });
}

/// Each task: acquire, check the "inside" marker, read-then-write the
/// counter, release; for a bounded number of rounds.
async fn child_increment() {
    let client = LockClient::builder(env_var(URL))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let tasks: usize = env_var(TASKS).parse().unwrap_or(1);
    let rounds: usize = env_var(ROUNDS).parse().unwrap_or(1);
    let name = env_var(NAME);
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let client = client.clone();
        let name = name.clone();
        handles.push(tokio::spawn(async move {
            let lock = client.lock(&name).unwrap_or_else(|e| panic!("{e}"));
            let redis =
                redis::Client::open(client.config().url.as_str()).unwrap_or_else(|e| panic!("{e}"));
            let mut conn = redis
                .get_multiplexed_async_connection()
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            for _ in 0..rounds {
                let guard = lock.acquire().await.unwrap_or_else(|e| panic!("{e}"));
                let entered: Option<String> =
                    cmd(&mut conn, &["SET", "xp:inside", "1", "NX"]).await;
                if entered.is_none() {
                    let _: i64 = cmd(&mut conn, &["INCR", "xp:violations"]).await;
                }
                let value: Option<i64> = cmd(&mut conn, &["GET", "xp:counter"]).await;
                tokio::task::yield_now().await;
                let next = (value.unwrap_or(0) + 1).to_string();
                let _: () = cmd(&mut conn, &["SET", "xp:counter", &next]).await;
                let _: i64 = cmd(&mut conn, &["DEL", "xp:inside"]).await;
                guard.release().await.unwrap_or_else(|e| panic!("{e}"));
            }
        }));
    }
    for h in handles {
        h.await.unwrap_or_else(|e| panic!("task: {e}"));
    }
}

/// Acquire the lock (or, `read`, the read side of the read-write lock) of
/// that name, say so on stdout with the owner id, then hold (renewed by
/// the watchdog) until killed.
async fn child_hold(read: bool) {
    let watchdog: u64 = env_var(WATCHDOG_MS).parse().unwrap_or(1000);
    let client = LockClient::builder(env_var(URL))
        .watchdog_timeout(Duration::from_millis(watchdog))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let lock = match read {
        true => client.rw_lock(env_var(NAME)).map(|rw| rw.read()),
        false => client.lock(env_var(NAME)),
    };
    let guard = lock
        .unwrap_or_else(|e| panic!("{e}"))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    println!("HELD {}", guard.owner_id());
    tokio::time::sleep(Duration::from_secs(60)).await;
    drop(guard);
}

/// Starts a child with `role`, waits for its "HELD <x>" line; returns the
/// child and `<x>`.
async fn held_by_child(role: &str, url: String, name: &str, watchdog_ms: u64) -> (Child, String) {
    let mut child = spawn_child(&[
        (ROLE, role.to_string()),
        (URL, url),
        (NAME, name.to_string()),
        (WATCHDOG_MS, watchdog_ms.to_string()),
    ]);
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("piped stdout"));
    let line = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|l| l.contains("HELD "))
    });
    let held = tokio::time::timeout(Duration::from_secs(30), line)
        .await
        .unwrap_or_else(|_| panic!("child never said HELD"))
        .unwrap_or_else(|e| panic!("reader: {e}"))
        .unwrap_or_else(|| panic!("child exited without holding"));
    let what = held.trim().trim_start_matches("HELD ").to_string();
    (child, what)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_reader_process_does_not_keep_a_writer_out_past_its_lease() {
    let server = support::server();
    let watchdog_ms = 1000u64;
    let (mut child, dead) = held_by_child("hold-read", server.url(), "xp:rw", watchdog_ms).await;
    // a reader of ours shares with the child, renewed all along
    let ours = support::client_for(&server, watchdog_ms)
        .rw_lock("xp:rw")
        .expect("name");
    let reader = ours
        .read()
        .acquire_timeout(Duration::from_secs(2))
        .await
        .expect("shares");
    let writer_client = support::client_for(&server, 30_000);
    let rw = writer_client.rw_lock("xp:rw").expect("name");
    let writer = tokio::spawn({
        let w = rw.write();
        async move { w.acquire_timeout(Duration::from_secs(20)).await }
    });
    child.kill().unwrap_or_else(|e| panic!("kill: {e}"));
    let _ = child.wait();
    // past the dead reader's lease (its timeout key expires; our renewals
    // never touch it, unlike Redisson's, which renew every reader's)
    tokio::time::sleep(Duration::from_millis(watchdog_ms + 500)).await;
    let mut conn = raw(&server).await;
    let its_key = format!("{{xp:rw}}:{dead}:rwlock_timeout:1");
    let pttl: i64 = cmd(&mut conn, &["PTTL", &its_key]).await;
    assert_eq!(pttl, -2, "the killed reader's timeout key expired");
    assert!(
        !writer.is_finished(),
        "our live reader still keeps the writer out"
    );
    assert!(reader.is_held());
    let released = Instant::now();
    reader.release().await.expect("release");
    let w = support::within(Duration::from_secs(3), "writer", writer)
        .await
        .expect("join")
        .expect("the writer gets in");
    assert!(
        released.elapsed() < Duration::from_millis(800),
        "the dead reader's field did not hold the writer: {:?}",
        released.elapsed()
    );
    w.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_of_eight_tasks_never_overlap_and_lose_no_update() {
    let server = support::server();
    let (children, tasks, rounds) = (3usize, 8usize, 12usize);
    let envs = vec![
        (ROLE, "increment".to_string()),
        (URL, server.url()),
        (NAME, "xp:lock".to_string()),
        (TASKS, tasks.to_string()),
        (ROUNDS, rounds.to_string()),
    ];
    let mut procs: Vec<Child> = (0..children).map(|_| spawn_child(&envs)).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    for child in &mut procs {
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    assert!(status.success(), "child failed: {status}");
                    break;
                }
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => {
                    let _ = child.kill();
                    panic!("child did not finish in time: {other:?}");
                }
            }
        }
    }
    let mut conn = raw(&server).await;
    let counter: i64 = cmd(&mut conn, &["GET", "xp:counter"]).await;
    let violations: Option<i64> = cmd(&mut conn, &["GET", "xp:violations"]).await;
    assert_eq!(violations, None, "two holders were inside at once");
    assert_eq!(counter, (children * tasks * rounds) as i64, "lost updates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_is_taken_over_after_the_watchdog_timeout() {
    let server = support::server();
    let watchdog_ms = 1000u64;
    let (mut child, _) = held_by_child("hold", server.url(), "xp:crash", watchdog_ms).await;

    let client = support::client_for(&server, 30_000);
    let lock = client.lock("xp:crash").unwrap_or_else(|e| panic!("{e}"));
    // Held and renewed: still locked after more than one watchdog timeout.
    tokio::time::sleep(Duration::from_millis(watchdog_ms + 300)).await;
    assert!(
        lock.try_acquire().await.expect("try").is_none(),
        "the child's lock expired while it lived"
    );

    child.kill().unwrap_or_else(|e| panic!("kill: {e}"));
    let _ = child.wait();
    let killed_at = Instant::now();
    let guard = lock
        .acquire_timeout(Duration::from_millis(watchdog_ms + 1500))
        .await
        .unwrap_or_else(|e| panic!("not taken over: {e}"));
    let took = killed_at.elapsed();
    assert!(
        took <= Duration::from_millis(watchdog_ms + 1500),
        "{took:?}"
    );
    guard.release().await.expect("release");
}
