//! `#[distributed_lock]` against real Redis: exclusion, concurrency of
//! different keys, reentrancy, error conversion, `skip_if_locked` against
//! another process, and release on return, `?`, panic and cancellation.
//!
//! No test here installs a default client (see the `macros_default_client`
//! binary), so calls without `client = ...` fail with
//! `Error::NoDefaultClient`.
//! The child processes are this test binary itself, started with
//! `--ignored --exact <this module>::child_process` (`support::spawn_child`)
//! and a role in the environment.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{self, eventually, within};
use lock_core::{distributed_lock, LockClient};
use tokio::sync::{Barrier, Notify};

/// A caller's own error type; lock failures arrive as `Lock`.
#[derive(Debug)]
enum ShopError {
    Lock(lock_core::Error),
    Rejected,
}

impl From<lock_core::Error> for ShopError {
    fn from(err: lock_core::Error) -> Self {
        ShopError::Lock(err)
    }
}

/// Counts how many calls are inside a body at once.
#[derive(Debug, Default)]
struct Probe {
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    runs: AtomicUsize,
}

/// Leaves the probe on drop, so early returns and panics count too.
struct Inside<'a>(&'a Probe);

impl Probe {
    fn enter(&self) -> Inside<'_> {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_inside.fetch_max(now, Ordering::SeqCst);
        self.runs.fetch_add(1, Ordering::SeqCst);
        Inside(self)
    }

    fn max_inside(&self) -> usize {
        self.max_inside.load(Ordering::SeqCst)
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

fn lock(client: &LockClient, name: &str) -> lock_core::Lock {
    client.lock(name).unwrap_or_else(|e| panic!("{e}"))
}

async fn is_locked(client: &LockClient, name: &str) -> bool {
    lock(client, name)
        .is_locked()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------
// Exclusion and concurrency

#[derive(Debug, Default)]
struct Stock {
    left: AtomicU32,
    sold: AtomicU32,
    probe: Probe,
}

/// Read, yield, write: loses updates unless calls are exclusive.
#[distributed_lock(key = "stock:{sku}", client = client)]
async fn buy(client: &LockClient, stock: &Stock, sku: &str) -> Result<u32, ShopError> {
    let _inside = stock.probe.enter();
    let left = stock.left.load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    if left == 0 {
        return Err(ShopError::Rejected);
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    stock.left.store(left - 1, Ordering::SeqCst);
    stock.sold.fetch_add(1, Ordering::SeqCst);
    Ok(left - 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_with_the_same_key_never_overlap_and_never_oversell() {
    let server = support::server();
    // Two clients: two "replicas" with different client ids.
    let clients = [
        support::client_for(&server, 5_000),
        support::client_for(&server, 5_000),
    ];
    let stock = Arc::new(Stock::default());
    stock.left.store(40, Ordering::SeqCst);
    let (tasks, rounds) = (8usize, 8usize);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let client = clients[t % 2].clone();
        let stock = stock.clone();
        // tokio::spawn: the annotated fn's future is Send.
        handles.push(tokio::spawn(async move {
            let (mut bought, mut sold_out) = (0u32, 0u32);
            for _ in 0..rounds {
                match buy(&client, &stock, "sku-1").await {
                    Ok(_) => bought += 1,
                    Err(ShopError::Rejected) => sold_out += 1,
                    Err(e) => panic!("lock failure: {e:?}"),
                }
            }
            (bought, sold_out)
        }));
    }
    let mut total = (0, 0);
    for h in handles {
        let (b, s) = within(Duration::from_secs(60), "buyers", h)
            .await
            .unwrap_or_else(|e| panic!("task: {e}"));
        total = (total.0 + b, total.1 + s);
    }
    assert_eq!(stock.probe.max_inside(), 1, "two calls were inside at once");
    assert_eq!(
        stock.sold.load(Ordering::SeqCst),
        40,
        "oversold or lost updates"
    );
    assert_eq!(stock.left.load(Ordering::SeqCst), 0);
    assert_eq!(total, (40, (tasks * rounds) as u32 - 40));
    assert!(!is_locked(&clients[0], "stock:sku-1").await);
}

/// Waits at a barrier inside the lock: completes only if both calls are
/// inside at the same time.
#[distributed_lock(key = "room:{room}", client = client)]
async fn meet(
    client: &LockClient,
    room: &str,
    barrier: &Barrier,
    probe: &Probe,
) -> Result<(), ShopError> {
    let _inside = probe.enter();
    barrier.wait().await;
    Ok(())
}

#[tokio::test]
async fn calls_with_different_keys_run_concurrently() {
    let env = support::env(5_000);
    let barrier = Barrier::new(2);
    let probe = Probe::default();
    let (a, b) = within(
        Duration::from_secs(10),
        "different keys blocked each other",
        async {
            tokio::join!(
                meet(&env.client, "a", &barrier, &probe),
                meet(&env.client, "b", &barrier, &probe)
            )
        },
    )
    .await;
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    assert_eq!(probe.max_inside(), 2, "the calls never overlapped");
}

// ---------------------------------------------------------------------------
// Reentrancy

/// Recursion: every level re-enters the lock the outer call holds.
#[distributed_lock(key = "tree:{id}", client = client)]
async fn descend(client: &LockClient, id: u32, levels: u32) -> Result<u32, lock_core::Error> {
    if levels == 0 {
        return client.lock(format!("tree:{id}"))?.hold_count().await;
    }
    Box::pin(descend(client, id, levels - 1)).await
}

#[distributed_lock(key = "account:{id}", client = client)]
async fn transfer(client: &LockClient, id: u32) -> Result<u32, lock_core::Error> {
    audit(client, id).await
}

#[distributed_lock(key = "account:{id}", client = client)]
async fn audit(client: &LockClient, id: u32) -> Result<u32, lock_core::Error> {
    client.lock(format!("account:{id}"))?.hold_count().await
}

#[tokio::test]
async fn recursion_and_nested_calls_with_the_same_key_reenter() {
    let env = support::env(5_000);
    let holds = within(
        Duration::from_secs(10),
        "recursion deadlocked",
        descend(&env.client, 7, 3),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(holds, 4, "four nested holds of one lock");
    let holds = within(
        Duration::from_secs(10),
        "nested call deadlocked",
        transfer(&env.client, 7),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(holds, 2);
    assert!(!is_locked(&env.client, "tree:7").await);
    assert!(!is_locked(&env.client, "account:7").await);
}

/// The one-line body of issue 13, kept on one line: it once expanded to an
/// `unused_braces` warning (an error under `-D warnings`, with a suggested
/// fix that did not compile). The suite's clippy run denies warnings.
#[distributed_lock(key = "echo:{id}", client = client)]
#[rustfmt::skip]
async fn echo(client: &LockClient, id: u64) -> Result<u64, ShopError> { Ok(id) }

/// An empty body.
#[distributed_lock(key = "noop", client = client, skip_if_locked)]
async fn noop(client: &LockClient) {}

#[tokio::test]
async fn one_line_and_empty_bodies_run_under_the_lock() {
    let env = support::env(5_000);
    let id = within(Duration::from_secs(10), "echo", echo(&env.client, 42))
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(id, 42);
    within(Duration::from_secs(10), "noop", noop(&env.client)).await;
    assert!(!is_locked(&env.client, "echo:42").await);
    assert!(!is_locked(&env.client, "noop").await);
}

// ---------------------------------------------------------------------------
// Errors

#[distributed_lock(key = "stock:{sku}", client = client, wait = "200ms")]
async fn buy_within(client: &LockClient, sku: &str, probe: &Probe) -> Result<(), ShopError> {
    let _inside = probe.enter();
    Ok(())
}

/// No `client = ...`: uses the default client, which this binary never installs.
#[distributed_lock(key = "stock:{sku}")]
async fn buy_with_default(sku: &str, probe: &Probe) -> Result<(), ShopError> {
    let _inside = probe.enter();
    Ok(())
}

#[tokio::test]
async fn lock_failures_come_back_as_the_callers_error_without_running_the_body() {
    let env = support::env(5_000);
    let probe = Probe::default();

    // Held by another owner: the bounded wait runs out.
    let holder = lock(&env.client, "stock:busy")
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    match buy_within(&env.client, "busy", &probe).await {
        Err(ShopError::Lock(e)) if e.is_wait_timeout() => {}
        other => panic!("expected a wait timeout, got {other:?}"),
    }
    holder.release().await.unwrap_or_else(|e| panic!("{e}"));

    // A key longer than the client accepts: rejected before any Redis call.
    let long = "x".repeat(lock_core::DEFAULT_MAX_NAME_LEN + 1);
    match buy_within(&env.client, &long, &probe).await {
        Err(ShopError::Lock(e)) if e.is_invalid_input() => {}
        other => panic!("expected an invalid name, got {other:?}"),
    }

    // No default client installed: a runtime error, not a panic.
    match buy_with_default("any", &probe).await {
        Err(ShopError::Lock(e)) if e.is_no_default_client() => {}
        other => panic!("expected NoDefaultClient, got {other:?}"),
    }
    assert_eq!(probe.runs(), 0, "a body ran without its lock");

    // Free again: the call runs.
    buy_within(&env.client, "busy", &probe)
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(probe.runs(), 1);
}

/// Outlives its lease: the lock is gone by the time the body returns.
#[distributed_lock(key = "short", client = client, lease = "200ms")]
async fn outlive_lease(client: &LockClient) -> Result<u32, ShopError> {
    tokio::time::sleep(Duration::from_millis(600)).await;
    Ok(1)
}

#[tokio::test]
async fn a_lock_lost_before_the_body_returns_is_reported_as_an_error() {
    let env = support::env(5_000);
    match outlive_lease(&env.client).await {
        Err(ShopError::Lock(e)) if e.is_lost() => {}
        other => panic!("expected Lost, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Release on return, early return and `?`

#[distributed_lock(key = "early:{n}", client = client)]
async fn early(client: &LockClient, n: u32) -> Result<u32, ShopError> {
    if n == 0 {
        return Err(ShopError::Rejected);
    }
    let parsed: u32 = format!("{n}x").parse().map_err(|_| ShopError::Rejected)?;
    Ok(parsed)
}

#[tokio::test]
async fn the_lock_is_free_once_the_call_returns_by_any_path() {
    let env = support::env(30_000);
    for n in [0u32, 1] {
        let err = early(&env.client, n).await;
        assert!(matches!(err, Err(ShopError::Rejected)), "{err:?}");
        // The release was awaited before the call returned: no waiting here.
        assert!(
            !is_locked(&env.client, &format!("early:{n}")).await,
            "early:{n} still locked"
        );
    }
    assert_eq!(env.client.renewing_count(), 0);
}

// ---------------------------------------------------------------------------
// Options

#[distributed_lock(key = "leased", client = client, lease = "5s")]
async fn leased(client: &LockClient) -> Result<(Option<Duration>, usize), lock_core::Error> {
    let ttl = client.lock("leased")?.remaining_ttl().await?;
    Ok((ttl, client.renewing_count()))
}

#[distributed_lock(key = "watched", client = client)]
async fn watched(client: &LockClient) -> Result<(Option<Duration>, usize), lock_core::Error> {
    let ttl = client.lock("watched")?.remaining_ttl().await?;
    Ok((ttl, client.renewing_count()))
}

#[tokio::test]
async fn lease_fixes_the_expiry_and_no_lease_means_watchdog_renewal() {
    let env = support::env(2_000);
    let (ttl, renewing) = leased(&env.client).await.unwrap_or_else(|e| panic!("{e}"));
    let ttl = ttl.unwrap_or_else(|| panic!("not locked inside the body"));
    assert!(
        ttl > Duration::from_secs(2) && ttl <= Duration::from_secs(5),
        "{ttl:?}"
    );
    assert_eq!(renewing, 0, "an explicit lease is not renewed");

    let (ttl, renewing) = watched(&env.client).await.unwrap_or_else(|e| panic!("{e}"));
    let ttl = ttl.unwrap_or_else(|| panic!("not locked inside the body"));
    assert!(ttl <= Duration::from_secs(2), "{ttl:?}");
    assert_eq!(renewing, 1, "the watchdog renews a lock without a lease");
    assert_eq!(env.client.renewing_count(), 0);
}

#[derive(Debug)]
struct Order {
    id: u64,
}

#[derive(Debug)]
struct User {
    id: u32,
}

struct Payments {
    locks: LockClient,
}

impl Payments {
    /// The example: field paths, every option, a client from `self`.
    #[distributed_lock(
        key = "order:{order.id}:{user.id}",
        wait = "5s",
        lease = "30s",
        client = self.locks.clone()
    )]
    async fn pay(&self, order: &Order, user: &User) -> Result<bool, ShopError> {
        let expected = format!("order:{}:{}", order.id, user.id);
        Ok(self
            .locks
            .lock(&expected)?
            .is_held_by_current_context()
            .await?)
    }
}

#[tokio::test]
async fn methods_build_the_key_from_field_paths() {
    let env = support::env(5_000);
    let payments = Payments {
        locks: env.client.clone(),
    };
    let held = payments
        .pay(&Order { id: 7 }, &User { id: 3 })
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(held, "the body did not hold `order:7:3`");
    assert!(!is_locked(&env.client, "order:7:3").await);
}

// ---------------------------------------------------------------------------
// skip_if_locked against another process

#[distributed_lock(key = "report:{day}", client = client, skip_if_locked)]
async fn nightly_report(client: &LockClient, day: u32, probe: &Probe) {
    let _inside = probe.enter();
}

#[distributed_lock(key = "report:{day}", client = client, skip_if_locked, wait = "300ms")]
async fn report_rows(client: &LockClient, day: u32, probe: &Probe) -> Option<u32> {
    let _inside = probe.enter();
    Some(day * 10)
}

#[distributed_lock(key = "report:{day}", client = client, skip_if_locked)]
async fn report_checked(
    client: &LockClient,
    day: u32,
    probe: &Probe,
) -> Result<Option<u32>, ShopError> {
    let _inside = probe.enter();
    Ok(Some(day))
}

const ROLE: &str = "LOCK_MACRO_TEST_CHILD_ROLE";
const URL: &str = "LOCK_MACRO_TEST_URL";
const DAY: &str = "LOCK_MACRO_TEST_DAY";

/// The child's side: holds `report:{day}` through the macro until its stdin
/// is closed.
#[distributed_lock(key = "report:{day}", client = client)]
async fn hold_report_until_stdin_closes(client: &LockClient, day: u32) -> Result<(), ShopError> {
    println!("HELD report:{day}");
    let eof = tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        std::io::stdin().read_to_end(&mut sink)
    });
    match tokio::time::timeout(Duration::from_secs(60), eof).await {
        Ok(Ok(Ok(_))) => Ok(()),
        _ => Err(ShopError::Rejected),
    }
}

/// Entry point of the child processes; does nothing unless started by a
/// test below with a role.
#[test]
#[ignore = "entry point of child processes started by the macro tests"]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("child needs {name}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(async {
        match role.as_str() {
            "hold-report" => {
                let client = LockClient::builder(var(URL))
                    .build()
                    .unwrap_or_else(|e| panic!("{e}"));
                let day: u32 = var(DAY).parse().unwrap_or_else(|e| panic!("{e}"));
                hold_report_until_stdin_closes(&client, day)
                    .await
                    .unwrap_or_else(|e| panic!("{e:?}"));
                println!("RELEASED");
            }
            other => panic!("unknown role {other}"),
        }
    });
}

fn spawn_child(envs: &[(&str, String)]) -> Child {
    support::spawn_child(module_path!(), envs, Stdio::piped())
}

/// Waits (bounded) for the child's exit; kills it when it overstays.
async fn wait_for_exit(child: &mut Child, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                assert!(status.success(), "child failed: {status}");
                return;
            }
            Ok(None) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("child did not finish in time: {other:?}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_if_locked_skips_while_another_process_holds_the_key() {
    let server = support::server();
    let client = support::client_for(&server, 5_000);
    let day = 20240601u32;
    let mut child = spawn_child(&[
        (ROLE, "hold-report".to_string()),
        (URL, server.url()),
        (DAY, day.to_string()),
    ]);
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("piped stdout"));
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let reader = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        let held = lines.by_ref().any(|l| l.contains("HELD report:"));
        let _ = held_tx.send(held);
        let released = lines.any(|l| l.contains("RELEASED"));
        // Read to the end: a closed pipe would fail the child's last prints.
        lines.for_each(drop);
        released
    });
    let held = tokio::time::timeout(Duration::from_secs(30), held_rx).await;
    if !matches!(held, Ok(Ok(true))) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("child never held the report lock: {held:?}");
    }

    // Held by the other process: every flavour skips its body.
    let probe = Probe::default();
    nightly_report(&client, day, &probe).await;
    assert_eq!(report_rows(&client, day, &probe).await, None);
    match report_checked(&client, day, &probe).await {
        Ok(None) => {}
        other => panic!("expected Ok(None), got {other:?}"),
    }
    assert_eq!(
        probe.runs(),
        0,
        "a body ran while another process held the key"
    );
    // Another key is not affected.
    assert_eq!(
        report_rows(&client, day + 1, &probe).await,
        Some((day + 1) * 10)
    );

    // The child returns from its locked fn when its stdin closes.
    drop(child.stdin.take());
    let released = within(Duration::from_secs(30), "child output", reader)
        .await
        .unwrap_or_else(|e| panic!("reader: {e}"));
    assert!(released, "the child did not finish its locked call");
    wait_for_exit(&mut child, Duration::from_secs(30)).await;

    nightly_report(&client, day, &probe).await;
    assert_eq!(report_rows(&client, day, &probe).await, Some(day * 10));
    assert_eq!(probe.runs(), 3, "free again: the bodies run");
}

// ---------------------------------------------------------------------------
// Cancellation and panics

/// Enters, says so, and never finishes.
#[distributed_lock(key = "slow:{id}", client = client)]
async fn stuck(client: &LockClient, id: u32, entered: &Notify) -> Result<(), ShopError> {
    entered.notify_one();
    std::future::pending::<()>().await;
    Ok(())
}

#[distributed_lock(key = "slow:{id}", client = client)]
async fn stuck_owned(client: LockClient, id: u32, entered: Arc<Notify>) -> Result<(), ShopError> {
    entered.notify_one();
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::test]
async fn a_call_dropped_mid_body_frees_the_lock_long_before_its_lease() {
    // Watchdog 30 s: freed "promptly" means by the drop, not by expiry.
    let env = support::env(30_000);
    let entered = Notify::new();
    tokio::select! {
        r = stuck(&env.client, 1, &entered) => panic!("stuck returned: {r:?}"),
        () = entered.notified() => {}
    }
    // The future is dropped here, mid-body.
    let freed = eventually(Duration::from_secs(5), || async {
        !is_locked(&env.client, "slow:1").await
    })
    .await;
    assert!(freed.is_some(), "the lock outlived the dropped call");

    // An aborted task frees it too.
    let entered = Arc::new(Notify::new());
    let task = tokio::spawn(stuck_owned(env.client.clone(), 2, entered.clone()));
    within(Duration::from_secs(10), "body entered", entered.notified()).await;
    assert!(is_locked(&env.client, "slow:2").await);
    task.abort();
    let freed = eventually(Duration::from_secs(5), || async {
        !is_locked(&env.client, "slow:2").await
    })
    .await;
    assert!(freed.is_some(), "the lock outlived the aborted task");
    // Nobody holds it: another owner gets it at once.
    let guard = lock(&env.client, "slow:2")
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(guard.is_some());
}

#[distributed_lock(key = "panic:{id}", client = client)]
async fn explode(client: LockClient, id: u32) -> Result<(), ShopError> {
    if id > 0 {
        panic!("boom in the critical section");
    }
    Ok(())
}

#[tokio::test]
async fn a_panicking_body_frees_the_lock() {
    let env = support::env(30_000);
    let joined = tokio::spawn(explode(env.client.clone(), 9)).await;
    assert!(
        joined.is_err_and(|e| e.is_panic()),
        "the body did not panic"
    );
    let freed = eventually(Duration::from_secs(5), || async {
        !is_locked(&env.client, "panic:9").await
    })
    .await;
    assert!(freed.is_some(), "the lock outlived the panic");
    // And the next call runs normally.
    explode(env.client.clone(), 0)
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
}
