//! One seed's run: the server, its network, the clients and their tasks,
//! the events, the observer's steps, the checks at the end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::__private::{seeded_ids, MemoryServerForTests};
use lock_core::LockClient;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::network::{Network, NetworkTally};
use crate::observer::{Activity, Bounds, Invariant, Observer, Violation};
use crate::scenario::{Event, Options, Scenario};
use crate::workload::Task;

/// What one seed's run found.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The scenario run.
    pub scenario: Scenario,
    /// Broken invariants, in the order found.
    pub violations: Vec<Violation>,
    /// What the workload did.
    pub activity: Activity,
    /// What the network did.
    pub network: NetworkTally,
    /// The trace (empty unless asked for).
    pub trace: Vec<String>,
    /// A digest of the whole trace: equal for equal runs.
    pub digest: u64,
    /// Virtual time the run took.
    pub virtual_time: Duration,
}

impl Outcome {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Names the servers of runs in one process apart.
static RUNS: AtomicU64 = AtomicU64::new(0);

/// Runs seed `seed` on a new current-thread runtime on a paused clock.
pub fn run(seed: u64, options: &Options) -> std::io::Result<Outcome> {
    let _ids = seeded_ids(seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    let scenario = Scenario::of(seed, options);
    // A run that spins (a task that never waits) would never return: a
    // watchdog thread ends the process, naming the seed.
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let limit = options.real_limit;
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(limit) {
            eprintln!(
                "seed {seed} did not finish within {limit:?} of real time; replay: cargo run --release -p lock-sim -- --seed {seed}"
            );
            std::process::exit(3);
        }
    });
    let outcome = runtime.block_on(simulate(scenario, options));
    let _ = done.send(());
    Ok(outcome)
}

async fn simulate(scenario: Scenario, options: &Options) -> Outcome {
    let started = Instant::now();
    let server = MemoryServerForTests::new();
    let network = Network::new(
        scenario.seed,
        scenario.faults.clone(),
        options.plant,
        server.clone(),
    );
    server.set_network(network.clone());
    server.set_clock(scenario.fast_ppm, Duration::ZERO);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let names: Vec<String> = (0..scenario.clients)
        .map(|i| format!("sim{run}-c{i}"))
        .collect();
    for name in &names {
        server.alias(name);
    }
    let ct = scenario.command_timeout;
    let bounds = Bounds {
        // A waiter that gives up leaves the clients' waiting line in Redis
        // before it returns, for at most 50 ms (`LEAVE_LINE_MARGIN`), and
        // timers fire on whole milliseconds.
        wait_slack: Duration::from_millis(51),
        // A waiter whose unlock message is lost sleeps at most the
        // holder's remaining lease between checks (an explicit lease is up
        // to a lease and a half here), and a check may take a connect and a
        // command time-out, twice when a link goes silent.
        free_lock: scenario.lease * 3 / 2 + ct * 6,
    };
    // A semaphore seed has no locks: the lock checks look at none.
    let locks = if scenario.semaphores.is_empty() {
        scenario.keys.clone()
    } else {
        Vec::new()
    };
    let observer = Observer::new(server.clone(), locks, bounds, options.trace);
    observer.observe_semaphores(scenario.semaphores.clone());
    observer.event(format!("{scenario:?}"));
    network.log_to(observer.clone());
    let mut clients: Vec<Option<Arc<LockClient>>> = Vec::new();
    let mut client_ids = Vec::new();
    for (c, name) in names.iter().enumerate() {
        let hook = {
            let observer = observer.clone();
            let client = format!("c{c}");
            move |err: &lock_core::Error| observer.hook_called(&client, &err.to_string())
        };
        let built = LockClient::builder(format!("memory://{name}"))
            .error_hook(hook)
            .watchdog_timeout(scenario.lease)
            .command_timeout(ct)
            .connect_timeout(ct)
            .pool_size(scenario.pool_size)
            .build();
        match built {
            Ok(client) => {
                observer.client_id(&format!("c{c}"), client.client_id());
                client_ids.push(client.client_id().to_owned());
                clients.push(Some(Arc::new(client)));
            }
            Err(err) => {
                observer.violation(Invariant::EveryHoldEnds, format!("client not built: {err}"));
                return finish(scenario, &observer, &network, started);
            }
        }
    }
    let until = started + options.duration;
    let mut tasks: Vec<Vec<JoinHandle<()>>> = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        let mut mine = Vec::new();
        for t in 0..scenario.tasks {
            let Some(client) = client.clone() else {
                continue;
            };
            let task = Task {
                who: format!("c{c}.t{t}"),
                client,
                observer: observer.clone(),
                keys: scenario.keys.clone(),
                rw: scenario.rw,
                semaphores: scenario.semaphores.clone(),
                lease: scenario.lease,
                command_timeout: ct,
                until,
                rng: fastrand::Rng::with_seed(
                    scenario.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        ^ ((c as u64) << 32 | t as u64),
                ),
            };
            mine.push(tokio::spawn(task.run()));
        }
        tasks.push(mine);
    }
    // The observer's steps: every millisecond of virtual time.
    let stepping = {
        let observer = observer.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            loop {
                tick.tick().await;
                observer.step();
            }
        })
    };
    let mut crashed = vec![false; scenario.clients];
    for (at, event) in &scenario.events {
        tokio::time::sleep_until(started + *at).await;
        match event {
            Event::Restart(down) => {
                server.restart(*down);
                observer.restarted(*down);
            }
            Event::Crash(c) => {
                network.crash(&names[*c]);
                for task in &tasks[*c] {
                    task.abort();
                }
                clients[*c] = None;
                crashed[*c] = true;
                observer.event(format!("client c{c} crashed"));
            }
            Event::Shutdown(c) => {
                let Some(client) = clients[*c].clone().filter(|_| !crashed[*c]) else {
                    continue;
                };
                let prefix = format!("c{c}.");
                observer.event(format!(
                    "client c{c} shuts down; valid guards: {:?}",
                    observer.valid_guards_of(&prefix)
                ));
                let report = client.shutdown(ct * 8).await;
                observer.event(format!("client c{c} shut down: {report:?}"));
                let valid = observer
                    .valid_guards_of(&prefix)
                    .into_iter()
                    .chain(observer.valid_permits_of(&prefix));
                for guard in valid {
                    observer.violation(
                        Invariant::EveryHoldEnds,
                        format!("after its client's shutdown, still valid: {guard}"),
                    );
                }
                if report.is_complete() {
                    let id = client.client_id().to_owned();
                    // A hold whose release failed before (the caller was
                    // told) is no longer the client's: it may stay until
                    // its lease ends, as at the end of a run.
                    for (key, owner) in observer.left_in_redis() {
                        if owner.starts_with(&id) && !observer.excused_to_stay(&owner) {
                            observer.violation(
                                Invariant::EveryHoldEnds,
                                format!("a complete shutdown left {key} held by {owner}"),
                            );
                        }
                    }
                    let name = format!("c{c}");
                    for (sem, permit, client, owner) in observer.permits_left_in_redis() {
                        if client == name && !observer.excused_to_stay(&owner) {
                            observer.violation(
                                Invariant::EveryHoldEnds,
                                format!("a complete shutdown left permit {permit} of {sem} held"),
                            );
                        }
                    }
                }
            }
            Event::ClockJump(by) => {
                server.set_clock(scenario.fast_ppm, *by);
                observer.event(format!("server clock jumped {by:?} ahead"));
            }
        }
    }
    tokio::time::sleep_until(until).await;
    // The tasks finish their round: every wait is bounded (a lease and a
    // half), so is every hold; the longest round (an outer hold re-entered
    // twice) is three waits and two leases, plus releases and retries.
    let rounds_end = until + scenario.lease * 8;
    for task in tasks.iter().flatten() {
        let left = rounds_end.saturating_duration_since(Instant::now());
        if !task.is_finished()
            && tokio::time::timeout(left, async {
                while !task.is_finished() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await
            .is_err()
        {
            observer.violation(
                Invariant::EveryHoldEnds,
                format!(
                    "a task's round did not end within {:?} of the run's end",
                    scenario.lease * 8
                ),
            );
        }
    }
    for task in tasks.iter().flatten() {
        task.abort();
    }
    network.calm();
    observer.event("the network is calm");
    // Background releases and their retries end within a few command
    // time-outs; a lease has not run out yet, so what a released hold
    // left in Redis is still there to see.
    tokio::time::sleep(ct * 8).await;
    for (c, client) in clients.iter().enumerate() {
        let Some(client) = client else { continue };
        let renewing = client.renewing_count();
        if renewing != 0 {
            observer.violation(
                Invariant::EveryHoldEnds,
                format!(
                    "client c{c} still renews {renewing} hold(s) after every guard was released"
                ),
            );
        }
    }
    let crashed_ids: Vec<&String> = client_ids
        .iter()
        .zip(&crashed)
        .filter(|(_, c)| **c)
        .map(|(id, _)| id)
        .collect();
    for (key, owner) in observer.left_in_redis() {
        let crashed = crashed_ids.iter().any(|id| owner.starts_with(id.as_str()));
        if !crashed && !observer.excused_to_stay(&owner) {
            observer.violation(
                Invariant::EveryHoldEnds,
                format!("released, yet still in Redis: {key} held by {owner}"),
            );
        }
    }
    for (sem, permit, client, owner) in observer.permits_left_in_redis() {
        let crashed = client
            .strip_prefix('c')
            .and_then(|c| c.parse::<usize>().ok())
            .is_some_and(|c| crashed[c]);
        // `?`: taken by an acquisition the workload never saw return
        // (cancelled; its background cancellation may fail, reported)
        if !crashed && !observer.excused_to_stay(&owner) && client != "?" {
            observer.violation(
                Invariant::EveryHoldEnds,
                format!("released, yet still live in Redis: permit {permit} of {sem} (held by {client})"),
            );
        }
    }
    // Crashed clients' holds, and those whose release failed, expire
    // within a lease.
    tokio::time::sleep(scenario.lease + ct * 2).await;
    for (key, owner) in observer.left_in_redis() {
        observer.violation(
            Invariant::EveryHoldEnds,
            format!("still in Redis a lease after the end: {key} held by {owner}"),
        );
    }
    if !scenario.semaphores.is_empty() {
        observer.check_conservation(crashed.iter().any(|c| *c));
    }
    stepping.abort();
    for client in clients.iter().flatten() {
        let report = client.shutdown(ct * 8).await;
        if !report.is_complete() {
            observer.violation(
                Invariant::EveryHoldEnds,
                format!("a client's shutdown left work behind: {report:?}"),
            );
        }
    }
    finish(scenario, &observer, &network, started)
}

fn finish(scenario: Scenario, observer: &Observer, network: &Network, started: Instant) -> Outcome {
    let (violations, activity, trace, digest) = observer.finish();
    Outcome {
        scenario,
        violations,
        activity,
        network: network.tally(),
        trace,
        digest,
        virtual_time: started.elapsed(),
    }
}
