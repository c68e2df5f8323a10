//! The command line: a small hand-written parser (no dependency), the
//! defaults, and the `--smoke` presets.

use std::time::Duration;

/// Usage text printed by `--help` and after a bad argument.
pub(crate) const USAGE: &str = "\
lock-bench: measures lock-core against reference loops on a real Redis.

usage: lock-bench [options]

  --url URL            Redis to use (default: start a private redis-server)
  --workloads LIST     comma-separated, any of REF,W1,S1,F1,RL,W2,W2F,R1,M1,W3,W3NP,W3F,WD,LAYER (default: all)
  --duration SECS      measured window per workload (default 5)
  --warmup SECS        warm-up before each window (default 1)
  --tasks N            tasks of W1, S1, F1, W2, W2F, R1, M1, the L-min and R-min references, and LAYER's HTTP client tasks;
                       W3 and W3F split them over the processes (default 16)
  --processes N        W3, W3NP and W3F processes (default 4; W3, W3F: tasks per process =
                       tasks / processes; W3NP: one task per process)
  --wd-counts LIST     numbers of locks the WD workload holds (default 10000,100000)
  --wd-watchdog-ms MS  watchdog timeout of the WD client (default 3000: renewal every 1 s)
  --wd-in-flight N     WD acquisitions (and releases) in flight at once (default 256)
  --wd-periods N       renewal periods WD measures over (default 3; longer for a profile)
  --ref-conns N        connections of the L-min-pool reference (default: lock-core's
                       pool size, 1); L-min-mux always shares one multiplexed connection
  --hand-off-window-ms MS  the lock-core clients' hand-off window (ClientConfig::hand_off_window;
                       default: lock-core's, 2 ms): how long a process passes a lock between its own
                       tasks before letting other processes in (W2, W3 and every other workload)
  --threads N          tokio worker threads (default: CPUs this process may run on)
  --redis-cpu N        pin the private redis-server to CPU N (ignored with --url)
  --bench-cpu N        pin this program (and its W3 children) to CPU N
  --cluster            after the single-server run, run the chosen workloads but LAYER and RL again
                       on a private 3-primary Redis Cluster (lib names end in @cluster)
  --smoke              tiny durations and counts, for CI (whole run well under 20 s)
  -h, --help           this text

REF measures L-min twice: L-min-mux (all tasks on one multiplexed
connection, redis-rs pipelining their commands) and L-min-pool (lock-core's
pool shape); and R-min: Redisson's own RLock protocol as Redisson sends it
(its lock script, then its unlock script with the unlock latch, each an
EVALSHA: two round trips per cycle), all tasks on one multiplexed
connection, each on a lock of its own; every lock must answer nil and every
unlock 1, or the line fails. W1 (watchdog lease; lib lock-core-fixed: a
fixed 10 s lease) is judged against the faster L-min (target >= 0.8) and
against R-min (target >= 1.5). S1 (permits/s, each task
acquire 1 + release on a semaphore of its own; lib lock-core-permit: the
expirable kind with watchdog renewal, lock-core-sem: the plain kind) is set
against the faster L-min and W1 of the same run (no target). F1 (fenced
writes/s: each task holds a lock of its own and loops a fenced INCRBY 1;
lib lock-core-fenced) is set against raw-INCRBY, the same loop of plain
INCRBY measured in the same run (no target). RL (W1's loop on a Redlock
over three private redis-servers started for it; lib lock-core-redlock3)
is set against W1 of the same run (no target). R1 (readers only on one
key of a read-write lock) is set against W1 of the same run; M1 (90 % reads,
10 % writes on one key) reports reads/s, writes/s and the writers' waits.
W2F and W3F are W2's and W3's loops on the FAIR lock (client.fair_lock,
Redisson's RFairLock: every waiter queued in Redis, served in arrival
order, no local queue); set against L-serial of the same run and against
W2 / W3 (no target). Every contended line also gives the share of sections
that jumped the queue (their holder called acquire after a waiter that was
served later).

Output: one JSON line per measurement on stdout (lib = lock-core,
lock-core-fixed, lock-core-read, lock-core-write (M1), lock-core-permit,
lock-core-sem (S1), lock-core-fenced and raw-INCRBY (F1), lock-core-redlock3 (RL), L-min-mux, L-min-pool, R-min, L-serial, lock-tower, by-hand
or bare; W1, S1, F1, RL, R1 and the L-min and R-min lines carry
client_cpu_us_per_cycle: this process's getrusage user+sys CPU over the
window / measured cycles; server_cpu_us_per_cycle: the server's INFO cpu
user+sys over the same window / measured cycles; and calls_per_cycle: the
commands the client sent, as the server counted them over the same window
(INFO commandstats: EVAL/EVALSHA/FCALL/SCRIPT calls, plus the plain
commands the loop sends itself: L-min's SET, raw-INCRBY's INCRBY; not the
commands run inside scripts, which Redis 7 counts too, nor our own INFO) /
measured cycles; RL's server figures are summed over its three servers); a
summary with the ratios against the targets on stderr.";

/// The workloads, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Workload {
    /// The reference loops: L-min-mux, L-min-pool and R-min (on W1), L-serial (on W2).
    Ref,
    /// Uncontended: one key per task.
    W1,
    /// Permits uncontended: one semaphore of 1 permit per task.
    S1,
    /// Fenced writes under a held lock, beside plain writes.
    F1,
    /// Redlock uncontended: W1's loop over three private servers.
    Rl,
    /// Contended: all tasks on one key, one process.
    W2,
    /// W2 on the fair lock: every task queued in Redis, arrival order.
    W2f,
    /// Readers only: all tasks take the read side of one read-write lock.
    R1,
    /// Mixed: all tasks on one read-write lock, 90 % reads, 10 % writes.
    M1,
    /// Contended across processes.
    W3,
    /// Contended across processes, one task per process: each process asks
    /// again the moment its release returns (no pause, no local queue).
    W3np,
    /// W3 on the fair lock: every task of every process queued in Redis.
    W3f,
    /// Many locks held by the watchdog.
    Wd,
    /// lock-tower's layer against the lock taken by hand, over HTTP.
    Layer,
}

impl Workload {
    pub(crate) const ALL: [Workload; 14] = [
        Workload::Ref,
        Workload::W1,
        Workload::S1,
        Workload::F1,
        Workload::Rl,
        Workload::W2,
        Workload::W2f,
        Workload::R1,
        Workload::M1,
        Workload::W3,
        Workload::W3np,
        Workload::W3f,
        Workload::Wd,
        Workload::Layer,
    ];

    fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_uppercase().as_str() {
            "REF" => Ok(Workload::Ref),
            "W1" => Ok(Workload::W1),
            "S1" => Ok(Workload::S1),
            "F1" => Ok(Workload::F1),
            "RL" => Ok(Workload::Rl),
            "W2" => Ok(Workload::W2),
            "W2F" => Ok(Workload::W2f),
            "R1" => Ok(Workload::R1),
            "M1" => Ok(Workload::M1),
            "W3" => Ok(Workload::W3),
            "W3NP" => Ok(Workload::W3np),
            "W3F" => Ok(Workload::W3f),
            "WD" => Ok(Workload::Wd),
            "LAYER" => Ok(Workload::Layer),
            other => Err(format!(
                "unknown workload {other:?} (valid: REF, W1, S1, F1, RL, W2, W2F, R1, M1, W3, W3NP, W3F, WD, LAYER)"
            )),
        }
    }
}

/// Settings of a parent run.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// `--hand-off-window-ms`: the lock-core clients' hand-off window.
    pub(crate) hand_off_window: Option<Duration>,
    pub(crate) url: Option<String>,
    pub(crate) workloads: Vec<Workload>,
    pub(crate) duration: Duration,
    pub(crate) warmup: Duration,
    pub(crate) tasks: usize,
    pub(crate) processes: usize,
    pub(crate) wd_counts: Vec<usize>,
    pub(crate) wd_watchdog: Duration,
    pub(crate) wd_in_flight: usize,
    pub(crate) wd_periods: u32,
    pub(crate) ref_conns: usize,
    pub(crate) threads: Option<usize>,
    pub(crate) redis_cpu: Option<usize>,
    pub(crate) bench_cpu: Option<usize>,
    pub(crate) smoke: bool,
    /// Run the workloads again on a private 3-primary cluster.
    pub(crate) cluster: bool,
}

/// Settings of a W3 / W3NP / W3F child process (the hidden `--child w3` role).
#[derive(Clone, Debug)]
pub(crate) struct ChildOptions {
    pub(crate) url: String,
    pub(crate) prefix: String,
    /// The lock's name; the counter is `<prefix><lock>:counter`.
    pub(crate) lock: String,
    pub(crate) proc_id: usize,
    pub(crate) tasks: usize,
    pub(crate) threads: Option<usize>,
    /// The fair lock (W3F) instead of the plain one.
    pub(crate) fair: bool,
    /// `--hand-off-window-ms`, as the parent got it.
    pub(crate) hand_off_window: Option<Duration>,
}

/// What the command line asks for.
#[derive(Debug)]
pub(crate) enum Command {
    Run(Options),
    Child(ChildOptions),
    Help,
}

/// Upper bounds that keep a typo from starting an endless run.
const MAX_SECS: f64 = 3600.0;
const MAX_TASKS: usize = 4096;
const MAX_PROCESSES: usize = 64;
const MAX_WD_LOCKS: usize = 1_000_000;

/// Parses the arguments after the program name.
pub(crate) fn parse(args: &[String]) -> Result<Command, String> {
    let mut it = args.iter();
    let mut url = None;
    let mut workloads = None;
    let mut duration = None;
    let mut warmup = None;
    let mut tasks = None;
    let mut processes = None;
    let mut wd_counts = None;
    let mut wd_watchdog = None;
    let mut wd_in_flight = None;
    let mut wd_periods = None;
    let mut ref_conns = None;
    let mut threads = None;
    let mut redis_cpu = None;
    let mut bench_cpu = None;
    let mut smoke = false;
    let mut cluster = false;
    let mut child = None;
    let mut prefix = None;
    let mut proc_id = None;
    let mut lock = None;
    let mut fair = false;
    let mut hand_off_window = None;
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--url" => url = Some(value()?),
            "--workloads" => {
                let list = value()?
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(Workload::parse)
                    .collect::<Result<Vec<_>, _>>()?;
                workloads = Some(list);
            }
            "--duration" => duration = Some(secs(flag, &value()?)?),
            "--warmup" => warmup = Some(secs(flag, &value()?)?),
            "--tasks" => tasks = Some(count(flag, &value()?, 1, MAX_TASKS)?),
            "--processes" => processes = Some(count(flag, &value()?, 1, MAX_PROCESSES)?),
            "--wd-counts" => {
                let list = value()?
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| count(flag, s.trim(), 1, MAX_WD_LOCKS))
                    .collect::<Result<Vec<_>, _>>()?;
                wd_counts = Some(list);
            }
            "--wd-watchdog-ms" => {
                let ms = count(flag, &value()?, 300, 600_000)?;
                wd_watchdog = Some(Duration::from_millis(ms as u64));
            }
            "--wd-in-flight" => wd_in_flight = Some(count(flag, &value()?, 1, 65_536)?),
            "--wd-periods" => wd_periods = Some(count(flag, &value()?, 1, 1000)? as u32),
            "--ref-conns" => ref_conns = Some(count(flag, &value()?, 1, MAX_TASKS)?),
            "--threads" => threads = Some(count(flag, &value()?, 1, 256)?),
            "--hand-off-window-ms" => {
                let ms = count(flag, &value()?, 0, 10_000)?;
                hand_off_window = Some(Duration::from_millis(ms as u64));
            }
            "--redis-cpu" => redis_cpu = Some(count(flag, &value()?, 0, 4095)?),
            "--bench-cpu" => bench_cpu = Some(count(flag, &value()?, 0, 4095)?),
            "--smoke" => smoke = true,
            "--cluster" => cluster = true,
            // Hidden: the role of a W3 child process and its settings.
            "--child" => child = Some(value()?),
            "--prefix" => prefix = Some(value()?),
            "--proc" => proc_id = Some(count(flag, &value()?, 0, MAX_PROCESSES)?),
            "--lock" => lock = Some(value()?),
            "--fair" => fair = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }

    if let Some(role) = child {
        if role != "w3" {
            return Err(format!("unknown child role {role:?}"));
        }
        return Ok(Command::Child(ChildOptions {
            url: url.ok_or("a child needs --url")?,
            prefix: prefix.ok_or("a child needs --prefix")?,
            lock: lock.ok_or("a child needs --lock")?,
            proc_id: proc_id.ok_or("a child needs --proc")?,
            tasks: tasks.ok_or("a child needs --tasks")?,
            threads,
            fair,
            hand_off_window,
        }));
    }

    let (def_duration, def_warmup, def_wd) = if smoke {
        (
            Duration::from_millis(500),
            Duration::from_millis(200),
            vec![500],
        )
    } else {
        (
            Duration::from_secs(5),
            Duration::from_secs(1),
            vec![10_000, 100_000],
        )
    };
    Ok(Command::Run(Options {
        hand_off_window,
        url,
        workloads: workloads.unwrap_or_else(|| Workload::ALL.to_vec()),
        duration: duration.unwrap_or(def_duration),
        warmup: warmup.unwrap_or(def_warmup),
        tasks: tasks.unwrap_or(16),
        processes: processes.unwrap_or(4),
        wd_counts: wd_counts.unwrap_or(def_wd),
        wd_watchdog: wd_watchdog.unwrap_or(Duration::from_secs(3)),
        wd_in_flight: wd_in_flight.unwrap_or(256),
        wd_periods: wd_periods.unwrap_or(3),
        ref_conns: ref_conns.unwrap_or(lock_core::DEFAULT_POOL_SIZE as usize),
        threads,
        redis_cpu,
        bench_cpu,
        smoke,
        cluster,
    }))
}

fn secs(flag: &str, v: &str) -> Result<Duration, String> {
    let s: f64 = v
        .parse()
        .map_err(|_| format!("{flag}: {v:?} is not a number of seconds"))?;
    if !(0.0..=MAX_SECS).contains(&s) {
        return Err(format!("{flag}: {v} is outside 0..={MAX_SECS} seconds"));
    }
    Ok(Duration::from_secs_f64(s))
}

fn count(flag: &str, v: &str, min: usize, max: usize) -> Result<usize, String> {
    let n: usize = v
        .parse()
        .map_err(|_| format!("{flag}: {v:?} is not a whole number"))?;
    if !(min..=max).contains(&n) {
        return Err(format!("{flag}: {n} is outside {min}..={max}"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Options {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse(&args) {
            Ok(Command::Run(o)) => o,
            other => panic!("expected a run, got {other:?}"),
        }
    }

    #[test]
    fn defaults_match_the_issue() {
        let o = run(&[]);
        assert_eq!(o.duration, Duration::from_secs(5));
        assert_eq!(o.warmup, Duration::from_secs(1));
        assert_eq!((o.tasks, o.processes), (16, 4));
        assert_eq!(o.wd_counts, vec![10_000, 100_000]);
        assert_eq!(o.workloads, Workload::ALL.to_vec());
        assert!(!o.cluster);
        assert!(run(&["--cluster"]).cluster);
    }

    #[test]
    fn smoke_shrinks_defaults_but_explicit_flags_win() {
        let o = run(&["--smoke", "--duration", "0.3", "--workloads", "w2,ref"]);
        assert_eq!(o.duration, Duration::from_millis(300));
        assert_eq!(o.warmup, Duration::from_millis(200));
        assert_eq!(o.wd_counts, vec![500]);
        assert_eq!(o.workloads, vec![Workload::W2, Workload::Ref]);
        assert_eq!(
            run(&["--workloads", "layer"]).workloads,
            vec![Workload::Layer]
        );
        assert_eq!(
            run(&["--workloads", "REF,W3,w3np"]).workloads,
            vec![Workload::Ref, Workload::W3, Workload::W3np]
        );
        assert_eq!(
            run(&["--workloads", "w1,R1,m1"]).workloads,
            vec![Workload::W1, Workload::R1, Workload::M1]
        );
        assert_eq!(
            run(&["--workloads", "W2F,w3f"]).workloads,
            vec![Workload::W2f, Workload::W3f]
        );
    }

    #[test]
    fn a_child_takes_the_fair_lock_only_when_told() {
        let child = |extra: &[&str]| {
            let mut args: Vec<String> = [
                "--child",
                "w3",
                "--url",
                "redis://x",
                "--prefix",
                "p:",
                "--lock",
                "w3f",
                "--proc",
                "1",
                "--tasks",
                "4",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.extend(extra.iter().map(|s| s.to_string()));
            match parse(&args) {
                Ok(Command::Child(o)) => o,
                other => panic!("expected a child, got {other:?}"),
            }
        };
        assert!(!child(&[]).fair);
        assert_eq!(child(&[]).hand_off_window, None);
        assert_eq!(
            child(&["--hand-off-window-ms", "7"]).hand_off_window,
            Some(Duration::from_millis(7))
        );
        assert_eq!(
            run(&["--hand-off-window-ms", "0"]).hand_off_window,
            Some(Duration::ZERO)
        );
        assert!(parse(&["--hand-off-window-ms".into(), "10001".into()]).is_err());
        let fair = child(&["--fair"]);
        assert!(fair.fair);
        assert_eq!(
            (fair.lock.as_str(), fair.proc_id, fair.tasks),
            ("w3f", 1, 4)
        );
    }

    #[test]
    fn bad_values_are_errors() {
        for bad in [
            vec!["--tasks", "0"],
            vec!["--duration", "x"],
            vec!["--workloads", "W9"],
            vec!["--frobnicate"],
            vec!["--url"],
            vec!["--child", "w3"],
            vec!["--workloads", "W3-NP"],
        ] {
            let args: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert!(parse(&args).is_err(), "{bad:?} must be rejected");
        }
    }
}
