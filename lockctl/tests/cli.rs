//! The real `lockctl` binary against real redis-server processes.
//!
//! Every lockctl runs in its own process group (as under a script or cron,
//! not in a terminal's foreground group), with stdin closed unless a test
//! feeds it. Every wait is bounded; a process still running when its test
//! ends is killed.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_tests::RedisServer;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_lockctl");
/// Bound on any one lockctl invocation that is expected to end by itself.
const LIMIT: Duration = Duration::from_secs(30);

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("cannot start redis-server: {e}"))
}

/// `lockctl --url <url> ARGS...`
fn lockctl(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--url")
        .arg(url)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("REDIS_URL")
        .env_remove("RUST_BACKTRACE")
        .process_group(0);
    cmd
}

/// A finished invocation.
#[derive(Debug)]
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
            .collect()
    }

    /// One line on stderr, no panic, no backtrace, the expected code.
    fn assert_one_line_error(&self, code: i32, needle: &str) {
        assert_eq!(self.code, Some(code), "{self:?}");
        assert_eq!(self.stderr.lines().count(), 1, "one line: {self:?}");
        assert!(self.stderr.starts_with("lockctl: "), "{self:?}");
        assert!(self.stderr.contains(needle), "`{needle}` in {self:?}");
        for bad in ["panicked", "backtrace", "RUST_BACKTRACE"] {
            assert!(!self.stderr.contains(bad), "{self:?}");
        }
    }
}

/// A running lockctl; killed (SIGKILL) if still running when dropped.
struct Proc {
    child: Child,
    stdout: Option<BufReader<ChildStdout>>,
}

impl Proc {
    fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn lockctl: {e}"));
        let stdout = child.stdout.take().map(BufReader::new);
        Proc { child, stdout }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).unwrap_or_else(|e| panic!("kill {sig}: {e}"));
    }

    /// The first stdout line, as JSON, within `limit`.
    fn first_json(&mut self, limit: Duration) -> Value {
        let mut stdout = self.stdout.take().expect("stdout is read once");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut line = String::new();
            let _ = stdout.read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(limit)
            .unwrap_or_else(|_| panic!("no line on stdout within {limit:?}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"))
    }

    fn try_code(&mut self) -> Option<Option<i32>> {
        self.child
            .try_wait()
            .unwrap_or_else(|e| panic!("try_wait: {e}"))
            .map(|s| s.code())
    }

    /// Waits for the exit within `limit`; collects what is left of the output.
    fn finish(mut self, limit: Duration) -> Out {
        let start = Instant::now();
        let mut stdout_pipe = self.stdout.take();
        let mut stderr_pipe = self.child.stderr.take();
        let out_reader = thread::spawn(move || {
            let mut s = String::new();
            if let Some(p) = stdout_pipe.as_mut() {
                let _ = p.read_to_string(&mut s);
            }
            s
        });
        let err_reader = thread::spawn(move || {
            let mut s = String::new();
            if let Some(p) = stderr_pipe.as_mut() {
                let _ = p.read_to_string(&mut s);
            }
            s
        });
        let code = loop {
            if let Some(code) = self.try_code() {
                break code;
            }
            assert!(
                start.elapsed() < limit,
                "lockctl still running after {limit:?}"
            );
            thread::sleep(Duration::from_millis(10));
        };
        Out {
            code,
            stdout: out_reader.join().unwrap_or_default(),
            stderr: err_reader.join().unwrap_or_default(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs to completion within [`LIMIT`].
fn run(cmd: Command) -> Out {
    Proc::spawn(cmd).finish(LIMIT)
}

fn status(url: &str, name: &str) -> Value {
    let out = run(lockctl(url, &["status", name]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut lines = out.json_lines();
    assert_eq!(lines.len(), 1, "{out:?}");
    lines.remove(0)
}

/// The fields of a JSON object, in the order printed.
fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// Polls `check` every 10 ms for at most `limit`.
fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check() {
            return true;
        }
        thread::sleep(Duration::from_millis(10));
    }
    false
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

// ------------------------------------------------------------------- run

#[test]
fn run_excludes_across_six_concurrent_invocations() {
    let server = server();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("count"), "0").expect("counter");
    // Read, pause, write: loses updates unless the lock excludes. The
    // `inside` directory catches two commands running at once.
    let script = "cd \"$1\"; mkdir inside || echo overlap >> violations; \
                  n=$(cat count); sleep 0.03; echo $((n + 1)) > count; rmdir inside";
    let (invocations, rounds) = (6, 3);
    let workers: Vec<_> = (0..invocations)
        .map(|_| {
            let url = server.url();
            let dir = dir.path().to_string_lossy().into_owned();
            thread::spawn(move || {
                for _ in 0..rounds {
                    let out = run(lockctl(
                        &url,
                        &["run", "counter", "--", "sh", "-c", script, "sh", &dir],
                    ));
                    assert_eq!(out.code, Some(0), "{out:?}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    assert_eq!(
        read(&dir.path().join("violations")),
        "",
        "two commands ran at once"
    );
    assert_eq!(
        read(&dir.path().join("count")).trim(),
        (invocations * rounds).to_string()
    );
    assert_eq!(status(&server.url(), "counter")["locked"], false);
}

#[test]
fn run_passes_the_commands_exit_code_and_output_through() {
    let server = server();
    let url = server.url();
    for (script, code) in [
        ("exit 0", 0),
        ("exit 7", 7),
        ("exit 255", 255),
        ("kill -KILL $$", 137),
    ] {
        let out = run(lockctl(&url, &["run", "code", "--", "sh", "-c", script]));
        assert_eq!(out.code, Some(code), "{script}: {out:?}");
        assert_eq!(out.stderr, "", "{script}");
    }
    // stdout and stderr untouched, stdin passed on.
    let out = run(lockctl(
        &url,
        &["run", "io", "--", "sh", "-c", "echo out; echo err >&2"],
    ));
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("out\n", "err\n")
    );
    let mut cmd = lockctl(&url, &["run", "io", "--", "cat"]);
    cmd.stdin(Stdio::piped());
    let mut proc = Proc::spawn(cmd);
    let mut stdin = proc.child.stdin.take().expect("stdin");
    stdin.write_all(b"line one\nline two\n").expect("write");
    drop(stdin);
    let out = proc.finish(LIMIT);
    assert_eq!(out.stdout, "line one\nline two\n", "{out:?}");
    // A command that cannot be found or run: 127 / 126, lock released.
    let out = run(lockctl(&url, &["run", "io", "--", "/no/such/command"]));
    out.assert_one_line_error(127, "cannot run `/no/such/command`");
    let out = run(lockctl(&url, &["run", "io", "--", "/"]));
    out.assert_one_line_error(126, "cannot run `/`");
    assert_eq!(status(&url, "io")["locked"], false);
}

#[test]
fn run_exits_75_when_the_wait_bound_passes_without_running_the_command() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let mut holder = Proc::spawn(lockctl(&url, &["hold", "busy"]));
    holder.first_json(LIMIT);

    let touch = ["touch", marker.to_str().expect("utf-8 path")];
    let started = Instant::now();
    let mut args = vec!["run", "busy", "--wait", "300ms", "--"];
    args.extend(touch);
    let out = run(lockctl(&url, &args));
    out.assert_one_line_error(75, "timed out after 300ms waiting for lock `busy`");
    assert!(started.elapsed() >= Duration::from_millis(300));

    let mut args = vec!["run", "busy", "--wait", "0s", "--"];
    args.extend(touch);
    run(lockctl(&url, &args)).assert_one_line_error(75, "held by another owner");

    let out = run(lockctl(&url, &["hold", "busy", "--wait", "100ms"]));
    out.assert_one_line_error(75, "waiting for lock `busy`");
    assert!(
        !marker.exists(),
        "the command must not run without the lock"
    );
}

/// A command that records SIGTERM in `dir/term` and exits; it writes
/// `dir/started` first so a test knows it runs.
fn term_recorder(dir: &Path) -> Vec<String> {
    let script = "cd \"$1\"; trap 'echo term > term; kill $p 2>/dev/null; exit 0' TERM; \
                  trap 'echo int > int; kill $p 2>/dev/null; exit 4' INT; \
                  touch started; sleep 30 & p=$!; wait $p; echo done > done";
    vec![
        "sh".into(),
        "-c".into(),
        script.into(),
        "sh".into(),
        dir.to_string_lossy().into_owned(),
    ]
}

fn spawn_run(url: &str, global: &[&str], name: &str, extra: &[&str], command: &[String]) -> Proc {
    let mut args: Vec<&str> = global.to_vec();
    args.extend(["run", name]);
    args.extend(extra);
    args.push("--");
    args.extend(command.iter().map(String::as_str));
    Proc::spawn(lockctl(url, &args))
}

#[test]
fn run_exits_76_and_terms_the_command_when_the_lock_is_force_unlocked() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let proc = spawn_run(
        &url,
        &["--watchdog", "900ms"],
        "lost",
        &[],
        &term_recorder(dir.path()),
    );
    assert!(
        eventually(LIMIT, || dir.path().join("started").exists()),
        "command started"
    );

    let out = run(lockctl(&url, &["unlock", "--force", "lost"]));
    assert_eq!(out.json_lines()[0]["removed"], true, "{out:?}");
    // The next renewal (every 300 ms) finds the lock gone.
    let out = proc.finish(LIMIT);
    out.assert_one_line_error(76, "lock `lost` was lost while the command ran");
    assert_eq!(
        read(&dir.path().join("term")),
        "term\n",
        "the command got SIGTERM"
    );
    assert!(!dir.path().join("done").exists());
}

#[test]
fn run_exits_76_when_a_fixed_lease_runs_out() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let proc = spawn_run(
        &url,
        &[],
        "leased",
        &["--lease", "500ms"],
        &term_recorder(dir.path()),
    );
    let out = proc.finish(LIMIT);
    out.assert_one_line_error(76, "was lost while the command ran");
    // Lost at the guard's deadline: the lease minus the drift margin
    // (1 % + 2 ms), counted from when the acquire was sent.
    assert!(started.elapsed() >= Duration::from_millis(500 - 7));
    assert_eq!(read(&dir.path().join("term")), "term\n");
}

#[test]
fn sigterm_and_sigint_are_forwarded_and_the_lock_released() {
    let server = server();
    let url = server.url();
    for (sig, file, code) in [(Signal::SIGTERM, "term", 0), (Signal::SIGINT, "int", 4)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let proc = spawn_run(&url, &[], "fwd", &[], &term_recorder(dir.path()));
        assert!(eventually(LIMIT, || dir.path().join("started").exists()));
        assert_eq!(status(&url, "fwd")["locked"], true);
        proc.signal(sig);
        let out = proc.finish(LIMIT);
        assert_eq!(out.code, Some(code), "{sig}: {out:?}");
        assert_eq!(out.stderr, "", "{sig}");
        assert_eq!(
            read(&dir.path().join(file)),
            format!("{file}\n"),
            "{sig} forwarded"
        );
        assert_eq!(status(&url, "fwd")["locked"], false, "released after {sig}");
    }
}

#[test]
fn a_signal_while_waiting_stops_the_wait_without_running_the_command() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut holder = Proc::spawn(lockctl(&url, &["hold", "w"]));
    holder.first_json(LIMIT);
    let waiter = spawn_run(&url, &[], "w", &[], &term_recorder(dir.path()));
    let channel = "redisson_lock__channel:{w}";
    assert!(
        eventually(LIMIT, || subscribers(&server, channel) == 1),
        "waiting"
    );
    waiter.signal(Signal::SIGTERM);
    let out = waiter.finish(LIMIT);
    out.assert_one_line_error(143, "interrupted by SIGTERM while waiting for lock `w`");
    assert!(!dir.path().join("started").exists());
}

// ------------------------------------------------------------ hold, status

#[test]
fn hold_is_visible_to_status_from_another_process_until_released() {
    let server = server();
    let url = server.url();
    let mut holder = Proc::spawn(lockctl(&url, &["hold", "report"]));
    let held = holder.first_json(LIMIT);
    assert_eq!(keys(&held), ["name", "owner", "fencing_token"]);
    assert_eq!(held["name"], "report");
    let owner = held["owner"].as_str().expect("owner").to_string();
    let token = held["fencing_token"].as_u64().expect("token");

    let s = status(&url, "report");
    assert_eq!(keys(&s), ["name", "locked", "owners", "ttl_ms", "key"]);
    assert_eq!(s["name"], "report");
    assert_eq!(s["locked"], true);
    assert_eq!(
        s["owners"],
        serde_json::json!([{ "owner": owner, "count": 1 }])
    );
    let ttl = s["ttl_ms"].as_i64().expect("ttl");
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");

    holder.signal(Signal::SIGINT);
    let out = holder.finish(LIMIT);
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""));
    let s = status(&url, "report");
    assert_eq!(s["locked"], false);
    assert_eq!(s["owners"], serde_json::json!([]));
    assert_eq!(s["ttl_ms"], Value::Null);

    // --for ends the hold by itself; the next holder gets a larger token.
    let mut again = Proc::spawn(lockctl(&url, &["hold", "report", "--for", "200ms"]));
    let next = again.first_json(LIMIT)["fencing_token"]
        .as_u64()
        .expect("token");
    assert!(next > token, "{next} > {token}");
    assert_eq!(again.finish(LIMIT).code, Some(0));
    assert_eq!(status(&url, "report")["locked"], false);
}

#[test]
fn hold_with_a_lease_shows_its_ttl_and_exits_76_when_it_runs_out() {
    let server = server();
    let url = server.url();
    let mut holder = Proc::spawn(lockctl(&url, &["hold", "short", "--lease", "2s"]));
    holder.first_json(LIMIT);
    let ttl = status(&url, "short")["ttl_ms"].as_i64().expect("ttl");
    assert!(ttl > 0 && ttl <= 2_000, "{ttl}");
    holder
        .finish(LIMIT)
        .assert_one_line_error(76, "lock `short` was lost while held");
}

fn subscribers(server: &RedisServer, channel: &str) -> i64 {
    server
        .command(&["PUBSUB", "NUMSUB", channel])
        .ok()
        .and_then(|v| v.as_array().and_then(|a| a.get(1).and_then(|n| n.as_i64())))
        .unwrap_or(0)
}

#[test]
fn unlock_force_wakes_a_waiting_run() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    // The holder's lease is 30 s: only the unlock message can wake the waiter soon.
    let mut holder = Proc::spawn(lockctl(&url, &["hold", "stuck"]));
    holder.first_json(LIMIT);
    let waiter = Proc::spawn(lockctl(
        &url,
        &[
            "run",
            "stuck",
            "--",
            "touch",
            marker.to_str().expect("utf-8"),
        ],
    ));
    let channel = "redisson_lock__channel:{stuck}";
    assert!(
        eventually(LIMIT, || subscribers(&server, channel) == 1),
        "run waits"
    );
    assert!(!marker.exists());

    let unlocked_at = Instant::now();
    let out = run(lockctl(&url, &["unlock", "--force", "stuck"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        out.json_lines(),
        [serde_json::json!({ "name": "stuck", "key": "stuck", "removed": true })]
    );
    let out = waiter.finish(LIMIT);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(marker.exists());
    assert!(
        unlocked_at.elapsed() < Duration::from_secs(15),
        "woken by the unlock, not by the holder's 30 s lease"
    );
    let out = run(lockctl(&url, &["unlock", "--force", "stuck"]));
    assert_eq!(out.json_lines()[0]["removed"], false);
}

#[test]
fn a_sigkilled_hold_is_taken_over_after_the_watchdog_timeout() {
    let server = server();
    let url = server.url();
    let mut holder = Proc::spawn(lockctl(&url, &["--watchdog", "1s", "hold", "crash"]));
    let owner = holder.first_json(LIMIT)["owner"].clone();
    holder.signal(Signal::SIGKILL);
    let killed_at = Instant::now();
    assert_eq!(holder.finish(LIMIT).code, None, "killed");

    // Nobody released it: it stays until its lease (at most 1 s) runs out.
    let s = status(&url, "crash");
    if s["locked"] == true {
        assert_eq!(s["owners"][0]["owner"], owner);
        let ttl = s["ttl_ms"].as_i64().expect("ttl");
        assert!(ttl > 0 && ttl <= 1_000, "{ttl}");
    }
    let out = run(lockctl(
        &url,
        &["run", "crash", "--wait", "10s", "--", "true"],
    ));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(killed_at.elapsed() < Duration::from_secs(10));
}

// ------------------------------------------------------------- read-write

/// The fields of the hash at `key`, read with a raw connection.
fn hash(server: &RedisServer, key: &str) -> std::collections::BTreeMap<String, String> {
    let reply = server.command(&["HGETALL", key]).expect("HGETALL");
    let items: Vec<String> = reply
        .as_array()
        .unwrap_or_default()
        .iter()
        .map(|v| v.as_string().expect("a bulk string"))
        .collect();
    items
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}

/// `{"owner","count"}` of one holder, as `status` prints it.
fn holder(owner: &str, count: u64) -> Value {
    serde_json::json!({ "owner": owner, "count": count })
}

#[test]
fn two_read_holds_share_a_name_and_a_write_hold_waits_for_both() {
    let server = server();
    let url = server.url();
    let mut readers: Vec<(Proc, String)> = Vec::new();
    for _ in 0..2 {
        let mut p = Proc::spawn(lockctl(&url, &["hold", "prices", "--read"]));
        let held = p.first_json(LIMIT);
        assert_eq!(keys(&held), ["name", "mode", "owner", "fencing_token"]);
        assert_eq!(
            (&held["name"], &held["mode"]),
            (&"prices".into(), &"read".into())
        );
        let owner = held["owner"].as_str().expect("owner").to_string();
        readers.push((p, owner));
    }
    // Both at once, in Redisson's layout: mode=read, one field per reader.
    let mut expected: std::collections::BTreeMap<String, String> = readers
        .iter()
        .map(|(_, owner)| (owner.clone(), "1".to_string()))
        .collect();
    expected.insert("mode".into(), "read".into());
    assert_eq!(hash(&server, "prices"), expected);

    // A writer waits (subscribed to the read-write lock's channel) ...
    let mut writer = Proc::spawn(lockctl(&url, &["hold", "prices", "--write"]));
    assert!(
        eventually(LIMIT, || subscribers(&server, "redisson_rwlock:{prices}")
            == 1),
        "the writer waits"
    );
    // ... as long as one reader is left.
    let (first, _) = readers.remove(0);
    first.signal(Signal::SIGTERM);
    assert_eq!(first.finish(LIMIT).code, Some(0));
    let s = status(&url, "prices");
    assert_eq!(s["mode"], "read", "{s}");
    assert_eq!(s["readers"], serde_json::json!([holder(&readers[0].1, 1)]));
    assert_eq!(s["writer"], Value::Null);
    assert_eq!(writer.try_code(), None, "still waiting");

    let (last, _) = readers.remove(0);
    last.signal(Signal::SIGTERM);
    assert_eq!(last.finish(LIMIT).code, Some(0));
    let held = writer.first_json(LIMIT);
    assert_eq!(held["mode"], "write");
    let owner = held["owner"].as_str().expect("owner").to_string();
    let fields = hash(&server, "prices");
    assert_eq!(fields.get("mode").map(String::as_str), Some("write"));
    assert_eq!(
        fields.get(&format!("{owner}:write")).map(String::as_str),
        Some("1"),
        "{fields:?}"
    );
    let s = status(&url, "prices");
    assert_eq!(s["mode"], "write");
    assert_eq!(s["readers"], serde_json::json!([]));
    assert_eq!(s["writer"], holder(&owner, 1));

    // While written, a reader's single attempt is refused with its own words.
    let out = run(lockctl(&url, &["hold", "prices", "--read", "--wait", "0s"]));
    out.assert_one_line_error(75, "read-write lock `prices` is held by a writer");
    writer.signal(Signal::SIGTERM);
    assert_eq!(writer.finish(LIMIT).code, Some(0));
    assert_eq!(status(&url, "prices")["locked"], false);
}

#[test]
fn status_and_list_show_the_mode_readers_and_writer_of_a_read_write_lock() {
    let server = server();
    let url = server.url();
    let mut reader = Proc::spawn(lockctl(&url, &["hold", "catalog", "--read"]));
    let owner = reader.first_json(LIMIT)["owner"]
        .as_str()
        .expect("owner")
        .to_string();
    let mut plain = Proc::spawn(lockctl(&url, &["hold", "deploy"]));
    plain.first_json(LIMIT);

    let s = status(&url, "catalog");
    assert_eq!(
        keys(&s),
        ["name", "locked", "mode", "owners", "readers", "writer", "ttl_ms", "key"]
    );
    assert_eq!((&s["locked"], &s["mode"]), (&true.into(), &"read".into()));
    assert_eq!(
        s["owners"],
        serde_json::json!([{ "owner": owner, "count": 1, "mode": "read" }])
    );
    assert_eq!(s["readers"], serde_json::json!([holder(&owner, 1)]));
    assert_eq!(s["writer"], Value::Null);
    let ttl = s["ttl_ms"].as_i64().expect("ttl");
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");

    // A run under the read side shares it with the holder at once.
    let out = run(lockctl(
        &url,
        &["run", "catalog", "--read", "--wait", "0s", "--", "true"],
    ));
    assert_eq!(out.code, Some(0), "{out:?}");
    // A writer's single attempt is refused.
    let out = run(lockctl(
        &url,
        &["run", "catalog", "--write", "--wait", "0s", "--", "true"],
    ));
    out.assert_one_line_error(
        75,
        "read-write lock `catalog` is held by readers or a writer",
    );

    // list: the read-write lock with its mode; the plain lock's line unchanged.
    let out = run(lockctl(&url, &["list"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines = out.json_lines();
    assert_eq!(lines.len(), 2, "{out:?}");
    let mut listed = lines[0].clone();
    listed["ttl_ms"] = s["ttl_ms"].clone(); // the TTL moves between two reads
    assert_eq!(listed, s);
    assert_eq!(
        keys(&lines[1]),
        ["name", "locked", "owners", "ttl_ms", "key"]
    );
    assert_eq!(lines[1]["name"], "deploy");

    // unlock --force deletes it as a read-write lock and says in which mode.
    let out = run(lockctl(&url, &["unlock", "--force", "catalog"]));
    assert_eq!(
        out.json_lines(),
        [
            serde_json::json!({ "name": "catalog", "mode": "read", "removed": true, "key": "catalog" })
        ]
    );
    assert_eq!(status(&url, "catalog")["locked"], false);
    for p in [reader, plain] {
        p.signal(Signal::SIGTERM);
        let _ = p.finish(LIMIT);
    }
}

#[test]
fn a_write_hold_waiting_on_readers_is_woken_by_unlock_force() {
    let server = server();
    let url = server.url();
    // The reader's lease is 30 s: only the unlock message wakes the writer soon.
    let mut reader = Proc::spawn(lockctl(&url, &["hold", "stuck-rw", "--read"]));
    reader.first_json(LIMIT);
    let mut writer = Proc::spawn(lockctl(&url, &["hold", "stuck-rw", "--write"]));
    assert!(eventually(LIMIT, || {
        subscribers(&server, "redisson_rwlock:{stuck-rw}") == 1
    }));
    let unlocked_at = Instant::now();
    let out = run(lockctl(&url, &["unlock", "--force", "stuck-rw"]));
    assert_eq!(out.json_lines()[0]["removed"], true, "{out:?}");
    assert_eq!(writer.first_json(LIMIT)["mode"], "write");
    assert!(
        unlocked_at.elapsed() < Duration::from_secs(15),
        "woken by the unlock, not by the reader's 30 s lease"
    );
    for p in [writer, reader] {
        p.signal(Signal::SIGTERM);
        let _ = p.finish(LIMIT);
    }
}

// ------------------------------------------------------------------- fair

/// The fair queue of `name` (no prefix) as Redis holds it: the waiting
/// owners, first first, read with a raw connection.
fn fair_queue(server: &RedisServer, name: &str) -> Vec<String> {
    let key = format!("redisson_lock_queue:{{{name}}}");
    server
        .command(&["LRANGE", &key, "0", "-1"])
        .expect("LRANGE")
        .as_array()
        .unwrap_or_default()
        .iter()
        .map(|v| v.as_string().expect("an owner"))
        .collect()
}

/// A waiter's deadline in the fair lock's ZSET, read with a raw connection.
fn fair_deadline(server: &RedisServer, name: &str, owner: &str) -> u64 {
    let key = format!("redisson_lock_timeout:{{{name}}}");
    let score = server
        .command(&["ZSCORE", &key, owner])
        .expect("ZSCORE")
        .as_string()
        .expect("a score");
    score.parse::<f64>().expect("a number") as u64
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as u64
}

/// Spawns `run --fair NAME -- sh -c SCRIPT sh DIR LETTER` and waits until
/// Redis' queue holds `place` waiters (this one the last), so that the
/// arrival order is the spawn order.
fn queued_fair_run(
    server: &RedisServer,
    name: &str,
    script: &str,
    dir: &Path,
    letter: &str,
    place: usize,
) -> Proc {
    let dir = dir.to_str().expect("utf-8 path");
    let proc = Proc::spawn(lockctl(
        &server.url(),
        &[
            "run", name, "--fair", "--", "sh", "-c", script, "sh", dir, letter,
        ],
    ));
    assert!(
        eventually(LIMIT, || fair_queue(server, name).len() == place),
        "run {letter} queued at place {place}: {:?}",
        fair_queue(server, name)
    );
    proc
}

#[test]
fn run_fair_serializes_two_runs() {
    let server = server();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("count"), "0").expect("counter");
    let script = "cd \"$1\"; mkdir inside || echo overlap >> violations; \
                  n=$(cat count); sleep 0.05; echo $((n + 1)) > count; rmdir inside";
    let rounds = 4;
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let url = server.url();
            let dir = dir.path().to_string_lossy().into_owned();
            thread::spawn(move || {
                for _ in 0..rounds {
                    let out = run(lockctl(
                        &url,
                        &[
                            "run",
                            "fair-counter",
                            "--fair",
                            "--",
                            "sh",
                            "-c",
                            script,
                            "sh",
                            &dir,
                        ],
                    ));
                    assert_eq!(out.code, Some(0), "{out:?}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    assert_eq!(
        read(&dir.path().join("violations")),
        "",
        "two commands ran at once"
    );
    assert_eq!(
        read(&dir.path().join("count")).trim(),
        (2 * rounds).to_string()
    );
    let s = status(&server.url(), "fair-counter");
    assert_eq!(s["locked"], false);
    assert_eq!(
        keys(&s),
        ["name", "locked", "owners", "ttl_ms", "key"],
        "no queue left: {s}"
    );
    assert!(fair_queue(&server, "fair-counter").is_empty());
}

#[test]
fn run_fair_serves_three_queued_runs_in_arrival_order() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    // Each command notes its letter when it starts and when it ends.
    let script = "cd \"$1\"; echo \"start $2\" >> order; sleep 0.1; echo \"end $2\" >> order";
    let mut holder = Proc::spawn(lockctl(&url, &["hold", "fifo", "--fair"]));
    holder.first_json(LIMIT);
    let runs: Vec<Proc> = ["A", "B", "C"]
        .iter()
        .enumerate()
        .map(|(i, letter)| queued_fair_run(&server, "fifo", script, dir.path(), letter, i + 1))
        .collect();
    assert_eq!(
        read(&dir.path().join("order")),
        "",
        "nothing runs while held"
    );

    holder.signal(Signal::SIGTERM);
    assert_eq!(holder.finish(LIMIT).code, Some(0));
    for proc in runs {
        let out = proc.finish(LIMIT);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    assert_eq!(
        read(&dir.path().join("order")),
        "start A\nend A\nstart B\nend B\nstart C\nend C\n",
        "one at a time, in the order they began to wait"
    );
    assert!(fair_queue(&server, "fifo").is_empty());
}

#[test]
fn status_shows_the_fair_queue_while_runs_wait() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut hold = Proc::spawn(lockctl(&url, &["hold", "close", "--fair"]));
    let held = hold.first_json(LIMIT);
    assert_eq!(keys(&held), ["name", "fair", "owner", "fencing_token"]);
    assert_eq!(held["fair"], true);
    let owner = held["owner"].as_str().expect("owner").to_string();
    // A single attempt never queues, and says which lock it tried.
    let out = run(lockctl(
        &url,
        &["run", "close", "--fair", "--wait", "0s", "--", "true"],
    ));
    out.assert_one_line_error(75, "fair lock `close` is held by another owner");
    // Nobody waits: the plain line.
    let s = status(&url, "close");
    assert_eq!(
        keys(&s),
        ["name", "locked", "owners", "ttl_ms", "key"],
        "{s}"
    );

    let script = "true";
    let waiters: Vec<Proc> = ["A", "B"]
        .iter()
        .enumerate()
        .map(|(i, letter)| queued_fair_run(&server, "close", script, dir.path(), letter, i + 1))
        .collect();
    let queued = fair_queue(&server, "close");
    let before = now_ms();
    let s = status(&url, "close");
    assert_eq!(
        keys(&s),
        ["name", "locked", "owners", "queue", "ttl_ms", "key"],
        "{s}"
    );
    assert_eq!(s["owners"], serde_json::json!([holder(&owner, 1)]));
    let expected: Vec<Value> = queued
        .iter()
        .map(|o| serde_json::json!({ "owner": o, "deadline_ms": fair_deadline(&server, "close", o) }))
        .collect();
    assert_eq!(
        s["queue"],
        Value::Array(expected),
        "first first, as Redis has them"
    );
    let deadlines: Vec<u64> = s["queue"]
        .as_array()
        .expect("queue")
        .iter()
        .map(|w| w["deadline_ms"].as_u64().expect("deadline"))
        .collect();
    assert!(
        deadlines[0] > before && deadlines[0] < deadlines[1],
        "{deadlines:?}"
    );
    // `list` prints the lock without its queue.
    let out = run(lockctl(&url, &["list"]));
    assert_eq!(
        keys(&out.json_lines()[0]),
        ["name", "locked", "owners", "ttl_ms", "key"]
    );

    // A user whose ACL does not reach the queue keys still gets the line.
    server
        .command(&[
            "ACL",
            "SETUSER",
            "ops",
            "on",
            ">pw",
            "resetkeys",
            "~close",
            "+@all",
        ])
        .expect("ACL SETUSER");
    let limited = url.replacen("redis://", "redis://ops:pw@", 1);
    let out = run(lockctl(&limited, &["status", "close"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let line = &out.json_lines()[0];
    assert_eq!(
        keys(line),
        ["name", "locked", "owners", "ttl_ms", "key"],
        "{out:?}"
    );
    assert!(
        out.stderr
            .starts_with("lockctl: note: the fair queue of `close` is not shown")
            && out.stderr.lines().count() == 1,
        "{out:?}"
    );

    hold.signal(Signal::SIGTERM);
    assert_eq!(hold.finish(LIMIT).code, Some(0));
    for proc in waiters {
        assert_eq!(proc.finish(LIMIT).code, Some(0));
    }
    let s = status(&url, "close");
    assert_eq!(
        keys(&s),
        ["name", "locked", "owners", "ttl_ms", "key"],
        "{s}"
    );
}

/// A raw subscriber to one channel: an observer of what is published on it.
struct Subscriber {
    conn: std::net::TcpStream,
    seen: Vec<u8>,
}

impl Subscriber {
    fn new(server: &RedisServer, channel: &str) -> Subscriber {
        let mut conn = std::net::TcpStream::connect(server.addr()).expect("connect");
        conn.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        write!(
            conn,
            "*2\r\n$9\r\nSUBSCRIBE\r\n${}\r\n{channel}\r\n",
            channel.len()
        )
        .expect("SUBSCRIBE");
        let mut sub = Subscriber {
            conn,
            seen: Vec::new(),
        };
        assert!(sub.saw("subscribe", LIMIT), "subscribed to {channel}");
        sub
    }

    /// Whether what arrived so far contains `needle`, reading for at most `limit`.
    fn saw(&mut self, needle: &str, limit: Duration) -> bool {
        let start = Instant::now();
        let mut buf = [0u8; 512];
        loop {
            if String::from_utf8_lossy(&self.seen).contains(needle) {
                return true;
            }
            if start.elapsed() > limit {
                return false;
            }
            if let Ok(n) = self.conn.read(&mut buf) {
                self.seen.extend_from_slice(&buf[..n]);
            }
        }
    }
}

#[test]
fn unlock_force_of_a_fair_lock_tells_the_first_waiter_on_its_channel() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut holder = Proc::spawn(lockctl(&url, &["hold", "stuck-fair", "--fair"]));
    holder.first_json(LIMIT);
    let marker = dir.path().join("ran");
    let waiter = queued_fair_run(
        &server,
        "stuck-fair",
        "touch \"$1/ran\"",
        dir.path(),
        "A",
        1,
    );
    let head = fair_queue(&server, "stuck-fair").remove(0);
    let mut told = Subscriber::new(
        &server,
        &format!("redisson_lock__channel:{{stuck-fair}}:{head}"),
    );

    let out = run(lockctl(&url, &["unlock", "--force", "stuck-fair"]));
    assert_eq!(
        out.json_lines(),
        [serde_json::json!({ "name": "stuck-fair", "removed": true, "key": "stuck-fair" })]
    );
    assert!(
        told.saw("message", Duration::from_secs(5)),
        "the first waiter is told on its own channel: {:?}",
        String::from_utf8_lossy(&told.seen)
    );
    let out = waiter.finish(LIMIT);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(marker.exists());
    // The holder learns that it lost the lock.
    holder
        .finish(LIMIT)
        .assert_one_line_error(76, "lock `stuck-fair` was lost while held");
}

// ---------------------------------------------------------------- permits

/// The largest number of commands seen inside together: each run of the
/// script (below) appends how many were inside right after it entered.
fn most_inside(dir: &Path) -> usize {
    read(&dir.join("seen"))
        .lines()
        .map(|l| l.trim().parse::<usize>().expect("a count"))
        .max()
        .unwrap_or(0)
}

#[test]
fn run_with_permits_never_runs_more_commands_at_once_than_permits() {
    let server = server();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("inside")).expect("inside");
    // The observer, outside lockctl: each command puts its own entry in
    // `inside`, counts the entries (itself included), stays a while and
    // takes its entry out. Three commands inside at once would make the
    // last of them count 3.
    let script = "cd \"$1\"; mkdir inside/$$; ls inside | wc -l >> seen; \
                  sleep 0.2; rmdir inside/$$";
    let (invocations, rounds) = (3, 3);
    let workers: Vec<_> = (0..invocations)
        .map(|_| {
            let url = server.url();
            let dir = dir.path().to_string_lossy().into_owned();
            thread::spawn(move || {
                for _ in 0..rounds {
                    let out = run(lockctl(
                        &url,
                        &[
                            "run",
                            "imports",
                            "--permits",
                            "2",
                            "--",
                            "sh",
                            "-c",
                            script,
                            "sh",
                            &dir,
                        ],
                    ));
                    assert_eq!(out.code, Some(0), "{out:?}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let seen = read(&dir.path().join("seen"));
    assert_eq!(seen.lines().count(), invocations * rounds, "{seen}");
    assert_eq!(
        most_inside(dir.path()),
        2,
        "at most 2, and 2 together: {seen}"
    );
    // Created with 2 permits, all given back.
    let out = run(lockctl(&server.url(), &["semaphore", "status", "imports"]));
    assert_eq!(
        out.json_lines(),
        [serde_json::json!({
            "name": "imports", "available": 2, "held_total": 0, "held": [], "key": "imports"
        })],
        "{out:?}"
    );
}

/// Redisson's `{name}:timeout` set's members (16 bytes each) in hex, as
/// Redisson and `semaphore status` show them.
const HEX_MEMBERS: &str = "local out = {} for i, m in ipairs(redis.call('zrange', KEYS[1], 0, -1)) do \
    out[i] = string.gsub(m, '.', function(c) return string.format('%02x', string.byte(c)) end) end return out";

/// The permit ids held in Redis (Redisson's `{name}:timeout` set).
fn permit_ids(server: &RedisServer, name: &str) -> Vec<String> {
    let reply = server
        .command(&["EVAL", HEX_MEMBERS, "1", &format!("{{{name}}}:timeout")])
        .expect("ZRANGE");
    reply
        .as_array()
        .unwrap_or_default()
        .iter()
        .map(|v| v.as_string().expect("an id"))
        .collect()
}

fn semaphore_status(url: &str, name: &str) -> Value {
    let out = run(lockctl(url, &["semaphore", "status", name]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut lines = out.json_lines();
    assert_eq!(lines.len(), 1, "{out:?}");
    lines.remove(0)
}

#[test]
fn semaphore_status_shows_the_held_permits_renewed_while_the_command_runs() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let proc = spawn_run(
        &url,
        &["--watchdog", "900ms"],
        "jobs",
        &["--permits", "2"],
        &term_recorder(dir.path()),
    );
    assert!(
        eventually(LIMIT, || dir.path().join("started").exists()),
        "command started"
    );
    let ids = permit_ids(&server, "jobs");
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(ids[0].len(), 32, "{ids:?}");
    // Longer than the 900 ms lease: still held, renewed by the watchdog.
    thread::sleep(Duration::from_millis(1_200));
    let s = semaphore_status(&url, "jobs");
    assert_eq!(keys(&s), ["name", "available", "held_total", "held", "key"]);
    assert_eq!((&s["available"], &s["held_total"]), (&1.into(), &1.into()));
    assert_eq!(s["held"][0]["id"], ids[0].as_str(), "{s}");
    let ttl = s["held"][0]["ttl_ms"].as_u64().expect("ttl");
    assert!(ttl > 0 && ttl <= 900, "{ttl}");
    // A second run shares the semaphore at once; the third permit is not there.
    let out = run(lockctl(
        &url,
        &[
            "run",
            "jobs",
            "--permits",
            "2",
            "--wait",
            "0s",
            "--",
            "true",
        ],
    ));
    assert_eq!(out.code, Some(0), "{out:?}");

    // SIGTERM reaches the command; the permit is given back.
    proc.signal(Signal::SIGTERM);
    let out = proc.finish(LIMIT);
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""), "{out:?}");
    assert_eq!(read(&dir.path().join("term")), "term\n");
    let s = semaphore_status(&url, "jobs");
    assert_eq!(
        (&s["available"], &s["held"]),
        (&2.into(), &serde_json::json!([]))
    );

    // A plain semaphore (Redisson's RSemaphore: a counter, no permit ids)
    // shows what is available.
    server.command(&["SET", "plain", "5"]).expect("SET");
    let s = semaphore_status(&url, "plain");
    assert_eq!(
        s,
        serde_json::json!({
            "name": "plain", "available": 5, "held_total": 0, "held": [], "key": "plain"
        })
    );
}

#[test]
fn semaphore_set_and_add_and_an_existing_semaphore_keeps_its_count() {
    let server = server();
    let url = server.url();
    let line = |args: &[&str]| -> Value {
        let out = run(lockctl(&url, args));
        assert_eq!(out.code, Some(0), "{out:?}");
        out.json_lines().remove(0)
    };
    assert_eq!(
        line(&["semaphore", "set", "pool", "1"]),
        serde_json::json!({ "name": "pool", "set": true, "available": 1, "key": "pool" })
    );
    assert_eq!(line(&["semaphore", "set", "pool", "9"])["set"], false);
    // `run --permits 3` takes the existing semaphore of 1 as it is.
    let dir = tempfile::tempdir().expect("tempdir");
    let proc = spawn_run(
        &url,
        &[],
        "pool",
        &["--permits", "3"],
        &term_recorder(dir.path()),
    );
    assert!(eventually(LIMIT, || dir.path().join("started").exists()));
    let marker = dir.path().join("second");
    let touch = ["touch", marker.to_str().expect("utf-8 path")];
    let mut args = vec!["run", "pool", "--permits", "3", "--wait", "0s", "--"];
    args.extend(touch);
    run(lockctl(&url, &args)).assert_one_line_error(75, "no permit of semaphore `pool` is free");
    let mut args = vec!["run", "pool", "--permits", "3", "--wait", "300ms", "--"];
    args.extend(touch);
    let started = Instant::now();
    run(lockctl(&url, &args)).assert_one_line_error(
        75,
        "timed out after 300ms waiting for a permit of semaphore `pool`",
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(!marker.exists(), "no command runs without a permit");

    // One more permit: the second run gets it.
    assert_eq!(line(&["semaphore", "add", "pool", "1"])["available"], 1);
    let mut args = vec!["run", "pool", "--permits", "3", "--wait", "0s", "--"];
    args.extend(touch);
    assert_eq!(run(lockctl(&url, &args)).code, Some(0));
    assert!(marker.exists());
    // Never below zero.
    run(lockctl(&url, &["semaphore", "add", "pool", "-2"]))
        .assert_one_line_error(64, "only 1 are available");
    assert_eq!(line(&["semaphore", "add", "pool", "-1"])["available"], 0);
    proc.signal(Signal::SIGTERM);
    assert_eq!(proc.finish(LIMIT).code, Some(0));
    assert_eq!(semaphore_status(&url, "pool")["available"], 1);

    // A key that is not a semaphore.
    server.command(&["HSET", "a-lock", "x", "1"]).expect("HSET");
    for args in [
        &["semaphore", "status", "a-lock"][..],
        &["semaphore", "add", "a-lock", "1"],
        &["run", "a-lock", "--permits", "1", "--", "true"],
    ] {
        run(lockctl(&url, args)).assert_one_line_error(65, "key `a-lock` is not a semaphore");
    }
}

#[test]
fn run_with_permits_exits_76_when_its_permit_expires_in_redis() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let proc = spawn_run(
        &url,
        &["--watchdog", "900ms"],
        "expiring",
        &["--permits", "1"],
        &term_recorder(dir.path()),
    );
    assert!(eventually(LIMIT, || dir.path().join("started").exists()));
    let ids = permit_ids(&server, "expiring");
    assert_eq!(ids.len(), 1, "{ids:?}");
    // Its expiry moved into the past: the next renewal finds it gone.
    server
        .command(&[
            "EVAL",
            "return redis.call('zadd', KEYS[1], 'xx', 1, redis.call('zrange', KEYS[1], 0, 0)[1])",
            "1",
            "{expiring}:timeout",
        ])
        .expect("ZADD");
    let out = proc.finish(LIMIT);
    out.assert_one_line_error(
        76,
        "permit of semaphore `expiring` was lost while the command ran",
    );
    assert_eq!(read(&dir.path().join("term")), "term\n");
    // The expired permit came back.
    assert_eq!(semaphore_status(&url, "expiring")["available"], 1);
}

// ------------------------------------------------------------------- list

#[test]
fn list_prints_the_locks_that_exist_now() {
    let server = server();
    let url = server.url();
    let mut holders: Vec<Proc> = Vec::new();
    for (prefix, name) in [("app:", "jobs:a"), ("app:", "jobs:b"), ("", "other")] {
        let mut p = Proc::spawn(lockctl(&url, &["--prefix", prefix, "hold", name]));
        p.first_json(LIMIT);
        holders.push(p);
    }
    server
        .command(&["SET", "app:not-a-lock", "1"])
        .expect("SET");
    server
        .command(&["HSET", "app:profile", "name", "x"])
        .expect("HSET");

    let names = |out: &Out| -> Vec<String> {
        assert_eq!(out.code, Some(0), "{out:?}");
        out.json_lines()
            .iter()
            .map(|l| l["name"].as_str().expect("name").to_string())
            .collect()
    };
    let out = run(lockctl(&url, &["--prefix", "app:", "list"]));
    assert_eq!(names(&out), ["jobs:a", "jobs:b"]);
    let first = &out.json_lines()[0];
    assert_eq!(first["key"], "app:jobs:a");
    assert_eq!(first["locked"], true);
    assert_eq!(first["owners"].as_array().map(Vec::len), Some(1));
    let out = run(lockctl(
        &url,
        &["--prefix", "app:", "list", "--match", "*:b"],
    ));
    assert_eq!(names(&out), ["jobs:b"]);
    let out = run(lockctl(&url, &["list"]));
    assert_eq!(names(&out), ["app:jobs:a", "app:jobs:b", "other"]);

    let first = holders.remove(0);
    first.signal(Signal::SIGTERM);
    assert_eq!(first.finish(LIMIT).code, Some(0));
    let out = run(lockctl(&url, &["list"]));
    assert_eq!(names(&out), ["app:jobs:b", "other"], "released at once");
}

// ----------------------------------------------------------------- errors

#[test]
fn bad_input_is_one_line_and_exit_64() {
    let server = server();
    let url = server.url();
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "x", "--wait", "5x", "--", "true"],
            "unknown unit `x`",
        ),
        (&["run", "x", "--wait", "5", "--", "true"], "no unit"),
        (
            &["--watchdog", "0s", "status", "x"],
            "watchdog_timeout must be greater than zero",
        ),
        (
            &["hold", "x", "--lease", "0s"],
            "lease must be at least 1ms",
        ),
        (&["status", ""], "invalid lock name: name is empty"),
        (&["run", "", "--", "true"], "invalid lock name"),
        (&["unlock", "x"], "--force"),
        (&["run", "x"], "<CMD>"),
        (&["run", "x", "true"], "unexpected argument"),
        (&["list", "--match", ""], "pattern is empty"),
        (&["frobnicate"], "unrecognized subcommand"),
        (
            &["hold", "x", "--read", "--write"],
            "'--read' cannot be used with '--write'",
        ),
        (
            &["run", "x", "--write", "--read", "--", "true"],
            "cannot be used with",
        ),
        (
            &["run", "x", "--permits", "0", "--", "true"],
            "0 is not in 1..=10000",
        ),
        (
            &["run", "x", "--permits", "10001", "--", "true"],
            "10001 is not in 1..=10000",
        ),
        (
            &["run", "x", "--permits", "-1", "--", "true"],
            "unexpected argument '-1'",
        ),
        (
            &["run", "x", "--permits", "two", "--", "true"],
            "invalid value 'two' for '--permits <N>'",
        ),
        (
            &["run", "x", "--permits", "2", "--read", "--", "true"],
            "'--permits <N>' cannot be used with '--read'",
        ),
        (
            &["run", "x", "--write", "--permits", "2", "--", "true"],
            "cannot be used with",
        ),
        (&["semaphore", "status", ""], "invalid lock name"),
        (&["semaphore", "add", "x"], "<DELTA>"),
        (&["semaphore", "set", "x", "-1"], "unexpected argument '-1'"),
        (&["semaphore", "frob", "x"], "unrecognized subcommand"),
        (&["elect", "x"], "<CMD>"),
        (&["elect", "x", "true"], "unexpected argument"),
        (&["elect", "", "--", "true"], "invalid lock name"),
        (
            &["elect", "x", "--wait", "5x", "--", "true"],
            "unknown unit `x`",
        ),
        (
            &["elect", "x", "--read", "--", "true"],
            "unexpected argument '--read'",
        ),
        (&["leader", ""], "invalid lock name"),
        (&["leader"], "<NAME>"),
        (
            &["run", "x", "--fair", "--read", "--", "true"],
            "'--fair' cannot be used with '--read'",
        ),
        (
            &["run", "x", "--write", "--fair", "--", "true"],
            "cannot be used with",
        ),
        (
            &["run", "x", "--permits", "2", "--fair", "--", "true"],
            "cannot be used with",
        ),
        (&["hold", "x", "--read", "--fair"], "cannot be used with"),
        (
            &["elect", "x", "--fair", "--", "true"],
            "unexpected argument '--fair'",
        ),
    ];
    for (args, needle) in cases {
        run(lockctl(&url, args)).assert_one_line_error(64, needle);
    }
    for bad_url in ["foo://x", "not a url", "redis://h:notaport"] {
        let out = run(lockctl(bad_url, &["status", "x"]));
        out.assert_one_line_error(64, "invalid redis url");
        // the message lists what is taken (issue 21)
        out.assert_one_line_error(64, "the accepted forms are redis://");
        out.assert_one_line_error(64, "redis+cluster://");
    }
    let out = run(lockctl(&url, &["--help"]));
    assert_eq!(out.code, Some(0));
    assert!(out.stdout.contains("Exit codes:"), "{out:?}");
}

#[test]
fn unreachable_redis_is_one_line_and_exit_69() {
    let port = lock_tests::free_port().expect("port");
    let url = format!("redis://user:secret@127.0.0.1:{port}");
    let cases: [&[&str]; 9] = [
        &["status", "x"],
        &["elect", "x", "--", "true"],
        &["leader", "x"],
        &["list"],
        &["unlock", "--force", "x"],
        &["run", "x", "--", "true"],
        &["hold", "x"],
        &["run", "x", "--permits", "2", "--", "true"],
        &["semaphore", "status", "x"],
    ];
    let procs: Vec<Proc> = cases
        .iter()
        .map(|args| Proc::spawn(lockctl(&url, args)))
        .collect();
    for proc in procs {
        let out = proc.finish(LIMIT);
        out.assert_one_line_error(69, &format!("redis at redis://user:***@127.0.0.1:{port}"));
        assert!(!out.stderr.contains("secret"));
    }
}

#[test]
fn a_key_that_is_not_a_lock_is_exit_65() {
    let server = server();
    server.command(&["SET", "plain", "1"]).expect("SET");
    run(lockctl(&server.url(), &["status", "plain"])).assert_one_line_error(65, "is not a lock");
}

#[test]
fn the_default_url_comes_from_redis_url() {
    let server = server();
    let mut cmd = Command::new(BIN);
    cmd.args(["status", "x"])
        .env("REDIS_URL", server.url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.json_lines()[0]["locked"], false);
}

// ------------------------------------------------------- cluster, sentinel

#[test]
fn hold_status_and_list_work_unchanged_with_cluster_and_sentinel_urls() {
    let cluster = lock_tests::RedisCluster::start(3, 0).expect("cluster");
    let url = cluster.url();
    let names: Vec<String> = (0..6).map(|i| format!("job-{i}")).collect();
    let primaries: std::collections::HashSet<usize> = names
        .iter()
        .map(|n| {
            cluster
                .primary_for_slot(cluster.key_slot(n).expect("slot"))
                .expect("primary")
        })
        .collect();
    assert!(primaries.len() >= 2, "the names spread over primaries");
    let mut holders: Vec<Proc> = Vec::new();
    for name in &names {
        let mut p = Proc::spawn(lockctl(&url, &["hold", name]));
        p.first_json(LIMIT);
        holders.push(p);
    }
    let out = run(lockctl(&url, &["list"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let listed: Vec<String> = out
        .json_lines()
        .iter()
        .map(|l| l["name"].as_str().expect("name").to_string())
        .collect();
    assert_eq!(listed, names, "every primary scanned");
    assert_eq!(status(&url, "job-3")["locked"], true);
    for p in holders {
        p.signal(Signal::SIGTERM);
        assert_eq!(p.finish(LIMIT).code, Some(0));
    }
    assert_eq!(status(&url, "job-3")["locked"], false);

    let sentinel = lock_tests::SentinelSet::start("locks").expect("sentinel set");
    let url = sentinel.url();
    let mut p = Proc::spawn(lockctl(&url, &["hold", "nightly"]));
    p.first_json(LIMIT);
    assert_eq!(status(&url, "nightly")["locked"], true);
    let on_primary = sentinel.data_nodes()[0]
        .command(&["EXISTS", "nightly"])
        .expect("EXISTS");
    assert_eq!(
        on_primary.as_i64(),
        Some(1),
        "held on the primary the sentinels name"
    );
    p.signal(Signal::SIGTERM);
    assert_eq!(p.finish(LIMIT).code, Some(0));
}

// ------------------------------------------------------------ elect, leader

fn spawn_elect(url: &str, global: &[&str], name: &str, extra: &[&str], command: &[String]) -> Proc {
    let mut args: Vec<&str> = global.to_vec();
    args.extend(["elect", name]);
    args.extend(extra);
    args.push("--");
    args.extend(command.iter().map(String::as_str));
    Proc::spawn(lockctl(url, &args))
}

/// `lockctl leader NAME`'s one line.
fn leader(url: &str, name: &str) -> Value {
    let out = run(lockctl(url, &["leader", name]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut lines = out.json_lines();
    assert_eq!(lines.len(), 1, "{out:?}");
    lines.remove(0)
}

#[test]
fn two_elects_on_one_name_run_their_commands_one_after_the_other() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    // Each command logs its start and end; `inside` catches two at once.
    let script = "cd \"$1\"; mkdir inside || echo overlap >> violations; \
                  echo \"start $2\" >> log; sleep 1; echo \"end $2\" >> log; rmdir inside";
    let command = |who: &str| -> Vec<String> {
        ["sh", "-c", script, "sh", &dir.path().to_string_lossy(), who]
            .map(String::from)
            .to_vec()
    };
    let first = spawn_elect(&url, &[], "relay", &["--value", "first"], &command("a"));
    assert!(
        eventually(LIMIT, || read(&dir.path().join("log")) == "start a\n"),
        "the first command started"
    );
    let second = spawn_elect(&url, &[], "relay", &["--value", "second"], &command("b"));
    // The second campaigns (subscribed to the lock's channel) while the
    // first leads; Redis' own record names the first.
    assert!(
        eventually(LIMIT, || subscribers(
            &server,
            "redisson_lock__channel:{relay}"
        ) >= 1),
        "the second campaigns"
    );
    assert_eq!(
        hash(&server, "lockcore_leader:{relay}")
            .get("value")
            .map(String::as_str),
        Some("first")
    );
    assert!(!read(&dir.path().join("log")).contains("start b"));

    let out = first.finish(LIMIT);
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""), "{out:?}");
    let out = second.finish(LIMIT);
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""), "{out:?}");
    assert_eq!(
        read(&dir.path().join("log")),
        "start a\nend a\nstart b\nend b\n",
        "the second command started after the first ended"
    );
    assert_eq!(
        read(&dir.path().join("violations")),
        "",
        "two commands ran at once"
    );
    assert_eq!(
        leader(&url, "relay")["leader"],
        Value::Null,
        "both resigned"
    );
    assert_eq!(status(&url, "relay")["locked"], false);
}

#[test]
fn elect_exits_76_and_terms_the_command_when_its_lock_is_deleted() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let proc = spawn_elect(
        &url,
        &["--watchdog", "900ms"],
        "deposed",
        &[],
        &term_recorder(dir.path()),
    );
    assert!(
        eventually(LIMIT, || dir.path().join("started").exists()),
        "command started"
    );
    assert_eq!(status(&url, "deposed")["locked"], true);
    // An independent connection deletes the lock; the next renewal (every
    // 300 ms) finds it gone.
    assert_eq!(
        server.command(&["DEL", "deposed"]).expect("DEL").as_i64(),
        Some(1)
    );
    let out = proc.finish(LIMIT);
    out.assert_one_line_error(
        76,
        "leadership of election `deposed` was lost while the command ran; sending it SIGTERM",
    );
    assert_eq!(
        read(&dir.path().join("term")),
        "term\n",
        "the command got SIGTERM"
    );
    assert!(!dir.path().join("done").exists());
}

#[test]
fn leader_prints_the_leader_its_term_and_ttl_or_null() {
    let server = server();
    let url = server.url();
    assert_eq!(
        leader(&url, "boss"),
        serde_json::json!({ "name": "boss", "leader": null, "key": "boss" })
    );
    // The default value: <hostname>:<pid of lockctl>.
    let dir = tempfile::tempdir().expect("tempdir");
    let proc = spawn_elect(&url, &[], "boss", &[], &term_recorder(dir.path()));
    assert!(eventually(LIMIT, || dir.path().join("started").exists()));
    let mut line = Value::Null;
    assert!(
        eventually(LIMIT, || {
            line = leader(&url, "boss");
            line["leader"]["value"].is_string()
        }),
        "the record is written right after the grant"
    );
    assert_eq!(keys(&line), ["name", "leader", "key"]);
    assert_eq!(keys(&line["leader"]), ["value", "term", "ttl_ms"]);
    let value = line["leader"]["value"].as_str().expect("value");
    assert!(
        value.ends_with(&format!(":{}", proc.child.id())),
        "{value}: <hostname>:<pid>"
    );
    // What Redis holds, read on an independent connection.
    let record = hash(&server, "lockcore_leader:{boss}");
    assert_eq!(record.get("value").map(String::as_str), Some(value));
    let term = line["leader"]["term"].as_u64().expect("term");
    assert_eq!(record.get("term"), Some(&term.to_string()));
    let ttl = line["leader"]["ttl_ms"].as_i64().expect("ttl");
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");

    // SIGTERM goes to the command, which exits 0 here; then it resigns.
    proc.signal(Signal::SIGTERM);
    let out = proc.finish(LIMIT);
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""), "{out:?}");
    assert_eq!(read(&dir.path().join("term")), "term\n");
    assert_eq!(leader(&url, "boss")["leader"], Value::Null);

    // A holder without a record (a plain lock, as a Redisson RLock): a
    // leader with no value and no term; the next leader's term is larger.
    let mut holder = Proc::spawn(lockctl(&url, &["hold", "boss"]));
    holder.first_json(LIMIT);
    let line = leader(&url, "boss");
    assert_eq!(line["leader"]["value"], Value::Null, "{line}");
    assert_eq!(line["leader"]["term"], Value::Null, "{line}");
    assert!(
        line["leader"]["ttl_ms"].as_i64().is_some_and(|t| t > 0),
        "{line}"
    );
    holder.signal(Signal::SIGTERM);
    assert_eq!(holder.finish(LIMIT).code, Some(0));
    let mut next = spawn_elect(
        &url,
        &[],
        "boss",
        &["--value", "web-2"],
        &["sleep".into(), "30".into()],
    );
    let mut seen = Value::Null;
    assert!(eventually(LIMIT, || {
        seen = leader(&url, "boss");
        seen["leader"]["value"] == "web-2"
    }));
    assert!(
        seen["leader"]["term"].as_u64().expect("term") > term,
        "{seen}"
    );
    assert_eq!(next.try_code(), None, "still leading");
    next.signal(Signal::SIGTERM);
    let out = next.finish(LIMIT);
    assert_eq!(
        out.code,
        Some(143),
        "sleep died of the forwarded SIGTERM: {out:?}"
    );
}

#[test]
fn elect_with_a_wait_bound_exits_75_and_a_signal_stops_the_campaign() {
    let server = server();
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let touch = ["touch", marker.to_str().expect("utf-8 path")];
    let mut holder = Proc::spawn(lockctl(&url, &["hold", "busy"]));
    holder.first_json(LIMIT);

    let started = Instant::now();
    let mut args = vec!["elect", "busy", "--wait", "300ms", "--"];
    args.extend(touch);
    let out = run(lockctl(&url, &args));
    out.assert_one_line_error(75, "timed out after 300ms");
    assert!(started.elapsed() >= Duration::from_millis(300));
    let mut args = vec!["elect", "busy", "--wait", "0s", "--"];
    args.extend(touch);
    run(lockctl(&url, &args)).assert_one_line_error(75, "election `busy` has another leader");

    let waiter = spawn_elect(&url, &[], "busy", &[], &term_recorder(dir.path()));
    assert!(
        eventually(LIMIT, || subscribers(
            &server,
            "redisson_lock__channel:{busy}"
        ) >= 1),
        "campaigning"
    );
    waiter.signal(Signal::SIGTERM);
    let out = waiter.finish(LIMIT);
    out.assert_one_line_error(
        143,
        "interrupted by SIGTERM while campaigning in election `busy`",
    );
    assert!(!marker.exists() && !dir.path().join("started").exists());
    // The command's own exit code, as `run` passes it through.
    holder.signal(Signal::SIGTERM);
    assert_eq!(holder.finish(LIMIT).code, Some(0));
    let out = run(lockctl(
        &url,
        &["elect", "busy", "--", "sh", "-c", "exit 9"],
    ));
    assert_eq!((out.code, out.stderr.as_str()), (Some(9), ""), "{out:?}");
    let out = run(lockctl(&url, &["elect", "busy", "--", "/no/such/command"]));
    out.assert_one_line_error(127, "cannot run `/no/such/command`");
    assert_eq!(status(&url, "busy")["locked"], false);
}

#[test]
fn fair_wait_sets_the_allowance_every_client_of_the_lock_shares() {
    let server = server();
    let url = server.url();
    let mut hold = Proc::spawn(lockctl(&url, &["hold", "allowance", "--fair"]));
    let _held = hold.first_json(LIMIT);
    let _first = Proc::spawn(lockctl(
        &url,
        &[
            "--fair-wait",
            "7s",
            "run",
            "allowance",
            "--fair",
            "--",
            "true",
        ],
    ));
    assert!(
        eventually(LIMIT, || fair_queue(&server, "allowance").len() == 1),
        "queued"
    );
    let _second = Proc::spawn(lockctl(
        &url,
        &[
            "--fair-wait",
            "7s",
            "run",
            "allowance",
            "--fair",
            "--",
            "true",
        ],
    ));
    assert!(
        eventually(LIMIT, || fair_queue(&server, "allowance").len() == 2),
        "queued"
    );
    let queued = fair_queue(&server, "allowance");
    let (a, b) = (
        fair_deadline(&server, "allowance", &queued[0]),
        fair_deadline(&server, "allowance", &queued[1]),
    );
    assert_eq!(
        b - a,
        7_000,
        "the second's deadline: the first's plus the allowance"
    );
    drop(hold);
}
