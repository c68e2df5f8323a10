//! The fair lock's scripts (`LockClient::fair_lock`, Redisson's
//! `RFairLock`) cut at every byte offset of their commands and replies,
//! each offset once (FIN at even offsets, RST at odd ones), through the
//! harness's fault proxy: `fair_release.lua` (the holder's release, a
//! waiter at the queue's head), `fair_cancel.lua` (a waiter giving up),
//! `fair_acquire.lua` three times (a waiter joining the queue, the head's
//! attempt that gets the grant, an attempt that finds the lock free with
//! an unaware Redisson head and must wake it) and `fair_force_unlock.lua`.
//!
//! Three offsets run at once, each on its own client through the proxy
//! and its own lock name (a cut closes only its command's connection).
//! The client under test talks through the proxy; the other clients (ours
//! and a Redisson-protocol one, `support/redisson_fair.rs`) go straight to
//! the server. After each offset a raw connection (not the library) reads
//! the lock's hash, the queue `redisson_lock_queue:{name}`, the deadlines
//! `redisson_lock_timeout:{name}` and the liveness marks
//! `lockcore_fair_alive:{name}` in one `MULTI`: the queue and the
//! deadlines name the same owners, each once, every mark has a place, and
//! the hash never has two owners. A watcher polls the hash every
//! millisecond while the step runs: each owner holds in one stretch (a
//! lock freed once), and a hold nobody has a guard for (a grant being
//! undone) lasts at most [`ORPHAN_BOUND`]. The queue's head gets a freed
//! lock within [`HEAD_BOUND`], a waiter that gave up leaves the queue, its
//! deadline and its mark, and nobody is left queued at the end.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use lock_core::{Error, LockClient, LockContext, LockGuard};
use lock_tests::{CommandMatch, Fault, FaultHandle, FaultProxy, RedisServer};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;

use crate::support::cut::{alternating, setup_acquire};
use crate::support::redisson_fair::RedissonFairLock;
use crate::support::{self, cmd, raw, within};

/// The wait allowance of every client here (Redisson's
/// `fairLockWaitTimeout`): deadlines are far beyond every step.
const ALLOWANCE: Duration = Duration::from_secs(5);

/// How soon the queue's head must get a freed lock: its message, or (lost)
/// its re-check (`FAIR_RECHECK`, 1 s), plus slack. A stale head with a
/// liveness mark would block it for up to 3 s.
const HEAD_BOUND: Duration = Duration::from_millis(1_500);

/// How long a hold nobody has a guard for (a grant whose reply was lost,
/// being undone by `fair_cancel.lua`) may be seen in Redis.
const ORPHAN_BOUND: Duration = Duration::from_millis(1_000);

/// How long a waiter that gave up may stay queued or marked: its liveness
/// mark lapses 3 s after its last attempt; and slack.
const LAPSE_BOUND: Duration = Duration::from_millis(3_500);

/// The lease of Redisson's holds here, in ms.
const JAVA_LEASE_MS: i64 = 30_000;

fn script_sha(source: &str) -> String {
    redis::Script::new(source).get_hash().to_string()
}

fn fair_acquire_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/fair_acquire.lua"
    ))
}

fn fair_release_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/fair_release.lua"
    ))
}

fn fair_cancel_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/fair_cancel.lua"
    ))
}

fn fair_force_unlock_sha() -> String {
    script_sha(include_str!(
        "../../../lock-core/src/protocol/fair_force_unlock.lua"
    ))
}

/// `script`'s calls on the lock `name` (its first key).
fn calls(sha: String, name: &str) -> CommandMatch {
    CommandMatch::name("EVALSHA")
        .with_exact_arg(sha)
        .with_exact_arg(name)
}

/// `fair_acquire.lua`'s calls on `name` in `mode` (`wait`, `once`, `re`).
fn acquires(name: &str, mode: &str) -> CommandMatch {
    calls(fair_acquire_sha(), name).with_exact_arg(mode)
}

/// Owner ids (`<client id>:<n>`, `n` drawn process-wide) are in the
/// commands cut here: `n` is moved on to where its width stays the same
/// for at least 50 000 more draws, so that every offset of a sweep cuts a
/// command of one layout (each cut's length is checked against the
/// probe's).
fn steady_owner_width() {
    loop {
        let id = LockContext::new().id();
        let next = 10u64.saturating_pow(id.to_string().len() as u32);
        if next - id >= 50_000 {
            return;
        }
        while LockContext::new().id() < next {}
    }
}

/// A client whose fair locks use [`ALLOWANCE`].
fn fair_client(url: String, watchdog: Duration, timeouts: Duration) -> LockClient {
    LockClient::builder(url)
        .watchdog_timeout(watchdog)
        .command_timeout(timeouts)
        .connect_timeout(timeouts)
        .fair_lock_wait_timeout(ALLOWANCE)
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// How many offsets of a sweep run at once, each on its own client
/// through the proxy and its own lock name (a cut closes only the
/// connection of the command it aims at, which only that client uses).
const LANES: usize = 3;

struct Rig {
    server: RedisServer,
    proxy: FaultProxy,
    /// Through the proxy: the clients under test, one per lane.
    lanes: Vec<LockClient>,
    /// Straight to the server: other processes.
    other: LockClient,
    third: LockClient,
    /// The observer's connection.
    conn: MultiplexedConnection,
}

/// When this file's first test began: each test prints the file's
/// runtime so far when it ends (the last line printed is the file's).
static FILE_STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

async fn rig() -> Rig {
    FILE_STARTED.get_or_init(Instant::now);
    steady_owner_width();
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let lanes = (0..LANES)
        .map(|_| {
            fair_client(
                proxy.url(),
                Duration::from_secs(10),
                Duration::from_millis(500),
            )
        })
        .collect();
    let other = fair_client(
        server.url(),
        Duration::from_secs(30),
        Duration::from_secs(2),
    );
    let third = fair_client(
        server.url(),
        Duration::from_secs(30),
        Duration::from_secs(2),
    );
    let conn = raw(&server).await;
    Rig {
        server,
        proxy,
        lanes,
        other,
        third,
        conn,
    }
}

/// A fair lock's keys as the observer reads them.
#[derive(Clone, Debug, Default, PartialEq)]
struct FairState {
    /// The lock's hash: owner -> count.
    hash: BTreeMap<String, String>,
    /// The queue, first first.
    queue: Vec<String>,
    /// The owners with a deadline (sorted).
    deadlines: Vec<String>,
    /// The owners with a liveness mark (sorted).
    alive: Vec<String>,
}

impl FairState {
    /// Held by `owner` alone, once.
    fn held_by(&self, owner: &str) -> bool {
        self.hash.len() == 1 && self.hash.get(owner).map(String::as_str) == Some("1")
    }

    /// Nobody holds, waits, has a deadline or a mark.
    fn is_clean(&self) -> bool {
        self.hash.is_empty()
            && self.queue.is_empty()
            && self.deadlines.is_empty()
            && self.alive.is_empty()
    }

    /// Nobody queued, with a deadline or a mark.
    fn nobody_waits(&self) -> bool {
        self.queue.is_empty() && self.deadlines.is_empty() && self.alive.is_empty()
    }

    /// What must hold at every moment: the queue and the deadlines name the
    /// same owners, each once; every mark has a place; one owner at most.
    fn check(&self, what: &str) {
        let mut queued = self.queue.clone();
        queued.sort();
        let unique: HashSet<&String> = self.queue.iter().collect();
        assert_eq!(
            unique.len(),
            self.queue.len(),
            "{what}: an owner queued twice: {self:?}"
        );
        assert_eq!(
            queued, self.deadlines,
            "{what}: the queue and the deadlines differ: {self:?}"
        );
        assert!(
            self.alive.iter().all(|a| self.queue.contains(a)),
            "{what}: a liveness mark without a place: {self:?}"
        );
        assert!(self.hash.len() <= 1, "{what}: two owners: {self:?}");
    }
}

/// The lock `name`'s keys, read in one `MULTI` and checked.
async fn fair_state(conn: &MultiplexedConnection, name: &str, what: &str) -> FairState {
    let mut c = conn.clone();
    let (hash, queue, mut deadlines, mut alive): (
        BTreeMap<String, String>,
        Vec<String>,
        Vec<String>,
        Vec<String>,
    ) = redis::pipe()
        .atomic()
        .cmd("HGETALL")
        .arg(name)
        .cmd("LRANGE")
        .arg(format!("redisson_lock_queue:{{{name}}}"))
        .arg(0)
        .arg(-1)
        .cmd("ZRANGE")
        .arg(format!("redisson_lock_timeout:{{{name}}}"))
        .arg(0)
        .arg(-1)
        .cmd("ZRANGE")
        .arg(format!("lockcore_fair_alive:{{{name}}}"))
        .arg(0)
        .arg(-1)
        .query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("{what}: reading the fair lock's keys: {e}"));
    deadlines.sort();
    alive.sort();
    let state = FairState {
        hash,
        queue,
        deadlines,
        alive,
    };
    state.check(what);
    state
}

/// Polls (every 2 ms, at most `limit`) until `done`; the state and how
/// long it took.
async fn settles(
    conn: &MultiplexedConnection,
    name: &str,
    what: &str,
    limit: Duration,
    done: impl Fn(&FairState) -> bool,
) -> (FairState, Duration) {
    let started = Instant::now();
    loop {
        let now = fair_state(conn, name, what).await;
        if done(&now) {
            return (now, started.elapsed());
        }
        if started.elapsed() > limit {
            panic!("{what}: not settled within {limit:?}: {now:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until `n` owners are queued.
async fn queue_reaches(r: &Rig, name: &str, n: usize, what: &str) -> FairState {
    settles(&r.conn, name, what, Duration::from_secs(3), |s| {
        s.queue.len() >= n
    })
    .await
    .0
}

/// Who held the lock's hash while a step ran, polled every millisecond.
#[derive(Debug, Default)]
struct Seen {
    polls: usize,
    /// The most owners seen in one poll.
    most: usize,
    /// Per owner: first and last poll that saw it, and how many separate
    /// stretches it held in.
    spans: HashMap<String, (Instant, Instant, usize)>,
}

impl Seen {
    /// The owners that held, each in one stretch, never two at once; every
    /// owner not in `guarded` (a hold nobody had a guard for) held at most
    /// [`ORPHAN_BOUND`]: those, with how long they were seen.
    fn check(&self, what: &str, guarded: &[&str]) -> Vec<(String, Duration)> {
        assert!(self.most <= 1, "{what}: two owners at once ({self:?})");
        let mut orphans = Vec::new();
        for (owner, (first, last, stretches)) in &self.spans {
            assert_eq!(
                *stretches, 1,
                "{what}: {owner} held in {stretches} stretches (freed and taken again): {self:?}"
            );
            if !guarded.contains(&owner.as_str()) {
                let span = *last - *first;
                assert!(
                    span <= ORPHAN_BOUND,
                    "{what}: {owner} held for {span:?} without a guard"
                );
                orphans.push((owner.clone(), span));
            }
        }
        orphans
    }

    /// `a`'s hold ended before `b`'s began.
    fn before(&self, a: &str, b: &str) -> bool {
        match (self.spans.get(a), self.spans.get(b)) {
            (Some((_, a_last, _)), Some((b_first, _, _))) => a_last < b_first,
            _ => false,
        }
    }
}

struct Watch {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Seen>,
}

impl Watch {
    /// Starts watching `name`'s hash; its first poll is done on return.
    async fn start(conn: &MultiplexedConnection, name: &str) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let (mut conn, name, flag) = (conn.clone(), name.to_string(), stop.clone());
        let mut seen = Seen::default();
        let mut before: HashSet<String> = HashSet::new();
        Self::poll(&mut conn, &name, &mut seen, &mut before).await;
        let task = tokio::spawn(async move {
            loop {
                let last = flag.load(Ordering::SeqCst);
                Self::poll(&mut conn, &name, &mut seen, &mut before).await;
                if last {
                    return seen;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        Watch { stop, task }
    }

    async fn poll(
        conn: &mut MultiplexedConnection,
        name: &str,
        seen: &mut Seen,
        before: &mut HashSet<String>,
    ) {
        let hash: HashMap<String, String> = cmd(conn, &["HGETALL", name]).await;
        let now = Instant::now();
        seen.polls += 1;
        seen.most = seen.most.max(hash.len());
        for owner in hash.keys() {
            let span = seen.spans.entry(owner.clone()).or_insert((now, now, 0));
            span.1 = now;
            if !before.contains(owner) {
                span.2 += 1;
            }
        }
        *before = hash.into_keys().collect();
    }

    /// Stops watching, after one more poll.
    async fn finish(self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        within(Duration::from_secs(2), "the watcher", self.task)
            .await
            .expect("the watcher")
    }
}

/// Which kind of client a waiter is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    /// lock-core, straight to the server.
    Ours,
    /// The Redisson-protocol client.
    Redisson,
}

/// Offsets `4k, 4k+1` get our waiter, `4k+2, 4k+3` Redisson's: both
/// kinds meet both FIN and RST.
fn side(i: usize) -> Side {
    if (i / 2).is_multiple_of(2) {
        Side::Ours
    } else {
        Side::Redisson
    }
}

/// A waiter's grant.
struct Granted {
    owner: String,
    at: Instant,
    /// Our waiter's guard, unless released already (Redisson's is released
    /// through its protocol).
    guard: Option<LockGuard>,
}

/// A waiter for `name` on `side` (ours on `client`; Redisson's as owner
/// `java-<i>:1`) that waits at most `bound` and must get the lock; with
/// `release`, it releases at once (after 2 ms).
fn spawn_waiter(
    r: &Rig,
    side: Side,
    client: &LockClient,
    name: &str,
    i: usize,
    bound: Duration,
    release: bool,
) -> JoinHandle<Granted> {
    match side {
        Side::Ours => {
            let lock = client.fair_lock(name).expect("name");
            let name = name.to_string();
            tokio::spawn(async move {
                let g = lock
                    .acquire_timeout(bound)
                    .await
                    .unwrap_or_else(|e| panic!("our waiter for {name}: {e:?}"));
                let (owner, at) = (g.owner_id().to_string(), Instant::now());
                let guard = if release {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    g.release().await.expect("our waiter's release");
                    None
                } else {
                    Some(g)
                };
                Granted { owner, at, guard }
            })
        }
        Side::Redisson => {
            let mut java = redisson(r, name);
            let owner = format!("java-{i:05}:1");
            tokio::spawn(async move {
                assert!(
                    java.lock_within(&owner, JAVA_LEASE_MS, bound).await,
                    "Redisson's waiter {owner} for {} did not get the lock",
                    java.name
                );
                let at = Instant::now();
                if release {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    assert_eq!(java.unlock(&owner, JAVA_LEASE_MS).await, Some(1));
                }
                Granted {
                    owner,
                    at,
                    guard: None,
                }
            })
        }
    }
}

fn redisson(r: &Rig, name: &str) -> RedissonFairLock {
    RedissonFairLock::new(
        r.conn.clone(),
        &r.server.url(),
        name,
        ALLOWANCE.as_millis() as i64,
    )
}

/// Releases a waiter's hold (ours by its guard, Redisson's by its unlock).
async fn release_granted(r: &Rig, name: &str, g: Granted) {
    match g.guard {
        Some(guard) => guard.release().await.expect("release"),
        None => assert_eq!(
            redisson(r, name).unlock(&g.owner, JAVA_LEASE_MS).await,
            Some(1),
            "Redisson's unlock"
        ),
    }
}

/// Arms `fault` (or, without one, an observation) on the next `matcher`.
fn arm(proxy: &FaultProxy, matcher: CommandMatch, fault: Option<Fault>) -> FaultHandle {
    match fault {
        Some(f) => proxy.fault_next(matcher, f),
        None => proxy.observe_next(matcher),
    }
}

/// Whether the command under `fault` reached Redis whole (and ran).
fn applied(fault: &Option<Fault>, handle: &FaultHandle) -> bool {
    match fault {
        Some(Fault::CutCommand { after, .. }) => handle.command_len().is_some_and(|n| *after >= n),
        _ => true,
    }
}

/// What one offset did: its fault's handle, the outcome's name and the
/// times measured.
struct Outcome {
    handle: FaultHandle,
    kind: String,
    figures: Vec<(&'static str, Duration)>,
}

/// The figures of a sweep.
struct Summary {
    kinds: BTreeMap<String, usize>,
}

/// Runs `step` twice unfaulted (the first loads every script, the second
/// measures the command and its reply), then once per offset of
/// [`alternating`], [`LANES`] at a time; prints the offsets, the outcomes,
/// the longest of each figure and the time taken.
async fn sweep<F, Fut>(r: &Rig, what: &str, step: F) -> Summary
where
    F: Fn(usize, usize, String, Option<Fault>) -> Fut,
    Fut: Future<Output = Outcome>,
{
    let started = Instant::now();
    step(0, 0, format!("{what}: probe 0"), None).await;
    let probe = step(0, 1, format!("{what}: probe 1"), None).await;
    let command_len = probe.handle.command_len().expect("the command's length");
    let reply_len = probe.handle.reply_len().expect("the reply's length");
    let cases: Vec<(usize, String, Fault)> = alternating(command_len, reply_len)
        .into_iter()
        .enumerate()
        .map(|(i, (label, fault))| (i + 2, format!("{what}: {label}"), fault))
        .collect();
    let n = cases.len();
    let swept = Instant::now();
    let lanes = (0..r.lanes.len()).map(|l| {
        let (cases, step) = (&cases, &step);
        async move {
            let mut outs = Vec::new();
            for (i, label, fault) in cases.iter().skip(l).step_by(LANES) {
                let reply_cut = matches!(fault, Fault::CutReply { .. });
                let out = step(l, *i, label.clone(), Some(fault.clone())).await;
                assert_eq!(
                    out.handle.command_len(),
                    Some(command_len),
                    "{label}: the command's layout changed"
                );
                if reply_cut {
                    assert_eq!(
                        out.handle.reply_len(),
                        Some(reply_len),
                        "{label}: the reply's layout changed"
                    );
                }
                outs.push(out);
            }
            outs
        }
    });
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut longest: BTreeMap<&'static str, Duration> = BTreeMap::new();
    for out in join_all(lanes).await.into_iter().flatten() {
        *kinds.entry(out.kind).or_default() += 1;
        for (figure, took) in out.figures {
            let max = longest.entry(figure).or_default();
            *max = (*max).max(took);
        }
    }
    eprintln!(
        "{what}: {n} offsets (command {command_len} B + reply {reply_len} B, every byte once, FIN at even offsets, RST at odd; {LANES} at a time): {kinds:?}; longest {longest:?}; {:?} (sweep {:?}); fair_cut_faults running for {:?}",
        started.elapsed(),
        swept.elapsed(),
        FILE_STARTED.get().map(Instant::elapsed).unwrap_or_default()
    );
    Summary { kinds }
}

/// The holder's `fair_release.lua` cut, with a waiter at the queue's head.
async fn release_step(
    r: &Rig,
    lane: usize,
    i: usize,
    label: String,
    fault: Option<Fault>,
) -> Outcome {
    let lane = &r.lanes[lane];
    let name = format!("fcut-rel-{i:05}");
    let lock = lane.fair_lock(&name).expect("name");
    let guard = setup_acquire(&lock).await;
    let holder = guard.owner_id().to_string();
    let side = side(i);
    let waiter = spawn_waiter(r, side, &r.other, &name, i, Duration::from_secs(5), false);
    let before = queue_reaches(r, &name, 1, &label).await;
    assert!(before.held_by(&holder), "{label}: {before:?}");
    assert!(
        !waiter.is_finished(),
        "{label}: the waiter got in while the guard holds"
    );
    let watch = Watch::start(&r.conn, &name).await;
    let handle = arm(&r.proxy, calls(fair_release_sha(), &name), fault);
    let started = Instant::now();
    let result = within(Duration::from_secs(5), &label, guard.release()).await;
    let took = started.elapsed();
    assert!(
        handle.wait_fired(Duration::from_secs(2)),
        "{label}: the fault fired"
    );
    let granted = within(HEAD_BOUND + Duration::from_secs(1), &label, waiter)
        .await
        .expect("the waiter");
    let to_head = granted.at - started;
    assert!(
        to_head <= HEAD_BOUND,
        "{label}: the head got in {to_head:?} after the release began"
    );
    let owner = granted.owner.clone();
    let now = fair_state(&r.conn, &name, &label).await;
    assert!(
        now.held_by(&owner) && now.nobody_waits(),
        "{label}: the head holds, nobody waits: {now:?}"
    );
    // (the last poll while the head holds)
    let seen = watch.finish().await;
    release_granted(r, &name, granted).await;
    let orphans = seen.check(&label, &[&holder, &owner]);
    assert!(
        orphans.is_empty(),
        "{label}: holds without a guard {orphans:?}"
    );
    assert!(
        seen.before(&holder, &owner),
        "{label}: freed once, then the head's: {seen:?}"
    );
    settles(
        &r.conn,
        &name,
        &label,
        Duration::from_secs(1),
        FairState::is_clean,
    )
    .await;
    let result = match result {
        Ok(()) => "released",
        Err(e) => {
            assert!(
                e.is_redis() && !matches!(e, Error::Protocol(_)),
                "{label}: {e:?}"
            );
            "release failed"
        }
    };
    Outcome {
        handle,
        kind: format!("{result}, {side:?}'s head in"),
        figures: vec![("release", took), ("head in", to_head)],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_cut_at_every_byte_frees_once_and_the_head_gets_in() {
    let r = rig().await;
    let s = sweep(&r, "fair release", |lane, i, label, fault| {
        release_step(&r, lane, i, label, fault)
    })
    .await;
    assert!(
        s.kinds.keys().any(|k| k.contains("Ours"))
            && s.kinds.keys().any(|k| k.contains("Redisson"))
    );
    // one cut is ridden out by the release's retries: a retry that finds
    // the hold gone (its first copy ran) reports the release done
    assert!(
        s.kinds.keys().all(|k| k.starts_with("released")),
        "{:?}",
        s.kinds
    );
}

/// A waiter giving up (its bound passes while another client holds): its
/// `fair_cancel.lua` cut.
async fn cancel_step(
    r: &Rig,
    lane: usize,
    i: usize,
    label: String,
    fault: Option<Fault>,
) -> Outcome {
    let lane = &r.lanes[lane];
    let name = format!("fcut-can-{i:05}");
    let held = r
        .other
        .fair_lock(&name)
        .expect("name")
        .acquire()
        .await
        .expect("the holder");
    let holder = held.owner_id().to_string();
    let handle = arm(&r.proxy, calls(fair_cancel_sha(), &name), fault);
    let bound = Duration::from_millis(20);
    let lock = lane.fair_lock(&name).expect("name");
    let started = Instant::now();
    let waiter = tokio::spawn(async move { lock.acquire_timeout(bound).await });
    // the waiter's owner id, seen queued
    let mut queued: Option<String> = None;
    while !waiter.is_finished() && started.elapsed() < Duration::from_secs(3) {
        let s = fair_state(&r.conn, &name, &label).await;
        assert!(s.held_by(&holder), "{label}: {s:?}");
        if let Some(first) = s.queue.first() {
            assert!(
                first.starts_with(lane.client_id()) && s.queue.len() == 1,
                "{label}: {s:?}"
            );
            queued = Some(first.clone());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let outcome = within(Duration::from_secs(3), &label, waiter)
        .await
        .expect("the waiter");
    let ended = started.elapsed();
    match &outcome {
        Err(Error::WaitTimeout { name: n, waited }) if *n == name && *waited == bound => {}
        other => panic!("{label}: want WaitTimeout {{ {name}, {bound:?} }}, got {other:?}"),
    }
    assert!(
        handle.wait_fired(Duration::from_secs(2)),
        "{label}: the fault fired"
    );
    // out of the queue, the deadlines and the marks (bounded: a
    // cancellation left to the background, or at worst the mark's lapse)
    let (s, left) = settles(&r.conn, &name, &label, LAPSE_BOUND, FairState::nobody_waits).await;
    assert!(
        s.held_by(&holder),
        "{label}: the holder's hold untouched: {s:?}"
    );
    // nobody wedged: a later waiter gets the lock at the holder's release
    let later = spawn_waiter(
        r,
        side(i),
        &r.third,
        &name,
        i,
        Duration::from_secs(5),
        false,
    );
    queue_reaches(r, &name, 1, &label).await;
    let released = Instant::now();
    held.release().await.expect("the holder's release");
    let granted = within(HEAD_BOUND + Duration::from_secs(1), &label, later)
        .await
        .expect("the later waiter");
    let to_later = granted.at - released;
    assert!(
        to_later <= HEAD_BOUND,
        "{label}: the later waiter got in after {to_later:?}"
    );
    release_granted(r, &name, granted).await;
    settles(
        &r.conn,
        &name,
        &label,
        Duration::from_secs(1),
        FairState::is_clean,
    )
    .await;
    Outcome {
        handle,
        kind: if queued.is_some() {
            "queued, gave up, left".into()
        } else {
            "gave up (not seen queued), left".into()
        },
        figures: vec![
            ("wait ended", ended),
            ("left after the error", left),
            ("later waiter in", to_later),
        ],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_giving_up_cut_at_every_byte_leaves_the_queue_deadlines_and_marks() {
    let r = rig().await;
    let s = sweep(&r, "fair cancel (giving up)", |lane, i, label, fault| {
        cancel_step(&r, lane, i, label, fault)
    })
    .await;
    assert!(s.kinds.contains_key("queued, gave up, left"));
}

/// A waiter's first `fair_acquire.lua` ('wait': it joins the queue behind
/// another client's hold) cut.
async fn join_step(r: &Rig, lane: usize, i: usize, label: String, fault: Option<Fault>) -> Outcome {
    let lane = &r.lanes[lane];
    let name = format!("fcut-join-{i:05}");
    let held = r
        .other
        .fair_lock(&name)
        .expect("name")
        .acquire()
        .await
        .expect("the holder");
    let holder = held.owner_id().to_string();
    let watch = Watch::start(&r.conn, &name).await;
    let handle = arm(&r.proxy, acquires(&name, "wait"), fault);
    let lock = lane.fair_lock(&name).expect("name");
    let waiter = tokio::spawn(async move {
        let out = lock.acquire_timeout(Duration::from_secs(4)).await;
        (out, Instant::now())
    });
    assert!(
        handle.wait_fired(Duration::from_secs(2)),
        "{label}: the fault fired"
    );
    // the waiter queued under a live owner id (again), or failed
    let client_id = lane.client_id().to_string();
    let (s, _) = settles(&r.conn, &name, &label, Duration::from_secs(2), |s| {
        waiter.is_finished()
            || s.queue
                .iter()
                .any(|o| o.starts_with(&client_id) && s.alive.contains(o))
    })
    .await;
    assert!(s.held_by(&holder), "{label}: only the holder holds: {s:?}");
    let released = Instant::now();
    held.release().await.expect("the holder's release");
    let (out, at) = within(HEAD_BOUND + Duration::from_secs(1), &label, waiter)
        .await
        .expect("the waiter");
    let mut guarded = vec![holder.clone()];
    let (kind, next_in) = match out {
        Ok(g) => {
            let to_head = at - released;
            assert!(
                to_head <= HEAD_BOUND,
                "{label}: the waiter got in {to_head:?} after the release"
            );
            let now = fair_state(&r.conn, &name, &label).await;
            assert!(
                now.held_by(g.owner_id()) && now.nobody_waits(),
                "{label}: no stale entry behind the waiter's grant: {now:?}"
            );
            guarded.push(g.owner_id().to_string());
            g.release().await.expect("release");
            ("joined, got in", to_head)
        }
        Err(e) => {
            assert!(
                e.is_redis() && !matches!(e, Error::Protocol(_)),
                "{label}: {e:?}"
            );
            // another client gets in after the holder, within the bound
            let g = within(
                HEAD_BOUND + Duration::from_secs(1),
                &label,
                r.third
                    .fair_lock(&name)
                    .expect("name")
                    .acquire_timeout(HEAD_BOUND),
            )
            .await
            .unwrap_or_else(|e| panic!("{label}: the next client: {e:?}"));
            let to_next = released.elapsed();
            guarded.push(g.owner_id().to_string());
            g.release().await.expect("release");
            ("failed, the next client got in", to_next)
        }
    };
    // no stale entry at the head: a one-shot attempt is not refused
    let g = r
        .third
        .fair_lock(&name)
        .expect("name")
        .try_acquire()
        .await
        .expect("try_acquire")
        .unwrap_or_else(|| panic!("{label}: refused by a stale head"));
    guarded.push(g.owner_id().to_string());
    g.release().await.expect("release");
    let seen = watch.finish().await;
    let guarded: Vec<&str> = guarded.iter().map(String::as_str).collect();
    let orphans = seen.check(&label, &guarded);
    assert!(
        orphans.is_empty(),
        "{label}: holds without a guard {orphans:?}"
    );
    settles(
        &r.conn,
        &name,
        &label,
        Duration::from_secs(1),
        FairState::is_clean,
    )
    .await;
    Outcome {
        handle,
        kind: kind.into(),
        figures: vec![("in after the holder's release", next_in)],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_join_cut_at_every_byte_leaves_no_stale_entry_and_no_orphan_hold() {
    let r = rig().await;
    let s = sweep(&r, "fair join", |lane, i, label, fault| {
        join_step(&r, lane, i, label, fault)
    })
    .await;
    assert!(s.kinds.contains_key("joined, got in"));
}

/// The queue's head's `fair_acquire.lua` that gets the grant (the holder
/// released; another waiter behind it) cut.
async fn grant_step(
    r: &Rig,
    lane: usize,
    i: usize,
    label: String,
    fault: Option<Fault>,
) -> Outcome {
    let lane = &r.lanes[lane];
    let cut = fault.clone();
    let name = format!("fcut-head-{i:05}");
    let held = r
        .other
        .fair_lock(&name)
        .expect("name")
        .acquire()
        .await
        .expect("the holder");
    let holder = held.owner_id().to_string();
    // The head's two attempts before it sleeps (it joins, subscribes and
    // asks again), so that the cut hits the one after the release.
    let joins = [
        r.proxy.observe_next(acquires(&name, "wait")),
        r.proxy.observe_next(acquires(&name, "wait")),
    ];
    let head = spawn_waiter(r, Side::Ours, lane, &name, i, Duration::from_secs(5), true);
    for seen in &joins {
        assert!(
            seen.wait_fired(Duration::from_secs(2)),
            "{label}: the head's attempts before it sleeps"
        );
    }
    let first = queue_reaches(r, &name, 1, &label).await.queue[0].clone();
    assert!(first.starts_with(lane.client_id()), "{label}: {first}");
    let side = side(i);
    let next = spawn_waiter(r, side, &r.third, &name, i, Duration::from_secs(5), true);
    let queued = queue_reaches(r, &name, 2, &label).await;
    assert_eq!(queued.queue[0], first, "{label}: {queued:?}");
    let watch = Watch::start(&r.conn, &name).await;
    let handle = arm(
        &r.proxy,
        acquires(&name, "wait").with_exact_arg(&first),
        fault,
    );
    let fault = cut;
    let released = Instant::now();
    held.release().await.expect("the holder's release");
    assert!(
        handle.wait_fired(Duration::from_secs(2)),
        "{label}: the fault fired"
    );
    let head = within(Duration::from_secs(5), &label, head)
        .await
        .expect("the head");
    let next = within(Duration::from_secs(5), &label, next)
        .await
        .expect("the next");
    let seen = watch.finish().await;
    let kept = head.owner == first;
    if kept {
        assert!(head.at < next.at, "{label}: the head first");
    } else {
        assert!(
            next.at < head.at,
            "{label}: the head's grant undone, it queued again behind the next"
        );
    }
    let first_in = head.at.min(next.at) - released;
    assert!(
        first_in <= HEAD_BOUND,
        "{label}: somebody got in {first_in:?} after the release"
    );
    let orphans = seen.check(&label, &[&holder, &head.owner, &next.owner]);
    assert!(
        orphans.iter().all(|(o, _)| *o == first && !kept),
        "{label}: a hold without a guard other than the head's undone grant: {orphans:?}"
    );
    settles(
        &r.conn,
        &name,
        &label,
        Duration::from_secs(1),
        FairState::is_clean,
    )
    .await;
    let (kind, mut figures) = match (kept, applied(&fault, &handle)) {
        (true, _) => ("the head kept its grant".to_string(), vec![]),
        (false, true) => (
            format!("the head's grant undone, {side:?}'s next in first"),
            orphans
                .first()
                .map(|(_, span)| vec![("an undone grant seen held", *span)])
                .unwrap_or_default(),
        ),
        (false, false) => (
            format!("the head's grant not applied, {side:?}'s next in first"),
            vec![],
        ),
    };
    figures.push(("first in after the release", first_in));
    Outcome {
        handle,
        kind,
        figures,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heads_grant_cut_at_every_byte_is_kept_with_a_guard_or_undone() {
    let r = rig().await;
    let s = sweep(&r, "fair head grant", |lane, i, label, fault| {
        grant_step(&r, lane, i, label, fault)
    })
    .await;
    assert!(s.kinds.contains_key("the head kept its grant"));
    assert!(s
        .kinds
        .keys()
        .any(|k| k.starts_with("the head's grant undone")));
}

/// A waiter's first `fair_acquire.lua` cut while the lock is free and a
/// Redisson head, unaware (its holder's lease ran out: no message), sleeps
/// for seconds: the head is told (by that attempt, or by the cancellation
/// of it) and gets in within [`HEAD_BOUND`]; the waiter after it.
async fn wake_step(r: &Rig, lane: usize, i: usize, label: String, fault: Option<Fault>) -> Outcome {
    let lane = &r.lanes[lane];
    let name = format!("fcut-wake-{i:05}");
    let mut conn = r.conn.clone();
    let _: () = cmd(&mut conn, &["HSET", &name, "ghost:0", "1"]).await;
    let _: i64 = cmd(&mut conn, &["PEXPIRE", &name, "10000"]).await;
    let head = spawn_waiter(
        r,
        Side::Redisson,
        &r.third,
        &name,
        i,
        Duration::from_secs(8),
        true,
    );
    queue_reaches(r, &name, 1, &label).await;
    // the holder's lease runs out: no message
    let _: i64 = cmd(&mut conn, &["DEL", &name]).await;
    let watch = Watch::start(&r.conn, &name).await;
    let handle = arm(&r.proxy, acquires(&name, "wait"), fault.clone());
    let started = Instant::now();
    let waiter = spawn_waiter(r, Side::Ours, lane, &name, i, Duration::from_secs(5), true);
    assert!(
        handle.wait_fired(Duration::from_secs(2)),
        "{label}: the fault fired"
    );
    let head = within(HEAD_BOUND + Duration::from_secs(1), &label, head)
        .await
        .expect("the head");
    let woken = head.at - started;
    assert!(
        woken <= HEAD_BOUND,
        "{label}: the unaware head got in after {woken:?}"
    );
    let waiter = within(Duration::from_secs(5), &label, waiter)
        .await
        .expect("the waiter");
    assert!(head.at < waiter.at, "{label}: the head first");
    let seen = watch.finish().await;
    let orphans = seen.check(&label, &[&head.owner, &waiter.owner]);
    assert!(
        orphans.is_empty(),
        "{label}: holds without a guard {orphans:?}"
    );
    settles(
        &r.conn,
        &name,
        &label,
        Duration::from_secs(1),
        FairState::is_clean,
    )
    .await;
    Outcome {
        kind: if applied(&fault, &handle) {
            "attempt applied (it told the head)".into()
        } else {
            "attempt not applied (its cancellation or retry told the head)".into()
        },
        handle,
        figures: vec![("the head in", woken)],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_wakes_its_unaware_head_through_a_cut_attempt() {
    let r = rig().await;
    let s = sweep(&r, "fair free-lock wake", |lane, i, label, fault| {
        wake_step(&r, lane, i, label, fault)
    })
    .await;
    assert_eq!(s.kinds.len(), 2, "both paths: {:?}", s.kinds);
}

/// `force_unlock` of a held fair lock with a waiter queued, its
/// `fair_force_unlock.lua` cut: applied once or not at all (never to the
/// next holder's hold), and the waiter gets in.
async fn force_step(
    r: &Rig,
    lane: usize,
    i: usize,
    label: String,
    fault: Option<Fault>,
) -> Outcome {
    let lane = &r.lanes[lane];
    let name = format!("fcut-force-{i:05}");
    let held = r
        .other
        .fair_lock(&name)
        .expect("name")
        .acquire()
        .await
        .expect("the holder");
    let holder = held.owner_id().to_string();
    let side = side(i);
    let waiter = spawn_waiter(r, side, &r.third, &name, i, Duration::from_secs(5), false);
    queue_reaches(r, &name, 1, &label).await;
    let watch = Watch::start(&r.conn, &name).await;
    let handle = arm(&r.proxy, calls(fair_force_unlock_sha(), &name), fault);
    let started = Instant::now();
    let result = within(
        Duration::from_secs(5),
        &label,
        lane.fair_lock(&name).expect("name").force_unlock(),
    )
    .await;
    assert!(
        handle.wait_fired(Duration::from_secs(2)),
        "{label}: the fault fired"
    );
    // (a cut connection delivers no late copy: what Redis has now is final)
    let after = fair_state(&r.conn, &name, &label).await;
    let applied = !after.hash.contains_key(&holder);
    match &result {
        Ok(true) => assert!(applied, "{label}: {after:?}"),
        Ok(false) => panic!("{label}: there was a lock to delete"),
        Err(e) => assert!(
            e.is_redis() && !matches!(e, Error::Protocol(_)),
            "{label}: {e:?}"
        ),
    }
    let (from, held) = if applied {
        (started, Some(held))
    } else {
        let released = Instant::now();
        held.release().await.expect("the holder's release");
        (released, None)
    };
    let granted = within(HEAD_BOUND + Duration::from_secs(1), &label, waiter)
        .await
        .expect("the waiter");
    let to_head = granted.at - from;
    assert!(
        to_head <= HEAD_BOUND,
        "{label}: the waiter got in after {to_head:?}"
    );
    if let Some(held) = held {
        // the holder's guard ends after the force-unlock: it must not
        // touch the next holder's hold
        let late = held.release().await;
        assert!(
            late.is_err(),
            "{label}: the deleted hold released: {late:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let now = fair_state(&r.conn, &name, &label).await;
    assert!(
        now.held_by(&granted.owner) && now.nobody_waits(),
        "{label}: the waiter's hold stays: {now:?}"
    );
    let owner = granted.owner.clone();
    let seen = watch.finish().await;
    release_granted(r, &name, granted).await;
    let orphans = seen.check(&label, &[&holder, &owner]);
    assert!(
        orphans.is_empty(),
        "{label}: holds without a guard {orphans:?}"
    );
    settles(
        &r.conn,
        &name,
        &label,
        Duration::from_secs(1),
        FairState::is_clean,
    )
    .await;
    let result = match (&result, applied) {
        (Ok(_), _) => "deleted, answered",
        (Err(_), true) => "deleted, answer lost",
        (Err(_), false) => "not applied, failed",
    };
    Outcome {
        handle,
        kind: format!("{result}, {side:?}'s waiter in"),
        figures: vec![("waiter in", to_head)],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_force_unlock_cut_at_every_byte_deletes_at_most_once_and_wakes_the_head() {
    let r = rig().await;
    let s = sweep(&r, "fair force unlock", |lane, i, label, fault| {
        force_step(&r, lane, i, label, fault)
    })
    .await;
    assert!(s
        .kinds
        .keys()
        .any(|k| k.starts_with("deleted, answer lost")));
    assert!(s.kinds.keys().any(|k| k.starts_with("not applied")));
}
