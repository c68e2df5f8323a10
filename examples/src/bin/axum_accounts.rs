//! An account service on axum with lock-tower's `LockLayer`: withdrawals
//! from one account are serialized across two server processes, while
//! withdrawals from different accounts run at the same time.
//!
//! Run it with `cargo run -p lock-examples --bin axum_accounts`. It uses the
//! Redis at `$REDIS_URL` when set, otherwise it starts a private
//! `redis-server` for the run (the binary must be installed).
//!
//! What it does: starts two server processes (this program with `serve`),
//! each with its own lock client, then
//! 1. sends 30 concurrent withdrawals of 10 from one account (balance 100),
//!    alternating between the two servers: exactly 10 are accepted and the
//!    balance ends at 0 — the handler reads, pauses, then writes the
//!    balance (see `lock_examples::ledger`), which loses updates without
//!    the lock;
//! 2. sends one withdrawal to each of 8 other accounts at once: they run
//!    concurrently.
//!
//! The ledger also checks an "inside" marker per account and the handler
//! answers 500 if two withdrawals of one account ever overlap.
//!
//! A server shuts down gracefully on SIGTERM, Ctrl-C or when its standard
//! input closes: axum's `with_graceful_shutdown` lets the requests in
//! flight finish, then `LockClient::shutdown` gives back every lock the
//! process still has, so a deploy leaves no lock behind. Each server
//! serves its metrics (lock-core's and lock-tower's, Prometheus text
//! format) at `/metrics`; the demo prints one server's lock metrics at the
//! end.

use std::process::Stdio;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use futures_util::future::try_join_all;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use lock_core::LockClient;
use lock_examples::ledger::{run_id, Ledger, Outcome};
use lock_examples::BoxError;
use lock_tower::{LockLayer, PathSegment};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const START_BALANCE: i64 = 100;
const AMOUNT: i64 = 10;
const SAME_ACCOUNT_REQUESTS: usize = 30;
const OTHER_ACCOUNTS: usize = 8;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        let (Some(url), Some(run)) = (args.get(2), args.get(3)) else {
            return Err("usage: axum_accounts serve <redis-url> <run-id>".into());
        };
        return serve(url, run).await;
    }
    demo().await
}

// ---------------------------------------------------------------- server

/// Extra time a withdrawal keeps its account's lock, from
/// `$AXUM_ACCOUNTS_HOLD_MS` (the graceful-shutdown test sets it, so that
/// requests are in flight when the server is told to stop).
const HOLD_MS_VAR: &str = "AXUM_ACCOUNTS_HOLD_MS";

/// One server process: prints `listening on <addr>`, then serves until
/// SIGTERM, Ctrl-C, or its standard input closes (the demo process ended
/// or let it go); then it lets the requests in flight finish, gives back
/// its locks, and prints `shut down: ...`.
async fn serve(redis_url: &str, run: &str) -> Result<(), BoxError> {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    let client = LockClient::builder(redis_url)
        .key_prefix(format!("example:{run}:"))
        .build()?;
    let ledger = Ledger::connect(redis_url, run).await?;
    let hold = Duration::from_millis(
        std::env::var(HOLD_MS_VAR)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );

    let app = Router::new()
        .route("/accounts/{id}/withdraw", post(withdraw))
        // `route_layer`: only requests that matched a route take a lock (a
        // 404 or 405 answers at once, never queued behind real requests).
        // "/accounts/{id}/..." → lock "account:{id}".
        .route_layer(
            LockLayer::new(
                client.clone(),
                PathSegment::after("accounts").prefix("account:"),
            )
            .wait(Duration::from_secs(10)),
        )
        .route("/health", get(|| async { "ok" })) // added after: never locked
        .route(
            "/metrics",
            get(move || std::future::ready(metrics.render())),
        )
        .with_state(AppState { ledger, hold });

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(stop_requested())
        .await?;
    // Every request has been answered; give back whatever is still held
    // (and wait for the releases of dropped guards), at most 5 s.
    let report = client.shutdown(Duration::from_secs(5)).await;
    println!(
        "shut down: released {} lock(s), {} already gone, {} failed, in time: {}",
        report.released, report.not_held, report.failed, report.finished_in_time
    );
    Ok(())
}

/// Resolves on SIGTERM, Ctrl-C, or when standard input closes.
async fn stop_requested() {
    // Read on a plain thread: tokio's stdin reads on a blocking-pool
    // thread that would keep the runtime from shutting down while the
    // input stays open (a SIGTERM with stdin still open).
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        let _ = closed_tx.send(());
    });
    let stdin_closed = async {
        let _ = closed_rx.await;
    };
    let sigterm = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = stdin_closed => {}
        _ = sigterm => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[derive(Clone)]
struct AppState {
    ledger: Ledger,
    hold: Duration,
}

/// `POST /accounts/{id}/withdraw` with the amount as the body.
async fn withdraw(
    State(AppState { mut ledger, hold }): State<AppState>,
    Path(id): Path<String>,
    body: String,
) -> (StatusCode, String) {
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
    let Ok(amount) = body.trim().parse::<i64>() else {
        return (
            StatusCode::BAD_REQUEST,
            "the body must be an amount\n".into(),
        );
    };
    match ledger.withdraw(&id, amount).await {
        Ok(Outcome::Overlap) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "overlap: another withdrawal of this account is inside\n".into(),
        ),
        Ok(Outcome::Done {
            accepted,
            balance,
            concurrent,
        }) => (
            if accepted {
                StatusCode::OK
            } else {
                StatusCode::CONFLICT
            },
            format!("accepted={accepted} balance={balance} concurrent={concurrent}\n"),
        ),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("redis: {e}\n")),
    }
}

// ---------------------------------------------------------------- demo

/// A server process started by the demo; killed when dropped.
struct ServerProcess {
    child: Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    base: String,
}

impl ServerProcess {
    /// Closes the server's standard input (it shuts down gracefully) and
    /// returns its `shut down: ...` line.
    async fn stop(mut self) -> Result<String, BoxError> {
        drop(self.child.stdin.take());
        let mut report = None;
        let read = async {
            while let Some(line) = self.lines.next_line().await? {
                if line.starts_with("shut down: ") {
                    report = Some(line);
                }
            }
            self.child.wait().await
        };
        let status = tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .map_err(|_| "server did not stop within 30 s")??;
        if !status.success() {
            return Err(format!("server exited with {status}").into());
        }
        report.ok_or_else(|| "server stopped without its shutdown report".into())
    }
}

async fn start_server(url: &str, run: &str) -> Result<ServerProcess, BoxError> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["serve", url, run])
        .stdin(Stdio::piped()) // closed when the demo ends: the server stops
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .map_err(|_| "server did not start within 30 s")??
        .ok_or("server exited before listening")?;
    let addr = line
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("unexpected server output: {line}"))?;
    let base = format!("http://{addr}");
    Ok(ServerProcess { child, lines, base })
}

struct Reply {
    status: StatusCode,
    text: String,
}

impl Reply {
    /// The `concurrent=N` field of a withdrawal's answer.
    fn concurrent(&self) -> Option<i64> {
        self.text
            .split_whitespace()
            .find_map(|f| f.strip_prefix("concurrent="))
            .and_then(|n| n.parse().ok())
    }
}

async fn post_withdraw(
    http: &Client<HttpConnector, Full<Bytes>>,
    base: &str,
    account: &str,
) -> Result<Reply, BoxError> {
    let req = hyper::Request::post(format!("{base}/accounts/{account}/withdraw"))
        .body(Full::new(Bytes::from(AMOUNT.to_string())))?;
    let res = tokio::time::timeout(Duration::from_secs(30), http.request(req))
        .await
        .map_err(|_| "withdrawal not answered within 30 s")??;
    let status = res.status();
    let body = res.into_body().collect().await?.to_bytes();
    Ok(Reply {
        status,
        text: String::from_utf8_lossy(&body).trim().to_string(),
    })
}

async fn demo() -> Result<(), BoxError> {
    let (url, _redis_server) = lock_examples::redis_url()?;
    let run = run_id();
    let mut ledger = Ledger::connect(&url, &run).await?;
    let mut accounts = vec!["alice".to_string()];
    accounts.extend((0..OTHER_ACCOUNTS).map(|i| format!("acct-{i}")));
    for account in &accounts {
        ledger.set_balance(account, START_BALANCE).await?;
    }

    let servers = [
        start_server(&url, &run).await?,
        start_server(&url, &run).await?,
    ];
    println!("servers: {} and {}", servers[0].base, servers[1].base);
    let http: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();

    // 1. Many withdrawals from one account, spread over both servers.
    let replies = try_join_all(
        (0..SAME_ACCOUNT_REQUESTS).map(|i| post_withdraw(&http, &servers[i % 2].base, "alice")),
    )
    .await?;
    let count = |status: StatusCode| replies.iter().filter(|r| r.status == status).count();
    let (accepted, refused) = (count(StatusCode::OK), count(StatusCode::CONFLICT));
    let balance = ledger.balance("alice").await?;
    println!(
        "one account, {SAME_ACCOUNT_REQUESTS} concurrent withdrawals of {AMOUNT} over 2 servers: \
         {accepted} accepted, {refused} refused (insufficient funds), final balance {balance}"
    );
    if let Some(bad) = replies
        .iter()
        .find(|r| r.status != StatusCode::OK && r.status != StatusCode::CONFLICT)
    {
        return Err(format!("unexpected answer: {} {}", bad.status, bad.text).into());
    }
    let expected = (START_BALANCE / AMOUNT) as usize;
    if accepted != expected || balance != 0 {
        return Err(format!(
            "lost update: expected {expected} accepted and balance 0, \
             got {accepted} accepted and balance {balance}"
        )
        .into());
    }

    // 2. One withdrawal from each of several accounts at once.
    let replies = try_join_all(
        accounts[1..]
            .iter()
            .enumerate()
            .map(|(i, account)| post_withdraw(&http, &servers[i % 2].base, account)),
    )
    .await?;
    if let Some(bad) = replies.iter().find(|r| r.status != StatusCode::OK) {
        return Err(format!("unexpected answer: {} {}", bad.status, bad.text).into());
    }
    let max_concurrent = replies
        .iter()
        .filter_map(Reply::concurrent)
        .max()
        .unwrap_or(0);
    println!(
        "{OTHER_ACCOUNTS} different accounts at once: up to {max_concurrent} withdrawals ran concurrently"
    );
    if max_concurrent < 2 {
        return Err("different accounts did not run concurrently".into());
    }

    // 3. The lock metrics of one server (Prometheus text format).
    let res = http
        .get(format!("{}/metrics", servers[0].base).parse()?)
        .await?;
    let page = res.into_body().collect().await?.to_bytes();
    println!("lock metrics of server 1:");
    for line in String::from_utf8_lossy(&page)
        .lines()
        .filter(|l| l.starts_with("lock_") && !l.contains("_bucket"))
    {
        println!("  {line}");
    }

    // 4. Both servers stop gracefully and give back their locks.
    for (i, server) in servers.into_iter().enumerate() {
        println!("server {}: {}", i + 1, server.stop().await?);
    }
    let left = ledger.lock_keys().await?;
    if !left.is_empty() {
        return Err(format!("locks left behind after shutdown: {left:?}").into());
    }

    for account in &accounts {
        ledger.remove(account).await?;
    }
    println!("ok: one account serialized across processes, different accounts concurrent, no lock left behind");
    Ok(())
}
