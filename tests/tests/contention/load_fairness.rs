//! Load and fairness: 500 waiters of one client on one key (each with its
//! own deadline), and four clients of four tasks each taking turns on one
//! key behind 20 ms of network latency each way. Safety is judged by the
//! independent observer (`support::Inside`); connections by `CLIENT LIST`
//! on a raw connection; waits and deadlines by the tasks' own clocks.
//! Run with `--nocapture` to see the measured figures.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{self, cmd, eventually, raw, within, Inside};
use lock_core::LockClient;
use lock_tests::{Direction, FaultProxy};
use tokio::time::Instant;

// ------------------------------------------------------------ CLIENT LIST

/// One line of `CLIENT LIST`: the connection's id and its subscriptions
/// (`sub` + `psub` + `ssub`).
#[derive(Debug, Clone, Copy)]
struct Conn {
    id: u64,
    subscriptions: u64,
}

async fn client_list(conn: &mut redis::aio::MultiplexedConnection) -> Vec<Conn> {
    let text: String = cmd(conn, &["CLIENT", "LIST"]).await;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields: HashMap<&str, &str> = line
                .split_whitespace()
                .filter_map(|f| f.split_once('='))
                .collect();
            let num = |k: &str| fields.get(k).and_then(|v| v.parse::<u64>().ok());
            Conn {
                id: num("id").unwrap_or_else(|| panic!("no id in {line:?}")),
                subscriptions: ["sub", "psub", "ssub"].iter().filter_map(|k| num(k)).sum(),
            }
        })
        .collect()
}

/// The `q`-quantile (0..=1) of sorted durations.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ------------------------------------------- 500 waiters on one key

/// What one of the 500 tasks saw.
#[derive(Debug)]
enum Outcome {
    /// Acquired after `waited`; `alone`: nobody else was inside.
    Acquired { waited: Duration, alone: bool },
    /// `acquire_timeout` gave up (`is_wait_timeout`) after `after`.
    TimedOut { after: Duration },
    /// Any other error: a failure of the test.
    Failed(String),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_waiters_on_one_key_meet_their_deadlines_on_a_bounded_set_of_connections() {
    const TASKS: usize = 500;
    const LONG: Duration = Duration::from_secs(20);
    // A timed-out acquisition ends at its deadline, at most this late.
    const SLACK: Duration = Duration::from_millis(500);
    let server = support::server();
    let name = "load:five-hundred";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    // The test's own connections exist before the client's: every other
    // connection in CLIENT LIST is the lock client's.
    let mut probe = raw(&server).await;
    let inside = Inside::new(&server, name).await;
    let own: HashSet<u64> = client_list(&mut probe).await.iter().map(|c| c.id).collect();

    let client = LockClient::builder(server.url())
        .command_timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"));
    let pool_size = u64::from(client.config().pool_size);
    assert_eq!(pool_size, 1, "the default: one shared connection");
    let lock = client.lock(name).expect("name");

    // A foreign holder (Redisson's layout, by hand) keeps the lock while the
    // 500 tasks line up, so that the client's head subscribes to the lock's
    // channel: the run then has a pub/sub connection to watch.
    let _: i64 = cmd(&mut probe, &["HSET", name, "planted-0000:1", "1"]).await;
    let _: i64 = cmd(&mut probe, &["PEXPIRE", name, "10000"]).await;

    within(Duration::from_secs(30), "500 waiters", async {
        // Deadlines: even tasks 20 s (they all must get the lock), odd tasks
        // spread from 250 ms to 3 s in steps of 250 ms (the late ones in the
        // queue time out: every section lasts at least 1 ms).
        let deadline_of = |i: usize| {
            if i.is_multiple_of(2) {
                LONG
            } else {
                Duration::from_millis(250 * (1 + (i as u64 / 2) % 12))
            }
        };
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let lock = lock.clone();
                let mut inside = inside.clone();
                let deadline = deadline_of(i);
                tokio::spawn(async move {
                    let asked = Instant::now();
                    match lock.acquire_timeout(deadline).await {
                        Ok(guard) => {
                            let waited = asked.elapsed();
                            let alone = guard.is_held() && inside.enter().await;
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            inside.leave().await;
                            match guard.release().await {
                                Ok(()) => Outcome::Acquired { waited, alone },
                                Err(e) => Outcome::Failed(format!("release: {e}")),
                            }
                        }
                        Err(e) if e.is_wait_timeout() => Outcome::TimedOut {
                            after: asked.elapsed(),
                        },
                        Err(e) => Outcome::Failed(format!("acquire: {e}")),
                    }
                })
            })
            .collect();

        // The head found the lock held and subscribed: one connection of the
        // client has a subscription. That is the pub/sub connection.
        let looking = Instant::now();
        let pubsub_id = loop {
            let list = client_list(&mut probe).await;
            if let Some(c) = list
                .iter()
                .find(|c| !own.contains(&c.id) && c.subscriptions > 0)
            {
                break c.id;
            }
            assert!(
                looking.elapsed() < Duration::from_secs(5),
                "the client's head subscribed to {channel}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };

        // Sample the client's connections while the queue drains.
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let stop = stop.clone();
            let mut probe = probe.clone();
            let own = own.clone();
            tokio::spawn(async move {
                let (mut samples, mut most) = (0u32, 0usize);
                let mut subscribed = HashSet::new();
                while !stop.load(Ordering::Relaxed) {
                    let list = client_list(&mut probe).await;
                    let mine: Vec<&Conn> = list.iter().filter(|c| !own.contains(&c.id)).collect();
                    most = most.max(mine.len());
                    subscribed.extend(mine.iter().filter(|c| c.subscriptions > 0).map(|c| c.id));
                    samples += 1;
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                (samples, most, subscribed)
            })
        };

        // The foreign holder lets go, as Redisson's unlock does.
        let started = Instant::now();
        let _: i64 = cmd(&mut probe, &["DEL", name]).await;
        let _: i64 = cmd(&mut probe, &["PUBLISH", &channel, "0"]).await;

        let mut outcomes = Vec::with_capacity(TASKS);
        for (i, t) in tasks.into_iter().enumerate() {
            outcomes.push((i, t.await.expect("task")));
        }
        let drained = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        let (samples, most, subscribed) = sampler.await.expect("sampler");
        let after: HashSet<u64> = client_list(&mut probe).await.iter().map(|c| c.id).collect();

        // Sort the outcomes out.
        let mut waits = Vec::new();
        let (mut timed_out, mut worst_late, mut earliest) = (0usize, Duration::ZERO, None);
        let mut failures = Vec::new();
        for (i, outcome) in &outcomes {
            let deadline = deadline_of(*i);
            match outcome {
                Outcome::Acquired { waited, alone } => {
                    assert!(alone, "task {i}: someone else was inside");
                    assert!(
                        *waited <= deadline + SLACK,
                        "task {i} acquired after {waited:?}, past its deadline {deadline:?}"
                    );
                    waits.push(*waited);
                }
                Outcome::TimedOut { after } => {
                    timed_out += 1;
                    // Never before the deadline; at most SLACK after it.
                    let early = deadline.checked_sub(*after);
                    if let Some(early) = early.filter(|e| !e.is_zero()) {
                        earliest = Some(earliest.map_or(early, |e: Duration| e.max(early)));
                    }
                    worst_late = worst_late.max(after.saturating_sub(deadline));
                    if deadline == LONG {
                        failures.push(format!("task {i} (20 s) timed out after {after:?}"));
                    }
                }
                Outcome::Failed(e) => failures.push(format!("task {i}: {e}")),
            }
        }
        waits.sort();
        eprintln!(
            "500 waiters, one client: drained in {:.0} ms; acquired {} (wait p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms), \
             timed out {timed_out} (worst lateness {:.1} ms, early by {:?}); connections of the client at most {most} \
             in {samples} samples (pool {pool_size} + pub/sub 1), subscribed connections seen {subscribed:?} (pub/sub id {pubsub_id})",
            ms(drained),
            waits.len(),
            ms(quantile(&waits, 0.5)),
            ms(quantile(&waits, 0.99)),
            ms(waits.last().copied().unwrap_or_default()),
            ms(worst_late),
            earliest,
        );
        assert!(failures.is_empty(), "{failures:#?}");
        assert_eq!(waits.len() + timed_out, TASKS);
        assert!(waits.len() >= TASKS / 2, "every 20 s task acquired");
        assert!(
            timed_out > 0,
            "the short deadlines were exercised (none timed out)"
        );
        assert_eq!(earliest, None, "a wait timed out before its deadline");
        assert!(
            worst_late <= SLACK,
            "a timed-out wait ended {worst_late:?} after its deadline"
        );
        assert!(samples >= 3, "the connections were sampled ({samples})");
        assert!(
            most as u64 <= pool_size + 1,
            "{most} connections of the client (pool {pool_size} + pub/sub 1)"
        );
        assert_eq!(
            subscribed,
            HashSet::from([pubsub_id]),
            "one pub/sub connection all along"
        );
        assert!(
            after.contains(&pubsub_id),
            "the pub/sub connection {pubsub_id} is still the same at the end (no reconnect)"
        );
    })
    .await;

    let mut inside = inside;
    assert_eq!(inside.violations().await, 0, "never two inside");
    let gone = eventually(Duration::from_secs(2), || {
        let mut probe = probe.clone();
        async move {
            let n: i64 = cmd(&mut probe, &["EXISTS", name]).await;
            n == 0
        }
    })
    .await;
    assert!(gone.is_some(), "the lock is free at the end");
}

// ----------------------------------- four clients behind 20 ms latency

/// One grant of the lock, as its task saw it.
#[derive(Debug, Clone, Copy)]
struct Grant {
    /// When the acquisition returned, since the start of the phase.
    at: Duration,
    client: usize,
    task: usize,
    /// From the call to `acquire_timeout` to its return.
    waited: Duration,
}

/// Every task of every client loops acquire → section → release until
/// `run` has passed (since `start`); returns every grant, and the time the
/// last task stopped (since `start`).
async fn take_turns(
    clients: &[LockClient],
    tasks_per_client: usize,
    name: &str,
    inside: &Inside,
    section: Duration,
    run: Duration,
) -> (Vec<Grant>, Duration) {
    let start = Instant::now();
    let end = start + run;
    let mut handles = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..tasks_per_client {
            let lock = client.lock(name).expect("name");
            let mut inside = inside.clone();
            handles.push(tokio::spawn(async move {
                let mut grants = Vec::new();
                while Instant::now() < end {
                    let asked = Instant::now();
                    let guard = match lock.acquire_timeout(Duration::from_secs(15)).await {
                        Ok(g) => g,
                        Err(e) => panic!("client {c} task {t}: {e} (after {:?})", asked.elapsed()),
                    };
                    let now = Instant::now();
                    grants.push(Grant {
                        at: now - start,
                        client: c,
                        task: t,
                        waited: now - asked,
                    });
                    assert!(inside.enter().await, "client {c} task {t}: two inside");
                    tokio::time::sleep(section).await;
                    inside.leave().await;
                    guard
                        .release()
                        .await
                        .unwrap_or_else(|e| panic!("client {c} task {t}: release: {e}"));
                }
                grants
            }));
        }
    }
    let mut grants = Vec::new();
    for h in handles {
        grants.extend(h.await.expect("task"));
    }
    let elapsed = start.elapsed();
    grants.sort_by_key(|g| g.at);
    (grants, elapsed)
}

/// Issue 11's bound between clients. Before lock-core kept the waiting
/// clients in Redis (`lockcore_waiters`) and gave the turn after a release
/// to the one that waited longest, this failed in about half of the runs
/// (max wait 3.1 to 5.2 x the fair wait): the turn was a race after each
/// unlock message, biased by each client's round-trip estimate. Now the
/// clients take turns in order (measured: 1.11 to 1.17 x).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_clients_of_four_tasks_behind_20ms_latency_take_turns() {
    const CLIENTS: usize = 4;
    const TASKS: usize = 4;
    const LATENCY: Duration = Duration::from_millis(20);
    const SECTION: Duration = Duration::from_millis(2);
    const RUN: Duration = Duration::from_secs(8);
    let server = support::server();
    let name = "load:turns";
    // One proxy per client: 20 ms added to every command on its way to
    // Redis and to every reply (and pub/sub message) on its way back. The
    // proxy's delay is latency per command or reply (each is delivered 20 ms
    // after the proxy read it), not a throughput limit: pipelined commands
    // are not delayed one after another. So one round trip is ~40 ms.
    let proxies: Vec<FaultProxy> = (0..CLIENTS)
        .map(|_| {
            let p = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
            p.delay(Direction::ToServer, LATENCY);
            p.delay(Direction::ToClient, LATENCY);
            p
        })
        .collect();
    let clients: Vec<LockClient> = proxies
        .iter()
        .map(|p| {
            LockClient::builder(p.url())
                .command_timeout(Duration::from_secs(5))
                .connect_timeout(Duration::from_secs(2))
                .build()
                .unwrap_or_else(|e| panic!("client: {e}"))
        })
        .collect();
    let inside = Inside::new(&server, name).await;

    let (grants, elapsed) = within(Duration::from_secs(45), "clients take turns", async {
        // Warm-up (not measured): pool connections opened, scripts loaded,
        // round trips sampled, all through the proxies.
        take_turns(
            &clients,
            TASKS,
            name,
            &inside,
            SECTION,
            Duration::from_millis(1500),
        )
        .await;
        take_turns(&clients, TASKS, name, &inside, SECTION, RUN).await
    })
    .await;

    // What is measured. Every grant is one section; `elapsed` runs from the
    // start of the phase until the last task stopped, and the lock was
    // wanted by several tasks all along. So the mean section time T =
    // elapsed / sections is the lock's cycle time: the mean time between
    // two consecutive grants, a section plus the hand-over to the next
    // holder (whatever that costs: a local hand-off, or a release in Redis
    // and another client's acquisition through the latency).
    //
    // The fair wait. With N contenders that ask again right after their
    // release, a task that just released waits, under perfect round-robin,
    // for the N - 1 others to have one section each: (N - 1) × T. A task
    // waiting much longer than that was overtaken repeatedly (another
    // client kept the lock through local hand-offs, or a client starved).
    // The bound of the issue: no wait above 3 × the fair wait.
    let contenders = CLIENTS * TASKS;
    let sections = grants.len();
    assert!(sections > 0, "the lock was used");
    let cycle = elapsed / sections as u32;
    let fair = cycle * (contenders as u32 - 1);
    let longest = grants
        .iter()
        .max_by_key(|g| g.waited)
        .copied()
        .expect("grants");
    let ratio = longest.waited.as_secs_f64() / fair.as_secs_f64();

    let mut per_client = vec![0usize; CLIENTS];
    let mut per_task: BTreeMap<(usize, usize), (usize, Duration)> = BTreeMap::new();
    for g in &grants {
        per_client[g.client] += 1;
        let e = per_task.entry((g.client, g.task)).or_default();
        e.0 += 1;
        e.1 = e.1.max(g.waited);
    }
    // Streaks: runs of consecutive grants to one client (local hand-offs
    // and re-acquisitions by the same client).
    let mut streaks: Vec<(usize, usize, Duration)> = Vec::new(); // (client, length, first grant)
    for g in &grants {
        match streaks.last_mut() {
            Some((c, n, _)) if *c == g.client => *n += 1,
            _ => streaks.push((g.client, 1, g.at)),
        }
    }
    let mut streaks_per_client = vec![0usize; CLIENTS];
    for s in &streaks {
        streaks_per_client[s.0] += 1;
    }
    let longest_streak = streaks
        .iter()
        .max_by_key(|s| s.1)
        .map(|s| (s.0, s.1))
        .unwrap_or((0, 0));
    let mean_streak = sections as f64 / streaks.len().max(1) as f64;
    let mut waits: Vec<Duration> = grants.iter().map(|g| g.waited).collect();
    waits.sort();
    // How many sections of other clients went by while the longest wait
    // lasted (its grants between the call and the return).
    let asked_at = longest.at.saturating_sub(longest.waited);
    let overtaken: Vec<usize> = (0..CLIENTS)
        .map(|c| {
            grants
                .iter()
                .filter(|g| g.client == c && g.at > asked_at && g.at < longest.at)
                .count()
        })
        .collect();
    // Each streak of another client that began during the longest wait is
    // a turn of the lock between clients that the waiting client lost.
    let lost_turns = streaks
        .iter()
        .filter(|s| s.0 != longest.client && s.2 > asked_at && s.2 < longest.at)
        .count();

    eprintln!(
        "4 clients x 4 tasks, 20 ms each way, {SECTION:?} sections, {:.1} s: {sections} sections, per client {per_client:?}, \
         per task (sections, longest wait ms) {:?}",
        elapsed.as_secs_f64(),
        per_task
            .iter()
            .map(|(k, v)| (*k, v.0, ms(v.1).round() as u64))
            .collect::<Vec<_>>(),
    );
    eprintln!(
        "mean section time (cycle) {:.1} ms, fair wait (15 x cycle) {:.0} ms, wait p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms \
         (client {} task {}), ratio max/fair {ratio:.2}; streaks: {} (mean {mean_streak:.2}, longest {} by client {}); \
         streaks (runs of grants to one client) per client {streaks_per_client:?}; during the longest wait, sections \
         per client {overtaken:?}, turns between clients lost in a row {lost_turns}",
        ms(cycle),
        ms(fair),
        ms(quantile(&waits, 0.5)),
        ms(quantile(&waits, 0.99)),
        ms(longest.waited),
        longest.client,
        longest.task,
        streaks.len(),
        longest_streak.1,
        longest_streak.0,
    );

    let mut inside = inside;
    assert_eq!(inside.violations().await, 0, "never two inside");
    for ((c, t), (n, _)) in &per_task {
        assert!(*n > 0, "client {c} task {t} never got the lock");
    }
    assert_eq!(per_task.len(), contenders, "every task got the lock");
    assert!(
        ratio <= 3.0,
        "client {} task {} waited {:.0} ms, {ratio:.2} x the fair wait of {:.0} ms",
        longest.client,
        longest.task,
        ms(longest.waited),
        ms(fair)
    );
    drop(proxies);
}
