//! Semaphore permits held by processes that are killed (SIGKILL) mid-run.
//!
//! Three child processes (this test binary, started with `--ignored
//! --exact <this module>::child_process` and a role in the environment,
//! as `engine/cross_process.rs` does) take permits in bounded loops with
//! random hold times, each marking its critical section in an observer
//! kept in Redis by a script on its own connection (`SemInside`: the
//! highest count inside is recorded there). One child is killed mid-run:
//!
//! - expirable permits: never more than N inside, and the killed child's
//!   permits are back after one lease (the watchdog's, 1 s);
//! - plain permits have no lease (Redisson's `RSemaphore`): the killed
//!   child's permits are lost for good — `available == N - held by the
//!   killed child` — until someone adds them back.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lock_core::LockClient;

use crate::support::redisson_sem::raw_id;
use crate::support::sem::{sem_state, AnySem, Kind, SemInside};
use crate::support::{self, env_var, raw};

const ROLE: &str = "LOCK_TEST_CHILD_ROLE";
const URL: &str = "LOCK_TEST_URL";
const NAME: &str = "LOCK_TEST_NAME";
const KIND: &str = "LOCK_TEST_KIND";
const OWNER: &str = "LOCK_TEST_OWNER";
const TASKS: &str = "LOCK_TEST_TASKS";
const ROUNDS: &str = "LOCK_TEST_ROUNDS";
const RUN_MS: &str = "LOCK_TEST_RUN_MS";
const PERMITS: &str = "LOCK_TEST_PERMITS";
const HOLD: &str = "LOCK_TEST_HOLD";

/// The watchdog of every child (the expirable permits' lease).
const WATCHDOG: Duration = Duration::from_secs(1);

/// Entry point of the child processes; does nothing unless started by a
/// test below with a role.
#[test]
#[ignore = "entry point of child processes started by the semaphore kill tests"]
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
            "loop" => child_loop().await,
            "hold" => child_hold().await,
            other => panic!("unknown role {other}"),
        }
    });
}

fn kind_from_env() -> Kind {
    match env_var(KIND).as_str() {
        "plain" => Kind::Plain,
        _ => Kind::Expirable,
    }
}

fn child_client() -> LockClient {
    LockClient::builder(env_var(URL))
        .watchdog_timeout(WATCHDOG)
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn observer(client: &LockClient) -> SemInside {
    let redis = redis::Client::open(client.config().url.as_str()).unwrap_or_else(|e| panic!("{e}"));
    let conn = redis
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let limit: i64 = env_var(PERMITS).parse().unwrap_or(0);
    SemInside::attach(conn, &env_var(NAME), limit)
}

/// Each task: acquire one permit, enter the observer, say `IN <ids>`,
/// hold 2 to 25 ms (random), say `OUT <ids>`, leave, release; for a
/// bounded number of rounds and time.
async fn child_loop() {
    let client = child_client();
    let tasks: u64 = env_var(TASKS).parse().unwrap_or(1);
    let rounds: usize = env_var(ROUNDS).parse().unwrap_or(1);
    let run_ms: u64 = env_var(RUN_MS).parse().unwrap_or(1000);
    let stop = Instant::now() + Duration::from_millis(run_ms);
    let (name, owner, kind) = (env_var(NAME), env_var(OWNER), kind_from_env());
    let mut handles = Vec::new();
    for t in 0..tasks {
        let sem = AnySem::of(&client, kind, &name);
        let mut seen = observer(&client).await;
        let owner = owner.clone();
        let mut rng = u64::from(std::process::id()) * 7919 + t * 104_729 + 1;
        handles.push(tokio::spawn(async move {
            for _ in 0..rounds {
                if Instant::now() > stop {
                    break;
                }
                let permit = sem
                    .acquire_timeout(1, Duration::from_secs(10))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                seen.enter(&owner, 1).await;
                let ids = permit.ids().join(",");
                println!("IN {ids}");
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                tokio::time::sleep(Duration::from_millis(2 + rng % 24)).await;
                println!("OUT {ids}");
                seen.leave(&owner, 1).await;
                permit.release().await.unwrap_or_else(|e| panic!("{e}"));
            }
        }));
    }
    for h in handles {
        h.await.unwrap_or_else(|e| panic!("task: {e}"));
    }
}

/// Acquire `HOLD` permits, enter the observer with them, say `HELD
/// <count>`, then hold until killed.
async fn child_hold() {
    let client = child_client();
    let n: u32 = env_var(HOLD).parse().unwrap_or(1);
    let sem = AnySem::of(&client, kind_from_env(), &env_var(NAME));
    let permits = sem
        .acquire_timeout(n, Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut seen = observer(&client).await;
    seen.enter(&env_var(OWNER), i64::from(n)).await;
    println!("HELD {}", permits.count());
    tokio::time::sleep(Duration::from_secs(60)).await;
    drop(permits);
}

/// Child processes, killed when the test ends (also when it fails).
struct Kids(Vec<(Child, mpsc::Receiver<String>)>);

impl Drop for Kids {
    fn drop(&mut self) {
        for (child, _) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A child with `envs`, and its stdout lines (read by a thread until the
/// child's end; the test harness's prefix taken off).
fn spawn(envs: &[(&str, String)]) -> (Child, mpsc::Receiver<String>) {
    let mut child = support::spawn_child(module_path!(), envs, Stdio::null());
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("piped stdout"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // the first line follows the test harness's `test <name> ... `
            let line = match line.rfind("... ") {
                Some(at) => line[at + 4..].to_string(),
                None => line,
            };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

fn envs(role: &str, url: &str, name: &str, kind: Kind, owner: &str) -> Vec<(&'static str, String)> {
    vec![
        (ROLE, role.to_string()),
        (URL, url.to_string()),
        (NAME, name.to_string()),
        (KIND, kind.label().to_string()),
        (OWNER, owner.to_string()),
        (TASKS, "3".to_string()),
        (ROUNDS, "150".to_string()),
        (RUN_MS, "3500".to_string()),
    ]
}

/// Waits (bounded) for `child` to exit successfully.
async fn finishes(child: &mut Child, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                assert!(status.success(), "child failed: {status}");
                return;
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

/// The ids a child said it holds (`IN`) and not yet let go of (`OUT`),
/// from `lines` so far, adding to `held`.
fn track(lines: &mpsc::Receiver<String>, held: &mut BTreeSet<String>, wait: Duration) -> bool {
    let mut seen = false;
    let deadline = Instant::now() + wait;
    while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        seen = true;
        if let Some(ids) = line.strip_prefix("IN ") {
            held.extend(ids.split(',').map(str::to_string));
        } else if let Some(ids) = line.strip_prefix("OUT ") {
            for id in ids.split(',') {
                held.remove(id);
            }
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_never_lets_more_than_n_in_and_its_expirable_permits_come_back_after_one_lease(
) {
    let server = support::server();
    let n: i64 = 4;
    let name = "xp:sem:kill";
    let judge = support::client_for(&server, 1_000);
    let sem = judge.permit_semaphore(name).expect("name");
    assert!(sem.try_set_permits(n as u64).await.expect("set"));
    let mut seen = SemInside::new(&server, name, n).await;
    let conn = raw(&server).await;
    let mut children = Kids(
        (0..3)
            .map(|i| {
                let mut e = envs(
                    "loop",
                    &server.url(),
                    name,
                    Kind::Expirable,
                    &format!("child{i}"),
                );
                e.push((PERMITS, n.to_string()));
                spawn(&e)
            })
            .collect(),
    );
    // mid-run: the victim's lines until it holds something, then SIGKILL
    let started = Instant::now();
    let mut held = BTreeSet::new();
    let (victim, victim_lines) = &mut children.0[2];
    while started.elapsed() < Duration::from_millis(800) {
        track(victim_lines, &mut held, Duration::from_millis(20));
    }
    let limit = Instant::now() + Duration::from_secs(5);
    while held.is_empty() && Instant::now() < limit {
        track(victim_lines, &mut held, Duration::from_millis(1));
    }
    victim.kill().unwrap_or_else(|e| panic!("kill: {e}"));
    let killed_at = Instant::now();
    let _ = victim.wait();
    // what it held when it died: said IN, never said OUT (it releases
    // only after saying OUT)
    track(victim_lines, &mut held, Duration::from_millis(200));
    assert!(!held.is_empty(), "the victim was killed holding permits");
    let mut c = conn.clone();
    for id in &held {
        // (stored as 16 bytes; said in hex)
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(format!("{{{name}}}:timeout"))
            .arg(raw_id(id))
            .query_async(&mut c)
            .await
            .unwrap_or_else(|e| panic!("ZSCORE {id}: {e}"));
        assert!(
            score.is_some(),
            "a killed holder's permit {id} is still held"
        );
    }
    // its sections ended with it (bytes it sent before dying are in)
    tokio::time::sleep(Duration::from_millis(100)).await;
    let forgot = seen.inside_of("child2").await;
    seen.forget("child2").await;
    // its permits come back within a lease (reclaimed lazily by the
    // others' calls and by `available`)
    let back = support::eventually(Duration::from_secs(4), || async {
        let ids = sem_state(&conn, name).await.ids;
        held.iter().all(|id| !ids.contains(id))
    })
    .await
    .map(|_| killed_at.elapsed());
    for (child, _) in children.0.iter_mut().take(2) {
        finishes(child, Duration::from_secs(30)).await;
    }
    let available = support::eventually(Duration::from_secs(3), || async {
        sem.available().await.expect("available") == n as u64
    })
    .await;
    let end = sem_state(&conn, name).await;
    let (max, violations, entries) = (
        seen.max().await,
        seen.violations().await,
        seen.entries().await,
    );
    eprintln!(
        "sem kill (expirable): {entries} sections, most inside {max}/{n}; the victim held {} permits ({forgot} inside) when killed, back {back:?} after the kill (lease {WATCHDOG:?}); end {end:?}; {:?}",
        held.len(),
        started.elapsed()
    );
    assert_eq!(violations, 0, "more than {n} inside");
    assert!((2..=n).contains(&max), "most inside: {max}");
    let back = back.expect("the killed child's permits came back");
    // not before its lease ran out (renewed every third of it), and
    // soon after
    assert!(
        back >= WATCHDOG / 2 && back <= WATCHDOG + Duration::from_millis(1_500),
        "back after {back:?}"
    );
    assert!(available.is_some(), "all {n} available at the end: {end:?}");
    assert!(end.ids.is_empty(), "{end:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_loses_its_plain_permits_as_redissons_do() {
    let server = support::server();
    let (n, victim_holds) = (4i64, 2u32);
    let name = "xp:sem:kill-plain";
    let judge = support::client_for(&server, 1_000);
    let sem = judge.semaphore(name).expect("name");
    assert!(sem.try_set_permits(n as u64).await.expect("set"));
    let mut seen = SemInside::new(&server, name, n).await;
    let conn = raw(&server).await;
    let started = Instant::now();
    let mut children = Kids(
        (0..2)
            .map(|i| {
                let mut e = envs(
                    "loop",
                    &server.url(),
                    name,
                    Kind::Plain,
                    &format!("child{i}"),
                );
                e.push((PERMITS, n.to_string()));
                spawn(&e)
            })
            .collect(),
    );
    let mut e = envs("hold", &server.url(), name, Kind::Plain, "child2");
    e.push((PERMITS, n.to_string()));
    e.push((HOLD, victim_holds.to_string()));
    children.0.push(spawn(&e));
    let (victim, victim_lines) = &mut children.0[2];
    let said_by = Instant::now() + Duration::from_secs(15);
    let said = std::iter::from_fn(|| {
        victim_lines
            .recv_timeout(said_by.saturating_duration_since(Instant::now()))
            .ok()
    })
    .find(|l| l.starts_with("HELD "))
    .unwrap_or_else(|| panic!("the victim never said HELD"));
    assert_eq!(said, format!("HELD {victim_holds}"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    victim.kill().unwrap_or_else(|e| panic!("kill: {e}"));
    let _ = victim.wait();
    tokio::time::sleep(Duration::from_millis(100)).await;
    seen.forget("child2").await;
    for (child, lines) in children.0.iter_mut().take(2) {
        finishes(child, Duration::from_secs(30)).await;
        while lines.try_recv().is_ok() {}
    }
    // longer than any lease: plain permits have none
    tokio::time::sleep(WATCHDOG + Duration::from_millis(500)).await;
    let end = sem_state(&conn, name).await;
    let (max, violations, entries) = (
        seen.max().await,
        seen.violations().await,
        seen.entries().await,
    );
    eprintln!(
        "sem kill (plain): {entries} sections, most inside {max}/{n}; the victim held {victim_holds}: available {} at the end; {:?}",
        end.available,
        started.elapsed()
    );
    assert_eq!(violations, 0, "more than {n} inside");
    assert!((2..=n).contains(&max), "most inside: {max}");
    assert_eq!(
        end.available,
        n - i64::from(victim_holds),
        "the killed child's plain permits are lost (no lease)"
    );
    // its grant is the only one left (the others' all given back)
    assert_eq!(
        end.grants.values().copied().collect::<Vec<_>>(),
        vec![i64::from(victim_holds)],
        "{end:?}"
    );
    assert_eq!(
        sem.available().await.expect("available"),
        (n - i64::from(victim_holds)) as u64
    );
    // until someone adds them back
    assert_eq!(
        sem.add_permits(i64::from(victim_holds)).await.expect("add"),
        n as u64
    );
}
