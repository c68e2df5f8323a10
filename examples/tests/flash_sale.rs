//! Runs the flash-sale demo (a smaller load) and checks the lock's promise:
//! the locked round sells exactly the stock and leaves it at 0.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_flash_sale");
const LIMIT: Duration = Duration::from_secs(240);
/// A small locked round: 2 processes x 5 buyers, 15 units.
const SMALL_LOCKED_ROUND: [&str; 8] = [
    "--processes",
    "2",
    "--buyers",
    "5",
    "--stock",
    "15",
    "--rounds",
    "locked",
];

/// Runs the demo with `args`; returns its exit success and JSON lines.
fn demo(args: &[&str], url: Option<&str>) -> (bool, Vec<Value>, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .arg("--json")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(url) = url {
        cmd.args(["--url", url]);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn the demo: {e}"));
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("the demo did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let rows = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    (status.success(), rows, stderr)
}

#[test]
fn the_locked_round_sells_exactly_the_stock_with_a_private_redis() {
    let (ok, rows, stderr) = demo(
        &["--processes", "3", "--buyers", "10", "--stock", "40"],
        None,
    );
    assert!(ok, "demo failed: {stderr}");
    assert!(
        stderr.contains("started a private redis-server"),
        "{stderr}"
    );
    assert!(
        stderr.contains("stopped the private redis-server"),
        "{stderr}"
    );
    assert_eq!(rows.len(), 2, "{rows:?}");
    let unlocked = &rows[0];
    assert_eq!(unlocked["mode"], "unlocked");
    // Probabilistic, so only reported: how much the naive buyers oversold.
    eprintln!("unlocked round oversold {} of 40", unlocked["oversold"]);
    let locked = &rows[1];
    assert_eq!(locked["mode"], "locked");
    assert_eq!(locked["sold"], 40, "{locked}");
    assert_eq!(locked["final_stock"], 0, "{locked}");
    assert_eq!(locked["oversold"], 0, "{locked}");
}

#[test]
fn the_demo_uses_the_given_redis_and_leaves_no_stock_key_behind() {
    let server = lock_tests::RedisServer::start().expect("redis-server");
    let (ok, rows, stderr) = demo(&SMALL_LOCKED_ROUND, Some(&server.url()));
    assert!(ok, "demo failed: {stderr}");
    assert!(!stderr.contains("private redis-server"), "{stderr}");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0]["sold"].as_u64(), rows[0]["final_stock"].as_i64()),
        (Some(15), Some(0))
    );
    let stock = server
        .command(&["EXISTS", "flash-sale:stock:sku-42"])
        .expect("EXISTS");
    assert_eq!(stock.as_i64(), Some(0), "the stock key is removed");
    let locks = server
        .command(&["EXISTS", "flash-sale:lock:stock:sku-42"])
        .expect("EXISTS");
    assert_eq!(locks.as_i64(), Some(0), "the lock is released");
}

#[test]
fn the_demo_runs_unchanged_on_a_cluster_and_through_sentinel() {
    let locked_round = |url: &str| {
        let (ok, rows, stderr) = demo(&SMALL_LOCKED_ROUND, Some(url));
        assert!(ok, "demo failed on {url}: {stderr}");
        assert_eq!(
            (rows[0]["sold"].as_u64(), rows[0]["final_stock"].as_i64()),
            (Some(15), Some(0)),
            "{url}"
        );
    };
    let cluster = lock_tests::RedisCluster::start(3, 0).expect("cluster");
    locked_round(&cluster.url());
    let slot = cluster.key_slot("flash-sale:stock:sku-42").expect("slot");
    let node = &cluster.nodes()[cluster.primary_for_slot(slot).expect("primary")];
    let stock = node
        .command(&["EXISTS", "flash-sale:stock:sku-42"])
        .expect("EXISTS");
    assert_eq!(stock.as_i64(), Some(0), "the stock key is removed");

    let sentinel = lock_tests::SentinelSet::start("shop").expect("sentinel set");
    locked_round(&sentinel.url());
}
