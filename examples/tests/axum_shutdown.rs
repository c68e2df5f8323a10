//! A deploy leaves no lock behind: the axum example's server gets SIGTERM
//! with 8 requests in flight (6 holding their account's lock, 2 waiting
//! behind them); `with_graceful_shutdown` lets them finish and
//! `LockClient::shutdown` gives back what is left. An independent observer
//! (a raw Redis connection scanning for lock keys) checks the outcome; the
//! same check run after a SIGKILL sees the locks left behind.

use std::process::Stdio;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::StatusCode;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use lock_examples::ledger::{run_id, Ledger};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

/// How long each withdrawal keeps its lock (the server's extra hold).
const HOLD_MS: u64 = 1500;
const ACCOUNTS: usize = 6;

struct Server {
    child: Child,
    lines: tokio::io::Lines<BufReader<ChildStdout>>,
    base: String,
}

async fn start_server(url: &str, run: &str) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_axum_accounts"))
        .args(["serve", url, run])
        .env("AXUM_ACCOUNTS_HOLD_MS", HOLD_MS.to_string())
        .stdin(Stdio::piped()) // kept open: only the signal stops it
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn server: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("server did not start"))
        .unwrap_or_else(|e| panic!("read: {e}"))
        .unwrap_or_else(|| panic!("server exited before listening"));
    let addr = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected line {line}"))
        .to_string();
    Server {
        child,
        lines,
        base: format!("http://{addr}"),
    }
}

/// Sends 8 withdrawals (accounts 0..6, then 0 and 1 again) and waits until
/// 6 locks are held, as the observer sees them. Returns the requests.
async fn requests_in_flight(
    server: &Server,
    ledger: &mut Ledger,
) -> Vec<tokio::task::JoinHandle<Result<StatusCode, String>>> {
    let http: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut requests = Vec::new();
    for i in 0..ACCOUNTS + 2 {
        let uri = format!("{}/accounts/acct-{}/withdraw", server.base, i % ACCOUNTS);
        let http = http.clone();
        requests.push(tokio::spawn(async move {
            let req = hyper::Request::post(uri)
                .body(Full::new(Bytes::from("1")))
                .map_err(|e| e.to_string())?;
            let res = tokio::time::timeout(Duration::from_secs(30), http.request(req))
                .await
                .map_err(|_| "no answer within 30 s".to_string())?
                .map_err(|e| e.to_string())?;
            let status = res.status();
            let _ = res.into_body().collect().await;
            Ok(status)
        }));
    }
    let started = Instant::now();
    loop {
        let held = ledger.lock_keys().await.unwrap_or_default().len();
        if held == ACCOUNTS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "only {held} locks held after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    requests
}

async fn setup() -> (lock_tests::RedisServer, String, Ledger) {
    let redis = lock_tests::RedisServer::start().unwrap_or_else(|e| panic!("redis: {e}"));
    let run = run_id();
    let mut ledger = Ledger::connect(&redis.url(), &run)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for i in 0..ACCOUNTS {
        ledger
            .set_balance(&format!("acct-{i}"), 100)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    (redis, run, ledger)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_requests_in_flight_leaves_no_lock() {
    let (redis, run, mut ledger) = setup().await;
    let mut server = start_server(&redis.url(), &run).await;
    let requests = requests_in_flight(&server, &mut ledger).await;

    let pid = server.child.id().unwrap_or_else(|| panic!("no pid"));
    let signalled = Instant::now();
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap_or_else(|e| panic!("kill: {e}"));

    // Every request in flight is answered, none refused.
    for request in requests {
        let status = request.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status, Ok(StatusCode::OK));
    }
    let mut report = None;
    while let Ok(Some(line)) = server.lines.next_line().await {
        if line.starts_with("shut down: ") {
            report = Some(line);
        }
    }
    let status = server.child.wait().await.unwrap_or_else(|e| panic!("{e}"));
    let took = signalled.elapsed();
    assert!(status.success(), "server exited with {status}");
    let report = report.unwrap_or_else(|| panic!("no shutdown report"));
    println!("SIGTERM -> exit in {took:?}; {report}");

    // The observer: not one lock key remains.
    let left = ledger.lock_keys().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(left.is_empty(), "locks left behind: {left:?}");
    // And the withdrawals all happened: 8 of 1 from 6 accounts.
    let mut total = 0;
    for i in 0..ACCOUNTS {
        total += ledger.balance(&format!("acct-{i}")).await.unwrap_or(0);
    }
    assert_eq!(total, 100 * ACCOUNTS as i64 - 8);
}

/// The observer above catches a lock left behind: after SIGKILL (no
/// graceful shutdown) the 6 held locks stay in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observer_sees_locks_left_by_a_killed_server() {
    let (redis, run, mut ledger) = setup().await;
    let mut server = start_server(&redis.url(), &run).await;
    let requests = requests_in_flight(&server, &mut ledger).await;
    let pid = server.child.id().unwrap_or_else(|| panic!("no pid"));
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap_or_else(|e| panic!("kill: {e}"));
    let _ = server.child.wait().await;
    for request in requests {
        let answer = request.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(answer.is_err(), "a killed server answered: {answer:?}");
    }
    let left = ledger.lock_keys().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(left.len(), ACCOUNTS, "{left:?}");
}
