//! The flash sale: why a distributed lock, and why fenced writes. 100
//! units of one product in Redis, 4 processes of 50 concurrent buyers each,
//! and every buyer does the naive purchase: read the stock, check it is
//! above zero, decrement it. The same load runs twice, first without a lock
//! (buyers that read the same stock all sell the "last" unit: oversold,
//! stock below zero), then with the lock `stock:{sku-42}` around each
//! purchase, whose decrement is a fenced write (exactly 100 sold, stock 0),
//! and a short table compares the two.
//!
//! A third part shows what the lock alone cannot stop: a paused buyer. With
//! 1 unit left, buyer A (a client with a 1 s watchdog lease) takes the lock
//! and reads the stock; the organiser stops it (SIGSTOP) before its
//! decrement, A's lease runs out, buyer B takes the lock and sells the unit;
//! then A is resumed (SIGCONT) and finishes its purchase. Its late decrement
//! is done twice, in two runs: as a plain `DECR`, which lands (the unit is
//! sold twice: stock -1), and through the fence (`guard.fence()`), which
//! Redis refuses with `Error::FenceRefused` (stock stays 0). The organiser
//! reads the stock from Redis itself after B's sale and at the end.
//!
//! The stock key `flash-sale:stock:{sku-42}` has the lock key's hash tag, so
//! on a Redis Cluster both live in one slot (a fenced write may only touch
//! keys of the lock's slot).
//!
//! Run it with `bash scripts/demo.sh`, or
//! `cargo run --release -p lock-examples --no-default-features --bin flash_sale -- --help`
//! (without the features of the axum and tonic examples); `--rounds` picks
//! the parts (`unlocked`, `locked`, `paused`, comma-separated; default all).
//! It uses `--url`, else `$REDIS_URL`, else a private `redis-server` that
//! it starts for the run and stops at the end (the binary must be
//! installed). The buyer processes are copies of this program (`--child`).

use std::process::{ExitCode, Stdio};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use lock_core::{distributed_lock, Fence, HeldLock, LockClient};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines, Stdin};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

/// The product on sale.
const SKU: &str = "sku-42";
/// Prefix of the demo's lock keys, so that the lock `stock:{sku}` and the
/// stock counter never share a key.
const LOCK_PREFIX: &str = "flash-sale:lock:";
/// Bound on one whole round (start, sell out, exit).
const ROUND_LIMIT: Duration = Duration::from_secs(300);
/// The paused buyer's lease: its client's watchdog timeout (renewed every
/// third of it while the process runs, not while it is stopped).
const PAUSED_LEASE: Duration = Duration::from_secs(1);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Parser)]
#[command(
    about = "Flash sale: the same buyers without and with a distributed lock, and a paused buyer's late write with and without a fence"
)]
struct Args {
    /// Redis URL (one server, `redis+sentinel://...` or `redis+cluster://...`);
    /// default $REDIS_URL, else a private redis-server for the run
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    url: Option<String>,
    /// Units in stock at the start of each round
    #[arg(long, default_value_t = 100)]
    stock: u32,
    /// Buyer processes
    #[arg(long, default_value_t = 4)]
    processes: u32,
    /// Concurrent buyers in each process
    #[arg(long, default_value_t = 50)]
    buyers: u32,
    /// Milliseconds between reading the stock and decrementing it (the
    /// payment check); widens the race window a little
    #[arg(long, default_value_t = 1)]
    think_ms: u64,
    /// Which parts to run, comma-separated (`both` = unlocked,locked)
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    rounds: Vec<Rounds>,
    /// Print one JSON line per round instead of the tables
    #[arg(long)]
    json: bool,
    /// Internal: run as a buyer process of this mode
    #[arg(long, value_enum, hide = true)]
    child: Option<Mode>,
    /// Internal: the paused buyer's late decrement
    #[arg(long, value_enum, hide = true, default_value_t = LateWrite::Fenced)]
    late_write: LateWrite,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Rounds {
    /// unlocked, locked and paused
    All,
    /// unlocked and locked
    Both,
    /// the buyers without a lock
    Unlocked,
    /// the buyers with the lock (and fenced decrements)
    Locked,
    /// a paused buyer's late decrement, plain and fenced
    Paused,
}

impl Rounds {
    fn includes(self, part: Rounds) -> bool {
        self == part
            || self == Rounds::All
            || (self == Rounds::Both && matches!(part, Rounds::Unlocked | Rounds::Locked))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Unlocked,
    Locked,
    Paused,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Unlocked => "no lock",
            Mode::Locked => "with lock",
            Mode::Paused => "paused",
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Mode::Unlocked => "unlocked",
            Mode::Locked => "locked",
            Mode::Paused => "paused",
        }
    }
}

/// How the paused buyer does its late decrement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LateWrite {
    /// a plain `DECR`
    Plain,
    /// `guard.fence().incr_by(key, -1)`
    Fenced,
}

impl LateWrite {
    fn arg(self) -> &'static str {
        match self {
            LateWrite::Plain => "plain",
            LateWrite::Fenced => "fenced",
        }
    }
}

// ------------------------------------------------------------------ the shop

/// What can go wrong in a purchase.
#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error("lock: {0}")]
    Lock(#[from] lock_core::Error),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("the purchase runs outside its lock's section")]
    NotLocked,
}

/// One buyer process's view of the shop: the stock in Redis and the locks.
#[derive(Clone)]
struct Shop {
    redis: lock_core::RedisConnection,
    locks: LockClient,
    think: Duration,
}

/// The stock counter: `{sku}` is its hash tag, the same as the lock's
/// (`stock:{sku}`), so that on a cluster both are in one slot, as a fenced
/// write needs.
fn stock_key(sku: &str) -> String {
    format!("flash-sale:stock:{{{sku}}}")
}

/// The name of the lock on `sku`'s stock (the macro of [`buy`] builds the
/// same name from its template).
fn lock_name(sku: &str) -> String {
    format!("stock:{{{sku}}}")
}

impl Shop {
    async fn stock(&self, sku: &str) -> Result<i64, ShopError> {
        let mut redis = self.redis.clone();
        let stock: Option<i64> = redis::cmd("GET")
            .arg(stock_key(sku))
            .query_async(&mut redis)
            .await?;
        Ok(stock.unwrap_or(0))
    }

    /// Takes one unit off the stock: through `fence` (Redis applies it
    /// only while the fence's hold is still the lock's holder), or a plain
    /// `DECR` without one. The stock after.
    async fn decrement(&self, sku: &str, fence: Option<&Fence>) -> Result<i64, ShopError> {
        let key = stock_key(sku);
        match fence {
            Some(fence) => Ok(fence.incr_by(&key, -1).await?),
            None => {
                let mut redis = self.redis.clone();
                Ok(redis::cmd("DECR").arg(&key).query_async(&mut redis).await?)
            }
        }
    }

    /// The naive purchase: read the stock, check it, take one unit. Two
    /// buyers that read the same stock both sell the same unit.
    async fn take_one(&self, sku: &str, fence: Option<&Fence>) -> Result<bool, ShopError> {
        if self.stock(sku).await? <= 0 {
            return Ok(false);
        }
        tokio::time::sleep(self.think).await; // the payment check
        self.decrement(sku, fence).await?;
        Ok(true)
    }
}

/// The purchase under the distributed lock `stock:{sku}` (`{{`/`}}` are
/// literal braces: the lock of `sku-42` is `stock:{sku-42}`, a cluster
/// hash tag): one buyer at a time, across every process, reads and
/// decrements the stock, and the decrement is fenced by the section's
/// hold. The macro builds the key from `sku`, takes the lock before the
/// body and releases it after (also on `?`, panic or cancellation); a lock
/// error (a refused fenced write too) comes back as
/// `ShopError::from(lock_core::Error)`.
#[distributed_lock(key = "stock:{{{sku}}}", client = shop.locks.clone())]
async fn buy(shop: &Shop, sku: &str) -> Result<bool, ShopError> {
    let held = HeldLock::current().ok_or(ShopError::NotLocked)?;
    shop.take_one(sku, Some(&held.fence())).await
}

// ------------------------------------------------------------- buyer process

async fn connect(url: &str, lease: Option<Duration>) -> Result<Shop, BoxError> {
    let mut builder = LockClient::builder(url).key_prefix(LOCK_PREFIX);
    if let Some(lease) = lease {
        builder = builder.watchdog_timeout(lease);
    }
    let locks = builder.build()?;
    locks.ping().await?;
    // The stock lives where the locks do (one server, Sentinel or cluster).
    let redis = locks.redis_connection().await?;
    Ok(Shop {
        redis,
        locks,
        think: Duration::ZERO,
    })
}

async fn read_go(stdin: &mut Lines<BufReader<Stdin>>) -> Result<(), BoxError> {
    match stdin.next_line().await? {
        Some(_) => Ok(()),
        None => Err("stdin closed".into()),
    }
}

/// A buyer process: connect, say READY, wait for `go` on stdin, run the
/// buyers until the stock is gone, say `DONE <units sold here>`.
async fn child(mode: Mode, args: &Args) -> Result<(), BoxError> {
    let url = args.url.clone().ok_or("a buyer process needs --url")?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    if mode == Mode::Paused {
        return paused_buyer(&url, args.late_write, &mut stdin).await;
    }
    let shop = Shop {
        think: Duration::from_millis(args.think_ms),
        ..connect(&url, None).await?
    };
    println!("READY");
    read_go(&mut stdin).await?;

    let mut buyers = Vec::new();
    for _ in 0..args.buyers {
        let shop = shop.clone();
        buyers.push(tokio::spawn(async move {
            let mut sold = 0u64;
            // Each buyer buys one unit at a time until it sees none left.
            loop {
                let bought = match mode {
                    Mode::Locked => buy(&shop, SKU).await?,
                    _ => shop.take_one(SKU, None).await?,
                };
                if !bought {
                    return Ok::<_, ShopError>(sold);
                }
                sold += 1;
            }
        }));
    }
    let mut sold = 0;
    for buyer in buyers {
        sold += buyer.await??;
    }
    println!("DONE {sold}");
    Ok(())
}

/// Buyer A of the paused part: a client with a short watchdog lease takes
/// the lock, reads the stock and checks that it still holds the lock
/// (`READ <stock> HELD <true|false> TOKEN <token>`); the organiser stops
/// this process here, between that check and the decrement (the payment
/// check), and resumes it after another buyer has taken the lock and sold.
/// On `go` it does its late decrement, `late`, and says `LATE applied
/// <stock after>` or `LATE refused`, then `RELEASE ok` or `RELEASE lost`.
async fn paused_buyer(
    url: &str,
    late: LateWrite,
    stdin: &mut Lines<BufReader<Stdin>>,
) -> Result<(), BoxError> {
    let shop = connect(url, Some(PAUSED_LEASE)).await?;
    println!("READY");
    read_go(stdin).await?;
    let guard = shop.locks.lock(lock_name(SKU))?.acquire().await?;
    let stock = shop.stock(SKU).await?;
    println!(
        "READ {stock} HELD {} TOKEN {}",
        guard.is_held(),
        guard.fencing_token()
    );
    read_go(stdin).await?; // stopped here, past the lease
    if stock > 0 {
        let fence = guard.fence();
        let fence = (late == LateWrite::Fenced).then_some(&fence);
        match shop.decrement(SKU, fence).await {
            Ok(after) => println!("LATE applied {after}"),
            Err(ShopError::Lock(e)) if e.is_fence_refused() => println!("LATE refused"),
            Err(e) => return Err(e.into()),
        }
    }
    match guard.release().await {
        Ok(()) => println!("RELEASE ok"),
        Err(e) if e.is_lost() => println!("RELEASE lost"),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

// ------------------------------------------------------------ the organiser

/// The outcome of one round.
struct Row {
    mode: Mode,
    sold: u64,
    final_stock: i64,
    elapsed: Duration,
}

impl Row {
    fn oversold(&self, stock: u32) -> u64 {
        self.sold.saturating_sub(u64::from(stock))
    }

    fn per_second(&self) -> f64 {
        self.sold as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A buyer process and its stdout lines.
struct Buyer {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Buyer {
    async fn expect_line(&mut self, prefix: &str) -> Result<String, BoxError> {
        loop {
            match self.lines.next_line().await? {
                Some(line) if line.starts_with(prefix) => return Ok(line),
                Some(_) => continue,
                None => return Err(format!("a buyer process exited before {prefix}").into()),
            }
        }
    }

    async fn send_go(&mut self) -> Result<(), BoxError> {
        let stdin = self.child.stdin.as_mut().ok_or("no stdin")?;
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
        Ok(())
    }

    async fn finish(mut self) -> Result<(), BoxError> {
        let status = self.child.wait().await?;
        if !status.success() {
            return Err(format!("a buyer process failed: {status}").into());
        }
        Ok(())
    }

    fn signal(&self, signal: Signal) -> Result<(), BoxError> {
        let pid = self.child.id().ok_or("the buyer process has exited")?;
        kill(Pid::from_raw(i32::try_from(pid)?), signal)?;
        Ok(())
    }
}

/// Starts a buyer process of `mode` with `buyers` concurrent buyers (the
/// paused buyer A: with its late write `late`).
async fn spawn_buyer(
    mode: Mode,
    url: &str,
    buyers: u32,
    think_ms: u64,
    late: LateWrite,
) -> Result<Buyer, BoxError> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--child", mode.arg(), "--url", url])
        .args(["--buyers", &buyers.to_string()])
        .args(["--think-ms", &think_ms.to_string()])
        .args(["--late-write", late.arg()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    Ok(Buyer {
        child,
        lines: BufReader::new(stdout).lines(),
    })
}

/// The organiser's own connection, an observer independent of the buyers.
async fn observer(url: &str) -> Result<lock_core::RedisConnection, BoxError> {
    Ok(LockClient::builder(url).build()?.redis_connection().await?)
}

async fn get_stock(redis: &mut lock_core::RedisConnection) -> Result<i64, BoxError> {
    let value: Option<i64> = redis::cmd("GET")
        .arg(stock_key(SKU))
        .query_async(redis)
        .await?;
    Ok(value.unwrap_or(0))
}

async fn set_stock(redis: &mut lock_core::RedisConnection, stock: u32) -> Result<(), BoxError> {
    let _: () = redis::cmd("SET")
        .arg(stock_key(SKU))
        .arg(stock)
        .query_async(redis)
        .await?;
    Ok(())
}

async fn del_stock(redis: &mut lock_core::RedisConnection) -> Result<(), BoxError> {
    let _: () = redis::cmd("DEL")
        .arg(stock_key(SKU))
        .query_async(redis)
        .await?;
    Ok(())
}

/// Sets the stock, starts the buyer processes, lets them all go at once,
/// and measures until the last one has sold out.
async fn round(mode: Mode, url: &str, args: &Args) -> Result<Row, BoxError> {
    let mut redis = observer(url).await?;
    set_stock(&mut redis, args.stock).await?;

    let mut buyers = Vec::new();
    for _ in 0..args.processes {
        buyers.push(spawn_buyer(mode, url, args.buyers, args.think_ms, args.late_write).await?);
    }
    for buyer in &mut buyers {
        buyer.expect_line("READY").await?;
    }
    let started = Instant::now();
    for buyer in &mut buyers {
        buyer.send_go().await?;
    }
    let mut sold = 0u64;
    for buyer in &mut buyers {
        let line = buyer.expect_line("DONE ").await?;
        sold += line["DONE ".len()..].trim().parse::<u64>()?;
    }
    let elapsed = started.elapsed();
    for buyer in buyers {
        buyer.finish().await?;
    }
    let final_stock = get_stock(&mut redis).await?;
    del_stock(&mut redis).await?;
    Ok(Row {
        mode,
        sold,
        final_stock,
        elapsed,
    })
}

/// One run of the paused part.
struct PausedRun {
    late: LateWrite,
    /// Buyer A's fencing token.
    token: u64,
    /// Whether A's guard said "held" right before A was stopped.
    held_before_pause: bool,
    /// How long A was stopped.
    paused: Duration,
    /// Units buyer B sold while A was stopped.
    b_sold: u64,
    /// The stock after B's sale, read by the organiser.
    stock_after_b: i64,
    /// A's late decrement: `Some(stock after)` when applied, `None` when refused.
    late_outcome: Option<i64>,
    /// Whether A's release found the lock still held.
    released_held: bool,
    /// The stock at the end, read by the organiser.
    final_stock: i64,
}

impl PausedRun {
    /// What this run must show: the plain late write lands on the stock B
    /// left (one unit sold twice), the fenced one is refused (stock intact).
    fn as_expected(&self) -> bool {
        let sold_out = self.b_sold == 1 && self.stock_after_b == 0;
        sold_out
            && self.held_before_pause
            && !self.released_held
            && match self.late {
                LateWrite::Plain => self.late_outcome == Some(-1) && self.final_stock == -1,
                LateWrite::Fenced => self.late_outcome.is_none() && self.final_stock == 0,
            }
    }
}

/// The paused part, one run: 1 unit left; buyer A takes the lock and reads
/// it; A is stopped; buyer B (a process of the locked round) takes the
/// lock once A's lease has run out in Redis and sells the unit; A is
/// resumed and does its late decrement, `late`.
async fn paused_run(late: LateWrite, url: &str, args: &Args) -> Result<PausedRun, BoxError> {
    let mut redis = observer(url).await?;
    set_stock(&mut redis, 1).await?;
    let mut a = spawn_buyer(Mode::Paused, url, 1, 0, late).await?;
    let mut b = spawn_buyer(Mode::Locked, url, 1, args.think_ms, late).await?;
    a.expect_line("READY").await?;
    b.expect_line("READY").await?;

    a.send_go().await?;
    let read = a.expect_line("READ ").await?;
    let words: Vec<&str> = read.split(' ').collect();
    let (held_before_pause, token) = match words[..] {
        ["READ", _, "HELD", held, "TOKEN", token] => (held == "true", token.parse::<u64>()?),
        _ => return Err(format!("buyer A: {read}").into()),
    };
    // A holds the lock and has read the stock: stop it before its decrement.
    a.signal(Signal::SIGSTOP)?;
    let stopped = Instant::now();
    // B waits for the lock (A's watchdog is stopped too, so A's lease runs
    // out in Redis), then sells the unit.
    b.send_go().await?;
    let done = b.expect_line("DONE ").await?;
    let b_sold = done["DONE ".len()..].trim().parse::<u64>()?;
    b.finish().await?;
    let stock_after_b = get_stock(&mut redis).await?;
    a.signal(Signal::SIGCONT)?;
    let paused = stopped.elapsed();
    a.send_go().await?;
    let late_line = a.expect_line("LATE ").await?;
    let late_outcome = match late_line.strip_prefix("LATE applied ") {
        Some(after) => Some(after.trim().parse::<i64>()?),
        None if late_line == "LATE refused" => None,
        None => return Err(format!("buyer A: {late_line}").into()),
    };
    let released_held = a.expect_line("RELEASE ").await? == "RELEASE ok";
    a.finish().await?;
    let final_stock = get_stock(&mut redis).await?;
    del_stock(&mut redis).await?;
    Ok(PausedRun {
        late,
        token,
        held_before_pause,
        paused,
        b_sold,
        stock_after_b,
        late_outcome,
        released_held,
        final_stock,
    })
}

fn print_table(rows: &[Row], args: &Args) {
    println!(
        "flash sale: {} units of {SKU}, {} processes x {} concurrent buyers; each buyer reads the stock, checks it, decrements it",
        args.stock, args.processes, args.buyers
    );
    println!();
    println!(
        "{:<10} {:>6} {:>12} {:>9} {:>9} {:>12}",
        "mode", "sold", "final stock", "oversold", "elapsed", "purchases/s"
    );
    for row in rows {
        println!(
            "{:<10} {:>6} {:>12} {:>9} {:>7.2} s {:>12.0}",
            row.mode.label(),
            row.sold,
            row.final_stock,
            row.oversold(args.stock),
            row.elapsed.as_secs_f64(),
            row.per_second()
        );
    }
    println!();
    for row in rows {
        match row.mode {
            Mode::Unlocked if row.oversold(args.stock) > 0 => println!(
                "no lock:   {} units sold that did not exist (buyers read the same stock and all sold the \"last\" unit)",
                row.oversold(args.stock)
            ),
            Mode::Unlocked => println!("no lock:   no oversell this time (the race is timing-dependent; run again)"),
            _ => println!(
                "with lock: {} sold, stock {}: never more than there was",
                row.sold, row.final_stock
            ),
        }
    }
}

fn print_paused(runs: &[PausedRun], separate: bool) {
    if separate {
        println!();
    }
    println!(
        "paused buyer: 1 unit left. Buyer A (a {} s lease, renewed by its watchdog) takes the lock, reads the stock",
        PAUSED_LEASE.as_secs_f64()
    );
    println!("and checks is_held(): true. Then A is stopped (SIGSTOP) before its decrement, its lease runs out, buyer B");
    println!("takes the lock and sells the unit; A is resumed (SIGCONT) and decrements. Two runs; stock read from Redis:");
    println!();
    println!(
        "{:<20} {:>9} {:>6} {:>13}  {:<22} {:>11}",
        "A's late write", "A stopped", "B sold", "stock after B", "A's decrement", "final stock"
    );
    for run in runs {
        let outcome = match run.late_outcome {
            Some(after) => format!("applied (-> {after})"),
            None => "refused (FenceRefused)".to_string(),
        };
        let write = match run.late {
            LateWrite::Plain => "plain DECR",
            LateWrite::Fenced => "fenced (guard.fence)",
        };
        println!(
            "{:<20} {:>7.2} s {:>6} {:>13}  {:<22} {:>11}",
            write,
            run.paused.as_secs_f64(),
            run.b_sold,
            run.stock_after_b,
            outcome,
            run.final_stock
        );
    }
    println!();
    for run in runs {
        match (run.late, run.late_outcome) {
            (LateWrite::Plain, Some(_)) => println!(
                "plain DECR: lands: A sells the unit B already sold (stock {}); the lock alone cannot stop a paused holder's late write",
                run.final_stock
            ),
            (LateWrite::Fenced, None) => println!(
                "fenced:     refused, nothing written (stock {}): the holder check is part of the write, and A's hold ended while it was stopped",
                run.final_stock
            ),
            (_, Some(after)) => println!("{}: applied (stock {after})", run.late.arg()),
            (_, None) => println!("{}: refused (stock {})", run.late.arg(), run.final_stock),
        }
    }
}

fn print_json(rows: &[Row], runs: &[PausedRun], args: &Args) {
    for row in rows {
        println!(
            "{}",
            serde_json::json!({
                "mode": row.mode.arg(),
                "stock": args.stock,
                "sold": row.sold,
                "final_stock": row.final_stock,
                "oversold": row.oversold(args.stock),
                "elapsed_ms": row.elapsed.as_millis() as u64,
                "purchases_per_s": row.per_second().round(),
            })
        );
    }
    for run in runs {
        println!(
            "{}",
            serde_json::json!({
                "mode": Mode::Paused.arg(),
                "late_write": run.late.arg(),
                "stock": 1,
                "lease_ms": PAUSED_LEASE.as_millis() as u64,
                "paused_ms": run.paused.as_millis() as u64,
                "token": run.token,
                "held_before_pause": run.held_before_pause,
                "next_buyer_sold": run.b_sold,
                "stock_after_next_buyer": run.stock_after_b,
                "late_write_applied": run.late_outcome.is_some(),
                "late_write_result": run.late_outcome,
                "release_found_lock_held": run.released_held,
                "final_stock": run.final_stock,
            })
        );
    }
}

async fn organise(args: &Args) -> Result<Vec<String>, BoxError> {
    // Keep the private server (if any) alive until the end.
    let (url, server) = match &args.url {
        Some(url) => (url.clone(), None),
        None => {
            let server = lock_tests::RedisServer::start()?;
            eprintln!(
                "no --url or REDIS_URL: started a private redis-server on {}",
                server.url()
            );
            (server.url(), Some(server))
        }
    };
    let wanted = |part: Rounds| args.rounds.iter().any(|r| r.includes(part));
    let mut rows = Vec::new();
    for (part, mode) in [
        (Rounds::Unlocked, Mode::Unlocked),
        (Rounds::Locked, Mode::Locked),
    ] {
        if !wanted(part) {
            continue;
        }
        let row = tokio::time::timeout(ROUND_LIMIT, round(mode, &url, args))
            .await
            .map_err(|_| {
                format!(
                    "the {} round did not finish within {ROUND_LIMIT:?}",
                    mode.label()
                )
            })??;
        rows.push(row);
    }
    let mut runs = Vec::new();
    if wanted(Rounds::Paused) {
        for late in [LateWrite::Plain, LateWrite::Fenced] {
            let run = tokio::time::timeout(ROUND_LIMIT, paused_run(late, &url, args))
                .await
                .map_err(|_| format!("the paused part did not finish within {ROUND_LIMIT:?}"))??;
            runs.push(run);
        }
    }
    if args.json {
        print_json(&rows, &runs, args);
    } else {
        if !rows.is_empty() {
            print_table(&rows, args);
        }
        if !runs.is_empty() {
            print_paused(&runs, !rows.is_empty());
        }
    }
    if let Some(server) = server {
        drop(server);
        eprintln!("stopped the private redis-server");
    }
    let mut failures = Vec::new();
    // The lock's promise: never more sold than there was, and all of it sold.
    if rows
        .iter()
        .any(|r| r.mode == Mode::Locked && (r.sold != u64::from(args.stock) || r.final_stock != 0))
    {
        failures.push("the locked round sold a different amount than the stock".to_string());
    }
    // The fence's promise: the paused buyer's fenced late write is refused.
    for run in runs.iter().filter(|run| !run.as_expected()) {
        failures.push(format!(
            "the paused buyer's {} late write: not as expected",
            run.late.arg()
        ));
    }
    Ok(failures)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = match args.child {
        Some(mode) => child(mode, &args).await.map(|()| Vec::new()),
        None => organise(&args).await,
    };
    match outcome {
        Ok(failures) if failures.is_empty() => ExitCode::SUCCESS,
        Ok(failures) => {
            for failure in failures {
                eprintln!("error: {failure}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
