//! The fair lock's holders and waiters in processes that are killed
//! (SIGKILL) or that just stop, beside live waiters of other processes and
//! of Redisson's protocol (`support/redisson_fair.rs`).
//!
//! Each lock-core waiter is a child process (this test binary, started with
//! `--ignored --exact <this module>::child_process` and its settings in the
//! environment, as `sem_kill.rs` does): it says `READY <client id>`, waits
//! for a `go` line on its stdin (so that the test orders the arrivals),
//! acquires, marks its section in [`FairInside`] (an observer kept in Redis
//! by its own script on its own connection: who is inside, the order of
//! the entries), says `IN <who> <owner> <ms>` (its clock, ms since the
//! epoch), holds, leaves, releases. Redisson's waiters run in the test
//! process on their own connections. Every test checks, through the
//! observer and raw reads of Redis, that nobody was ever inside with
//! another, that the live waiters got the lock in the order they arrived,
//! and that the queue, its deadlines and the liveness marks are empty at
//! the end.
//!
//! 1. The holder is killed with waiters queued: the next one gets the lock
//!    once the dead holder's lease ran out (one watchdog time-out, 600 ms)
//!    and not before.
//! 2. The waiter at the queue's head is killed: once the lock is freed, the
//!    dead waiter leaves when its liveness mark lapses (~3 s) and the next
//!    one, ours or Redisson's, gets the lock.
//! 3. A Redisson waiter at the head stops calling (its process died), with
//!    a short allowance (1.5 s): the next one gets the lock shortly after
//!    the dead head's deadline. When a grant ahead of the dead head moved
//!    everyone up, the time Redisson's next waiter was told runs out one
//!    allowance late, at its own deadline: only the free lock waking its
//!    head (`fair_acquire.lua`, told by our waiter's re-check behind it)
//!    keeps it from being dropped as dead and passed.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lock_core::LockClient;
use lock_tests::RedisServer;

use crate::support::fair_state::{fair_state, FairInside, FairState};
use crate::support::redisson_fair::{now_ms, RedissonFairLock};
use crate::support::{self, env_var, raw, within};

const ROLE: &str = "LOCK_TEST_CHILD_ROLE";
const URL: &str = "LOCK_TEST_URL";
const NAME: &str = "LOCK_TEST_NAME";
const WHO: &str = "LOCK_TEST_WHO";
const ALLOWANCE_MS: &str = "LOCK_TEST_ALLOWANCE_MS";
const HOLD_MS: &str = "LOCK_TEST_HOLD_MS";

/// The watchdog of every lock-core client here (a hold's lease).
const WATCHDOG: Duration = Duration::from_millis(600);

/// How long each live waiter holds the lock.
const HOLD: Duration = Duration::from_millis(150);

/// The default allowance (`fair_lock_wait_timeout`), in ms.
const DEFAULT_ALLOWANCE_MS: u64 = 300_000;

/// The lease a Redisson holder asks for (its watchdog's, in ms).
const JAVA_LEASE_MS: i64 = 30_000;

/// Entry point of the child processes; does nothing unless started by a
/// test below with a role.
#[test]
#[ignore = "entry point of child processes started by the fair lock kill tests"]
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
            "waiter" => child_waiter().await,
            other => panic!("unknown role {other}"),
        }
    });
}

fn client(url: &str, allowance_ms: u64) -> LockClient {
    LockClient::builder(url)
        .watchdog_timeout(WATCHDOG)
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .fair_lock_wait_timeout(Duration::from_millis(allowance_ms))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// A lock-core waiter: `READY <client id>`, a `go` line, then acquire,
/// enter, `IN <who> <owner> <ms>`, hold `HOLD_MS` (0: until killed),
/// leave, release, `OUT <who>`.
async fn child_waiter() {
    let (url, name, who) = (env_var(URL), env_var(NAME), env_var(WHO));
    let allowance: u64 = env_var(ALLOWANCE_MS)
        .parse()
        .unwrap_or(DEFAULT_ALLOWANCE_MS);
    let hold_ms: u64 = env_var(HOLD_MS).parse().unwrap_or(0);
    let client = client(&url, allowance);
    let lock = client.fair_lock(&name).unwrap_or_else(|e| panic!("{e}"));
    // connected before it says it is ready
    lock.fair_queue().await.unwrap_or_else(|e| panic!("{e}"));
    let conn = redis::Client::open(url.as_str())
        .unwrap_or_else(|e| panic!("{e}"))
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut seen = FairInside::attach(conn, &name);
    println!("READY {}", client.client_id());
    let go = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
    .unwrap_or_else(|e| panic!("stdin: {e}"));
    assert_eq!(go.trim(), "go", "{who}: told {go:?}");
    let guard = lock
        .acquire_timeout(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{who}: {e}"));
    let (alone, _) = seen.enter(&who).await;
    println!("IN {who} {} {}", guard.owner_id(), now_ms());
    assert!(alone, "{who}: two inside");
    if hold_ms == 0 {
        tokio::time::sleep(Duration::from_secs(60)).await;
    } else {
        tokio::time::sleep(Duration::from_millis(hold_ms)).await;
    }
    assert!(guard.is_held(), "{who}: the hold ended while inside");
    seen.leave(&who).await;
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("{who}: release: {e}"));
    println!("OUT {who}");
}

/// A child process of the tests below: its stdin (for `go`), its stdout
/// lines, its client id.
struct Kid {
    who: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    id: String,
}

impl Kid {
    /// Starts a waiter `who` on the fair lock `name`; returns once it is
    /// ready (connected).
    fn spawn(url: &str, name: &str, who: &str, allowance_ms: u64, hold_ms: u64) -> Kid {
        let envs = [
            (ROLE, "waiter".to_string()),
            (URL, url.to_string()),
            (NAME, name.to_string()),
            (WHO, who.to_string()),
            (ALLOWANCE_MS, allowance_ms.to_string()),
            (HOLD_MS, hold_ms.to_string()),
        ];
        let mut child = support::spawn_child(module_path!(), &envs, Stdio::piped());
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
        let stdin = child.stdin.take();
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
        let mut kid = Kid {
            who: who.to_string(),
            child,
            stdin,
            lines: rx,
            id: String::new(),
        };
        kid.id = kid.said("READY ", Duration::from_secs(20))[0].clone();
        kid
    }

    /// The words after `prefix` of the next line that starts with it.
    fn said(&mut self, prefix: &str, limit: Duration) -> Vec<String> {
        let until = Instant::now() + limit;
        loop {
            match self
                .lines
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.split(' ').map(str::to_string).collect();
                    }
                }
                Err(e) => panic!("{} never said {prefix:?}: {e}", self.who),
            }
        }
    }

    /// `IN <who> <owner> <ms>`: the owner id it holds under and when it
    /// got in (its clock, ms since the epoch).
    async fn granted(&mut self, limit: Duration) -> (String, i64) {
        let words = tokio::task::block_in_place(|| self.said("IN ", limit));
        (words[1].clone(), words[2].parse().expect("ms"))
    }

    fn go(&mut self) {
        let stdin = self.stdin.as_mut().unwrap_or_else(|| panic!("stdin"));
        writeln!(stdin, "go").unwrap_or_else(|e| panic!("{}: go: {e}", self.who));
        stdin
            .flush()
            .unwrap_or_else(|e| panic!("{}: go: {e}", self.who));
    }

    fn kill(&mut self) {
        self.child
            .kill()
            .unwrap_or_else(|e| panic!("kill {}: {e}", self.who));
        let _ = self.child.wait();
    }

    /// Waits (bounded) for it to exit successfully.
    async fn finishes(&mut self, limit: Duration) {
        let until = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    assert!(status.success(), "{} failed: {status}", self.who);
                    return;
                }
                Ok(None) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => panic!("{} did not finish in time: {other:?}", self.who),
            }
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (bounded) until the queue of `name` holds `n` entries and the
/// last one starts with `prefix` (a client id or a Redisson owner); the
/// queue then.
async fn joined(
    conn: &redis::aio::MultiplexedConnection,
    name: &str,
    n: usize,
    prefix: &str,
) -> Vec<String> {
    let mut last = FairState::default();
    for _ in 0..1_000 {
        last = fair_state(conn, name).await;
        if last.queue.len() == n && last.queue[n - 1].starts_with(prefix) {
            return last.queue;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{prefix} never joined {name}'s queue as number {n}: {last:?}");
}

/// The owner of the Redisson waiter J (`<uuid>:<thread>`).
const JAVA_OWNER: &str = "java-j:1";

/// A Redisson waiter in the test process ([`JAVA_OWNER`]): `lock_within`
/// (its wait for the message or the time told, within 20 s), then enters
/// as `J`, holds [`HOLD`], leaves and unlocks. Returns when it got in (ms
/// since the epoch).
fn java_waiter(
    server: &RedisServer,
    conn: redis::aio::MultiplexedConnection,
    seen: &FairInside,
    name: &str,
    allowance_ms: i64,
) -> tokio::task::JoinHandle<i64> {
    let mut java = RedissonFairLock::new(conn, &server.url(), name, allowance_ms);
    let (owner, who, mut seen) = (JAVA_OWNER.to_string(), "J".to_string(), seen.clone());
    let bound = Duration::from_secs(20);
    tokio::spawn(async move {
        assert!(
            java.lock_within(&owner, JAVA_LEASE_MS, bound).await,
            "{who} did not get the lock within {bound:?}"
        );
        let (alone, _) = seen.enter(&who).await;
        let at = now_ms();
        assert!(alone, "{who}: two inside");
        tokio::time::sleep(HOLD).await;
        seen.leave(&who).await;
        assert_eq!(java.unlock(&owner, JAVA_LEASE_MS).await, Some(1), "{who}");
        at
    })
}

/// Waits (bounded) until nothing is left of the lock `name`; the state.
async fn drained(conn: &redis::aio::MultiplexedConnection, name: &str) -> FairState {
    let mut last = FairState::default();
    for _ in 0..200 {
        last = fair_state(conn, name).await;
        if last.is_empty() {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{name} not drained: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observer_catches_two_inside_and_keeps_the_order() {
    // the checker itself, on a planted violation
    let server = support::server();
    let mut seen = FairInside::new(&server, "planted").await;
    assert!(seen.enter("x").await.0);
    assert!(!seen.enter("y").await.0, "y entered with x inside");
    seen.leave("y").await;
    seen.forget("x").await;
    assert!(seen.enter("z").await.0);
    let (n, what) = seen.violations().await;
    assert_eq!(n, 1);
    assert_eq!(what, vec!["y entered with x".to_string()]);
    assert_eq!(seen.order().await, ["x", "y", "z"]);
    assert_eq!(seen.inside().await, ["z"]);
    // and the raw read of the lock's keys, on a planted orphan
    let conn = raw(&server).await;
    assert!(fair_state(&conn, "planted").await.is_empty());
    let mut c = conn.clone();
    let _: () = support::cmd(
        &mut c,
        &["RPUSH", "redisson_lock_queue:{planted}", "gone:1"],
    )
    .await;
    let _: () = support::cmd(
        &mut c,
        &["ZADD", "lockcore_fair_alive:{planted}", "1", "gone:1"],
    )
    .await;
    let planted = fair_state(&conn, "planted").await;
    assert!(!planted.is_empty(), "{planted:?}");
    assert_eq!(planted.of("gone:"), ["gone:1"]);
    assert_eq!(planted.marks.get("gone:1"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_is_followed_by_the_next_in_line_after_one_lease() {
    let server = support::server();
    let url = server.url();
    let name = "fair:kill:holder";
    let conn = raw(&server).await;
    let mut seen = FairInside::new(&server, name).await;
    let mut a = Kid::spawn(&url, name, "A", DEFAULT_ALLOWANCE_MS, 0);
    let mut b = Kid::spawn(
        &url,
        name,
        "B",
        DEFAULT_ALLOWANCE_MS,
        HOLD.as_millis() as u64,
    );
    let mut c = Kid::spawn(
        &url,
        name,
        "C",
        DEFAULT_ALLOWANCE_MS,
        HOLD.as_millis() as u64,
    );
    // A holds; B, Redisson's J and C queue in that order
    a.go();
    let (a_owner, _) = a.granted(Duration::from_secs(10)).await;
    b.go();
    joined(&conn, name, 1, &b.id).await;
    let java = java_waiter(
        &server,
        raw(&server).await,
        &seen,
        name,
        DEFAULT_ALLOWANCE_MS as i64,
    );
    joined(&conn, name, 2, JAVA_OWNER).await;
    c.go();
    let queue = joined(&conn, name, 3, &c.id).await;
    // A's hold outlives its lease (renewed by its watchdog)
    tokio::time::sleep(WATCHDOG + Duration::from_millis(300)).await;
    let before = fair_state(&conn, name).await;
    assert_eq!(
        before.holders.keys().collect::<Vec<_>>(),
        [&a_owner],
        "A holds past one lease: {before:?}"
    );
    assert_eq!(before.queue, queue, "nobody moved: {before:?}");

    a.kill();
    let killed_ms = now_ms();
    let mut c2 = conn.clone();
    let pttl: i64 = support::cmd(&mut c2, &["PTTL", name]).await;
    let lease_end_ms = now_ms() + pttl;
    seen.forget("A").await;
    let (b_owner, b_in) = b.granted(Duration::from_secs(5)).await;
    assert!(
        b_owner.starts_with(&b.id),
        "B holds under its id: {b_owner}"
    );
    let j_in = within(Duration::from_secs(10), "J", java)
        .await
        .expect("J panicked");
    let (_, c_in) = c.granted(Duration::from_secs(5)).await;
    b.finishes(Duration::from_secs(5)).await;
    c.finishes(Duration::from_secs(5)).await;
    let end = drained(&conn, name).await;
    let order = seen.order().await;
    let (violations, what) = seen.violations().await;
    eprintln!(
        "fair kill (holder): A killed with {pttl} ms of lease left; B got the lock {} ms after the kill ({} ms after the lease ran out), J {} ms after B, C {} ms after J; order {order:?}; end {end:?}",
        b_in - killed_ms,
        b_in - lease_end_ms,
        j_in - b_in,
        c_in - j_in
    );
    assert_eq!(violations, 0, "two inside: {what:?}");
    assert_eq!(order, ["A", "B", "J", "C"], "arrival order");
    // not before the dead holder's lease ran out (ms rounding aside), and
    // within a re-check after it
    assert!(pttl > 0 && pttl <= WATCHDOG.as_millis() as i64, "{pttl}");
    assert!(b_in >= lease_end_ms - 5, "B in before A's lease ran out");
    assert!(
        b_in - killed_ms <= (WATCHDOG + Duration::from_millis(1_000)).as_millis() as i64,
        "B waited {} ms after the kill",
        b_in - killed_ms
    );
}

/// The head of the queue (ours, a child process) is killed while the lock
/// is held; the holder (the test's client) releases soon after. `java_next`:
/// Redisson's waiter is right behind the dead head (else ours is).
async fn a_killed_head_waiter(java_next: bool) {
    let server = support::server();
    let url = server.url();
    let name = if java_next {
        "fair:kill:head-then-java"
    } else {
        "fair:kill:head-then-ours"
    };
    let conn = raw(&server).await;
    let mut seen = FairInside::new(&server, name).await;
    let holder = client(&url, DEFAULT_ALLOWANCE_MS);
    let lock = holder.fair_lock(name).expect("lock");
    let held = lock.acquire().await.expect("held");
    assert!(seen.enter("H").await.0);
    let mut v = Kid::spawn(
        &url,
        name,
        "V",
        DEFAULT_ALLOWANCE_MS,
        HOLD.as_millis() as u64,
    );
    let mut c = Kid::spawn(
        &url,
        name,
        "C",
        DEFAULT_ALLOWANCE_MS,
        HOLD.as_millis() as u64,
    );
    v.go();
    let v_owner = joined(&conn, name, 1, &v.id).await[0].clone();
    let java = |seen: &FairInside, conn| {
        java_waiter(&server, conn, seen, name, DEFAULT_ALLOWANCE_MS as i64)
    };
    let j = if java_next {
        let j = java(&seen, raw(&server).await);
        joined(&conn, name, 2, JAVA_OWNER).await;
        c.go();
        joined(&conn, name, 3, &c.id).await;
        j
    } else {
        c.go();
        joined(&conn, name, 2, &c.id).await;
        let j = java(&seen, raw(&server).await);
        joined(&conn, name, 3, JAVA_OWNER).await;
        j
    };
    // V waits at the head for a while (its attempts renew its mark)
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mark = fair_state(&conn, name).await.marks.get(&v_owner).copied();
    assert!(mark.is_some(), "V's liveness mark");
    v.kill();
    let killed = Instant::now();
    let killed_ms = now_ms();
    tokio::time::sleep(Duration::from_millis(200)).await;
    seen.leave("H").await;
    held.release().await.expect("release");
    let freed_ms = now_ms();
    // the dead head leaves (when its mark has lapsed and a call comes)
    let mut dropped = None;
    while killed.elapsed() < Duration::from_secs(8) {
        let s = fair_state(&conn, name).await;
        if !s.queue.contains(&v_owner) {
            dropped = Some(killed.elapsed());
            assert!(
                !s.marks.contains_key(&v_owner) && !s.deadlines.contains_key(&v_owner),
                "V's mark and deadline leave with it: {s:?}"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (c_owner, c_in) = c.granted(Duration::from_secs(20)).await;
    assert!(c_owner.starts_with(&c.id), "{c_owner}");
    let j_in = within(Duration::from_secs(20), "J", j)
        .await
        .expect("J panicked");
    c.finishes(Duration::from_secs(5)).await;
    let end = drained(&conn, name).await;
    let order = seen.order().await;
    let (violations, what) = seen.violations().await;
    let next_in = c_in.min(j_in);
    eprintln!(
        "fair kill (head waiter, {} behind it): V killed at the head; dropped {dropped:?} after the kill; the lock free {} ms after the kill, next grant {} ms after it was freed ({} ms after the kill); C in at +{} ms, J at +{} ms; order {order:?}; end {end:?}",
        if java_next { "Redisson's" } else { "ours" },
        freed_ms - killed_ms,
        next_in - freed_ms,
        next_in - killed_ms,
        c_in - killed_ms,
        j_in - killed_ms,
    );
    assert_eq!(violations, 0, "two inside: {what:?}");
    let expected = if java_next {
        ["H", "J", "C"]
    } else {
        ["H", "C", "J"]
    };
    assert_eq!(order, expected, "arrival order among the live");
    let dropped = dropped.expect("the dead head left the queue");
    // its mark (3 s from its last attempt, at most a lease before the
    // kill) lapsed first; then one re-check at most
    assert!(
        dropped >= Duration::from_secs(2) && dropped <= Duration::from_millis(4_500),
        "dropped {dropped:?} after the kill"
    );
    assert!(
        next_in - killed_ms <= 5_000,
        "next grant {} ms after the kill",
        next_in - killed_ms
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_head_waiter_is_dropped_when_its_mark_lapses_and_ours_next_gets_in() {
    a_killed_head_waiter(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_head_waiter_is_dropped_when_its_mark_lapses_and_redissons_next_gets_in() {
    a_killed_head_waiter(true).await;
}

/// Allowance of the short-allowance test (ms), on every client.
const SHORT_ALLOWANCE_MS: u64 = 1_500;

/// What waits around the dead Redisson head in [`a_dead_redisson_head`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Around {
    /// Behind it: ours (W), then Redisson's (J).
    OursThenJava,
    /// Behind it: Redisson's (J), then ours (W).
    JavaThenOurs,
    /// Ahead of it a live waiter of ours (X), served first; behind it
    /// Redisson's (J), then ours (W). X's grant moves everyone up by one
    /// allowance, so the time J was told at its last call (until the dead
    /// head's deadline as it was) runs out one allowance late: exactly at
    /// J's own new deadline.
    GrantFirst,
}

/// A Redisson waiter joins, then stops (no more calls) and so dies at the
/// queue's head; the others wait around it as `around` says. The holder
/// (the test's client) releases well before the dead head's deadline.
async fn a_dead_redisson_head(around: Around) {
    let server = support::server();
    let url = server.url();
    let name = format!("fair:dead-java-head:{around:?}");
    let name = name.as_str();
    let conn = raw(&server).await;
    let mut seen = FairInside::new(&server, name).await;
    let hold_ms = HOLD.as_millis() as u64;
    let mut w = Kid::spawn(&url, name, "W", SHORT_ALLOWANCE_MS, hold_ms);
    let mut x = (around == Around::GrantFirst)
        .then(|| Kid::spawn(&url, name, "X", SHORT_ALLOWANCE_MS, hold_ms));
    let holder = client(&url, SHORT_ALLOWANCE_MS);
    let lock = holder.fair_lock(name).expect("lock");
    let held = lock.acquire().await.expect("held");
    assert!(seen.enter("H").await.0);
    if let Some(x) = &mut x {
        x.go();
        joined(&conn, name, 1, &x.id).await;
    }
    let ahead = usize::from(x.is_some());
    let mut dead = RedissonFairLock::new(raw(&server).await, &url, name, SHORT_ALLOWANCE_MS as i64);
    assert!(dead.attempt("java-dead:1", JAVA_LEASE_MS).await.is_some());
    joined(&conn, name, ahead + 1, "java-dead:1").await;
    let java =
        |seen: &FairInside, conn| java_waiter(&server, conn, seen, name, SHORT_ALLOWANCE_MS as i64);
    let j = if around == Around::OursThenJava {
        w.go();
        joined(&conn, name, ahead + 2, &w.id).await;
        let j = java(&seen, raw(&server).await);
        joined(&conn, name, ahead + 3, JAVA_OWNER).await;
        j
    } else {
        let j = java(&seen, raw(&server).await);
        joined(&conn, name, ahead + 2, JAVA_OWNER).await;
        w.go();
        joined(&conn, name, ahead + 3, &w.id).await;
        j
    };
    let queued = fair_state(&conn, name).await;
    let first_deadline = queued.deadlines["java-dead:1"];
    assert!(
        now_ms() + 500 < first_deadline,
        "everyone queued well before the dead head's deadline: {queued:?}"
    );
    // the holder leaves well before the dead head's deadline: the release
    // tells the dead head (or X, which is served and leaves in turn), and
    // the dead head never hears it
    tokio::time::sleep(Duration::from_millis(200)).await;
    seen.leave("H").await;
    held.release().await.expect("release");
    let freed_ms = now_ms();
    let x_in = match &mut x {
        Some(x) => Some(x.granted(Duration::from_secs(5)).await.1),
        None => None,
    };
    // the dead head's deadline now (X's grant took one allowance off)
    let deadline = fair_state(&conn, name).await.deadlines["java-dead:1"];
    assert_eq!(
        deadline,
        first_deadline - (ahead as i64) * SHORT_ALLOWANCE_MS as i64,
        "a grant moves the waiters left up by one allowance"
    );
    let (_, w_in) = w.granted(Duration::from_secs(20)).await;
    let j_in = within(Duration::from_secs(20), "J", j)
        .await
        .expect("J panicked");
    w.finishes(Duration::from_secs(5)).await;
    if let Some(x) = &mut x {
        x.finishes(Duration::from_secs(5)).await;
    }
    let end = drained(&conn, name).await;
    let order = seen.order().await;
    let (violations, what) = seen.violations().await;
    let next_in = w_in.min(j_in);
    eprintln!(
        "fair dead Redisson head ({around:?}, allowance {SHORT_ALLOWANCE_MS} ms): freed {} ms before the dead head's deadline{}; next grant {} ms after that deadline; W in at {:+} ms, J at {:+} ms of it; order {order:?}; end {end:?}",
        deadline - freed_ms,
        x_in.map(|x| format!(" (X in {} ms after the release)", x - freed_ms)).unwrap_or_default(),
        next_in - deadline,
        w_in - deadline,
        j_in - deadline,
    );
    assert_eq!(violations, 0, "two inside: {what:?}");
    let expected: &[&str] = match around {
        Around::OursThenJava => &["H", "W", "J"],
        Around::JavaThenOurs => &["H", "J", "W"],
        Around::GrantFirst => &["H", "X", "J", "W"],
    };
    assert_eq!(order, expected, "arrival order among the live");
    // Redisson's rule: the dead head keeps its turn until its deadline;
    // then the next one gets in soon (a few ms, a re-check at most)
    assert!(
        next_in >= deadline - 5,
        "in before the dead head's deadline"
    );
    assert!(
        next_in - deadline <= 1_100,
        "next grant {} ms after the dead head's deadline",
        next_in - deadline
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redisson_head_is_passed_at_its_deadline_by_ours_next() {
    a_dead_redisson_head(Around::OursThenJava).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redisson_head_is_passed_at_its_deadline_by_redissons_next() {
    a_dead_redisson_head(Around::JavaThenOurs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redisson_head_behind_a_grant_is_passed_by_redissons_next_before_its_own_deadline() {
    // without the free lock waking its head, J sleeps through its own
    // deadline (the time it was told is one allowance stale), is dropped
    // as dead by its own call and goes to the end, behind W
    a_dead_redisson_head(Around::GrantFirst).await;
}
