//! CI smoke test: runs the whole benchmark with `--smoke` against a private
//! redis-server and checks the shape of its output and the invariants of
//! the lock-core workloads (the read-write lock's R1 and M1, the
//! semaphores' S1 and the fair lock's W2F and W3F included), of the R-min
//! reference (Redisson's protocol: every lock nil, every unlock 1) and of
//! LAYER (every HTTP answer 200). No timing is asserted.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const FIELDS: [&str; 19] = [
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

/// The W1 lines that report client CPU, server CPU and calls per cycle;
/// null on every other line but S1, F1, RL and R1's.
const CPU_LINES: [&str; 6] = [
    "lock-core",
    "lock-core-fixed",
    "lock-core-grouped",
    "L-min-mux",
    "L-min-pool",
    "R-min",
];

/// The per-cycle figures of the uncontended lines.
const PER_CYCLE: [&str; 3] = [
    "client_cpu_us_per_cycle",
    "server_cpu_us_per_cycle",
    "calls_per_cycle",
];

/// The per-process fairness fields: numbers on W3, W3NP and W3F, null elsewhere.
const PROCESS_FIELDS: [&str; 5] = [
    "jain_process",
    "process_sections",
    "min_process_share_pct",
    "longest_process_run",
    "cross_process_pct",
];

/// Far above the smoke run's own length (a few seconds), for loaded CI machines.
const LIMIT: Duration = Duration::from_secs(180);

/// Runs lock-bench with `args`; returns (success, stdout, stderr).
/// Runs lock-bench, which must succeed; its JSON lines, stdout and stderr.
fn run_ok(args: &[&str]) -> (Vec<Value>, String, String) {
    let (ok, out, err) = run(args);
    assert!(
        ok,
        "lock-bench {args:?} failed\nstdout:\n{out}\nstderr:\n{err}"
    );
    let lines = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    (lines, out, err)
}

fn run(args: &[&str]) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lock-bench"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start lock-bench: {e}"));
    let readers = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ]
    .map(|pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut text);
            }
            text
        })
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap_or_else(|e| panic!("wait: {e}")) {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("lock-bench --smoke did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let [out, err] = readers.map(|r| r.join().unwrap_or_default());
    (status.success(), out, err)
}

#[test]
fn smoke_run_prints_one_valid_line_per_measurement_and_keeps_the_invariants() {
    let (lines, out, err) = run_ok(&["--smoke"]);
    for v in &lines {
        let obj = v
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {v}"));
        for f in FIELDS {
            assert!(obj.contains_key(f), "field {f} missing in {v}");
        }
        assert_eq!(obj.len(), FIELDS.len(), "unexpected fields in {v}");
        if !matches!(v["workload"].as_str(), Some("W3" | "W3NP" | "W3F")) {
            for f in PROCESS_FIELDS {
                assert!(obj[f].is_null(), "{f} only on W3, W3NP and W3F: {v}");
            }
        }
        let cpu_line = (v["workload"] == "W1"
            && CPU_LINES.iter().any(|lib| v["lib"].as_str() == Some(lib)))
            || (v["workload"] == "R1" && v["lib"] == "lock-core")
            || v["workload"] == "S1"
            || v["workload"] == "F1"
            || v["workload"] == "RL";
        if !cpu_line {
            for f in PER_CYCLE {
                assert!(
                    obj[f].is_null(),
                    "{f} only on W1, S1, F1, RL, R1 and the L-min and R-min references: {v}"
                );
            }
        }
    }
    let find = |lib: &str, workload: &str| {
        lines
            .iter()
            .find(|v| v["lib"] == lib && v["workload"] == workload)
            .unwrap_or_else(|| panic!("no {lib}/{workload} line in:\n{out}"))
    };

    for lib in CPU_LINES {
        let v = find(lib, "W1");
        assert!(v["cycles_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
        assert!(v["p50_us"].is_number(), "{v}");
        for f in PER_CYCLE {
            assert!(v[f].as_f64().is_some_and(|c| c > 0.0), "{f}: {v}");
        }
    }
    assert_eq!(find("L-serial", "W2")["counter_ok"], true);
    r_min_checks(find("R-min", "W1"), &err);

    // Fenced writes beside plain ones (each loop checks its counters).
    for lib in ["lock-core-fenced", "raw-INCRBY"] {
        let v = find(lib, "F1");
        assert!(v["cycles_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
        for f in PER_CYCLE {
            assert!(v[f].as_f64().is_some_and(|c| c > 0.0), "{f}: {v}");
        }
        // one INCRBY, or one fenced-write script, per write
        assert!(two_sided(&v["calls_per_cycle"], 1.0), "{v}");
    }
    assert!(
        err.contains("F1  lock-core-fenced") && err.contains("to raw-INCRBY"),
        "the summary must set F1 against raw-INCRBY:\n{err}"
    );

    // Redlock over three private servers, set against W1.
    let v = find("lock-core-redlock3", "RL");
    assert!(v["cycles_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    assert!(v["p99_us"].is_number(), "{v}");
    for f in PER_CYCLE {
        assert!(v[f].as_f64().is_some_and(|c| c > 0.0), "{f}: {v}");
    }
    assert!(
        err.contains("RL  lock-core-redlock3") && err.contains("to W1 on one server"),
        "the summary must set RL against W1:\n{err}"
    );

    for workload in ["W2", "W2F", "W3", "W3NP", "W3F"] {
        let v = find("lock-core", workload);
        assert_eq!(v["counter_ok"], true, "{v}");
        assert_eq!(v["violations"], 0, "{v}");
        assert!(v["cycles_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
        assert!(v["jain"].is_number() && v["handoff_pct"].is_number(), "{v}");
        assert!(v["max_wait_ms"].is_number(), "{v}");
    }
    for workload in ["W3", "W3NP", "W3F"] {
        let v = find("lock-core", workload);
        let sections: Vec<u64> = v["process_sections"]
            .as_array()
            .unwrap_or_else(|| panic!("process_sections is not an array: {v}"))
            .iter()
            .map(|n| n.as_u64().unwrap_or_else(|| panic!("not a count: {v}")))
            .collect();
        assert_eq!(
            sections.len(),
            4,
            "one count per process (--processes 4): {v}"
        );
        assert!(sections.iter().sum::<u64>() > 0, "{v}");
        let share = v["min_process_share_pct"].as_f64();
        assert!(share.is_some_and(|s| (0.0..=25.0).contains(&s)), "{v}");
        assert!(
            v["jain_process"]
                .as_f64()
                .is_some_and(|j| j > 0.0 && j <= 1.0),
            "{v}"
        );
        assert!(
            v["longest_process_run"].as_u64().is_some_and(|n| n >= 1),
            "{v}"
        );
        let cross = v["cross_process_pct"].as_f64();
        assert!(cross.is_some_and(|c| (0.0..=100.0).contains(&c)), "{v}");
        assert!(
            err.contains(&format!("{workload}  lock-core"))
                && err.contains("longest run of one process"),
            "the summary must show the process figures of {workload}:\n{err}"
        );
    }
    assert!(
        err.contains("no process starved: min share")
            && err.contains("target >= 15 % for every process"),
        "the summary must judge W3NP's minimum process share:\n{err}"
    );
    assert_eq!(
        err.matches("no process starved: min share").count(),
        2,
        "W3NP's and W3F's:\n{err}"
    );

    // The fair lock: the same loops, on `fair_lock`, named so in the notes
    // and set against L-serial and their plain twin in the summary.
    for (workload, plain) in [("W2F", "W2"), ("W3F", "W3")] {
        let v = find("lock-core", workload);
        assert!(
            v["notes"]
                .as_str()
                .is_some_and(|n| n.contains("the FAIR lock") && n.contains("jumped the queue")),
            "{v}"
        );
        assert!(
            err.contains(&format!("{workload}  lock-core"))
                && err.contains(&format!("  {plain} "))
                && err.contains("fair / plain"),
            "the summary must set {workload} against {plain}:\n{err}"
        );
    }

    // The read-write lock: readers only (R1), and 90/10 reads/writes (M1).
    let r1 = find("lock-core", "R1");
    assert!(r1["cycles_per_s"].as_f64().is_some_and(|r| r > 0.0), "{r1}");
    assert!(r1["p50_us"].is_number() && r1["p99_us"].is_number(), "{r1}");
    for f in PER_CYCLE {
        assert!(r1[f].as_f64().is_some_and(|c| c > 0.0), "{f}: {r1}");
    }
    assert!(
        r1["notes"]
            .as_str()
            .is_some_and(|n| n.contains("most readers inside at once")),
        "{r1}"
    );
    for lib in ["lock-core-read", "lock-core-write"] {
        let v = find(lib, "M1");
        assert_eq!(v["violations"], 0, "no reader beside a writer: {v}");
        assert!(v["cycles_per_s"].is_number(), "{v}");
        assert!(
            v["p99_us"].is_number() && v["max_wait_ms"].is_number(),
            "{v}"
        );
    }
    assert!(
        err.contains("R1  lock-core") && err.contains("read cycles/s, readers only on one key  W1"),
        "the summary must set R1 against W1 of the same run:\n{err}"
    );
    assert!(
        err.contains("M1  lock-core reads")
            && err.contains("writers' wait under continuous readers: p50"),
        "the summary must give M1's rates and the writers' waits:\n{err}"
    );

    // Permits uncontended (S1): both kinds, every permit back (the
    // workload fails otherwise), set against L-min and W1 in the summary.
    for lib in ["lock-core-permit", "lock-core-sem"] {
        let v = find(lib, "S1");
        assert!(v["cycles_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
        assert!(v["p50_us"].is_number() && v["p99_us"].is_number(), "{v}");
        for f in PER_CYCLE {
            assert!(v[f].as_f64().is_some_and(|c| c > 0.0), "{f}: {v}");
        }
        assert!(
            v["notes"]
                .as_str()
                .is_some_and(|n| n.contains("every permit back at the end")),
            "{v}"
        );
        assert!(
            err.contains(&format!("S1  {lib}")) && err.contains("permits/s"),
            "the summary must give S1's permits/s of {lib}:
{err}"
        );
    }
    assert!(
        err.contains("to L-min-") && err.contains("to W1  (no target)"),
        "the summary must set S1 against L-min and W1 of the same run:
{err}"
    );

    let wd = find("lock-core", "WD");
    let notes = wd["notes"].as_str().unwrap_or_default();
    assert!(notes.contains("all_held=true"), "{wd}");
    assert!(notes.contains("commands/period="), "{wd}");

    assert!(
        err.contains("lock-bench summary"),
        "no summary on stderr:\n{err}"
    );
    for lib in ["lock-tower", "by-hand", "bare"] {
        let v = find(lib, "LAYER");
        assert_eq!(v["counter_ok"], true, "every answer must be 200: {v}");
        assert!(v["cycles_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
        assert!(v["p50_us"].is_number() && v["p99_us"].is_number(), "{v}");
    }
    assert!(
        err.contains("LAYER  lock-tower p50"),
        "the summary must compare the layer with the lock taken by hand:\n{err}"
    );
}

#[test]
fn smoke_run_measures_l_min_over_one_connection_and_over_the_pool_shape() {
    let (lines, out, err) = run_ok(&["--smoke", "--workloads", "REF,W1"]);
    let libs: Vec<&str> = lines
        .iter()
        .filter(|v| v["workload"] == "W1")
        .filter_map(|v| v["lib"].as_str())
        .collect();
    assert_eq!(
        libs,
        [
            "L-min-mux",
            "L-min-pool",
            "R-min",
            "lock-core",
            "lock-core-fixed",
            "lock-core-grouped"
        ],
        "the three references, then W1 with the watchdog lease, with a fixed lease and with group commit on:\n{out}"
    );
    let notes = |lib: &str| {
        lines
            .iter()
            .find(|v| v["lib"] == lib)
            .and_then(|v| v["notes"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        notes("L-min-mux").contains("ONE multiplexed connection"),
        "{out}"
    );
    assert!(
        notes("L-min-pool").contains("multiplexed connections (the library's pool shape"),
        "the pool shape: one connection per task up to lock-core's pool size:\n{out}"
    );
    for lib in CPU_LINES {
        let v = lines
            .iter()
            .find(|v| v["lib"] == lib && v["workload"] == "W1")
            .unwrap_or_else(|| panic!("no {lib} line:\n{out}"));
        assert!(
            v["client_cpu_us_per_cycle"]
                .as_f64()
                .is_some_and(|c| c > 0.0),
            "{v}"
        );
        if lib.starts_with("L-min") || lib == "lock-core" {
            // SET NX PX + the compare-and-delete EVALSHA; acquire + release
            assert!(two_sided(&v["calls_per_cycle"], 2.0), "{v}");
        }
        if lib == "lock-core-grouped" {
            // never more calls than operations (fewer when groups form)
            assert!(
                v["calls_per_cycle"]
                    .as_f64()
                    .is_some_and(|c| c > 0.0 && c <= 2.05),
                "{v}"
            );
        }
    }
    assert!(
        err.contains("lock-core with group commit on"),
        "the summary must show W1 with group commit on beside it:\n{err}"
    );
    assert!(
        err.contains("W1 / faster reference (L-min-") && err.contains("target >= 0.8 x L-min"),
        "the summary must judge W1 against the faster reference:\n{err}"
    );
    assert!(
        err.contains("client CPU per uncontended cycle: lock-core"),
        "the summary must show client CPU per cycle:\n{err}"
    );
    assert!(
        err.contains("server CPU per uncontended cycle: lock-core"),
        "the summary must show server CPU per cycle:\n{err}"
    );
    assert!(
        err.contains("calls per uncontended cycle: lock-core"),
        "the summary must show calls per cycle:\n{err}"
    );
    let r_min = lines
        .iter()
        .find(|v| v["lib"] == "R-min" && v["workload"] == "W1")
        .unwrap_or_else(|| panic!("no R-min line:\n{out}"));
    r_min_checks(r_min, &err);
}

/// `v` is a number within 25 % of `expected` (the window's edges cut a few
/// cycles of 16 tasks; a smoke window still holds hundreds of cycles).
fn two_sided(v: &Value, expected: f64) -> bool {
    v.as_f64()
        .is_some_and(|x| (expected * 0.75..=expected * 1.25).contains(&x))
}

/// The R-min line: Redisson's protocol, every lock nil and every unlock 1
/// (violations 0; the workload fails otherwise), every lock gone and every
/// task's last unlock latch at 1 on an independent connection (counter_ok),
/// two EVALSHA per cycle as the server counted them; the summary sets W1
/// against it with its own target.
fn r_min_checks(v: &Value, err: &str) {
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(v["counter_ok"], true, "{v}");
    assert!(v["cycles_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    assert!(
        two_sided(&v["calls_per_cycle"], 2.0),
        "two calls per cycle: {v}"
    );
    let notes = v["notes"].as_str().unwrap_or_default();
    assert!(
        notes.contains("Redisson's RLock protocol") && notes.contains("ONE multiplexed connection"),
        "{v}"
    );
    assert!(
        err.contains("  R-min ")
            && err.contains("W1 / R-min (")
            && err.contains("(target >= 1.5: "),
        "the summary must set W1 against R-min:\n{err}"
    );
}

#[test]
fn a_bad_argument_is_rejected_with_the_usage() {
    let (ok, out, err) = run(&["--workloads", "W9"]);
    assert!(!ok);
    assert!(out.is_empty(), "nothing on stdout: {out}");
    assert!(
        err.contains("unknown workload") && err.contains("usage:"),
        "{err}"
    );
}

#[test]
fn smoke_run_on_the_cluster_measures_w1_against_l_min_and_renews_per_slot() {
    let (lines, out, err) = run_ok(&["--smoke", "--cluster", "--workloads", "REF,W1,WD"]);
    let lib_line = |lib: &str, workload: &str| {
        lines
            .iter()
            .find(|v| v["lib"] == lib && v["workload"] == workload)
            .unwrap_or_else(|| panic!("no {lib} {workload} line:\n{out}"))
    };
    for lib in ["lock-core@cluster", "L-min-mux@cluster"] {
        let v = lib_line(lib, "W1");
        assert!(v["cycles_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
        assert!(
            v["server_cpu_us_per_cycle"]
                .as_f64()
                .is_some_and(|c| c > 0.0),
            "server CPU summed over the nodes: {v}"
        );
    }
    let v = lib_line("R-min@cluster", "W1");
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(v["counter_ok"], true, "{v}");
    assert!(
        two_sided(&v["calls_per_cycle"], 2.0),
        "summed over the nodes: {v}"
    );
    let wd = lib_line("lock-core@cluster", "WD");
    let notes = wd["notes"].as_str().unwrap_or_default();
    assert!(notes.contains("all_held=true"), "{wd}");
    assert!(
        err.contains("REDIS CLUSTER") && err.contains("W1  lock-core"),
        "a summary for the cluster too:\n{err}"
    );
}
