//! What a user's own tests look like with the in-memory server (lock-core's
//! `memory` feature in `[dev-dependencies]`): an axum router behind
//! `LockLayer`, and a `#[distributed_lock]` function, tested with
//! `cargo test` and no Redis installed or started.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::Router;
use lock_core::{LockClient, MemoryServer};
use lock_tower::LockLayer;
use tokio::sync::Mutex;
use tower::ServiceExt;

/// Balances, read and written with a pause in between: without the lock,
/// concurrent withdrawals of one account lose updates.
type Balances = Arc<Mutex<HashMap<u64, i64>>>;

async fn withdraw(State(balances): State<Balances>, Path(id): Path<u64>) -> StatusCode {
    let balance = balances.lock().await.get(&id).copied().unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(1)).await;
    if balance < 10 {
        return StatusCode::CONFLICT;
    }
    balances.lock().await.insert(id, balance - 10);
    StatusCode::OK
}

fn app(client: LockClient, balances: Balances) -> Router {
    Router::new()
        .route("/accounts/{id}/withdraw", post(withdraw))
        .route_layer(LockLayer::new(client, |req: &Request<Body>| {
            let id = req.uri().path().split('/').nth(2)?;
            Some(format!("account:{id}"))
        }))
        .with_state(balances)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdrawals_of_one_account_take_turns_without_redis() {
    let server = MemoryServer::new();
    // Two replicas of the service, one lock server between them.
    let balances: Balances = Arc::new(Mutex::new(HashMap::from([(7, 100)])));
    let replicas = [
        app(
            LockClient::builder(server.url()).build().expect("client"),
            balances.clone(),
        ),
        app(
            LockClient::builder(server.url()).build().expect("client"),
            balances.clone(),
        ),
    ];
    // Spawned all at once (collected), then awaited.
    let requests: Vec<_> = (0..20)
        .map(|i| {
            let router = replicas[i % 2].clone();
            tokio::spawn(async move {
                let request = Request::post("/accounts/7/withdraw")
                    .body(Body::empty())
                    .expect("request");
                router.oneshot(request).await.expect("infallible").status()
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for request in requests {
        statuses.push(request.await.expect("request task"));
    }
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::CONFLICT)
        .count();
    // 100 in the account, 10 per withdrawal: exactly 10 succeed, and the
    // balance ends at 0 (without the lock, several read the same balance).
    assert_eq!((ok, refused), (10, 10), "{statuses:?}");
    assert_eq!(balances.lock().await.get(&7), Some(&0));
}

/// A job that must run on one replica at a time, as a user writes it.
struct Reports {
    locks: LockClient,
    running: std::sync::atomic::AtomicUsize,
    overlaps: std::sync::atomic::AtomicUsize,
    runs: std::sync::atomic::AtomicUsize,
}

impl Reports {
    #[lock_core::distributed_lock(key = "report:{day}", client = &self.locks)]
    async fn build(&self, day: u32) -> Result<u32, lock_core::Error> {
        use std::sync::atomic::Ordering;
        if self.running.fetch_add(1, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(day)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_function_runs_once_at_a_time_without_redis() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let server = MemoryServer::new();
    let reports = Arc::new(Reports {
        locks: LockClient::builder(server.url()).build().expect("client"),
        running: AtomicUsize::new(0),
        overlaps: AtomicUsize::new(0),
        runs: AtomicUsize::new(0),
    });
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let reports = reports.clone();
            tokio::spawn(async move { reports.build(26).await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.expect("task").expect("the build ran"), 26);
    }
    assert_eq!(
        reports.overlaps.load(Ordering::SeqCst),
        0,
        "two builds at once"
    );
    assert_eq!(reports.runs.load(Ordering::SeqCst), 8);
}
