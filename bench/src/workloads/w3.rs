//! W3, contended across processes: the program starts `--processes` copies
//! of itself (the hidden `--child w3` role), each with tasks/processes tasks
//! looping acquire `w3` → INCR a Redis counter → release on the same Redis.
//!
//! Start: each child connects and prints `ready`; the parent then writes
//! `go <start> <from> <to>` (instants on `CLOCK_MONOTONIC`, which every
//! process on the machine shares) to every child's stdin, so all of them
//! warm up and measure over the same window. At the end each child prints
//! one JSON line with every cycle it made.
//!
//! Hand-offs and violations across processes come from the counter: the
//! INCR answers order the critical sections as Redis saw them, so a
//! hand-off is a change of task between consecutive answers, and a
//! violation is a critical section that began (acquire returned) before an
//! earlier one ended (before its release was sent) — sound because the
//! processes share one clock. The critical section stays one INCR, exactly
//! as in W2 and L-serial, so the three rates compare like with like.
//!
//! Fairness between processes, from the same order: each process's share
//! of the sections and Jain's index over them, the longest run of
//! consecutive sections by one process, and the share of hand-overs
//! (consecutive sections) that cross processes. Jain's index over per-task
//! totals alone would hide a process that waits through long runs of the
//! others as long as it catches up in bulk.
//!
//! W3NP is the same loop with one task per process (the fairness suite's
//! "four processes looping without pause"). No task in either variant pauses
//! between iterations, but in W3 a task that releases queues behind its
//! process's other tasks, so a process's head asks Redis again only after a
//! streak of local hand-offs; in W3NP nothing else of the process waits, and
//! the one task asks again the moment its release returns, racing the
//! processes that were told of the unlock.
//!
//! W3F is W3 on the fair lock `w3f` (`client.fair_lock`, Redisson's
//! `RFairLock`; children get the hidden `--fair`): no local queue, every
//! task of every process is its own waiter in Redis' queue and is served in
//! arrival order, so a process never keeps the lock through local
//! hand-offs.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

use super::{acquire_options, contended, lock_client, Ctx, LockKind, ACQUIRE_WAIT, MAX_CYCLES};
use crate::args::ChildOptions;
use crate::report::Measurement;
use crate::stats::{self, mono_ns, Cycle, Window};
use crate::{redis_util, BenchResult};

/// How long children may take to connect and say `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Head start between `go` and the window's start, so every child is waiting.
const START_DELAY: Duration = Duration::from_millis(100);
/// How long a child waits for `go`.
const GO_TIMEOUT: Duration = Duration::from_secs(120);
/// Extra time after the window for the children to finish and report.
const REPORT_GRACE: Duration = Duration::from_secs(30);
/// How long a child may take to exit after its report.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// A cross-process workload: its name, its lock (the counter is
/// `<lock>:counter`), its tasks per process and the kind of lock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Variant {
    name: &'static str,
    lock: &'static str,
    /// `None`: `--tasks / --processes` (at least 1).
    tasks_per_process: Option<usize>,
    kind: LockKind,
}

/// W3: `--processes` processes of `--tasks / --processes` tasks.
pub(crate) const W3: Variant = Variant {
    name: "W3",
    lock: "w3",
    tasks_per_process: None,
    kind: LockKind::Plain,
};

/// W3NP: `--processes` processes of one task each.
pub(crate) const W3NP: Variant = Variant {
    name: "W3NP",
    lock: "w3np",
    tasks_per_process: Some(1),
    kind: LockKind::Plain,
};

/// W3F: W3's processes and tasks on the fair lock.
pub(crate) const W3F: Variant = Variant {
    name: "W3F",
    lock: "w3f",
    tasks_per_process: None,
    kind: LockKind::Fair,
};

/// The counter a variant's sections increment (without the run's prefix).
fn counter_name(lock: &str) -> String {
    format!("{lock}:counter")
}

/// Child processes that are killed and reaped if the parent gives up early.
struct Children {
    procs: Vec<(Child, Option<ChildStdin>)>,
}

impl Drop for Children {
    fn drop(&mut self) {
        for (child, _) in &mut self.procs {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// A line from child `k`'s stdout, or its end.
type Line = (usize, Option<String>);

fn spawn_children(
    ctx: &Ctx,
    variant: Variant,
    per_proc: usize,
    tx: &mpsc::Sender<Line>,
) -> BenchResult<Children> {
    let exe = std::env::current_exe()?;
    let mut children = Children { procs: Vec::new() };
    for k in 0..ctx.opts.processes {
        let mut cmd = Command::new(&exe);
        cmd.args(["--child", "w3", "--url", &ctx.url, "--prefix", &ctx.prefix])
            .args(["--lock", variant.lock])
            .args(["--proc", &k.to_string(), "--tasks", &per_proc.to_string()]);
        if let Some(t) = ctx.opts.threads {
            cmd.args(["--threads", &t.to_string()]);
        }
        if variant.kind == LockKind::Fair {
            cmd.arg("--fair");
        }
        if let Some(w) = super::hand_off_window() {
            cmd.args(["--hand-off-window-ms", &w.as_millis().to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("child without stdout")?;
        children.procs.push((child, stdin));
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send((k, Some(l))).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send((k, None));
        });
    }
    Ok(children)
}

/// Waits for one line from every child that `accept` takes; a child that
/// ends first, or the deadline, is an error.
fn collect(
    rx: &mpsc::Receiver<Line>,
    n: usize,
    deadline: Instant,
    workload: &str,
    what: &str,
    mut accept: impl FnMut(usize, String) -> BenchResult<bool>,
) -> BenchResult<()> {
    let mut done = vec![false; n];
    while done.iter().any(|d| !d) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((k, Some(line))) => {
                if accept(k, line)? {
                    if let Some(d) = done.get_mut(k) {
                        *d = true;
                    }
                }
            }
            Ok((k, None)) if !done.get(k).copied().unwrap_or(true) => {
                return Err(format!("{workload} child {k} ended before its {what}").into())
            }
            Ok((_, None)) => {}
            Err(_) => return Err(format!("{workload} children: no {what} in time").into()),
        }
    }
    Ok(())
}

/// Parses a child's report into cycles with absolute timestamps.
fn parse_report(v: &Value, start: u64, cycles: &mut Vec<Cycle>) -> BenchResult<Option<String>> {
    let list = v["cycles"].as_array().ok_or("report without cycles")?;
    for c in list {
        let f = |i: usize| {
            c.get(i)
                .and_then(Value::as_u64)
                .ok_or("bad cycle in report")
        };
        cycles.push(Cycle {
            task: f(0)? as usize,
            seq: f(1)?,
            start: start + f(2)?,
            enter: start + f(3)?,
            exit: start + f(4)?,
            end: start + f(5)?,
        });
    }
    Ok(v["error"].as_str().map(str::to_owned))
}

/// The parent side: starts the children, synchronises them, aggregates.
pub(crate) fn run(ctx: &Ctx, rt: &Runtime, variant: Variant) -> BenchResult<Measurement> {
    let processes = ctx.opts.processes;
    let per_proc = variant
        .tasks_per_process
        .unwrap_or(ctx.opts.tasks / processes)
        .max(1);
    let counter = ctx.key(&counter_name(variant.lock));
    let mut conn = rt.block_on(redis_util::connect(&ctx.url))?;
    rt.block_on(async {
        redis::cmd("DEL")
            .arg(&counter)
            .query_async::<i64>(&mut conn)
            .await
    })?;

    let (tx, rx) = mpsc::channel();
    let mut children = spawn_children(ctx, variant, per_proc, &tx)?;
    drop(tx);
    collect(
        &rx,
        processes,
        Instant::now() + READY_TIMEOUT,
        variant.name,
        "ready",
        |_, l| Ok(l == "ready"),
    )?;

    let start = mono_ns() + START_DELAY.as_nanos() as u64;
    let window = Window::new(start, ctx.opts.warmup, ctx.opts.duration);
    for (_, stdin) in &mut children.procs {
        let stdin = stdin.as_mut().ok_or("child without stdin")?;
        writeln!(stdin, "go {} {} {}", window.start, window.from, window.to)?;
        stdin.flush()?;
    }

    let deadline = Instant::now()
        + START_DELAY
        + ctx.opts.warmup
        + ctx.opts.duration
        + ACQUIRE_WAIT
        + REPORT_GRACE;
    let mut cycles = Vec::new();
    let mut errors = Vec::new();
    collect(
        &rx,
        processes,
        deadline,
        variant.name,
        "report",
        |k, line| {
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                return Ok(false);
            };
            if let Some(e) = parse_report(&v, start, &mut cycles)? {
                errors.push(format!("child {k}: {e}"));
            }
            Ok(true)
        },
    )?;
    for (child, stdin) in &mut children.procs {
        drop(stdin.take());
        let until = Instant::now() + EXIT_TIMEOUT;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    drop(children);

    let total: Option<u64> =
        rt.block_on(async { redis::cmd("GET").arg(&counter).query_async(&mut conn).await })?;
    let completed = cycles.len() as u64;
    let by_process = stats::by_process(&cycles, processes, per_proc, &window);
    let c = stats::contended(cycles, processes * per_proc, &window);
    let counter_ok = errors.is_empty() && c.seq_ok && total == Some(completed);
    let shape = if variant.tasks_per_process == Some(1) {
        format!("{processes} processes x 1 task on one key, each asking again as soon as its release returns (no pause, no local queue)")
    } else {
        format!(
            "{processes} processes x {per_proc} tasks on one key, {}",
            variant.kind.text()
        )
    };
    let mut notes = format!(
        "{shape}, lease 10 s; violations = critical sections overlapping in counter order (one clock for all processes); counter {} of {completed} cycles; per process (INCR order): jain_process over process_sections, longest_process_run = most consecutive sections by one process, cross_process_pct = hand-overs between processes / {} hand-overs",
        total.unwrap_or(0),
        by_process.handovers
    );
    if !errors.is_empty() {
        notes.push_str(&format!("; {} failure(s): {}", errors.len(), errors[0]));
    }
    let mut m = contended(variant.name, &c, c.overlaps, counter_ok, &notes);
    m.by_process = Some(by_process);
    Ok(m)
}

/// The child side (`--child w3`, with `--fair` on the fair lock): connect,
/// say `ready`, wait for `go`, run the loop until the window ends, print
/// the report.
pub(crate) fn child(opts: &ChildOptions, rt: &Runtime) -> BenchResult<()> {
    let client = rt.block_on(lock_client(&opts.url, &opts.prefix, None))?;
    let kind = if opts.fair {
        LockKind::Fair
    } else {
        LockKind::Plain
    };
    let lock = kind.lock(&client, &opts.lock)?;
    let conn = rt.block_on(redis_util::connect(&opts.url))?;
    let counter = format!("{}{}", opts.prefix, counter_name(&opts.lock));
    println!("ready");
    std::io::stdout().flush()?;

    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(GO_TIMEOUT)
        .map_err(|_| "no `go` from the parent")?;
    let nums: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let [start, from, to] = nums[..] else {
        return Err(format!("bad go line {line:?}").into());
    };
    let window = Window { start, from, to };

    let base_task = opts.proc_id * opts.tasks;
    let (cycles, error) = rt.block_on(async {
        tokio::time::sleep(Duration::from_nanos(start.saturating_sub(mono_ns()))).await;
        let mut set: JoinSet<(Vec<Cycle>, Option<String>)> = JoinSet::new();
        for t in 0..opts.tasks {
            let lock = lock.clone();
            let mut conn = conn.clone();
            let counter = counter.clone();
            set.spawn(async move {
                let mut cycles = Vec::new();
                let outcome: BenchResult<()> = async {
                    for _ in 0..MAX_CYCLES {
                        let start = mono_ns();
                        if start >= window.to {
                            break;
                        }
                        let guard = lock.acquire_with(acquire_options()).await?;
                        let enter = mono_ns();
                        let seq: u64 = redis::cmd("INCR")
                            .arg(&counter)
                            .query_async(&mut conn)
                            .await?;
                        let exit = mono_ns();
                        guard.release().await?;
                        cycles.push(Cycle {
                            task: base_task + t,
                            seq,
                            start,
                            enter,
                            exit,
                            end: mono_ns(),
                        });
                    }
                    Ok(())
                }
                .await;
                (cycles, outcome.err().map(|e| e.to_string()))
            });
        }
        let mut cycles = Vec::new();
        let mut error = None;
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((c, e)) => {
                    cycles.extend(c);
                    error = error.or(e);
                }
                Err(e) => error = error.or(Some(e.to_string())),
            }
        }
        (cycles, error)
    });

    let rel = |t: u64| t.saturating_sub(start);
    let list: Vec<Value> = cycles
        .iter()
        .map(|c| {
            json!([
                c.task,
                c.seq,
                rel(c.start),
                rel(c.enter),
                rel(c.exit),
                rel(c.end)
            ])
        })
        .collect();
    let report = json!({ "proc": opts.proc_id, "cycles": list, "error": error });
    let mut out = std::io::stdout().lock();
    writeln!(out, "{report}")?;
    out.flush()?;
    Ok(())
}
