//! The flash sale: why a distributed lock. 100 units of one product in
//! Redis, 4 processes of 50 concurrent buyers each, and every buyer does the
//! naive purchase: read the stock, check it is above zero, decrement it.
//! The same load runs twice, first without a lock (buyers that read the
//! same stock all sell the "last" unit: oversold, stock below zero), then
//! with the lock `stock:{sku}` around each purchase (exactly 100 sold,
//! stock 0), and a short table compares the two.
//!
//! Run it with `bash scripts/demo.sh`, or
//! `cargo run --release -p lock-examples --no-default-features --bin flash_sale -- --help`
//! (without the features of the axum and tonic examples). It
//! uses `--url`, else `$REDIS_URL`, else a private `redis-server` that it
//! starts for the run and stops at the end (the binary must be installed).
//! The buyer processes are copies of this program (`--child`).

use std::process::{ExitCode, Stdio};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use lock_core::{distributed_lock, LockClient};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

/// The product on sale.
const SKU: &str = "sku-42";
/// Prefix of the demo's lock keys, so that the lock `stock:{sku}` and the
/// stock counter never share a key.
const LOCK_PREFIX: &str = "flash-sale:lock:";
/// Bound on one whole round (start, sell out, exit).
const ROUND_LIMIT: Duration = Duration::from_secs(300);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Parser)]
#[command(about = "Flash sale: the same buyers without and with a distributed lock")]
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
    /// Which rounds to run
    #[arg(long, value_enum, default_value_t = Rounds::Both)]
    rounds: Rounds,
    /// Print one JSON line per round instead of the table
    #[arg(long)]
    json: bool,
    /// Internal: run as a buyer process of this mode
    #[arg(long, value_enum, hide = true)]
    child: Option<Mode>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Rounds {
    Both,
    Unlocked,
    Locked,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Unlocked,
    Locked,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Unlocked => "no lock",
            Mode::Locked => "with lock",
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Mode::Unlocked => "unlocked",
            Mode::Locked => "locked",
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
}

/// One buyer process's view of the shop: the stock in Redis and the locks.
#[derive(Clone)]
struct Shop {
    redis: lock_core::RedisConnection,
    locks: LockClient,
    think: Duration,
}

fn stock_key(sku: &str) -> String {
    format!("flash-sale:stock:{sku}")
}

impl Shop {
    /// The naive purchase: read the stock, check it, take one unit. Two
    /// buyers that read the same stock both sell the same unit.
    async fn take_one(&self, sku: &str) -> Result<bool, ShopError> {
        let mut redis = self.redis.clone();
        let key = stock_key(sku);
        let stock: Option<i64> = redis::cmd("GET").arg(&key).query_async(&mut redis).await?;
        if stock.unwrap_or(0) <= 0 {
            return Ok(false);
        }
        tokio::time::sleep(self.think).await; // the payment check
        let _: i64 = redis::cmd("DECR").arg(&key).query_async(&mut redis).await?;
        Ok(true)
    }
}

/// The purchase under the distributed lock `stock:{sku}`: one buyer at a
/// time, across every process, reads and decrements the stock. The macro
/// builds the key from `sku`, takes the lock before the body and releases
/// it after (also on `?`, panic or cancellation); a lock error comes back
/// as `ShopError::from(lock_core::Error)`.
#[distributed_lock(key = "stock:{sku}", client = shop.locks.clone())]
async fn buy(shop: &Shop, sku: &str) -> Result<bool, ShopError> {
    shop.take_one(sku).await
}

// ------------------------------------------------------------- buyer process

/// A buyer process: connect, say READY, wait for `go` on stdin, run the
/// buyers until the stock is gone, say `DONE <units sold here>`.
async fn child(mode: Mode, args: &Args) -> Result<(), BoxError> {
    let url = args.url.clone().ok_or("a buyer process needs --url")?;
    let locks = LockClient::builder(url.as_str())
        .key_prefix(LOCK_PREFIX)
        .build()?;
    locks.ping().await?;
    // The stock lives where the locks do (one server, Sentinel or cluster).
    let redis = locks.redis_connection().await?;
    let shop = Shop {
        redis,
        locks,
        think: Duration::from_millis(args.think_ms),
    };
    println!("READY");
    let mut go = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut go)
        .await?;

    let mut buyers = Vec::new();
    for _ in 0..args.buyers {
        let shop = shop.clone();
        buyers.push(tokio::spawn(async move {
            let mut sold = 0u64;
            // Each buyer buys one unit at a time until it sees none left.
            loop {
                let bought = match mode {
                    Mode::Unlocked => shop.take_one(SKU).await?,
                    Mode::Locked => buy(&shop, SKU).await?,
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
}

async fn spawn_buyer(mode: Mode, url: &str, args: &Args) -> Result<Buyer, BoxError> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--child", mode.arg(), "--url", url])
        .args(["--buyers", &args.buyers.to_string()])
        .args(["--think-ms", &args.think_ms.to_string()])
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

async fn redis_int(
    conn: &mut lock_core::RedisConnection,
    cmd: &redis::Cmd,
) -> Result<i64, BoxError> {
    let value: Option<i64> = cmd.query_async(conn).await?;
    Ok(value.unwrap_or(0))
}

/// Sets the stock, starts the buyer processes, lets them all go at once,
/// and measures until the last one has sold out.
async fn round(mode: Mode, url: &str, args: &Args) -> Result<Row, BoxError> {
    let mut redis = LockClient::builder(url).build()?.redis_connection().await?;
    let key = stock_key(SKU);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(args.stock)
        .query_async(&mut redis)
        .await?;

    let mut buyers = Vec::new();
    for _ in 0..args.processes {
        buyers.push(spawn_buyer(mode, url, args).await?);
    }
    for buyer in &mut buyers {
        buyer.expect_line("READY").await?;
    }
    let started = Instant::now();
    for buyer in &mut buyers {
        let stdin = buyer.child.stdin.as_mut().ok_or("no stdin")?;
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
    }
    let mut sold = 0u64;
    for buyer in &mut buyers {
        let line = buyer.expect_line("DONE ").await?;
        sold += line["DONE ".len()..].trim().parse::<u64>()?;
    }
    let elapsed = started.elapsed();
    for mut buyer in buyers {
        let status = buyer.child.wait().await?;
        if !status.success() {
            return Err(format!("a buyer process failed: {status}").into());
        }
    }
    let final_stock = redis_int(&mut redis, redis::cmd("GET").arg(&key)).await?;
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut redis).await?;
    Ok(Row {
        mode,
        sold,
        final_stock,
        elapsed,
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
            Mode::Locked => println!(
                "with lock: {} sold, stock {}: never more than there was",
                row.sold, row.final_stock
            ),
        }
    }
}

fn print_json(rows: &[Row], args: &Args) {
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
}

async fn organise(args: &Args) -> Result<bool, BoxError> {
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
    let modes: &[Mode] = match args.rounds {
        Rounds::Both => &[Mode::Unlocked, Mode::Locked],
        Rounds::Unlocked => &[Mode::Unlocked],
        Rounds::Locked => &[Mode::Locked],
    };
    let mut rows = Vec::new();
    for &mode in modes {
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
    if args.json {
        print_json(&rows, args);
    } else {
        print_table(&rows, args);
    }
    if let Some(server) = server {
        drop(server);
        eprintln!("stopped the private redis-server");
    }
    // The lock's promise: never more sold than there was, and all of it sold.
    Ok(rows
        .iter()
        .filter(|r| r.mode == Mode::Locked)
        .all(|r| r.sold == u64::from(args.stock) && r.final_stock == 0))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = match args.child {
        Some(mode) => child(mode, &args).await.map(|()| true),
        None => organise(&args).await,
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("error: the locked round sold a different amount than the stock");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
