//! The fair lock under a load of waiters while their calls meet faults
//! through the harness's fault proxies: replies lost on a silent
//! connection, replies and commands held up past the command time-out (a
//! late copy of a cancelled attempt), connections reset mid-reply or cut
//! mid-command, every connection of a proxy cut at once, and black holes
//! that hold every byte of a proxy for a while (short ones, and one per
//! proxy longer than the cancellation's retry window). Three lock-core
//! clients (two through proxies, one direct) run three waiting tasks each,
//! beside two Redisson-protocol waiters (`support/redisson_fair.rs`, direct
//! connections) with the default allowance (5 minutes).
//!
//! An observer with its own connection ([`FairInside`]) judges: never two
//! inside; every acquisition that did not end in an error got the lock
//! within its bound (no wait time-out); a live Redisson waiter is never
//! dropped from the queue (its entry is there before each of its calls)
//! and its deadline never passes while it waits (checked at every look).
//! At the end, with the clients shut down, nothing is left of the lock in
//! Redis: no hold, no queue entry, no deadline, no liveness mark.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_core::{Error, LockClient};
use lock_tests::{CommandMatch, CutKind, Fault, FaultProxy};

use crate::support::fair_state::{
    fair_acquire_sha, fair_cancel_sha, fair_release_sha, fair_state, FairInside, FairState,
};
use crate::support::redisson_fair::{now_ms, RedissonFairLock};
use crate::support::{self, renew_sha, within};

/// The lock's name.
const NAME: &str = "fair:faults";

/// How long the load runs.
const LOAD: Duration = Duration::from_secs(8);

/// Each acquisition's bound: a waiter that did not get the lock by then
/// gave up (none may, unless its call failed).
const BOUND: Duration = Duration::from_secs(10);

/// The Redisson waiters' allowance: the default (`fair_lock_wait_timeout`).
const ALLOWANCE_MS: i64 = 300_000;

/// A Redisson holder's lease.
const JAVA_LEASE_MS: i64 = 30_000;

/// How long the long black holes last: longer than a cancellation's retry
/// window (three command time-outs, 600 ms here) and than one command's
/// bound.
const LONG_HOLE: Duration = Duration::from_millis(1_200);

fn through(proxy: &FaultProxy) -> LockClient {
    LockClient::builder(proxy.url())
        .watchdog_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// One proxy's faults until `stop`: one armed at a time on one of the fair
/// lock's script calls; now and then a black hole of 150 to 250 ms (with
/// quiet time around it), or every connection cut; once, at `long_at`, a
/// black hole of [`LONG_HOLE`]. Returns (faults fired, black holes, cuts).
async fn inject(
    proxy: Arc<FaultProxy>,
    p: usize,
    stop: Instant,
    long_at: Instant,
) -> (usize, usize, usize) {
    let faults = [
        Fault::DropReply,
        Fault::DelayReply(Duration::from_millis(450)),
        Fault::DelayCommand(Duration::from_millis(450)),
        Fault::CutReply {
            after: 0,
            how: CutKind::Rst,
        },
        Fault::CutCommand {
            after: 20,
            how: CutKind::Fin,
        },
    ];
    // mostly attempts and releases; cancellations and renewals are rarer
    let scripts = [
        fair_acquire_sha(),
        fair_release_sha(),
        fair_acquire_sha(),
        fair_cancel_sha(),
        fair_acquire_sha(),
        fair_release_sha(),
        renew_sha(),
    ];
    let (mut fired, mut holes, mut cuts) = (0, 0, 0);
    let mut long_done = false;
    for round in 0..400usize {
        if Instant::now() > stop {
            break;
        }
        if !long_done && Instant::now() >= long_at {
            long_done = true;
            proxy.black_hole();
            tokio::time::sleep(LONG_HOLE).await;
            if p == 0 {
                // a partition that ends with every connection reset: what
                // was held back (cancellations among it) is lost
                proxy.cut_all(CutKind::Rst);
                cuts += 1;
            }
            proxy.heal();
            holes += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        if round % 9 == 8 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            proxy.black_hole();
            tokio::time::sleep(Duration::from_millis(150 + 50 * (round % 3) as u64)).await;
            proxy.heal();
            holes += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        if round % 13 == 6 {
            proxy.cut_all(if round % 2 == 0 {
                CutKind::Rst
            } else {
                CutKind::Fin
            });
            cuts += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let sha = scripts[(round + p) % scripts.len()].clone();
        let fault = faults[(round / 2 + p) % faults.len()].clone();
        let handle = proxy.fault_next(CommandMatch::name("EVALSHA").with_exact_arg(sha), fault);
        let waited =
            tokio::task::spawn_blocking(move || handle.wait_fired(Duration::from_millis(300)))
                .await
                .unwrap_or(false);
        fired += usize::from(waited);
        proxy.clear_rules();
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    (fired, holes, cuts)
}

/// What the load's tasks did.
#[derive(Default, Debug)]
struct Tally {
    sections: u32,
    acquire_errors: u32,
    wait_timeouts: u32,
    longest_wait: Duration,
    release_errors: u32,
    lost: u32,
    /// A Redisson waiter found its entry gone from the queue while it
    /// waited (dropped as dead while alive).
    pruned: u32,
    /// A Redisson waiter saw its own deadline passed while it waited.
    overdue: u32,
    /// The errors that ended acquisitions, by kind.
    errors: std::collections::BTreeMap<String, u32>,
}

impl Tally {
    fn add(&mut self, t: &Tally) {
        self.sections += t.sections;
        self.acquire_errors += t.acquire_errors;
        self.wait_timeouts += t.wait_timeouts;
        self.longest_wait = self.longest_wait.max(t.longest_wait);
        self.release_errors += t.release_errors;
        self.lost += t.lost;
        self.pruned += t.pruned;
        self.overdue += t.overdue;
        for (k, n) in &t.errors {
            *self.errors.entry(k.clone()).or_default() += n;
        }
    }
}

/// A lock-core waiting task: acquire (bounded), enter, hold 2 to 5 ms,
/// leave, release; until `stop`.
async fn ours(client: LockClient, mut seen: FairInside, who: String, stop: Instant) -> Tally {
    let lock = client.fair_lock(NAME).expect("name");
    let mut tally = Tally::default();
    for round in 0..2_000u64 {
        if Instant::now() > stop {
            break;
        }
        let asked = Instant::now();
        let got = lock.acquire_timeout(BOUND).await;
        let waited = asked.elapsed();
        let guard = match got {
            Ok(g) => g,
            Err(e) if e.is_wait_timeout() => {
                tally.wait_timeouts += 1;
                continue;
            }
            Err(e) => {
                tally.acquire_errors += 1;
                let kind = format!("{e:?}");
                let kind = kind
                    .split(['(', ' ', '{'])
                    .next()
                    .unwrap_or("?")
                    .to_string();
                *tally.errors.entry(kind).or_default() += 1;
                continue;
            }
        };
        tally.longest_wait = tally.longest_wait.max(waited);
        if !guard.is_held() {
            continue;
        }
        seen.enter(&who).await;
        tokio::time::sleep(Duration::from_millis(2 + round % 4)).await;
        seen.leave(&who).await;
        assert!(guard.is_held(), "{who}: the hold ended while inside");
        match guard.release().await {
            Ok(()) => {}
            Err(Error::Lost { .. }) => tally.lost += 1,
            Err(_) => tally.release_errors += 1,
        }
        tally.sections += 1;
    }
    tally
}

/// A Redisson waiting task (one owner, as a Java thread is): Redisson's
/// wait — attempt; when told to wait, the message on its own channel or
/// the time told — bounded; enter, hold 2 to 5 ms, leave, unlock; until
/// `stop`. Before each attempt after the first of an acquisition, its
/// entry must still be in the queue with a deadline not passed.
async fn java(
    url: String,
    conn: redis::aio::MultiplexedConnection,
    mut seen: FairInside,
    owner: String,
    stop: Instant,
) -> Tally {
    let mut lock = RedissonFairLock::new(conn, &url, NAME, ALLOWANCE_MS);
    let client = redis::Client::open(url.as_str()).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe(lock.channel(&owner))
        .await
        .expect("subscribe");
    let mut messages = pubsub.on_message();
    let mut tally = Tally::default();
    for round in 0..2_000u64 {
        if Instant::now() > stop {
            break;
        }
        let asked = Instant::now();
        let mut queued = false;
        let granted = loop {
            if queued {
                match lock.deadline(&owner).await {
                    None => tally.pruned += 1,
                    Some(d) if d <= now_ms() => tally.overdue += 1,
                    Some(_) => {}
                }
            }
            let Some(wait_ms) = lock.attempt(&owner, JAVA_LEASE_MS).await else {
                break true;
            };
            queued = true;
            let elapsed = asked.elapsed();
            if elapsed >= BOUND {
                lock.acquire_failed(&owner).await;
                break false;
            }
            let wait = Duration::from_millis(wait_ms.max(1) as u64).min(BOUND - elapsed);
            let _ = tokio::time::timeout(wait, messages.next()).await;
        };
        if !granted {
            tally.wait_timeouts += 1;
            continue;
        }
        tally.longest_wait = tally.longest_wait.max(asked.elapsed());
        seen.enter(&owner).await;
        tokio::time::sleep(Duration::from_millis(2 + round % 4)).await;
        seen.leave(&owner).await;
        assert_eq!(
            lock.unlock(&owner, JAVA_LEASE_MS).await,
            Some(1),
            "{owner}: unlock"
        );
        tally.sections += 1;
    }
    tally
}

/// What the looks at the lock while the load ran found.
#[derive(Default, Debug)]
struct Looks {
    looks: u32,
    longest_queue: usize,
    /// A Redisson waiter's deadline already passed at a look.
    java_overdue: Vec<String>,
    /// More than one owner in the lock's hash.
    two_holders: Vec<FairState>,
    /// Entries of ours whose liveness mark had lapsed (left behind by a
    /// waiter whose leaving was lost), seen in the queue.
    dead_seen: std::collections::BTreeSet<String>,
    /// The lock free with someone waiting: since when (ms), and who was
    /// the head.
    free_since: Option<(i64, String)>,
    /// The longest such stall (ms) and its head.
    longest_stall: (i64, String),
}

/// One look: a Redisson entry whose deadline passed, or two holders, is
/// recorded.
fn look(state: &FairState, now: i64, looks: &mut Looks) {
    looks.looks += 1;
    looks.longest_queue = looks.longest_queue.max(state.queue.len());
    for (owner, deadline) in &state.deadlines {
        if owner.starts_with("java-") && *deadline <= now {
            looks
                .java_overdue
                .push(format!("{owner}: deadline {deadline} <= now {now}"));
        }
    }
    for (owner, alive) in &state.marks {
        if *alive <= now && state.queue.contains(owner) {
            looks.dead_seen.insert(owner.clone());
        }
    }
    match (
        &looks.free_since,
        state.holders.is_empty(),
        state.queue.first(),
    ) {
        (None, true, Some(head)) => looks.free_since = Some((now, head.clone())),
        (Some((since, head)), true, Some(_)) => {
            if now - since > looks.longest_stall.0 {
                looks.longest_stall = (now - since, head.clone());
            }
        }
        (Some(_), _, _) => looks.free_since = None,
        (None, _, _) => {}
    }
    if state.holders.len() > 1 {
        looks.two_holders.push(state.clone());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_look_flags_an_overdue_redisson_waiter_and_two_holders() {
    // the checker itself, on planted states
    let mut planted = FairState::default();
    planted.deadlines.insert("java-0:1".into(), 1_000);
    planted.deadlines.insert("c1:1".into(), 1_000);
    planted.deadlines.insert("java-1:1".into(), 5_000);
    planted.holders.insert("a".into(), "1".into());
    let mut looks = Looks::default();
    look(&planted, 2_000, &mut looks);
    assert_eq!(
        looks.java_overdue,
        ["java-0:1: deadline 1000 <= now 2000"],
        "only Redisson's entries are judged by their deadlines"
    );
    assert!(looks.two_holders.is_empty());
    planted.holders.insert("b".into(), "1".into());
    look(&planted, 0, &mut looks);
    assert_eq!(looks.two_holders.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_two_inside_every_waiter_served_and_the_queue_drained_under_faults() {
    let server = support::server();
    let proxies: Vec<Arc<FaultProxy>> = (0..2)
        .map(|_| {
            Arc::new(FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}")))
        })
        .collect();
    let mut clients: Vec<LockClient> = proxies.iter().map(|p| through(p)).collect();
    clients.push(support::client_for(&server, 1_000));
    let seen = FairInside::new(&server, NAME).await;
    let conn = support::raw(&server).await;
    let started = Instant::now();
    let stop = started + LOAD;
    let injectors: Vec<_> = proxies
        .iter()
        .enumerate()
        .map(|(p, proxy)| {
            let long_at = started + Duration::from_millis(2_500 + 2_500 * p as u64);
            tokio::spawn(inject(proxy.clone(), p, stop, long_at))
        })
        .collect();
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..3 {
            tasks.push(tokio::spawn(ours(
                client.clone(),
                seen.clone(),
                format!("c{c}t{t}"),
                stop,
            )));
        }
    }
    let mut java_tasks = Vec::new();
    for j in 0..2 {
        java_tasks.push(tokio::spawn(java(
            server.url(),
            support::raw(&server).await,
            seen.clone(),
            format!("java-{j}:1"),
            stop,
        )));
    }
    // the looks while the load runs
    let mut looks = Looks::default();
    while (tasks.iter().any(|t| !t.is_finished()) || java_tasks.iter().any(|t| !t.is_finished()))
        && started.elapsed() < LOAD + BOUND * 3
    {
        let state = fair_state(&conn, NAME).await;
        look(&state, now_ms(), &mut looks);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut total = Tally::default();
    for t in tasks {
        let t = within(Duration::from_secs(30), "task", t)
            .await
            .expect("a task panicked");
        total.add(&t);
    }
    let mut java_total = Tally::default();
    for t in java_tasks {
        let t = within(Duration::from_secs(30), "Redisson task", t)
            .await
            .expect("a Redisson task panicked");
        java_total.add(&t);
    }
    let (mut fired, mut holes, mut cuts) = (0, 0, 0);
    for i in injectors {
        let (f, h, c) = within(Duration::from_secs(10), "injector", i)
            .await
            .expect("join");
        fired += f;
        holes += h;
        cuts += c;
    }
    let load_time = started.elapsed();
    for p in &proxies {
        p.clear_rules();
        p.heal();
    }
    let at_end = fair_state(&conn, NAME).await;
    let mut reports = Vec::new();
    for c in &clients {
        reports.push(c.shutdown(Duration::from_secs(5)).await);
    }
    let after_shutdown = fair_state(&conn, NAME).await;
    // nothing left: orphan holds run out with their lease (1 s); entries of
    // waiters whose leaving was lost leave when their mark lapses (3 s) and
    // a call comes, here none: they must not be there
    let drain_started = Instant::now();
    let mut left = after_shutdown.clone();
    let mut drained = None;
    while drain_started.elapsed() < Duration::from_secs(5) {
        left = fair_state(&conn, NAME).await;
        if left.is_empty() {
            drained = Some(drain_started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut seen = seen;
    let (violations, what) = seen.violations().await;
    let entries = seen.entries().await;
    eprintln!(
        "fair under faults: {} sections ours + {} Redisson's ({entries} entries seen) in {load_time:?}; ours {total:?}; Redisson's {java_total:?}; {fired} faults fired, {holes} black holes (one {LONG_HOLE:?} per proxy), {cuts} connection cuts; {} looks, longest queue {}, {} dead entries of ours seen in the queue, longest time the lock was free with a waiter {:?}; at the end {at_end:?}, after shutdown {after_shutdown:?}, drained {drained:?} after ({left:?}); shutdowns {reports:?}",
        total.sections,
        java_total.sections,
        looks.looks,
        looks.longest_queue,
        looks.dead_seen.len(),
        looks.longest_stall,
    );
    assert_eq!(violations, 0, "two inside: {what:?}");
    assert!(looks.two_holders.is_empty(), "{:?}", looks.two_holders);
    assert_eq!(
        total.wait_timeouts, 0,
        "an acquisition of ours was not served"
    );
    assert_eq!(
        java_total.wait_timeouts, 0,
        "a Redisson waiter was not served"
    );
    assert_eq!(java_total.pruned, 0, "a live Redisson waiter was dropped");
    assert_eq!(
        java_total.overdue, 0,
        "a Redisson waiter saw its deadline pass"
    );
    assert!(looks.java_overdue.is_empty(), "{:?}", looks.java_overdue);
    assert!(total.longest_wait < BOUND, "{total:?}");
    assert!(
        drained.is_some(),
        "left in Redis after shutdown: {left:?} (just after it: {after_shutdown:?})"
    );
    assert!(fired >= 8, "faults fired: {fired}");
    assert!(holes >= 4, "black holes: {holes}");
    assert!(total.sections > 100, "sections of ours: {}", total.sections);
    assert!(
        java_total.sections > 10,
        "sections of Redisson's: {}",
        java_total.sections
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cut_off_past_the_cancel_window_leaves_at_most_one_lease_of_orphan_hold() {
    // A known limitation, bounded: a waiter behind a black-holed proxy
    // gives up while its attempts (and their cancellations, retried for
    // three command time-outs only) are held in the network; when the
    // network heals, its attempt reaches Redis after all, with the lock
    // free and its place at the head: the lock is granted to nobody's
    // guard (an orphan hold) until the lease runs out, and the next waiter
    // gets it then.
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let name = "fair:orphan";
    let holder = support::client_for(&server, 1_000);
    let next = support::client_for(&server, 1_000);
    let cut_off = through(&proxy);
    let conn = support::raw(&server).await;
    let mut seen = FairInside::new(&server, name).await;
    let held = holder
        .fair_lock(name)
        .expect("name")
        .acquire()
        .await
        .expect("held");
    assert!(seen.enter("H").await.0);
    let lock = cut_off.fair_lock(name).expect("name");
    let gives_up = tokio::spawn(async move {
        let r = lock.acquire_timeout(Duration::from_millis(1_500)).await;
        (r.map(|g| g.owner_id().to_string()), Instant::now())
    });
    let mut state = fair_state(&conn, name).await;
    for _ in 0..200 {
        if state.queue.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        state = fair_state(&conn, name).await;
    }
    let p_owner = state
        .queue
        .first()
        .cloned()
        .expect("the cut-off waiter queued");
    assert!(p_owner.starts_with(cut_off.client_id()), "{state:?}");
    let waiter = {
        let lock = next.fair_lock(name).expect("name");
        let mut seen = seen.clone();
        tokio::spawn(async move {
            let guard = lock
                .acquire_timeout(Duration::from_secs(10))
                .await
                .expect("the next waiter");
            let at = Instant::now();
            let alone = seen.enter("E").await.0;
            seen.leave("E").await;
            guard.release().await.expect("release");
            (at, alone)
        })
    };
    for _ in 0..200 {
        if fair_state(&conn, name).await.queue.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // cut off; the holder leaves meanwhile (it tells the cut-off head)
    let cut = Instant::now();
    proxy.black_hole();
    tokio::time::sleep(Duration::from_millis(300)).await;
    seen.leave("H").await;
    held.release().await.expect("release");
    let (outcome, gave_up) = within(Duration::from_secs(3), "the cut-off waiter", gives_up)
        .await
        .expect("join");
    assert!(
        outcome.is_err(),
        "cut off, it cannot get the lock: {outcome:?}"
    );
    tokio::time::sleep(Duration::from_millis(2_000).saturating_sub(cut.elapsed())).await;
    proxy.heal();
    let healed = Instant::now();
    // the orphan hold: the cut-off client's owner in the hash, with nobody
    // holding a guard for it
    let mut orphan: Option<(Instant, Instant)> = None;
    while healed.elapsed() < Duration::from_secs(4) {
        let s = fair_state(&conn, name).await;
        let now = Instant::now();
        if s.holders.keys().any(|o| o.starts_with(cut_off.client_id())) {
            orphan = Some(orphan.map_or((now, now), |(from, _)| (from, now)));
        } else if orphan.is_some() || waiter.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (e_in, alone) = within(Duration::from_secs(10), "the next waiter", waiter)
        .await
        .expect("join");
    // what the cut-off client left in the queue (entries of its attempts
    // under new owner ids after it gave up) leaves when their marks lapse
    // and a call comes
    tokio::time::sleep(Duration::from_millis(3_100)).await;
    let before_call = fair_state(&conn, name).await;
    let judge = support::client_for(&server, 1_000);
    if let Some(g) = judge
        .fair_lock(name)
        .expect("name")
        .try_acquire()
        .await
        .expect("try")
    {
        g.release().await.expect("release");
    }
    let end = fair_state(&conn, name).await;
    let (violations, what) = seen.violations().await;
    eprintln!(
        "fair cut off past the cancel window: the waiter gave up {:?} into a {:?} black hole ({outcome:?}); after the heal an orphan hold of it for {:?} (seen from {:?} after the heal); the next waiter in {:?} after the heal; left of it 3.1 s later {:?}; after one call {end:?}",
        gave_up - cut,
        healed - cut,
        orphan.map(|(from, to)| to - from),
        orphan.map(|(from, _)| from - healed),
        e_in.saturating_duration_since(healed),
        before_call.queue,
    );
    assert_eq!(violations, 0, "two inside: {what:?}");
    assert!(alone);
    if let Some((from, to)) = orphan {
        assert!(
            to - from <= Duration::from_millis(1_200),
            "an orphan hold outlived its lease (1 s): {:?}",
            to - from
        );
    }
    assert!(
        e_in.saturating_duration_since(healed) <= Duration::from_millis(2_500),
        "the next waiter waited {:?} after the heal",
        e_in.saturating_duration_since(healed)
    );
    assert!(end.is_empty(), "{end:?}");
}
