//! One seed's scenario: how many clients and tasks, the clients' settings,
//! the faults and the events (restarts, crashes, clock jumps), all drawn
//! from the seed.

use std::time::Duration;

use crate::network::Faults;
use crate::plant::Plant;

/// What a run may vary; the rest comes from the seed.
#[derive(Clone, Debug)]
pub struct Options {
    /// Virtual time the workload runs for.
    pub duration: Duration,
    /// A bug planted back.
    pub plant: Option<Plant>,
    /// Keep every trace line (for a replay); the digest is kept anyway.
    pub trace: bool,
    /// A run that takes longer than this in real time (a task that spins)
    /// ends the process with status 3, naming the seed.
    pub real_limit: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            duration: Duration::from_secs(4),
            plant: None,
            trace: false,
            real_limit: Duration::from_secs(60),
        }
    }
}

/// An event at a virtual time.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The server restarts, losing every key, and is down that long.
    Restart(Duration),
    /// Client `n` crashes (as by SIGKILL).
    Crash(usize),
    /// Client `n` shuts down (`LockClient::shutdown`) while its tasks run.
    Shutdown(usize),
    /// The server clock jumps ahead.
    ClockJump(Duration),
}

/// A semaphore of a semaphore seed: its name, its permits, its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemSpec {
    /// Its name (the counter's key).
    pub name: String,
    /// How many permits it has (N: never more than N inside).
    pub permits: u32,
    /// Redisson's `RPermitExpirableSemaphore` (leased permit ids) rather
    /// than the plain `RSemaphore` (a counter only).
    pub expirable: bool,
}

/// One seed's scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The seed everything is drawn from.
    pub seed: u64,
    /// Clients (each its own `LockClient`, as separate processes would be).
    pub clients: usize,
    /// Tasks per client.
    pub tasks: usize,
    /// Lock names the tasks contend for.
    pub keys: Vec<String>,
    /// The locks are read-write locks (tasks take either side) rather than
    /// reentrant locks: three seeds in ten, drawn apart from the rest so
    /// that the other seeds' scenarios stay as they were.
    pub rw: bool,
    /// Semaphore seeds: the tasks take permits of these semaphores instead
    /// of locks (empty: a lock seed). Three in ten of the seeds that are
    /// not read-write seeds, drawn apart from the rest, so that the other
    /// seeds' scenarios stay as they were.
    pub semaphores: Vec<SemSpec>,
    /// The clients' watchdog lease.
    pub lease: Duration,
    /// The clients' command (and connect) time-out.
    pub command_timeout: Duration,
    /// The clients' pool size.
    pub pool_size: u32,
    /// The network's faults.
    pub faults: Faults,
    /// How many millionths the server clock runs fast (within the drift
    /// the validity deadline allows: below 1 %).
    pub fast_ppm: u32,
    /// Events, by virtual time since the start.
    pub events: Vec<(Duration, Event)>,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Scenario {
    /// The scenario of `seed` under `options`.
    pub fn of(seed: u64, options: &Options) -> Scenario {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed_5eed_5eed_5eed);
        let clients = rng.usize(2..=4);
        let tasks = rng.usize(1..=3);
        let keys = (0..rng.usize(1..=2)).map(|k| format!("k{k}")).collect();
        let command_timeout = ms(rng.u64(20..=40));
        let lease = ms(rng.u64(500..=1200));
        // One seed in ten runs on a calm network.
        let faults = if rng.u64(0..10) == 0 {
            Faults::none()
        } else {
            Faults {
                late: rng.f64() * 0.08,
                twice: rng.f64() * 0.02,
                silence: rng.f64() * 0.01,
                reset: rng.f64() * 0.01,
                message_lost: rng.f64() * 0.3,
                jitter: Duration::from_micros(rng.u64(0..=3_000)),
                late_by: command_timeout * 3,
            }
        };
        let fast_ppm = match options.plant {
            Some(Plant::FastClock) => 50_000,
            _ => rng.u32(0..9_000),
        };
        let span = u64::try_from(options.duration.as_millis())
            .unwrap_or(u64::MAX)
            .max(10);
        let mut events = Vec::new();
        if rng.u64(0..10) < 3 {
            let down = command_timeout * rng.u32(0..=3);
            events.push((ms(rng.u64(span / 5..span)), Event::Restart(down)));
        }
        if rng.u64(0..10) < 3 {
            events.push((
                ms(rng.u64(span / 5..span)),
                Event::Crash(rng.usize(0..clients)),
            ));
        }
        if rng.u64(0..10) < 2 {
            events.push((
                ms(rng.u64(span / 5..span)),
                Event::Shutdown(rng.usize(0..clients)),
            ));
        }
        // Jumps of at most 1 ms, two leases apart at least: within the
        // 2 ms the drift margin allows beside the 1 %.
        let mut t = 0;
        for _ in 0..rng.u64(0..=3) {
            t += rng.u64(2 * 1200..=4 * 1200);
            if t < span {
                events.push((
                    ms(t),
                    Event::ClockJump(Duration::from_micros(rng.u64(0..=1000))),
                ));
            }
        }
        events.sort_by_key(|(at, _)| *at);
        let rw = fastrand::Rng::with_seed(seed ^ 0x7277_7277_7277_7277).u64(0..10) < 3;
        let semaphores = if rw { Vec::new() } else { semaphores_of(seed) };
        Scenario {
            seed,
            rw,
            semaphores,
            clients,
            tasks,
            keys,
            lease,
            command_timeout,
            pool_size: rng.u32(1..=2),
            faults,
            fast_ppm,
            events,
        }
    }
}

/// The semaphores of `seed` when it is a semaphore seed (three in ten of
/// the seeds drawn here), else none: one or two semaphores of 1 to 4
/// permits, each expirable (two in three) or plain. (The constant keeps
/// seeds 406929 and 406655, which found the undone re-entry's bug, lock
/// seeds.)
fn semaphores_of(seed: u64) -> Vec<SemSpec> {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5e3a_5e3a_5e3a_5e3a);
    if rng.u64(0..10) >= 3 {
        return Vec::new();
    }
    (0..rng.usize(1..=2))
        .map(|k| SemSpec {
            name: format!("s{k}"),
            permits: rng.u32(1..=4),
            expirable: rng.u32(0..3) < 2,
        })
        .collect()
}
