//! lock-bench: measures lock-core at the speed limit of Redis.
//!
//! Starts a private redis-server (or uses `--url`), runs the workloads of
//! issue 6 — the L-min references (L-min-mux over one multiplexed
//! connection shared by all tasks, L-min-pool over lock-core's pool shape;
//! see `workloads/refs.rs`), R-min (Redisson's own RLock protocol, lock
//! script + unlock script, over one multiplexed connection) and L-serial,
//! W1 (uncontended), S1 (permits
//! uncontended: each task acquire 1 + release on a semaphore of its own,
//! the expirable and the plain kind, set against L-min and W1), RL (W1's
//! loop on a Redlock over three private redis-servers, set against W1), W2
//! (contended, one process), W3 (contended, several processes: copies of
//! this program), W3NP (the same with one task per process, which asks
//! again the moment its release returns), W2F and W3F (W2 and W3 on the
//! fair lock, Redisson's `RFairLock`: every waiter queued in Redis), R1 (readers only on one key of a
//! read-write lock, set against W1 of the same run), M1 (90 % reads, 10 %
//! writes on one read-write lock: reads/s, writes/s, the writers' waits),
//! WD (watchdog holding many locks), LAYER (lock-tower's
//! `LockLayer` against the same lock taken by hand, over loopback HTTP) —
//! and prints one JSON line per measurement on stdout, then a summary with
//! the ratios against the targets on stderr. `scripts/bench.sh` builds it in release mode and
//! runs it with redis-server pinned to CPU 0 and the benchmark to CPU 1.
//!
//! W1's ratio is against the faster of the two L-min references (target:
//! W1 >= 0.8 x L-min over one multiplexed connection, issue 15), and
//! against R-min (target: W1 >= 1.5 x R-min, issue 28). The uncontended
//! lines (W1, S1, F1, RL, R1 and the L-min and R-min references) also
//! report `client_cpu_us_per_cycle`: the CPU time of this whole process
//! (getrusage `RUSAGE_SELF`, user + system) over the measured window
//! divided by the cycles counted in it; `server_cpu_us_per_cycle`: the
//! server's (`INFO cpu`) over the same window; and `calls_per_cycle`: the
//! commands the client sent, as the server counted them over the same
//! window (`INFO commandstats`: the script calls, EVAL/EVALSHA/FCALL/SCRIPT,
//! which no script can make, plus the plain commands the loop sends itself;
//! not the commands run inside scripts, which Redis 7 counts in
//! `total_commands_processed` and `INFO commandstats` alike).
//!
//! ```text
//! lock-bench [--url URL] [--workloads REF,W1,S1,F1,RL,W2,W2F,R1,M1,W3,W3NP,W3F,WD,LAYER] [--duration 5] [--warmup 1]
//!            [--tasks 16] [--processes 4] [--wd-counts 10000,100000] [--wd-periods 3] [--ref-conns 1]
//!            [--redis-cpu 0] [--bench-cpu 1] [--smoke]
//! ```

mod args;
mod load;
mod pin;
mod redis_util;
mod report;
mod stats;
mod workloads;

use std::error::Error;
use std::process::ExitCode;
use std::time::Duration;

use lock_tests::{RedisCluster, RedisServer};
use tokio::runtime::Runtime;

use crate::args::{ChildOptions, Command, Options, Workload, USAGE};
use crate::load::{load_average, Usage};
use crate::report::Measurement;
use crate::workloads::{fenced, layer, redlock, refs, rw, sem, w1, w2, w3, wd, Ctx, LockKind};

/// Errors of the benchmark: reported on stderr, never unwrapped.
pub(crate) type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let result = match args::parse(&argv) {
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run(opts)) => {
            crate::workloads::set_hand_off_window(opts.hand_off_window);
            run(opts)
        }
        Ok(Command::Child(opts)) => {
            crate::workloads::set_hand_off_window(opts.hand_off_window);
            child(&opts)
        }
        Err(e) => {
            eprintln!("lock-bench: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lock-bench: {}", chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// An error and its sources, `outer: inner: ...`; a source whose text is
/// already part of the message is not repeated.
pub(crate) fn chain(e: &(dyn Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        if !s.contains(&part) {
            s.push_str(": ");
            s.push_str(&part);
        }
        source = inner.source();
    }
    s
}

/// The runtime of the workloads: `--threads` workers, else one per CPU
/// this process may run on (1 when pinned).
fn runtime(threads: Option<usize>) -> std::io::Result<Runtime> {
    let workers = threads
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
}

fn cpus_text(cpu: Option<usize>) -> String {
    cpu.map_or("unpinned".into(), |c| format!("pinned to CPU {c}"))
}

fn run(opts: Options) -> BenchResult<ExitCode> {
    let machine_cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    if let Some(cpu) = opts.bench_cpu {
        pin::pin_self(cpu)?;
    }
    let server = match &opts.url {
        Some(_) => {
            if opts.redis_cpu.is_some() {
                eprintln!(
                    "lock-bench: --redis-cpu is ignored with --url (the server is not ours to pin)"
                );
            }
            None
        }
        None => Some(RedisServer::start()?),
    };
    let mut redis_text = match &opts.url {
        Some(u) => format!("redis at {u} (given), unpinned by us"),
        None => "private redis-server unpinned".into(),
    };
    if let (Some(server), Some(cpu)) = (&server, opts.redis_cpu) {
        let pid = server
            .pid()
            .ok_or("the private redis-server is not running")?;
        let threads = pin::pin_process(pid, cpu)?;
        redis_text = format!("private redis-server pinned to CPU {cpu} ({threads} threads)");
    }
    let url = match (&opts.url, &server) {
        (Some(u), _) => u.clone(),
        (None, Some(s)) => s.url(),
        (None, None) => return Err("no Redis to use".into()),
    };

    let redis_pid = server.as_ref().and_then(RedisServer::pid);
    let usage = Usage::now(redis_pid);
    let rt = runtime(opts.threads)?;
    let workers = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let load = load_average();
    let setup = format!(
        "{redis_text}; bench {} with {workers} tokio worker(s); machine has {machine_cpus} CPUs, load average {load} at start; window {:.1} s after {:.1} s warm-up{}",
        cpus_text(opts.bench_cpu),
        opts.duration.as_secs_f64(),
        opts.warmup.as_secs_f64(),
        if opts.smoke { "; SMOKE run: figures meaningless" } else { "" }
    );
    eprintln!("lock-bench: {setup}");
    let ctx = Ctx {
        servers: vec![url.clone()],
        url,
        cluster: false,
        prefix: format!("lb:{}:", std::process::id()),
        opts: opts.clone(),
    };

    let (mut all, mut failures) = run_workloads(&ctx, &rt, &opts.workloads, "");
    let mut cluster_all = Vec::new();
    let mut cluster_setup = String::new();
    if opts.cluster {
        match start_cluster(opts.redis_cpu) {
            Ok((cluster, text)) => {
                eprintln!("lock-bench: {text}");
                cluster_setup = text;
                let cluster_ctx = Ctx {
                    url: cluster.url(),
                    servers: cluster.urls(),
                    cluster: true,
                    prefix: ctx.prefix.clone(),
                    opts: opts.clone(),
                };
                let workloads: Vec<Workload> = opts
                    .workloads
                    .iter()
                    .copied()
                    // LAYER and RL start servers of their own
                    .filter(|w| !matches!(w, Workload::Layer | Workload::Rl))
                    .collect();
                let (ms, failed) = run_workloads(&cluster_ctx, &rt, &workloads, CLUSTER_SUFFIX);
                failures += failed;
                cluster_all = ms;
                drop(cluster);
            }
            Err(e) => {
                failures += 1;
                eprintln!(
                    "lock-bench: the cluster did not start: {}",
                    chain(e.as_ref())
                );
            }
        }
    }
    all.extend(cluster_all.iter().cloned());

    if opts.url.is_some() {
        let cleaned = rt.block_on(async {
            let mut conn = redis_util::connect(&ctx.url).await?;
            redis_util::delete_run_keys(&mut conn, &ctx.prefix).await
        });
        if let Err(e) = cleaned {
            eprintln!(
                "lock-bench: could not delete this run's keys ({}*): {}",
                ctx.prefix,
                chain(e.as_ref())
            );
        }
    }
    rt.shutdown_timeout(Duration::from_secs(5));
    // The benchmark itself keeps up to two CPUs busy, so its own load
    // average is about 2; the CPU time of other processes tells whether
    // someone else's work shared the machine during the run.
    let others = usage
        .others_pct_since(redis_pid)
        .map_or("?".into(), |p| format!("{p:.0}"));
    let setup = format!(
        "{setup}; load average {} at end; other processes used {others} % of one CPU during the run",
        load_average()
    );
    let single: Vec<Measurement> = all
        .iter()
        .filter(|m| !m.lib.ends_with(CLUSTER_SUFFIX))
        .cloned()
        .collect();
    eprint!("{}", report::summary(&single, &setup));
    if !cluster_all.is_empty() {
        // The same summary for the cluster lines, under their plain names.
        let plain: Vec<Measurement> = cluster_all
            .into_iter()
            .map(|mut m| {
                m.lib = m.lib.trim_end_matches(CLUSTER_SUFFIX).to_owned();
                m
            })
            .collect();
        eprint!(
            "{}",
            report::summary(&plain, &format!("REDIS CLUSTER: {cluster_setup}"))
        );
    }
    drop(server);
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What ends the lib names of the measurements made on the cluster.
const CLUSTER_SUFFIX: &str = "@cluster";

/// A private 3-primary cluster (no replicas), its nodes pinned to
/// `redis_cpu` when given; and how it was set up, for the summary.
fn start_cluster(redis_cpu: Option<usize>) -> BenchResult<(RedisCluster, String)> {
    let cluster = RedisCluster::start(3, 0)?;
    let mut text = "private 3-primary Redis Cluster (loopback, no replicas), unpinned".to_owned();
    if let Some(cpu) = redis_cpu {
        for node in cluster.nodes() {
            let pid = node.pid().ok_or("a cluster node is not running")?;
            pin::pin_process(pid, cpu)?;
        }
        text = format!("private 3-primary Redis Cluster (loopback, no replicas), all three nodes pinned to CPU {cpu}");
    }
    Ok((cluster, text))
}

/// Runs `workloads` on `ctx`'s deployment; lib names get `suffix`. The
/// measurements (emitted as they come) and how many failed.
fn run_workloads(
    ctx: &Ctx,
    rt: &tokio::runtime::Runtime,
    workloads: &[Workload],
    suffix: &str,
) -> (Vec<Measurement>, usize) {
    let opts = &ctx.opts;
    let mut all: Vec<Measurement> = Vec::new();
    let mut failures = 0;
    for workload in Workload::ALL {
        if !workloads.contains(&workload) {
            continue;
        }
        eprintln!(
            "lock-bench: running {workload:?}{suffix} (load average {})",
            load_average()
        );
        // (lib, workload, result) of each measurement.
        let results: Vec<(&str, String, BenchResult<Measurement>)> = match workload {
            Workload::Ref => vec![
                (
                    report::L_MIN_MUX,
                    "W1".into(),
                    rt.block_on(refs::l_min(ctx, refs::Shape::Mux)),
                ),
                (
                    report::L_MIN_POOL,
                    "W1".into(),
                    rt.block_on(refs::l_min(ctx, refs::Shape::Pool)),
                ),
                (report::R_MIN, "W1".into(), rt.block_on(refs::r_min(ctx))),
                ("L-serial", "W2".into(), rt.block_on(refs::l_serial(ctx))),
            ],
            Workload::W1 => [w1::Lease::Watchdog, w1::Lease::Fixed, w1::Lease::Grouped]
                .into_iter()
                .map(|lease| (lease.lib(), "W1".into(), rt.block_on(w1::run(ctx, lease))))
                .collect(),
            Workload::S1 => [sem::Kind::Expirable, sem::Kind::Plain]
                .into_iter()
                .map(|kind| (kind.lib(), "S1".into(), rt.block_on(sem::run(ctx, kind))))
                .collect(),
            Workload::F1 => vec![
                (fenced::RAW, "F1".into(), rt.block_on(fenced::raw(ctx))),
                (fenced::FENCED, "F1".into(), rt.block_on(fenced::run(ctx))),
            ],
            Workload::Rl => vec![(redlock::LIB, "RL".into(), rt.block_on(redlock::run(ctx)))],
            Workload::W2 => vec![(
                "lock-core",
                "W2".into(),
                rt.block_on(w2::run(ctx, LockKind::Plain)),
            )],
            Workload::W2f => vec![(
                "lock-core",
                "W2F".into(),
                rt.block_on(w2::run(ctx, LockKind::Fair)),
            )],
            Workload::R1 => vec![("lock-core", "R1".into(), rt.block_on(rw::r1(ctx)))],
            Workload::M1 => match rt.block_on(rw::m1(ctx)) {
                Ok(lines) => lines
                    .into_iter()
                    .map(|m| ("lock-core", "M1".into(), Ok(m)))
                    .collect(),
                Err(e) => vec![("lock-core", "M1".into(), Err(e))],
            },
            Workload::W3 => vec![("lock-core", "W3".into(), w3::run(ctx, rt, w3::W3))],
            Workload::W3np => vec![("lock-core", "W3NP".into(), w3::run(ctx, rt, w3::W3NP))],
            Workload::W3f => vec![("lock-core", "W3F".into(), w3::run(ctx, rt, w3::W3F))],
            Workload::Wd => opts
                .wd_counts
                .iter()
                .map(|&n| ("lock-core", "WD".into(), rt.block_on(wd::run(ctx, n))))
                .collect(),
            Workload::Layer => match rt.block_on(layer::run(ctx)) {
                Ok(lines) => lines
                    .into_iter()
                    .map(|m| ("lock-tower", "LAYER".into(), Ok(m)))
                    .collect(),
                Err(e) => vec![("lock-tower", "LAYER".into(), Err(e))],
            },
        };
        for (lib, name, result) in results {
            let mut m = result.unwrap_or_else(|e| {
                failures += 1;
                let why = chain(e.as_ref());
                eprintln!("lock-bench: {lib}{suffix} {name} failed: {why}");
                Measurement::failed(lib, &name, &why)
            });
            m.lib.push_str(suffix);
            m.emit();
            all.push(m);
        }
    }
    (all, failures)
}

fn child(opts: &ChildOptions) -> BenchResult<ExitCode> {
    let rt = runtime(opts.threads)?;
    w3::child(opts, &rt)?;
    rt.shutdown_timeout(Duration::from_secs(5));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_says_each_cause_once() {
        // redis-rs's error for an I/O failure has the I/O error as its
        // source, with the same text
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let redis = redis::RedisError::from(io);
        assert_eq!(chain(&redis), "refused");
        #[derive(Debug)]
        struct Outer(redis::RedisError);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("workload failed")
            }
        }
        impl Error for Outer {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        assert_eq!(chain(&Outer(redis)), "workload failed: refused");
    }
}
