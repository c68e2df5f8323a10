//! One JSON line per measurement (stdout) and the closing summary with the
//! ratios against the targets (stderr).

use std::io::Write;

use serde_json::json;

use crate::stats::ByProcess;

/// The fields every JSON line carries: the list, in its order, with
/// the per-process fairness figures of W3 and W3NP, and the client CPU,
/// server CPU and calls per cycle of the uncontended lines before the notes.
#[cfg(test)]
pub(crate) const FIELDS: [&str; 19] = [
    "lib",
    "workload",
    "cycles_per_s",
    "p50_us",
    "p99_us",
    "max_wait_ms",
    "jain",
    "handoff_pct",
    "violations",
    "counter_ok",
    "jain_process",
    "process_sections",
    "min_process_share_pct",
    "longest_process_run",
    "cross_process_pct",
    "client_cpu_us_per_cycle",
    "server_cpu_us_per_cycle",
    "calls_per_cycle",
    "notes",
];

/// The L-min reference over one multiplexed connection shared by all tasks.
pub(crate) const L_MIN_MUX: &str = "L-min-mux";
/// The L-min reference over lock-core's pool shape (`--ref-conns`).
pub(crate) const L_MIN_POOL: &str = "L-min-pool";
/// Redisson's own RLock protocol (lock script, unlock script) over one
/// multiplexed connection shared by all tasks.
pub(crate) const R_MIN: &str = "R-min";
/// W1's target: at least this share of the faster L-min reference (issue
/// 15: W1 >= 0.8 x L-min over one multiplexed connection).
pub(crate) const W1_TARGET: f64 = 0.8;
/// W1's target against R-min (issue 28: W1 >= 1.5 x R-min, the floor of a
/// Redisson-compatible lock that sends one script per operation).
pub(crate) const W1_R_MIN_TARGET: f64 = 1.5;

/// "No process starved" in W3NP and W3F: every process got at least this share of
/// the measured sections, in percent (the fairness suite's bound).
pub(crate) const MIN_PROCESS_SHARE_PCT: f64 = 15.0;

/// How the summary judges a contended workload.
struct Judged {
    workload: &'static str,
    /// The target of its ratio to L-serial, if any.
    ratio_target: Option<f64>,
    /// Jain's index (per task, per process) is judged against 0.99.
    jain_target: bool,
    /// The line "no process starved" (every process at least
    /// [`MIN_PROCESS_SHARE_PCT`] of the sections) is judged.
    starvation: bool,
    /// The plain-lock workload a fair one is set against (no target).
    beside: Option<&'static str>,
}

/// The contended workloads in the summary, in the order they run: W2 and
/// W3 have the targets (ratio and Jain); W3NP has one, no process
/// starved; W2F and W3F (the fair lock) are set against L-serial and their
/// plain twin without a target, and W3F is judged on "no process starved"
/// as W3NP is.
const CONTENDED: [Judged; 5] = [
    Judged {
        workload: "W2",
        ratio_target: Some(1.0),
        jain_target: true,
        starvation: false,
        beside: None,
    },
    Judged {
        workload: "W2F",
        ratio_target: None,
        jain_target: false,
        starvation: false,
        beside: Some("W2"),
    },
    Judged {
        workload: "W3",
        ratio_target: Some(0.9),
        jain_target: true,
        starvation: false,
        beside: None,
    },
    Judged {
        workload: "W3NP",
        ratio_target: None,
        jain_target: false,
        starvation: true,
        beside: None,
    },
    Judged {
        workload: "W3F",
        ratio_target: None,
        jain_target: false,
        starvation: true,
        beside: Some("W3"),
    },
];

/// One measurement; `None` prints as `null` (not applicable).
#[derive(Clone, Debug, Default)]
pub(crate) struct Measurement {
    pub(crate) lib: String,
    pub(crate) workload: String,
    pub(crate) cycles_per_s: Option<f64>,
    /// W1 and references: cycle latency; W2/W3: acquire wait.
    pub(crate) p50_us: Option<f64>,
    pub(crate) p99_us: Option<f64>,
    pub(crate) max_wait_ms: Option<f64>,
    pub(crate) jain: Option<f64>,
    pub(crate) handoff_pct: Option<f64>,
    pub(crate) violations: Option<u64>,
    pub(crate) counter_ok: Option<bool>,
    /// W3, W3NP: fairness between the processes (sections in INCR order).
    pub(crate) by_process: Option<ByProcess>,
    /// The uncontended lines (W1, S1, F1, RL, R1, L-min, R-min): this
    /// process's CPU time (getrusage user + system) over the window divided
    /// by the measured cycles, µs.
    pub(crate) client_cpu_us_per_cycle: Option<f64>,
    /// The uncontended lines: the server's CPU (INFO cpu, user + system)
    /// over the window divided by the measured cycles, µs.
    pub(crate) server_cpu_us_per_cycle: Option<f64>,
    /// The uncontended lines: the calls the client sent the server over
    /// the window (INFO commandstats: script calls, and the plain commands
    /// the loop sends itself; not the commands run inside scripts) divided
    /// by the measured cycles.
    pub(crate) calls_per_cycle: Option<f64>,
    pub(crate) notes: String,
    /// Figures for the summary that have no JSON field of their own.
    pub(crate) extra: Extra,
}

/// Summary-only figures.
#[derive(Clone, Debug, Default)]
pub(crate) struct Extra {
    /// Median cycle latency (acquire start → release end) of one task, µs.
    pub(crate) cycle_p50_us: Option<f64>,
    /// The watchdog workload's figures.
    pub(crate) wd: Option<WdFigures>,
    /// R1 and M1: the most readers seen inside the read-write lock at once.
    pub(crate) peak_inside: Option<u64>,
    /// Contended workloads: share of measured sections that jumped the
    /// queue (their holder called acquire after a waiter served later), %.
    pub(crate) jumped_pct: Option<f64>,
}

/// What the WD workload measured for one number of locks.
#[derive(Clone, Debug, Default)]
pub(crate) struct WdFigures {
    pub(crate) locks: usize,
    /// Every command Redis counted, including those run inside scripts.
    pub(crate) commands_per_period: f64,
    /// EVALSHA/EVAL/SCRIPT calls only: commands on the wire.
    pub(crate) script_calls_per_period: f64,
    pub(crate) round_trips_per_period: f64,
    pub(crate) cpu_pct: Option<f64>,
    pub(crate) all_held: bool,
}

fn round(v: Option<f64>, digits: i32) -> Option<f64> {
    let scale = 10f64.powi(digits);
    v.filter(|x| x.is_finite())
        .map(|x| (x * scale).round() / scale)
}

impl Measurement {
    /// The line of a measurement that could not be made: every figure null,
    /// the error in the notes.
    pub(crate) fn failed(lib: &str, workload: &str, why: &str) -> Self {
        Measurement {
            lib: lib.into(),
            workload: workload.into(),
            notes: format!("FAILED: {why}"),
            ..Default::default()
        }
    }

    /// The JSON line (without newline).
    pub(crate) fn to_json(&self) -> String {
        let p = self.by_process.as_ref();
        json!({
            "lib": self.lib,
            "workload": self.workload,
            "cycles_per_s": round(self.cycles_per_s, 1),
            "p50_us": round(self.p50_us, 1),
            "p99_us": round(self.p99_us, 1),
            "max_wait_ms": round(self.max_wait_ms, 3),
            "jain": round(self.jain, 4),
            "handoff_pct": round(self.handoff_pct, 2),
            "violations": self.violations,
            "counter_ok": self.counter_ok,
            "jain_process": round(p.and_then(|p| p.jain), 4),
            "process_sections": p.map(|p| &p.sections),
            "min_process_share_pct": round(p.and_then(|p| p.min_share_pct), 2),
            "longest_process_run": p.map(|p| p.longest_run),
            "cross_process_pct": round(p.and_then(|p| p.cross_pct), 2),
            "client_cpu_us_per_cycle": round(self.client_cpu_us_per_cycle, 3),
            "server_cpu_us_per_cycle": round(self.server_cpu_us_per_cycle, 3),
            "calls_per_cycle": round(self.calls_per_cycle, 3),
            "notes": self.notes,
        })
        .to_string()
    }

    /// Prints the JSON line on stdout at once (so a long run shows progress).
    pub(crate) fn emit(&self) {
        let mut out = std::io::stdout().lock();
        // A closed stdout (e.g. `| head`) must not abort the run.
        let _ = writeln!(out, "{}", self.to_json());
        let _ = out.flush();
    }
}

fn find<'a>(all: &'a [Measurement], lib: &str, workload: &str) -> Option<&'a Measurement> {
    all.iter().find(|m| m.lib == lib && m.workload == workload)
}

/// Calls per cycle as the summary prints them.
fn calls_text(v: Option<f64>) -> String {
    v.map_or("-".into(), |c| format!("{c:.2}"))
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// The human-readable summary: every ratio against its target.
pub(crate) fn summary(all: &[Measurement], setup: &str) -> String {
    let mut s = String::new();
    let mut line = |t: String| {
        s.push_str(&t);
        s.push('\n');
    };
    line(format!("== lock-bench summary ({setup})"));
    line(
        "   figures compare only within one run; the machine may be shared with other builds"
            .into(),
    );

    let l_serial = find(all, "L-serial", "W2").and_then(|m| m.cycles_per_s);
    w1_summary(all, &mut line);
    s1_summary(all, &mut line);
    f1_summary(all, &mut line);
    rl_summary(all, &mut line);

    for judged in CONTENDED {
        let (workload, target) = (judged.workload, judged.ratio_target);
        let Some(m) = find(all, "lock-core", workload) else {
            continue;
        };
        let Some(rate) = m.cycles_per_s else {
            line(format!("{workload}  lock-core: no figures ({})", m.notes));
            continue;
        };
        let ratio = l_serial.filter(|r| *r > 0.0).map(|r| rate / r);
        let mut ratio_text = match (ratio, l_serial, target) {
            (Some(x), Some(r), Some(target)) => format!(
                "L-serial {r:>7.0}  ratio {x:.3}  (target >= {target}: {})",
                verdict(x >= target)
            ),
            (Some(x), Some(r), None) => format!("L-serial {r:>7.0}  ratio {x:.3}  (no target)"),
            _ => "(no L-serial in this run: run REF too)".into(),
        };
        if let Some(plain) = judged.beside {
            let plain_rate = find(all, "lock-core", plain)
                .and_then(|p| p.cycles_per_s)
                .filter(|r| *r > 0.0);
            ratio_text.push_str(&match plain_rate {
                Some(p) => format!("  {plain} {p:>7.0}  fair / plain {:.3}", rate / p),
                None => format!("  (no {plain} in this run)"),
            });
        }
        line(format!(
            "{workload}  lock-core {rate:>9.0} cycles/s  {ratio_text}"
        ));
        let jain_text = |j: f64| match judged.jain_target {
            true => format!("{j:.4} (target >= 0.99: {})", verdict(j >= 0.99)),
            false => format!("{j:.4}"),
        };
        match (m.jain, &m.by_process) {
            (Some(j), None) => line(format!("      Jain {}", jain_text(j))),
            (j, Some(p)) => {
                let show = |j: Option<f64>| j.map_or("-".into(), jain_text);
                line(format!(
                    "      Jain per task {}, per process {}",
                    show(j),
                    show(p.jain)
                ));
                line(process_line(p));
                if judged.starvation {
                    let min = p.min_share_pct.unwrap_or(0.0);
                    line(format!(
                        "      no process starved: min share {min:.1} % of sections (target >= {MIN_PROCESS_SHARE_PCT:.0} % for every process: {})",
                        verdict(p.min_share_pct.is_some_and(|x| x >= MIN_PROCESS_SHARE_PCT))
                    ));
                }
            }
            (None, None) => {}
        }
        if let Some(max_ms) = m.max_wait_ms {
            let lock_cycle_us = 1e6 / rate;
            let by_lock = max_ms * 1000.0 / lock_cycle_us;
            line(format!(
                "      max wait {max_ms:.1} ms = {by_lock:.0} x the lock-level cycle time 1/cycles_per_s ({lock_cycle_us:.0} us) (target <= 50: {})",
                verdict(by_lock <= 50.0)
            ));
            if let Some(task_cycle) = m.extra.cycle_p50_us.filter(|c| *c > 0.0) {
                let by_task = max_ms * 1000.0 / task_cycle;
                line(format!(
                    "      max wait {max_ms:.1} ms = {by_task:.1} x the p50 per-task cycle latency ({task_cycle:.0} us, acquire start -> release end) (target <= 50: {})",
                    verdict(by_task <= 50.0)
                ));
            }
        }
        if let Some(h) = m.handoff_pct {
            line(format!(
                "      hand-offs {h:.1} %  jumped the queue {} of sections  violations {}  counter ok {}",
                m.extra
                    .jumped_pct
                    .map_or("-".into(), |j| format!("{j:.2} %")),
                m.violations.map_or("-".into(), |v| v.to_string()),
                m.counter_ok.map_or("-".into(), |v| v.to_string())
            ));
        }
    }

    for m in all.iter().filter(|m| m.workload == "WD") {
        match &m.extra.wd {
            Some(wd) => {
                let cpu = wd.cpu_pct.map_or("?".into(), |c| format!("{c:.1}"));
                let targets = if wd.locks >= 100_000 {
                    format!(
                        "  (targets at 100k: round trips <= 1000: {}, CPU <= 5 %: {})",
                        verdict(wd.round_trips_per_period <= 1000.0),
                        verdict(wd.cpu_pct.is_some_and(|c| c <= 5.0))
                    )
                } else {
                    String::new()
                };
                line(format!(
                    "WD  {:>6} locks: {:.0} commands/period ({:.0} script calls + {:.0} run inside them), ~{:.0} round trips/period, client CPU {cpu} % of one core, all held {}{targets}",
                    wd.locks,
                    wd.commands_per_period,
                    wd.script_calls_per_period,
                    wd.commands_per_period - wd.script_calls_per_period,
                    wd.round_trips_per_period,
                    wd.all_held
                ));
            }
            None => line(format!("WD  no figures ({})", m.notes)),
        }
    }
    rw_summary(all, &mut line);
    if let Some(text) = layer_summary(all) {
        line(text);
    }
    s
}

/// The read-write lock's lines: R1 against W1 measured in the same run
/// (readers share one key, so they should approach the uncontended rate of
/// keys of their own), and M1's reads/s, writes/s and writers' waits.
fn rw_summary(all: &[Measurement], line: &mut impl FnMut(String)) {
    if let Some(r1) = find(all, "lock-core", "R1") {
        match r1.cycles_per_s {
            Some(rate) => {
                let w1 = find(all, "lock-core", "W1")
                    .and_then(|m| m.cycles_per_s)
                    .filter(|r| *r > 0.0);
                let vs = match w1 {
                    Some(w1) => format!(
                        "W1 {w1:>9.0}  ratio {:.3}  (readers share: near 1 = as fast as the same tasks on keys of their own; no target)",
                        rate / w1
                    ),
                    None => "(no W1 in this run: run W1 too)".into(),
                };
                line(format!(
                    "R1  lock-core {rate:>9.0} read cycles/s, readers only on one key  {vs}"
                ));
                let mut more = Vec::new();
                if let Some(peak) = r1.extra.peak_inside {
                    more.push(format!("most readers inside at once {peak}"));
                }
                let us = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.0} us"));
                more.push(format!(
                    "cycle latency p50 {}, p99 {}",
                    us(r1.p50_us),
                    us(r1.p99_us)
                ));
                if let Some(cpu) = r1.server_cpu_us_per_cycle {
                    let w1_cpu = find(all, "lock-core", "W1")
                        .and_then(|m| m.server_cpu_us_per_cycle)
                        .map_or(String::new(), |c| format!(" (W1 {c:.2} us)"));
                    more.push(format!("server CPU per read cycle {cpu:.2} us{w1_cpu}"));
                }
                line(format!("      {}", more.join("; ")));
            }
            None => line(format!("R1  lock-core: no figures ({})", r1.notes)),
        }
    }
    let (Some(reads), Some(writes)) = (
        find(all, "lock-core-read", "M1"),
        find(all, "lock-core-write", "M1"),
    ) else {
        return;
    };
    let (Some(read_rate), Some(write_rate)) = (reads.cycles_per_s, writes.cycles_per_s) else {
        line(format!("M1  lock-core: no figures ({})", reads.notes));
        return;
    };
    line(format!(
        "M1  lock-core reads {read_rate:>9.0}/s  writes {write_rate:>7.0}/s  (90 % reads / 10 % writes on one key; violations {})",
        writes
            .violations
            .map_or("-".into(), |v| v.to_string())
    ));
    let waits = |m: &Measurement| {
        let us = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.0} us"));
        let ms = m.max_wait_ms.map_or("-".into(), |x| format!("{x:.1} ms"));
        format!("p50 {}, p99 {}, longest {ms}", us(m.p50_us), us(m.p99_us))
    };
    line(format!(
        "      writers' wait under continuous readers: {}; readers' wait: {}",
        waits(writes),
        waits(reads)
    ));
}

/// The S1 libs: expirable permits, plain permits.
pub(crate) const S1_LIBS: [(&str, &str); 2] = [
    ("lock-core-permit", "expirable permits (watchdog)"),
    ("lock-core-sem", "plain permits"),
];

/// The S1 lines: permits/s of each kind against the faster L-min reference
/// and W1 of the same run (no target), and their CPU per permit.
fn s1_summary(all: &[Measurement], line: &mut impl FnMut(String)) {
    let rate = |lib: &str, workload: &str| {
        find(all, lib, workload)
            .and_then(|m| m.cycles_per_s)
            .filter(|r| *r > 0.0)
    };
    let faster = [L_MIN_MUX, L_MIN_POOL]
        .into_iter()
        .filter_map(|lib| Some((lib, rate(lib, "W1")?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let w1 = rate("lock-core", "W1");
    for (lib, what) in S1_LIBS {
        let Some(m) = find(all, lib, "S1") else {
            continue;
        };
        let Some(permits) = m.cycles_per_s else {
            line(format!("S1  {lib}: no figures ({})", m.notes));
            continue;
        };
        let vs_ref = match faster {
            Some((best, r)) => format!("ratio {:.3} to {best} ({r:.0})", permits / r),
            None => "(no L-min in this run: run REF too)".into(),
        };
        let vs_w1 = w1.map_or(String::new(), |w| format!(", {:.3} to W1", permits / w));
        let cpu = |v: Option<f64>| v.map_or("-".into(), |us| format!("{us:.2} us"));
        line(format!(
            "S1  {lib} {permits:>9.0} permits/s, {what}, acquire 1 + release on a semaphore of its own  {vs_ref}{vs_w1}  (no target)"
        ));
        line(format!(
            "      per permit: client CPU {}, server CPU {}, calls {}; cycle latency p50 {}, p99 {}",
            cpu(m.client_cpu_us_per_cycle),
            cpu(m.server_cpu_us_per_cycle),
            calls_text(m.calls_per_cycle),
            cpu(m.p50_us),
            cpu(m.p99_us)
        ));
    }
}

/// The F1 line: fenced writes/s against the plain writes of the same run
/// (no target), and their CPU per write.
fn f1_summary(all: &[Measurement], line: &mut impl FnMut(String)) {
    let Some(m) = find(all, "lock-core-fenced", "F1") else {
        return;
    };
    let Some(writes) = m.cycles_per_s else {
        line(format!("F1  lock-core-fenced: no figures ({})", m.notes));
        return;
    };
    let raw = find(all, "raw-INCRBY", "F1")
        .and_then(|r| r.cycles_per_s)
        .filter(|r| *r > 0.0);
    let vs_raw = raw.map_or("(no raw-INCRBY figures)".into(), |r| {
        format!("ratio {:.3} to raw-INCRBY ({r:.0})", writes / r)
    });
    let us = |v: Option<f64>| v.map_or("-".into(), |us| format!("{us:.2} us"));
    line(format!(
        "F1  lock-core-fenced {writes:>9.0} writes/s, fenced INCRBY under a held lock  {vs_raw}  (no target)"
    ));
    line(format!(
        "      per write: client CPU {}, server CPU {}, calls {} (raw-INCRBY: {}); latency p50 {}, p99 {}",
        us(m.client_cpu_us_per_cycle),
        us(m.server_cpu_us_per_cycle),
        calls_text(m.calls_per_cycle),
        calls_text(find(all, "raw-INCRBY", "F1").and_then(|r| r.calls_per_cycle)),
        us(m.p50_us),
        us(m.p99_us)
    ));
}

/// The RL line: a Redlock over three servers against W1 (one server) of
/// the same run (no target).
fn rl_summary(all: &[Measurement], line: &mut impl FnMut(String)) {
    let Some(m) = find(all, "lock-core-redlock3", "RL") else {
        return;
    };
    let Some(rate) = m.cycles_per_s else {
        line(format!("RL  lock-core-redlock3: no figures ({})", m.notes));
        return;
    };
    let w1 = find(all, "lock-core", "W1");
    let vs_w1 = w1
        .and_then(|w| w.cycles_per_s)
        .filter(|r| *r > 0.0)
        .map_or("(no W1 in this run)".into(), |r| {
            format!("ratio {:.3} to W1 on one server ({r:.0})", rate / r)
        });
    let us = |v: Option<f64>| v.map_or("-".into(), |us| format!("{us:.0} us"));
    line(format!(
        "RL  lock-core-redlock3 {rate:>9.0} cycles/s, Redlock over 3 servers, acquire + release  {vs_w1}  (no target)"
    ));
    let us2 = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2} us"));
    line(format!(
        "      cycle latency p50 {}, p99 {} (W1: p50 {}, p99 {}); per cycle: client CPU {}, server CPU {} and calls {} (server figures summed over the three servers)",
        us(m.p50_us),
        us(m.p99_us),
        us(w1.and_then(|w| w.p50_us)),
        us(w1.and_then(|w| w.p99_us)),
        us2(m.client_cpu_us_per_cycle),
        us2(m.server_cpu_us_per_cycle),
        calls_text(m.calls_per_cycle)
    ));
}

/// The W1 lines: W1 against both L-min references and R-min, the ratio to
/// the faster L-min against its target and the ratio to R-min against its
/// own, and the client CPU, server CPU and calls per cycle of each.
fn w1_summary(all: &[Measurement], line: &mut impl FnMut(String)) {
    let rate = |lib: &str| {
        find(all, lib, "W1")
            .and_then(|m| m.cycles_per_s)
            .filter(|r| *r > 0.0)
    };
    let refs: Vec<(&str, f64)> = [L_MIN_MUX, L_MIN_POOL]
        .into_iter()
        .filter_map(|lib| Some((lib, rate(lib)?)))
        .collect();
    let faster = refs.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1));
    let r_min = rate(R_MIN);
    // R-min is shown beside the L-min references, never judged as one.
    let shown: Vec<(&str, f64)> = refs
        .iter()
        .copied()
        .chain(r_min.map(|r| (R_MIN, r)))
        .collect();
    let w1 = find(all, "lock-core", "W1").and_then(|m| m.cycles_per_s);
    match (w1, faster) {
        (Some(w1), Some((best, best_rate))) => {
            let each: Vec<String> = shown
                .iter()
                .map(|(lib, r)| format!("{lib} {r:>9.0}  ratio {:.3}", w1 / r))
                .collect();
            line(format!(
                "W1  lock-core {w1:>9.0} cycles/s  {}",
                each.join("  ")
            ));
            let ratio = w1 / best_rate;
            line(format!(
                "      W1 / faster reference ({best}) {ratio:.3}  (target >= {W1_TARGET} x L-min over one multiplexed connection, judged against the faster reference: {})",
                verdict(ratio >= W1_TARGET)
            ));
        }
        (Some(w1), None) => line(format!(
            "W1  lock-core {w1:>9.0} cycles/s  (no L-min in this run: run REF too)"
        )),
        (None, _) if !shown.is_empty() => {
            let each: Vec<String> = shown
                .iter()
                .map(|(lib, r)| format!("{lib} {r:>9.0} cycles/s"))
                .collect();
            line(format!("REF {}  (no W1 in this run)", each.join("  ")));
        }
        (None, _) => {}
    }
    if let (Some(w1), Some(r)) = (w1, r_min) {
        let ratio = w1 / r;
        line(format!(
            "      W1 / R-min (Redisson's RLock protocol, one script per operation, one multiplexed connection) {ratio:.3}  (target >= {W1_R_MIN_TARGET}: {})",
            verdict(ratio >= W1_R_MIN_TARGET)
        ));
    }
    if let Some(fixed) = find(all, "lock-core-fixed", "W1").and_then(|m| m.cycles_per_s) {
        let vs = match faster {
            Some((best, r)) => format!("  ratio {:.3} to {best}", fixed / r),
            None => String::new(),
        };
        line(format!(
            "    lock-core with a fixed 10 s lease {fixed:>9.0} cycles/s{vs}"
        ));
    }
    if let Some(grouped) =
        find(all, crate::workloads::w1::GROUPED, "W1").and_then(|m| m.cycles_per_s)
    {
        let vs = match (faster, r_min) {
            (Some((best, r)), Some(rm)) => format!(
                "  ratio {:.3} to {best}, {:.3} to R-min; x{:.2} of lock-core (group commit off)",
                grouped / r,
                grouped / rm,
                w1.map_or(0.0, |w| grouped / w)
            ),
            _ => String::new(),
        };
        line(format!(
            "    lock-core with group commit on {grouped:>9.0} cycles/s{vs}"
        ));
    }
    let libs = [
        "lock-core",
        "lock-core-fixed",
        crate::workloads::w1::GROUPED,
        L_MIN_MUX,
        L_MIN_POOL,
        R_MIN,
    ];
    let per_cycle = |field: fn(&Measurement) -> Option<f64>, unit: &str| -> Vec<String> {
        libs.into_iter()
            .filter_map(|lib| {
                let v = field(find(all, lib, "W1")?)?;
                Some(format!("{lib} {v:.2}{unit}"))
            })
            .collect()
    };
    let cpu = per_cycle(|m| m.client_cpu_us_per_cycle, " us");
    if !cpu.is_empty() {
        line(format!(
            "      client CPU per uncontended cycle: {}  (getrusage user+sys of this process over the window / measured cycles)",
            cpu.join(", ")
        ));
    }
    let server = per_cycle(|m| m.server_cpu_us_per_cycle, " us");
    if !server.is_empty() {
        line(format!(
            "      server CPU per uncontended cycle: {}  (INFO cpu user+sys of redis-server over the window / measured cycles)",
            server.join(", ")
        ));
    }
    let calls = per_cycle(|m| m.calls_per_cycle, "");
    if !calls.is_empty() {
        line(format!(
            "      calls per uncontended cycle: {}  (commands the client sent, counted by redis-server over the window: INFO commandstats script calls + the loop's own plain commands, not those run inside scripts / measured cycles)",
            calls.join(", ")
        ));
    }
}

/// The per-process line of W3 and W3NP: sections, longest run, crossings.
fn process_line(p: &ByProcess) -> String {
    let sections: Vec<String> = p.sections.iter().map(u64::to_string).collect();
    format!(
        "      processes: sections [{}], min share {}; longest run of one process {} section{}; cross-process hand-overs {} of {}",
        sections.join(", "),
        p.min_share_pct.map_or("-".into(), |x| format!("{x:.1} %")),
        p.longest_run,
        if p.longest_run == 1 { "" } else { "s" },
        p.cross_pct.map_or("-".into(), |x| format!("{x:.1} %")),
        p.handovers
    )
}

/// The LAYER line: lock-tower's layer against the same lock taken by hand.
fn layer_summary(all: &[Measurement]) -> Option<String> {
    let layer = find(all, "lock-tower", "LAYER")?;
    let (Some(hand), Some(l50), Some(l_rate)) = (
        find(all, "by-hand", "LAYER"),
        layer.p50_us,
        layer.cycles_per_s,
    ) else {
        return Some(format!("LAYER  no figures ({})", layer.notes));
    };
    let (Some(h50), Some(h_rate)) = (hand.p50_us, hand.cycles_per_s) else {
        return Some(format!("LAYER  no by-hand figures ({})", hand.notes));
    };
    if h50 <= 0.0 || h_rate <= 0.0 {
        return Some("LAYER  by-hand figures are zero".into());
    }
    let overhead = (l50 - h50) / h50 * 100.0;
    let ratio = l_rate / h_rate;
    let bare = find(all, "bare", "LAYER")
        .and_then(|b| b.p50_us)
        .map_or(String::new(), |b| format!("  (bare HTTP p50 {b:.0} us)"));
    Some(format!(
        "LAYER  lock-tower p50 {l50:.0} us vs by-hand {h50:.0} us: overhead {overhead:+.1} % (target <= 5 %: {}); requests/s {l_rate:.0} vs {h_rate:.0}, ratio {ratio:.3} (target >= 0.95: {}){bare}",
        verdict(overhead <= 5.0),
        verdict(ratio >= 0.95)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_carry_every_field_with_null_for_missing() {
        let m = Measurement {
            lib: "lock-core".into(),
            workload: "W1".into(),
            cycles_per_s: Some(1234.56),
            notes: "n".into(),
            ..Default::default()
        };
        let v: serde_json::Value =
            serde_json::from_str(&m.to_json()).unwrap_or_else(|e| panic!("{e}"));
        for f in FIELDS {
            assert!(v.get(f).is_some(), "field {f} missing");
        }
        assert_eq!(v["cycles_per_s"], json!(1234.6));
        assert!(v["jain"].is_null());
        assert!(v["process_sections"].is_null() && v["cross_process_pct"].is_null());
    }

    #[test]
    fn process_figures_go_to_their_json_fields() {
        let m = Measurement {
            lib: "lock-core".into(),
            workload: "W3".into(),
            by_process: Some(ByProcess {
                sections: vec![3, 1],
                jain: Some(0.8),
                min_share_pct: Some(25.0),
                longest_run: 2,
                handovers: 3,
                cross_pct: Some(200.0 / 3.0),
            }),
            ..Default::default()
        };
        let v: serde_json::Value =
            serde_json::from_str(&m.to_json()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["process_sections"], json!([3, 1]));
        assert_eq!(v["jain_process"], json!(0.8));
        assert_eq!(v["min_process_share_pct"], json!(25.0));
        assert_eq!(v["longest_process_run"], json!(2));
        assert_eq!(v["cross_process_pct"], json!(66.67));
        let keys: Vec<&str> = v
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(keys, FIELDS.to_vec(), "fields in the documented order");
    }

    #[test]
    fn summary_reports_ratios_and_verdicts() {
        let all = vec![
            Measurement {
                lib: "L-serial".into(),
                workload: "W2".into(),
                cycles_per_s: Some(5000.0),
                ..Default::default()
            },
            Measurement {
                lib: "lock-core".into(),
                workload: "W2".into(),
                cycles_per_s: Some(5500.0),
                jain: Some(0.995),
                max_wait_ms: Some(20.0),
                extra: Extra {
                    cycle_p50_us: Some(3000.0),
                    ..Default::default()
                },
                ..Default::default()
            },
        ];
        let s = summary(&all, "test");
        assert!(s.contains("ratio 1.100"), "{s}");
        assert!(s.contains("Jain 0.9950 (target >= 0.99: met)"), "{s}");
        // 20 ms / (1e6/5500 us) = 110 lock cycles: missed; 20 ms / 3 ms = 6.7 task cycles: met.
        assert!(s.contains("= 110 x the lock-level"), "{s}");
        assert!(s.contains("6.7 x the p50 per-task"), "{s}");
        assert!(
            !s.contains("LAYER"),
            "no LAYER line without LAYER figures: {s}"
        );
    }

    #[test]
    fn w3_lines_show_process_fairness_and_w3np_the_starvation_target() {
        let by_process = |sections: Vec<u64>, min: f64| ByProcess {
            jain: crate::stats::jain(&sections),
            sections,
            min_share_pct: Some(min),
            longest_run: 9,
            handovers: 399,
            cross_pct: Some(26.5),
        };
        let all = vec![
            Measurement {
                lib: "L-serial".into(),
                workload: "W2".into(),
                cycles_per_s: Some(2000.0),
                ..Default::default()
            },
            Measurement {
                lib: "lock-core".into(),
                workload: "W3".into(),
                cycles_per_s: Some(2400.0),
                jain: Some(0.995),
                by_process: Some(by_process(vec![100, 100, 100, 100], 25.0)),
                ..Default::default()
            },
            Measurement {
                lib: "lock-core".into(),
                workload: "W3NP".into(),
                cycles_per_s: Some(2400.0),
                jain: Some(0.5),
                by_process: Some(by_process(vec![190, 190, 10, 10], 2.5)),
                ..Default::default()
            },
        ];
        let s = summary(&all, "test");
        assert!(s.contains("W3  lock-core      2400 cycles/s  L-serial    2000  ratio 1.200  (target >= 0.9: met)"), "{s}");
        assert!(
            s.contains("Jain per task 0.9950 (target >= 0.99: met), per process 1.0000 (target >= 0.99: met)"),
            "{s}"
        );
        assert!(
            s.contains("sections [100, 100, 100, 100], min share 25.0 %; longest run of one process 9 sections; cross-process hand-overs 26.5 % of 399"),
            "{s}"
        );
        assert!(
            s.contains(
                "W3NP  lock-core      2400 cycles/s  L-serial    2000  ratio 1.200  (no target)"
            ),
            "{s}"
        );
        assert!(
            s.contains("Jain per task 0.5000, per process 0.5525\n"),
            "{s}"
        );
        assert!(
            s.contains("no process starved: min share 2.5 % of sections (target >= 15 % for every process: MISSED)"),
            "{s}"
        );
        assert_eq!(s.matches("no process starved").count(), 1, "only W3NP: {s}");
    }

    #[test]
    fn fair_lines_are_set_against_l_serial_and_their_plain_twin_and_w3f_against_starvation() {
        let by_process = |sections: Vec<u64>, min: f64| ByProcess {
            jain: crate::stats::jain(&sections),
            sections,
            min_share_pct: Some(min),
            longest_run: 2,
            handovers: 399,
            cross_pct: Some(74.5),
        };
        let line = |workload: &str, rate: f64| Measurement {
            lib: "lock-core".into(),
            workload: workload.into(),
            cycles_per_s: Some(rate),
            jain: Some(0.999),
            handoff_pct: Some(93.75),
            violations: Some(0),
            counter_ok: Some(true),
            extra: Extra {
                jumped_pct: Some(0.25),
                ..Default::default()
            },
            ..Default::default()
        };
        let serial = Measurement {
            lib: "L-serial".into(),
            workload: "W2".into(),
            cycles_per_s: Some(2000.0),
            ..Default::default()
        };
        let mut w3f = line("W3F", 600.0);
        w3f.by_process = Some(by_process(vec![100, 100, 100, 100], 25.0));
        let all = vec![serial.clone(), line("W2", 2400.0), line("W2F", 800.0), w3f];
        let s = summary(&all, "test");
        assert!(
            s.contains("W2F  lock-core       800 cycles/s  L-serial    2000  ratio 0.400  (no target)  W2    2400  fair / plain 0.333"),
            "{s}"
        );
        assert!(
            s.contains("      Jain 0.9990\n"),
            "no Jain target for W2F: {s}"
        );
        assert!(
            s.contains("W3F  lock-core       600 cycles/s  L-serial    2000  ratio 0.300  (no target)  (no W3 in this run)"),
            "{s}"
        );
        assert!(
            s.contains("Jain per task 0.9990, per process 1.0000\n"),
            "{s}"
        );
        assert!(
            s.contains("no process starved: min share 25.0 % of sections (target >= 15 % for every process: met)"),
            "{s}"
        );
        assert!(
            s.contains("hand-offs 93.8 %  jumped the queue 0.25 % of sections  violations 0  counter ok true"),
            "{s}"
        );
        // W2 keeps its targets; W2F comes right after it.
        assert!(s.contains("Jain 0.9990 (target >= 0.99: met)"), "{s}");
        let (w2, w2f) = (s.find("W2  lock-core"), s.find("W2F  lock-core"));
        assert!(w2.is_some() && w2 < w2f, "{s}");
    }

    #[test]
    fn w1_is_judged_against_the_faster_l_min_and_every_cycle_shows_its_client_cpu() {
        let w1 = |lib: &str, rate: f64, cpu: f64| Measurement {
            lib: lib.into(),
            workload: "W1".into(),
            cycles_per_s: Some(rate),
            client_cpu_us_per_cycle: Some(cpu),
            server_cpu_us_per_cycle: Some(cpu / 2.0),
            ..Default::default()
        };
        let all = vec![
            w1(L_MIN_MUX, 100_000.0, 6.5),
            w1(L_MIN_POOL, 40_000.0, 20.25),
            w1("lock-core", 42_000.0, 23.0),
        ];
        let s = summary(&all, "test");
        assert!(
            s.contains("W1  lock-core     42000 cycles/s  L-min-mux    100000  ratio 0.420  L-min-pool     40000  ratio 1.050"),
            "{s}"
        );
        assert!(
            s.contains("W1 / faster reference (L-min-mux) 0.420  (target >= 0.8 x L-min over one multiplexed connection, judged against the faster reference: MISSED)"),
            "{s}"
        );
        assert!(
            s.contains("client CPU per uncontended cycle: lock-core 23.00 us, L-min-mux 6.50 us, L-min-pool 20.25 us"),
            "{s}"
        );
        assert!(
            s.contains("server CPU per uncontended cycle: lock-core 11.50 us, L-min-mux 3.25 us, L-min-pool 10.12 us"),
            "{s}"
        );
        let fixed = w1("lock-core-fixed", 40_000.0, 22.0);
        let s = summary(&[all.clone(), vec![fixed]].concat(), "test");
        assert!(
            s.contains(
                "lock-core with a fixed 10 s lease     40000 cycles/s  ratio 0.400 to L-min-mux"
            ),
            "{s}"
        );

        // The pool shape is the faster one: W1 is judged against it.
        let all = vec![
            w1(L_MIN_MUX, 30_000.0, 6.5),
            w1(L_MIN_POOL, 40_000.0, 20.25),
            w1("lock-core", 36_000.0, 23.0),
        ];
        let s = summary(&all, "test");
        assert!(
            s.contains("W1 / faster reference (L-min-pool) 0.900") && s.contains(": met)"),
            "{s}"
        );

        let s = summary(&[w1("lock-core", 36_000.0, 23.0)], "test");
        assert!(s.contains("(no L-min in this run: run REF too)"), "{s}");
        assert!(!s.contains("R-min"), "no R-min line without R-min: {s}");
        let s = summary(&[w1(L_MIN_MUX, 30_000.0, 6.5)], "test");
        assert!(
            s.contains("REF L-min-mux     30000 cycles/s  (no W1 in this run)"),
            "{s}"
        );
    }

    #[test]
    fn w1_is_set_against_r_min_with_its_own_target_and_every_line_shows_its_calls() {
        let w1 = |lib: &str, rate: f64, calls: f64| Measurement {
            lib: lib.into(),
            workload: "W1".into(),
            cycles_per_s: Some(rate),
            server_cpu_us_per_cycle: Some(10.0),
            calls_per_cycle: Some(calls),
            ..Default::default()
        };
        let all = vec![
            w1(L_MIN_MUX, 100_000.0, 2.0),
            w1(L_MIN_POOL, 40_000.0, 2.0),
            w1(R_MIN, 30_000.0, 2.0),
            w1("lock-core", 42_000.0, 2.125),
        ];
        let s = summary(&all, "test");
        assert!(
            s.contains("W1  lock-core     42000 cycles/s  L-min-mux    100000  ratio 0.420  L-min-pool     40000  ratio 1.050  R-min     30000  ratio 1.400"),
            "{s}"
        );
        // R-min is never the faster reference: the L-min target line stays
        assert!(
            s.contains("      W1 / faster reference (L-min-mux) 0.420  (target >= 0.8 x L-min over one multiplexed connection, judged against the faster reference: MISSED)"),
            "{s}"
        );
        assert!(
            s.contains("      W1 / R-min (Redisson's RLock protocol, one script per operation, one multiplexed connection) 1.400  (target >= 1.5: MISSED)"),
            "{s}"
        );
        assert!(
            s.contains("server CPU per uncontended cycle: lock-core 10.00 us, L-min-mux 10.00 us, L-min-pool 10.00 us, R-min 10.00 us"),
            "{s}"
        );
        assert!(
            s.contains("      calls per uncontended cycle: lock-core 2.12, L-min-mux 2.00, L-min-pool 2.00, R-min 2.00  (commands the client sent"),
            "{s}"
        );
        let (server, calls) = (
            s.find("server CPU per uncontended"),
            s.find("calls per uncontended"),
        );
        assert!(
            server.is_some() && server < calls,
            "calls right after server CPU: {s}"
        );

        let all = vec![
            w1(L_MIN_MUX, 20_000.0, 2.0),
            w1(R_MIN, 20_000.0, 2.0),
            w1("lock-core", 30_000.0, 2.0),
        ];
        let s = summary(&all, "test");
        assert!(s.contains(") 1.500  (target >= 1.5: met)"), "{s}");
        assert!(
            s.contains("judged against the faster reference: met)"),
            "{s}"
        );

        let s = summary(
            &[w1(L_MIN_MUX, 30_000.0, 2.0), w1(R_MIN, 20_000.0, 2.0)],
            "test",
        );
        assert!(
            s.contains(
                "REF L-min-mux     30000 cycles/s  R-min     20000 cycles/s  (no W1 in this run)"
            ),
            "{s}"
        );
        assert!(!s.contains("W1 / R-min"), "{s}");
    }

    #[test]
    fn f1_and_rl_lines_show_server_cpu_and_calls() {
        let line = |lib: &str, workload: &str, rate: f64, calls: f64| Measurement {
            lib: lib.into(),
            workload: workload.into(),
            cycles_per_s: Some(rate),
            client_cpu_us_per_cycle: Some(20.0),
            server_cpu_us_per_cycle: Some(15.0),
            calls_per_cycle: Some(calls),
            ..Default::default()
        };
        let all = vec![
            line("lock-core", "W1", 30_000.0, 2.0),
            line("raw-INCRBY", "F1", 80_000.0, 1.0),
            line("lock-core-fenced", "F1", 40_000.0, 1.0),
            line("lock-core-redlock3", "RL", 10_000.0, 6.0),
        ];
        let s = summary(&all, "test");
        assert!(
            s.contains("per write: client CPU 20.00 us, server CPU 15.00 us, calls 1.00 (raw-INCRBY: 1.00);"),
            "{s}"
        );
        assert!(
            s.contains("per cycle: client CPU 20.00 us, server CPU 15.00 us and calls 6.00 (server figures summed over the three servers)"),
            "{s}"
        );
    }

    #[test]
    fn r1_is_set_against_w1_and_m1_shows_both_rates_and_the_writers_waits() {
        let line = |lib: &str, workload: &str, rate: f64| Measurement {
            lib: lib.into(),
            workload: workload.into(),
            cycles_per_s: Some(rate),
            ..Default::default()
        };
        let mut r1 = line("lock-core", "R1", 9_000.0);
        r1.extra.peak_inside = Some(16);
        r1.server_cpu_us_per_cycle = Some(30.0);
        let mut w1 = line("lock-core", "W1", 12_000.0);
        w1.server_cpu_us_per_cycle = Some(20.0);
        let mut reads = line("lock-core-read", "M1", 4_000.0);
        reads.p50_us = Some(300.0);
        reads.p99_us = Some(9_000.0);
        reads.max_wait_ms = Some(20.0);
        reads.violations = Some(0);
        let mut writes = line("lock-core-write", "M1", 440.0);
        writes.p50_us = Some(11_000.0);
        writes.p99_us = Some(30_000.0);
        writes.max_wait_ms = Some(41.25);
        writes.violations = Some(0);
        let s = summary(&[r1.clone(), w1, reads, writes], "test");
        assert!(
            s.contains("R1  lock-core      9000 read cycles/s, readers only on one key  W1     12000  ratio 0.750"),
            "{s}"
        );
        assert!(
            s.contains("most readers inside at once 16; cycle latency p50 -, p99 -; server CPU per read cycle 30.00 us (W1 20.00 us)"),
            "{s}"
        );
        assert!(
            s.contains("M1  lock-core reads      4000/s  writes     440/s  (90 % reads / 10 % writes on one key; violations 0)"),
            "{s}"
        );
        assert!(
            s.contains("writers' wait under continuous readers: p50 11000 us, p99 30000 us, longest 41.2 ms; readers' wait: p50 300 us, p99 9000 us, longest 20.0 ms"),
            "{s}"
        );
        let s = summary(&[r1], "test");
        assert!(s.contains("(no W1 in this run: run W1 too)"), "{s}");
        assert!(!s.contains("M1"), "{s}");
    }

    #[test]
    fn s1_is_set_against_the_faster_l_min_and_w1() {
        let line = |lib: &str, workload: &str, rate: f64| Measurement {
            lib: lib.into(),
            workload: workload.into(),
            cycles_per_s: Some(rate),
            ..Default::default()
        };
        let mut permit = line("lock-core-permit", "S1", 20_000.0);
        permit.client_cpu_us_per_cycle = Some(30.0);
        permit.p50_us = Some(800.0);
        let all = vec![
            line(L_MIN_MUX, "W1", 50_000.0),
            line(L_MIN_POOL, "W1", 40_000.0),
            line("lock-core", "W1", 25_000.0),
            permit,
            line("lock-core-sem", "S1", 30_000.0),
        ];
        let s = summary(&all, "test");
        assert!(
            s.contains("S1  lock-core-permit     20000 permits/s, expirable permits (watchdog), acquire 1 + release on a semaphore of its own  ratio 0.400 to L-min-mux (50000), 0.800 to W1  (no target)"),
            "{s}"
        );
        assert!(
            s.contains(
                "per permit: client CPU 30.00 us, server CPU -, calls -; cycle latency p50 800.00 us, p99 -"
            ),
            "{s}"
        );
        assert!(
            s.contains("S1  lock-core-sem     30000 permits/s, plain permits")
                && s.contains("ratio 0.600 to L-min-mux (50000), 1.200 to W1"),
            "{s}"
        );
        let s = summary(&[line("lock-core-sem", "S1", 30_000.0)], "test");
        assert!(s.contains("(no L-min in this run: run REF too)"), "{s}");
    }

    #[test]
    fn client_cpu_goes_to_its_json_field() {
        let m = Measurement {
            lib: L_MIN_MUX.into(),
            workload: "W1".into(),
            client_cpu_us_per_cycle: Some(7.12345),
            server_cpu_us_per_cycle: Some(9.87654),
            ..Default::default()
        };
        let v: serde_json::Value =
            serde_json::from_str(&m.to_json()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["client_cpu_us_per_cycle"], json!(7.123));
        assert_eq!(v["server_cpu_us_per_cycle"], json!(9.877));
        assert!(v["calls_per_cycle"].is_null(), "null where not measured");
        let m = Measurement {
            calls_per_cycle: Some(2.00049),
            ..m
        };
        let v: serde_json::Value =
            serde_json::from_str(&m.to_json()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["calls_per_cycle"], json!(2.0));
    }

    #[test]
    fn layer_overhead_is_relative_to_the_lock_taken_by_hand() {
        let line = |lib: &str, p50: f64, rate: f64| Measurement {
            lib: lib.into(),
            workload: "LAYER".into(),
            p50_us: Some(p50),
            cycles_per_s: Some(rate),
            ..Default::default()
        };
        let all = vec![
            line("lock-tower", 420.0, 950.0),
            line("by-hand", 400.0, 1000.0),
            line("bare", 100.0, 4000.0),
        ];
        let s = summary(&all, "test");
        assert!(s.contains("overhead +5.0 % (target <= 5 %: met)"), "{s}");
        assert!(s.contains("ratio 0.950 (target >= 0.95: met)"), "{s}");
        assert!(s.contains("bare HTTP p50 100 us"), "{s}");
    }
}
