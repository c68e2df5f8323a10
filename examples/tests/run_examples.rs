//! Every example program, run as CI runs it: as its own process, against a
//! private redis-server it starts itself (`REDIS_URL` is removed from its
//! environment). An example exits non-zero when its invariant fails.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);

/// Runs `exe` with `args`, waits at most [`LIMIT`], and returns its standard output;
/// panics (after killing it) when it fails or takes too long.
fn run(exe: &str, args: &[&str]) -> String {
    let mut child = Command::new(exe)
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {exe}: {e}"));
    let mut stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < LIMIT => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{exe} did not finish within {LIMIT:?}");
            }
            Err(e) => panic!("wait for {exe}: {e}"),
        }
    };
    let out = reader.join().unwrap_or_default();
    assert!(status.success(), "{exe} failed ({status}); output:\n{out}");
    out
}

#[test]
fn manual_guard_counts_exactly() {
    let out = run(env!("CARGO_BIN_EXE_manual_guard"), &[]);
    assert!(out.contains("counter = 100 (expected 100)"), "{out}");
}

#[test]
fn axum_accounts_serializes_one_account_across_two_processes() {
    let out = run(env!("CARGO_BIN_EXE_axum_accounts"), &[]);
    assert!(out.contains("10 accepted, 20 refused"), "{out}");
    assert!(out.contains("final balance 0"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("ok: ")), "{out}");
}

#[test]
fn axum_leader_runs_its_job_on_one_server_at_a_time_across_a_crash_and_a_shutdown() {
    // The example checks the job's log itself (exits non-zero on two
    // leaders at once); here: every step happened.
    let out = run(env!("CARGO_BIN_EXE_axum_leader"), &[]);
    assert!(out.contains("GET /leader on each server"), "{out}");
    assert!(out.contains("killed the leader"), "{out}");
    assert!(out.contains("stopped the leader"), "{out}");
    assert!(out.contains("never two leaders at once"), "{out}");
}

#[test]
fn tonic_accounts_serializes_by_metadata_key() {
    let out = run(env!("CARGO_BIN_EXE_tonic_accounts"), &[]);
    assert!(out.contains("10 accepted, final balance 0"), "{out}");
    assert!(out.contains("Some(Unavailable)"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("ok: ")), "{out}");
}

#[test]
fn tower_overhead_measures_every_variant() {
    // A smoke run: few requests, figures not checked (no timing assertions).
    let out = run(env!("CARGO_BIN_EXE_tower_overhead"), &["50"]);
    for variant in ["bare", "layer, no key", "layer, key", "by hand"] {
        let rows = out
            .lines()
            .filter(|l| l.trim_start().starts_with(&format!("{variant}  ")))
            .count();
        assert_eq!(rows, 2, "{variant} missing:\n{out}");
    }
}
