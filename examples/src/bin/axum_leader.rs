//! An axum service with a leader-only background job: every replica
//! serves requests, and exactly one at a time runs the "outbox relay" — a
//! job that must never run twice at once.
//!
//! Run it with `cargo run -p lock-examples --bin axum_leader`. It uses the
//! Redis at `$REDIS_URL` when set, otherwise it starts a private
//! `redis-server` for the run (the binary must be installed).
//!
//! What it does: starts three server processes (this program with
//! `serve`), each with its own lock client (a 1 s watchdog, so that a
//! crashed leader is replaced within about a second). Each runs the job
//! with `Election::run_as_leader`; the job writes one line per round to a
//! log list in Redis through a fenced write (refused once its writer is no
//! longer the leader there). Then
//! 1. asks every server `GET /leader`: all three name the same leader;
//! 2. kills the leader process (SIGKILL): another server takes over after
//!    the dead one's lease (the fail-over time is printed);
//! 3. stops the new leader gracefully (its standard input closes): it
//!    resigns on shutdown and the last server takes over at once;
//! 4. reads the job's log from Redis: every line's term and writer, in
//!    Redis' order — terms only grow, each term has one writer, and no
//!    term comes back after a later one: the job never ran twice at once.
//!
//! It exits non-zero when any check fails.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use lock_core::{Election, FencedScript, Leadership, LockClient};
use lock_examples::ledger::run_id;
use lock_examples::BoxError;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The election (and lock) of the job; the hash tag keeps the job's log
/// in the lock's cluster slot, as fenced writes need.
const ELECTION: &str = "jobs:{outbox}";
/// How often the leader runs one round of the job.
const ROUND: Duration = Duration::from_millis(50);
/// The watchdog timeout of the servers' clients: a crashed leader's lock
/// expires after this.
const WATCHDOG: Duration = Duration::from_secs(1);
/// Bound on each wait of the demo.
const WAIT: Duration = Duration::from_secs(15);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        let (Some(url), Some(run), Some(name)) = (args.get(2), args.get(3), args.get(4)) else {
            return Err("usage: axum_leader serve <redis-url> <run-id> <server-name>".into());
        };
        return serve(url, run, name).await;
    }
    demo().await
}

// ---------------------------------------------------------------- server

/// The job's log: one line `<term> <server> <server time µs>` per round.
fn log_key(run: &str) -> String {
    format!("example:{run}:{ELECTION}:log")
}

/// One round of the job, fenced: Redis appends the line only while the
/// caller still leads.
fn round_script() -> FencedScript {
    FencedScript::new(
        "local t = redis.call('time')
         return redis.call('rpush', KEYS[1], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. t[1] .. string.format('%06d', tonumber(t[2])))",
    )
}

/// The leader's job: a round every [`ROUND`] until the leadership ends
/// (`run_as_leader` drops this future the moment it is lost).
async fn relay(leadership: Leadership, log: String, name: String) {
    let script = round_script();
    let term = leadership.term().to_string();
    // Bounded by the leadership: a refused write ends it, and a lost
    // leadership drops this future.
    loop {
        let written: Result<i64, _> = leadership
            .fence()
            .eval(&script, &[&log], &[&term, &name])
            .await;
        match written {
            Ok(_) => {}
            Err(e) if e.is_fence_refused() => return,
            Err(e) => eprintln!("{name}: a round failed: {e}"),
        }
        tokio::time::sleep(ROUND).await;
    }
}

#[derive(Clone)]
struct AppState {
    election: Election,
}

/// `GET /leader`: who leads, as Redis says.
async fn leader(State(state): State<AppState>) -> String {
    match state.election.leader().await {
        Ok(Some(l)) => format!(
            "value={} term={}\n",
            l.value().unwrap_or("?"),
            l.term().map_or("?".into(), |t| t.to_string())
        ),
        Ok(None) => "none\n".into(),
        Err(e) => format!("error={e}\n"),
    }
}

/// One server process: prints `listening on <addr>`, runs the job when it
/// leads, and serves until its standard input closes; then it shuts its
/// client down (resigning if it leads) and prints `shut down`.
async fn serve(redis_url: &str, run: &str, name: &str) -> Result<(), BoxError> {
    let client = LockClient::builder(redis_url)
        .key_prefix(format!("example:{run}:"))
        .watchdog_timeout(WATCHDOG)
        .build()?;
    let election = client.election(ELECTION)?;
    let job = tokio::spawn({
        let election = election.clone();
        let (log, name) = (log_key(run), name.to_owned());
        async move {
            election
                .run_as_leader(name.clone(), move |leadership| {
                    relay(leadership, log.clone(), name.clone())
                })
                .await
        }
    });
    let app = Router::new()
        .route("/leader", get(leader))
        .route("/health", get(|| async { "ok" }))
        .with_state(AppState { election });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(stdin_closed())
        .await?;
    job.abort();
    // Gives back the leadership (and wakes the next campaigner), at most 5 s.
    let report = client.shutdown(Duration::from_secs(5)).await;
    println!("shut down: released {}", report.released);
    Ok(())
}

async fn stdin_closed() {
    // A plain thread: tokio's stdin would keep the runtime from stopping.
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        let _ = tx.send(());
    });
    let _ = rx.await;
}

// ---------------------------------------------------------------- demo

struct ServerProcess {
    name: String,
    child: Child,
    base: String,
}

async fn start_server(url: &str, run: &str, name: &str) -> Result<ServerProcess, BoxError> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["serve", url, run, name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .map_err(|_| "server did not start in time")??
        .ok_or("server exited before listening")?;
    let addr = line
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("unexpected server output: {line}"))?;
    // The rest of its output is not needed; keep the pipe drained.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(ServerProcess {
        name: name.to_owned(),
        child,
        base: format!("http://{addr}"),
    })
}

async fn get_text(
    http: &Client<HttpConnector, Empty<Bytes>>,
    url: &str,
) -> Result<String, BoxError> {
    let res = tokio::time::timeout(WAIT, http.get(url.parse()?))
        .await
        .map_err(|_| "no answer in time")??;
    let body = res.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&body).trim().to_owned())
}

/// One line of the job's log.
#[derive(Debug)]
struct Round {
    term: u64,
    server: String,
    at_us: u64,
}

async fn read_log(
    redis: &mut redis::aio::MultiplexedConnection,
    run: &str,
) -> Result<Vec<Round>, BoxError> {
    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg(log_key(run))
        .arg(0)
        .arg(-1)
        .query_async(redis)
        .await?;
    lines
        .iter()
        .map(|line| {
            let mut parts = line.split(' ');
            let (Some(term), Some(server), Some(at)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(format!("bad log line {line:?}").into());
            };
            Ok(Round {
                term: term.parse()?,
                server: server.to_owned(),
                at_us: at.parse()?,
            })
        })
        .collect()
}

/// Waits until the log has a round of a term above `after`; returns it.
async fn next_term(
    redis: &mut redis::aio::MultiplexedConnection,
    run: &str,
    after: u64,
) -> Result<Round, BoxError> {
    let began = Instant::now();
    while began.elapsed() < WAIT {
        if let Some(round) = read_log(redis, run)
            .await?
            .into_iter()
            .find(|r| r.term > after)
        {
            return Ok(round);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("no new leader's round within {WAIT:?}").into())
}

async fn server_time_us(redis: &mut redis::aio::MultiplexedConnection) -> Result<u64, BoxError> {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(redis).await?;
    Ok(s * 1_000_000 + us)
}

async fn demo() -> Result<(), BoxError> {
    let (url, _redis_server) = lock_examples::redis_url()?;
    let run = run_id();
    let mut redis = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let mut servers = Vec::new();
    for i in 0..3 {
        servers.push(start_server(&url, &run, &format!("server-{i}")).await?);
    }
    let http: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();

    // 1. One leader, named alike by every server.
    let first = next_term(&mut redis, &run, 0).await?;
    // (a few rounds of each leader, for the log)
    let rounds = ROUND * 6;
    tokio::time::sleep(rounds).await;
    let mut views = Vec::new();
    for s in &servers {
        views.push(get_text(&http, &format!("{}/leader", s.base)).await?);
    }
    println!("GET /leader on each server: {views:?}");
    let expected = format!("value={} term={}", first.server, first.term);
    if views.iter().any(|v| *v != expected) {
        return Err(format!("the servers disagree on the leader (expected {expected:?})").into());
    }

    // 2. The leader crashes: another takes over after the lease.
    let victim = servers
        .iter()
        .position(|s| s.name == first.server)
        .ok_or("the leader is none of the servers")?;
    let mut dead = servers.remove(victim);
    let killed_at = server_time_us(&mut redis).await?;
    dead.child.start_kill()?;
    let _ = dead.child.wait().await;
    let second = next_term(&mut redis, &run, first.term).await?;
    println!(
        "killed the leader {} (SIGKILL): {} leads (term {}) {} ms later (the dead leader's lease: {} ms)",
        first.server,
        second.server,
        second.term,
        second.at_us.saturating_sub(killed_at) / 1000,
        WATCHDOG.as_millis()
    );

    tokio::time::sleep(rounds).await;

    // 3. The new leader stops gracefully: it resigns, the last one leads at once.
    let leaving = servers
        .iter()
        .position(|s| s.name == second.server)
        .ok_or("the new leader is none of the servers")?;
    let mut leaving = servers.remove(leaving);
    let stopped_at = server_time_us(&mut redis).await?;
    drop(leaving.child.stdin.take());
    tokio::time::timeout(WAIT, leaving.child.wait())
        .await
        .map_err(|_| "the leader did not stop in time")??;
    let third = next_term(&mut redis, &run, second.term).await?;
    println!(
        "stopped the leader {} gracefully: {} leads (term {}) {} ms later",
        second.server,
        third.server,
        third.term,
        third.at_us.saturating_sub(stopped_at) / 1000
    );
    tokio::time::sleep(rounds).await;
    for mut s in servers {
        drop(s.child.stdin.take());
        let _ = tokio::time::timeout(WAIT, s.child.wait()).await;
    }

    // 4. The log, as Redis ordered it: one writer per term, terms only
    // grow, never back to an earlier one.
    let log = read_log(&mut redis, &run).await?;
    let mut writers: BTreeMap<u64, &str> = BTreeMap::new();
    let mut last = 0;
    for round in &log {
        if round.term < last {
            return Err(format!(
                "term {} wrote after term {last}: two leaders at once",
                round.term
            )
            .into());
        }
        last = round.term;
        let writer = writers.entry(round.term).or_insert(&round.server);
        if *writer != round.server {
            return Err(format!(
                "term {} written by {} and {}",
                round.term, writer, round.server
            )
            .into());
        }
    }
    println!(
        "job log: {} rounds by {} terms, in Redis' order: terms only grow and each has one writer — never two leaders at once",
        log.len(),
        writers.len()
    );
    let _: i64 = redis::cmd("DEL")
        .arg(log_key(&run))
        .query_async(&mut redis)
        .await?;
    Ok(())
}
