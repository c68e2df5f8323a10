//! A guard's validity against a partition, a stalled Redis, late acquire
//! replies and a blocked runtime, against real redis-servers (and the fault
//! proxy between one client and its server).
//!
//! A guard is valid until the send time of the last acquire or renewal Redis
//! confirmed, plus the lease, minus a drift margin (1 % of the lease + 2 ms).
//! Every test judges safety with an independent view: a second client (B,
//! connected straight to the server) that acquires the lock, and raw reads
//! of the lock hash; never with the holder's own view alone. The measured
//! margins are printed (`--nocapture`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::support::{self, cmd, raw, within};
use futures_util::FutureExt;
use lock_core::{AcquireOptions, Error, Lock, LockClient, LockGuard};
use lock_tests::{CommandMatch, Fault, FaultProxy, RedisServer};
use tokio::time::Instant;

/// The watchdog timeout (and the fixed lease) of the holder in most tests.
const LEASE: Duration = Duration::from_millis(600);
/// The renewal period of `LEASE`: a third of it.
const PERIOD: Duration = Duration::from_millis(200);

fn client_at(url: String, watchdog: Duration, command_timeout: Duration) -> LockClient {
    LockClient::builder(url)
        .watchdog_timeout(watchdog)
        .command_timeout(command_timeout)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// `later - earlier` in ms, negative when `later` is before `earlier`.
fn ms_between(earlier: Instant, later: Instant) -> f64 {
    if later >= earlier {
        (later - earlier).as_secs_f64() * 1e3
    } else {
        -(earlier - later).as_secs_f64() * 1e3
    }
}

async fn hash(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> HashMap<String, String> {
    cmd(conn, &["HGETALL", key]).await
}

/// Awaits `guard.lost()` in a task of its own; yields the instant it resolved.
fn watch_lost(guard: &Arc<LockGuard>) -> tokio::task::JoinHandle<Instant> {
    let guard = guard.clone();
    tokio::spawn(async move {
        guard.lost().await;
        Instant::now()
    })
}

async fn ping(client: &LockClient, who: &str) {
    within(Duration::from_secs(5), who, client.ping())
        .await
        .unwrap_or_else(|e| panic!("{who}: {e}"));
}

// ------------------------------------------------------------ partitions

/// A (watchdog lease 600 ms, through the proxy) holds the lock; the proxy
/// black-holes A's traffic at `pct` % of the renewal period that follows
/// the first renewal. B (straight to the server) asks for the lock at once.
/// A's `lost()` must resolve strictly before B's acquire returns, and A's
/// guard must say "not held" when B has it. Returns the margin in ms
/// (B's acquire returned − A's `lost()` resolved).
async fn partition_case(server: &RedisServer, command_timeout: Duration, pct: u32) -> f64 {
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let a = client_at(proxy.url(), LEASE, command_timeout);
    let b = client_at(server.url(), LEASE, Duration::from_secs(2));
    ping(&a, "A ping").await;
    ping(&b, "B ping").await;
    let name = format!("partition-{}ms-{pct}", command_timeout.as_millis());
    let lock_a = a.lock(&name).expect("name");
    let lock_b = b.lock(&name).expect("name");
    let mut conn = raw(server).await;

    let guard = within(Duration::from_secs(5), "A acquires", lock_a.acquire())
        .await
        .expect("A acquires");
    let guard = Arc::new(guard);
    let acquired = Instant::now();
    // The watchdog's first renewal is due one period after the guard was
    // made, the next ones every period after the previous one's send time.
    let cut_at = acquired + PERIOD + PERIOD * pct / 100;
    tokio::time::sleep_until(cut_at).await;
    assert!(guard.is_held(), "held before the partition");
    let pttl_before: i64 = cmd(&mut conn, &["PTTL", lock_b.key()]).await;

    proxy.black_hole();
    let cut = Instant::now();
    let lost = watch_lost(&guard);
    let b_result = within(
        Duration::from_secs(8),
        "B's acquire",
        lock_b.acquire_timeout(Duration::from_secs(5)),
    )
    .await;
    let b_at = Instant::now();
    let held_at_b = guard.is_held();
    let lost_by_b = guard.lost().now_or_never().is_some();
    let b_guard = b_result.unwrap_or_else(|e| panic!("B acquires after A's lease ran out: {e}"));
    let lost_at = within(Duration::from_secs(3), "A's lost()", lost)
        .await
        .expect("lost task");
    let fields = hash(&mut conn, lock_b.key()).await;
    proxy.heal();

    let margin = ms_between(lost_at, b_at);
    eprintln!(
        "[validity] partition at {pct:>2}% of a period, command_timeout {:>4} ms: \
         PTTL before {pttl_before} ms; A lost() {:.1} ms after the cut; \
         B acquired {:.1} ms after the cut; margin {margin:.1} ms",
        command_timeout.as_millis(),
        ms_between(cut, lost_at),
        ms_between(cut, b_at),
    );
    assert!(
        !held_at_b,
        "A's guard says held while B holds the lock ({pct}%, {command_timeout:?})"
    );
    assert!(
        lost_by_b,
        "A's lost() not resolved when B got the lock ({pct}%, {command_timeout:?})"
    );
    assert!(
        lost_at < b_at,
        "A's lost() resolved {margin:.1} ms after B's acquire returned ({pct}%, {command_timeout:?})"
    );
    assert_eq!(
        fields,
        HashMap::from([(b_guard.owner_id().to_string(), "1".to_string())]),
        "Redis: the lock is B's alone"
    );
    within(Duration::from_secs(5), "B releases", b_guard.release())
        .await
        .expect("B releases");
    drop(guard); // healed: its background release cannot hang
    margin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_holder_loses_its_guard_before_another_client_gets_the_lock() {
    let server = support::server();
    let mut report = Vec::new();
    for command_timeout in [Duration::from_secs(2), Duration::from_millis(100)] {
        for pct in [10, 50, 90] {
            let margin = within(
                Duration::from_secs(20),
                "partition case",
                partition_case(&server, command_timeout, pct),
            )
            .await;
            report.push(format!(
                "{pct}%/{}ms: {margin:.1} ms",
                command_timeout.as_millis()
            ));
        }
    }
    eprintln!("[validity] partition margins: {}", report.join(", "));
}

// ---------------------------------------------------------------- stalls

#[derive(Clone, Copy, Debug)]
enum Stall {
    /// `CLIENT PAUSE <ms> ALL`: every client command waits (and, on Redis
    /// 7, key expiry is paused too: keys whose TTL ran out during the pause
    /// expire when it ends).
    ClientPause,
    /// `DEBUG SLEEP <s>`: the whole server sleeps.
    DebugSleep,
}

fn debug_server() -> Arc<RedisServer> {
    let server = RedisServer::builder()
        .arg("--enable-debug-command")
        .arg("local")
        .start()
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
    Arc::new(server)
}

/// Stalls the server for `length`, from a connection of its own in a
/// blocking thread. Returns an instant before the stall command was sent
/// (so the stall ends at or after `sent + length`) and the thread, which
/// ends when the command returns (at once for CLIENT PAUSE, after the
/// sleep for DEBUG SLEEP).
fn start_stall(
    server: &Arc<RedisServer>,
    how: Stall,
    length: Duration,
) -> (Instant, tokio::task::JoinHandle<()>) {
    let server = server.clone();
    let sent = Instant::now();
    let task = tokio::task::spawn_blocking(move || {
        let reply = match how {
            Stall::ClientPause => server.command_with_timeout(
                &["CLIENT", "PAUSE", &length.as_millis().to_string(), "ALL"],
                Duration::from_secs(5),
            ),
            Stall::DebugSleep => server.command_with_timeout(
                &["DEBUG", "SLEEP", &format!("{:.3}", length.as_secs_f64())],
                length + Duration::from_secs(5),
            ),
        };
        match reply {
            Ok(r) if r.as_string().as_deref() == Some("OK") => {}
            other => panic!("{how:?}: {other:?}"),
        }
    });
    (sent, task)
}

/// A stall of 1.2 s (twice the lease) starting right after a confirmed
/// renewal: A's guard must end by its deadline, before the stall is over,
/// and B, asking right after the stall, gets the lock.
async fn long_stall_case(server: &Arc<RedisServer>, how: Stall) -> f64 {
    let stall = Duration::from_millis(1200);
    let a = client_at(server.url(), LEASE, Duration::from_secs(2));
    let b = client_at(server.url(), LEASE, Duration::from_secs(2));
    ping(&a, "A ping").await;
    ping(&b, "B ping").await;
    let name = format!("stall-long-{how:?}");
    let lock_a = a.lock(&name).expect("name");
    let lock_b = b.lock(&name).expect("name");
    let mut conn = raw(server).await;

    let guard = within(Duration::from_secs(5), "A acquires", lock_a.acquire())
        .await
        .expect("A acquires");
    let guard = Arc::new(guard);
    let acquired = Instant::now();
    // Just after the first renewal: the latest deadline a stall can leave.
    tokio::time::sleep_until(acquired + PERIOD + Duration::from_millis(20)).await;
    assert!(guard.is_held(), "held before the stall");
    let lost = watch_lost(&guard);
    let (sent, stall_task) = start_stall(server, how, stall);
    within(Duration::from_secs(10), "the stall command", stall_task)
        .await
        .expect("stall thread");
    // CLIENT PAUSE answers at once; its pause runs on.
    tokio::time::sleep_until(sent + stall).await;
    let stall_over = Instant::now();
    let b_result = within(
        Duration::from_secs(8),
        "B's acquire",
        lock_b.acquire_timeout(Duration::from_secs(5)),
    )
    .await;
    let b_at = Instant::now();
    let held_at_b = guard.is_held();
    let lost_by_b = guard.lost().now_or_never().is_some();
    let ensure = guard.ensure_held();
    let b_guard = b_result.unwrap_or_else(|e| panic!("{how:?}: B acquires after the stall: {e}"));
    let lost_at = within(Duration::from_secs(3), "A's lost()", lost)
        .await
        .expect("lost task");
    let fields = hash(&mut conn, lock_b.key()).await;

    let margin = ms_between(lost_at, sent + stall);
    eprintln!(
        "[validity] {how:?} {} ms, lease {} ms: A lost() {:.1} ms after the stall was sent, \
         {margin:.1} ms before the stall could end; B acquired {:.1} ms after the stall ({:.1} ms after A's lost())",
        stall.as_millis(),
        LEASE.as_millis(),
        ms_between(sent, lost_at),
        ms_between(stall_over, b_at),
        ms_between(lost_at, b_at),
    );
    assert!(
        lost_at < sent + stall,
        "{how:?}: A's lost() resolved {:.1} ms after the stall could have ended",
        -margin
    );
    assert!(lost_at < b_at, "{how:?}: lost() after B's acquire returned");
    assert!(!held_at_b, "{how:?}: A's guard says held while B holds");
    assert!(lost_by_b, "{how:?}: lost() not resolved when B holds");
    assert!(
        matches!(ensure, Err(Error::Lost { .. })),
        "{how:?}: {ensure:?}"
    );
    assert_eq!(
        fields,
        HashMap::from([(b_guard.owner_id().to_string(), "1".to_string())]),
        "{how:?}: Redis: the lock is B's alone"
    );
    within(Duration::from_secs(5), "B releases", b_guard.release())
        .await
        .expect("B releases");
    drop(guard);
    margin
}

/// A stall of 100 ms (half a renewal period) over the renewal due at
/// 200 ms: no false loss. A second later the guard is still held, Redis
/// agrees (B cannot take the lock, the hash is A's), and release is Ok.
async fn short_stall_case(server: &Arc<RedisServer>, how: Stall) {
    let stall = Duration::from_millis(100);
    let a = client_at(server.url(), LEASE, Duration::from_secs(2));
    let b = client_at(server.url(), LEASE, Duration::from_secs(2));
    ping(&a, "A ping").await;
    ping(&b, "B ping").await;
    let name = format!("stall-short-{how:?}");
    let lock_a = a.lock(&name).expect("name");
    let lock_b = b.lock(&name).expect("name");
    let mut conn = raw(server).await;

    let guard = within(Duration::from_secs(5), "A acquires", lock_a.acquire())
        .await
        .expect("A acquires");
    let acquired = Instant::now();
    tokio::time::sleep_until(acquired + Duration::from_millis(150)).await;
    let (sent, stall_task) = start_stall(server, how, stall);
    within(Duration::from_secs(10), "the stall command", stall_task)
        .await
        .expect("stall thread");
    tokio::time::sleep_until(sent + Duration::from_secs(1)).await;

    let held = guard.is_held();
    let lost = guard.lost().now_or_never().is_some();
    let taken = within(Duration::from_secs(5), "B's try", lock_b.try_acquire())
        .await
        .expect("B's try");
    let fields = hash(&mut conn, lock_a.key()).await;
    let pttl: i64 = cmd(&mut conn, &["PTTL", lock_a.key()]).await;
    eprintln!(
        "[validity] short {how:?} {} ms, lease {} ms: 1 s later held={held}, PTTL {pttl} ms",
        stall.as_millis(),
        LEASE.as_millis()
    );
    assert!(held, "{how:?}: a short stall made the guard say lost");
    assert!(!lost, "{how:?}: lost() resolved after a short stall");
    assert!(taken.is_none(), "{how:?}: B took a lock A still holds");
    assert_eq!(
        fields,
        HashMap::from([(guard.owner_id().to_string(), "1".to_string())]),
        "{how:?}: Redis: the lock is A's"
    );
    assert!(pttl > 0, "{how:?}: renewed after the stall: PTTL {pttl}");
    within(Duration::from_secs(5), "A releases", guard.release())
        .await
        .unwrap_or_else(|e| panic!("{how:?}: release after a short stall: {e}"));
    let after = within(Duration::from_secs(5), "B's try", lock_b.try_acquire())
        .await
        .expect("B's try");
    let after = after.unwrap_or_else(|| panic!("{how:?}: B cannot take the released lock"));
    within(Duration::from_secs(5), "B releases", after.release())
        .await
        .expect("B releases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_ends_the_guard_by_its_deadline_and_a_short_stall_does_not() {
    let server = debug_server();
    let version = server
        .command(&["INFO", "server"])
        .ok()
        .and_then(|r| r.as_string())
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
        })
        .unwrap_or_default();
    eprintln!("[validity] redis_version {version}");
    let mut report = Vec::new();
    for how in [Stall::ClientPause, Stall::DebugSleep] {
        let margin = within(
            Duration::from_secs(20),
            "long stall case",
            long_stall_case(&server, how),
        )
        .await;
        report.push(format!("{how:?}: {margin:.1} ms"));
        within(
            Duration::from_secs(20),
            "short stall case",
            short_stall_case(&server, how),
        )
        .await;
    }
    eprintln!(
        "[validity] stall margins (stall end - lost()): {}",
        report.join(", ")
    );
}

// ------------------------------------------------------ late acquire replies

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Late {
    /// The acquire is applied at once; its reply comes 900 ms later.
    Reply,
    /// The acquire reaches the server 900 ms late (and is applied then).
    Command,
}

/// The guards of A and B, shared with the invariant checks.
#[derive(Default)]
struct Slots {
    a: Mutex<Option<LockGuard>>,
    b: Mutex<Option<LockGuard>>,
    violations: Mutex<Vec<String>>,
}

fn slot(m: &Mutex<Option<LockGuard>>) -> MutexGuard<'_, Option<LockGuard>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn held(guard: &Option<LockGuard>) -> bool {
    guard.as_ref().is_some_and(LockGuard::is_held)
}

impl Slots {
    fn violation(&self, what: String) {
        self.violations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(what);
    }

    /// Both guards say "held" now. (Slots are always locked A first.)
    fn both_held(&self) -> bool {
        let a = slot(&self.a);
        let b = slot(&self.b);
        held(&a) && held(&b)
    }
}

/// A (through the proxy) acquires while its acquire script call (or its
/// reply) is held back 900 ms, past a 600 ms lease; B (straight to the
/// server) tries all along. Never may both guards say "held" at once, and
/// once A's acquire returned, no hold of A may be left in Redis without a
/// guard.
async fn late_acquire_case(late: Late, fixed: bool) {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let a = client_at(proxy.url(), LEASE, Duration::from_secs(2));
    let b = client_at(server.url(), LEASE, Duration::from_secs(2));
    let name = "late-acquire";
    let lock_a = a.lock(name).expect("name");
    let lock_b = b.lock(name).expect("name");
    let key = lock_a.key().to_string();
    let mut conn = raw(&server).await;
    let case = format!("{late:?}/{}", if fixed { "fixed" } else { "watchdog" });

    // Warm-up: connections open, scripts loaded (a NOSCRIPT round would
    // take the fault instead of the acquire).
    for lock in [&lock_a, &lock_b] {
        let g = within(Duration::from_secs(5), "warm-up", lock.acquire())
            .await
            .expect("warm-up acquire");
        g.release().await.expect("warm-up release");
    }

    // The acquire script's mode argument is "new" (a fresh hold); nothing
    // else A sends now has it (owner ids and SHAs are hex, the key does
    // not contain it), except a cancellation, which comes after.
    let fault = match late {
        Late::Reply => Fault::DelayReply(Duration::from_millis(900)),
        Late::Command => Fault::DelayCommand(Duration::from_millis(900)),
    };
    let handle = proxy.fault_next(CommandMatch::name("EVALSHA").with_arg("new"), fault);

    let slots = Arc::new(Slots::default());
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();

    // The invariant, sampled every 2 ms.
    let monitor = {
        let slots = slots.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut samples = 0u64;
            while !stop.load(Ordering::Acquire) {
                if slots.both_held() {
                    slots.violation(format!(
                        "both held at +{:.1} ms",
                        ms_between(start, Instant::now())
                    ));
                }
                samples += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            samples
        })
    };

    // B: starts once the fault took hold of A's acquire, tries every 5 ms,
    // holds what it gets 400 ms (across A's late reply), then backs off
    // 300 ms. For a late reply B starts at once: A's hold was applied and
    // expires 600 ms later, while its reply is still held back. For a late
    // command B starts after it was applied (+900 ms), so that it is
    // applied on a free lock.
    let contender = {
        let slots = slots.clone();
        let stop = stop.clone();
        let lock_b: Lock = lock_b.clone();
        let handle = handle.clone();
        let b_start = match late {
            Late::Reply => Duration::ZERO,
            Late::Command => Duration::from_millis(950),
        };
        tokio::spawn(async move {
            while !handle.fired() {
                if start.elapsed() > Duration::from_secs(3) {
                    return Vec::new();
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(b_start).await;
            let mut got = Vec::new();
            while !stop.load(Ordering::Acquire) {
                let g = lock_b.try_acquire().await.expect("B's try");
                let Some(g) = g else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                let at = Instant::now();
                got.push(ms_between(start, at));
                {
                    let a = slot(&slots.a);
                    let mut b = slot(&slots.b);
                    if held(&a) {
                        slots.violation(format!(
                            "B acquired at +{:.1} ms while A's guard says held",
                            ms_between(start, at)
                        ));
                    }
                    *b = Some(g);
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
                let g = slot(&slots.b).take();
                if let Some(g) = g {
                    let _ = g.release().await;
                }
                // Long enough for A to take its turn: A's jitter before a
                // retry grows with its round-trip estimate, which the late
                // reply just inflated (about 900 ms / 8).
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            got
        })
    };

    // A: one acquisition, waiting up to 5 s; holds what it gets 300 ms.
    let options = if fixed {
        AcquireOptions::new()
            .wait(Duration::from_secs(5))
            .lease(LEASE)
    } else {
        AcquireOptions::new().wait(Duration::from_secs(5))
    };
    let result = within(
        Duration::from_secs(8),
        "A's acquire",
        lock_a.acquire_with(options),
    )
    .await;
    let a_at = Instant::now();
    let guard = result.unwrap_or_else(|e| panic!("{case}: A's acquire: {e}"));
    let a_owner = guard.owner_id().to_string();
    {
        let mut a_slot = slot(&slots.a);
        let b_slot = slot(&slots.b);
        if held(&b_slot) {
            slots.violation(format!(
                "A's acquire returned at +{:.1} ms while B's guard says held",
                ms_between(start, a_at)
            ));
        }
        if !guard.is_held() {
            slots.violation("A's acquire returned a guard that is not held".into());
        }
        *a_slot = Some(guard);
    }
    // A's late attempt is settled (undone, or expired) once acquire returned:
    // every field of A in the hash is the live guard's.
    let fields = hash(&mut conn, &key).await;
    let orphans: Vec<&String> = fields
        .keys()
        .filter(|f| f.starts_with(a.client_id()) && **f != a_owner)
        .collect();
    assert!(
        orphans.is_empty(),
        "{case}: holds of A without a guard: {orphans:?} (hash {fields:?}, live {a_owner})"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a_guard = slot(&slots.a).take();
    let a_release = match a_guard {
        Some(g) => within(Duration::from_secs(5), "A releases", g.release()).await,
        None => Ok(()),
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Release);
    let b_got = within(Duration::from_secs(5), "B stops", contender)
        .await
        .expect("B task");
    let samples = within(Duration::from_secs(5), "monitor stops", monitor)
        .await
        .expect("monitor task");
    let gone = support::eventually(Duration::from_secs(3), || {
        let mut conn = conn.clone();
        let key = key.clone();
        async move {
            let n: i64 = cmd(&mut conn, &["EXISTS", &key]).await;
            n == 0
        }
    })
    .await;

    let violations = slots
        .violations
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    eprintln!(
        "[validity] late acquire {case}: fault fired={}, A's acquire returned at +{:.1} ms; \
         B acquired at {b_got:.1?} ms; {samples} samples; key gone {gone:?} after the end",
        handle.fired(),
        ms_between(start, a_at),
    );
    assert!(handle.fired(), "{case}: the fault was not used");
    assert!(violations.is_empty(), "{case}: {violations:?}");
    assert!(
        ms_between(start, a_at) >= 900.0,
        "{case}: A's acquire returned before its late reply"
    );
    assert!(!b_got.is_empty(), "{case}: B never got the lock");
    match late {
        // A's hold was applied at once and kept the lock until its lease ran out.
        Late::Reply => assert!(
            b_got[0] > 550.0,
            "{case}: B got the lock at +{:.1} ms, before A's applied hold could expire",
            b_got[0]
        ),
        // The hold applied at +900 ms (lease to +1500 ms) was undone at
        // once, not left to expire: someone got the lock well before +1500.
        Late::Command => {
            let first = b_got[0].min(ms_between(start, a_at));
            assert!(
                first < 1400.0,
                "{case}: nobody got the lock before +{first:.1} ms: the late hold was not undone"
            );
        }
    }
    a_release.unwrap_or_else(|e| panic!("{case}: A's release: {e}"));
    assert!(gone.is_some(), "{case}: a hold was left behind");
    drop(proxy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_acquire_reply_is_never_handed_out_as_held() {
    for fixed in [false, true] {
        within(
            Duration::from_secs(30),
            "late reply case",
            late_acquire_case(Late::Reply, fixed),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_applied_acquire_is_undone_and_never_handed_out() {
    for fixed in [false, true] {
        within(
            Duration::from_secs(30),
            "late command case",
            late_acquire_case(Late::Command, fixed),
        )
        .await;
    }
}

// ------------------------------------------------------- a blocked runtime

/// What the holder saw after its runtime was blocked.
struct Blocked {
    acquired: Instant,
    woke: Instant,
    held: bool,
    ensure_lost: bool,
    ensure: String,
    lost_ready: bool,
    lost_wait: Duration,
    release: String,
    release_lost: bool,
}

/// A holds the lock (lease 300 ms, watchdog or fixed) on a current-thread
/// runtime that it then blocks for 900 ms inside the section. B, on another
/// runtime, takes the lock meanwhile; when A's runtime wakes, its guard
/// must say "not held" at once (and `lost()` must resolve).
async fn blocked_runtime_case(fixed: bool) -> Blocked {
    let lease = Duration::from_millis(300);
    let server = support::server();
    let b = client_at(server.url(), lease, Duration::from_secs(2));
    let name = if fixed {
        "blocked-fixed"
    } else {
        "blocked-watchdog"
    };
    let lock_b = b.lock(name).expect("name");
    let mut conn = raw(&server).await;
    let case = if fixed { "fixed" } else { "watchdog" };

    let (tx, rx) = tokio::sync::oneshot::channel::<String>();
    let url = server.url();
    let holder = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let a = client_at(url, lease, Duration::from_secs(2));
            let lock = a.lock(name).expect("name");
            let acquiring = async {
                if fixed {
                    lock.acquire_with_lease(lease).await
                } else {
                    lock.acquire().await
                }
            };
            let guard = within(Duration::from_secs(5), "A acquires", acquiring)
                .await
                .expect("A acquires");
            let acquired = Instant::now();
            let _ = tx.send(guard.owner_id().to_string());
            // Blocks the runtime: no timer, no watchdog, no reply is handled.
            std::thread::sleep(Duration::from_millis(900));
            let woke = Instant::now();
            let held = guard.is_held();
            let ensure = guard.ensure_held();
            let lost_ready = guard.lost().now_or_never().is_some();
            let waiting = Instant::now();
            within(Duration::from_secs(1), "A's lost()", guard.lost()).await;
            let lost_wait = waiting.elapsed();
            let release = within(Duration::from_secs(5), "A releases", guard.release()).await;
            Blocked {
                acquired,
                woke,
                held,
                ensure_lost: matches!(ensure, Err(Error::Lost { .. })),
                ensure: format!("{ensure:?}"),
                lost_ready,
                lost_wait,
                release_lost: matches!(release, Err(Error::Lost { .. })),
                release: format!("{release:?}"),
            }
        })
    });

    let a_owner = within(Duration::from_secs(10), "A's acquire", rx)
        .await
        .expect("A acquired");
    let b_result = within(
        Duration::from_secs(5),
        "B's acquire",
        lock_b.acquire_timeout(Duration::from_secs(3)),
    )
    .await;
    let b_at = Instant::now();
    let b_guard = b_result.unwrap_or_else(|e| panic!("{case}: B acquires: {e}"));
    let fields_at_b = hash(&mut conn, lock_b.key()).await;
    let joined = within(
        Duration::from_secs(10),
        "A's thread",
        tokio::task::spawn_blocking(move || holder.join()),
    )
    .await
    .expect("join task");
    let seen = joined.unwrap_or_else(|_| panic!("{case}: A's thread panicked"));
    let fields_after = hash(&mut conn, lock_b.key()).await;

    eprintln!(
        "[validity] blocked current_thread runtime, {case} lease {} ms: B acquired {:.1} ms \
         after A's acquire, A woke {:.1} ms after it ({:.1} ms after B); A then: held={}, \
         ensure_held={}, lost() ready at first poll={} (resolved after {:?} awaited), release={}",
        lease.as_millis(),
        ms_between(seen.acquired, b_at),
        ms_between(seen.acquired, seen.woke),
        ms_between(b_at, seen.woke),
        seen.held,
        seen.ensure,
        seen.lost_ready,
        seen.lost_wait,
        seen.release,
    );
    assert_eq!(
        fields_at_b,
        HashMap::from([(b_guard.owner_id().to_string(), "1".to_string())]),
        "{case}: Redis: B holds the lock, A's hold ({a_owner}) expired"
    );
    assert!(
        b_at < seen.woke,
        "{case}: B took the lock only after A's runtime woke"
    );
    assert!(!seen.held, "{case}: A's guard says held after the block");
    assert!(seen.ensure_lost, "{case}: ensure_held: {}", seen.ensure);
    assert!(seen.release_lost, "{case}: release: {}", seen.release);
    assert_eq!(
        fields_after, fields_at_b,
        "{case}: A's release touched B's hold"
    );
    assert!(
        seen.lost_wait < Duration::from_millis(50),
        "{case}: lost() took {:?} to resolve after the block",
        seen.lost_wait
    );
    within(Duration::from_secs(5), "B releases", b_guard.release())
        .await
        .expect("B releases");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_blocked_past_the_lease_sees_its_guard_lost_at_once() {
    for fixed in [false, true] {
        within(
            Duration::from_secs(30),
            "blocked runtime case",
            blocked_runtime_case(fixed),
        )
        .await;
    }
}

/// Once `is_held()` is false, `lost()` must be ready at its first poll,
/// like after a partition: `select! { _ = guard.lost() => .., _ = work => .. }`
/// must not start work on a lock whose deadline passed while the runtime
/// was blocked (its timer fires only at the runtime's next timer turn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_blocked_runtime_lost_is_ready_at_its_first_poll() {
    for fixed in [false, true] {
        let seen = within(
            Duration::from_secs(30),
            "blocked runtime case",
            blocked_runtime_case(fixed),
        )
        .await;
        let case = if fixed { "fixed" } else { "watchdog" };
        assert!(!seen.held, "{case}: held after the block");
        assert!(
            seen.lost_ready,
            "{case}: is_held() is false but lost() is still pending at its first poll \
             (it resolved {:?} later, when awaited)",
            seen.lost_wait
        );
    }
}
