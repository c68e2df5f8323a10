//! The request's lock in axum handlers behind real loopback servers: the
//! `Held` extractor and the request extension carry the lock Redis issued,
//! a route without the layer is a 500 naming the cause, and
//! `cancel_on_lost` stops a handler whose lock is deleted behind it.

use std::time::Duration;

use crate::support::layer::{http_client, send, HttpServer};
use crate::support::{self, cmd, prefixed_client, raw, within};
use axum::extract::Request;
use axum::routing::post;
use axum::Router;
use lock_core::{HeldLock, LockClient};
use lock_tests::RedisServer;
use lock_tower::{Held, HeldLockExt, LockLayer, MissingHeldLock, PathSegment};
use tokio::sync::mpsc;
use tokio::time::Instant;

fn account_layer(client: LockClient) -> LockLayer<PathSegment, lock_tower::Http> {
    LockLayer::new(client, PathSegment::after("accounts").prefix("account:"))
        .wait(Duration::from_secs(5))
}

/// What a handler saw of its lock, and what Redis said meanwhile.
#[derive(Debug)]
struct Seen {
    name: String,
    key: String,
    extractor_token: u64,
    extension_token: Option<u64>,
    ext_trait_token: Option<u64>,
    current_token: Option<u64>,
    redis_token: Option<u64>,
    owner_in_redis: bool,
    held: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extractor_and_the_extension_carry_the_token_redis_issued() {
    let server = support::server();
    let client = prefixed_client(&server, Duration::from_secs(5), Duration::from_secs(2));
    let observer = raw(&server).await;
    let (tx, mut rx) = mpsc::unbounded_channel::<Seen>();
    let handler = move |Held(held): Held, req: Request| {
        let (tx, mut observer) = (tx.clone(), observer.clone());
        async move {
            // Read by an independent connection while the lock is held.
            let token_key = format!("redisson_lock_token:{{{}}}", held.key());
            let redis_token: Option<u64> = cmd(&mut observer, &["GET", &token_key]).await;
            let owner: i64 = cmd(&mut observer, &["HEXISTS", held.key(), held.owner_id()]).await;
            let seen = Seen {
                name: held.name().to_string(),
                key: held.key().to_string(),
                extractor_token: held.fencing_token(),
                extension_token: req
                    .extensions()
                    .get::<HeldLock>()
                    .map(HeldLock::fencing_token),
                ext_trait_token: req.held_lock().map(HeldLock::fencing_token),
                current_token: HeldLock::current().map(|h| h.fencing_token()),
                redis_token,
                owner_in_redis: owner == 1,
                held: held.is_held(),
            };
            tx.send(seen).expect("the test listens");
            "done"
        }
    };
    let app = Router::new()
        .route("/accounts/{id}/withdraw", post(handler))
        .route_layer(account_layer(client));
    let http = HttpServer::start(app).await;
    let client = http_client();

    let mut tokens = Vec::new();
    for _ in 0..3 {
        let reply = send(&client, "POST", http.url("/accounts/7/withdraw")).await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "done"));
        let seen = within(Duration::from_secs(5), "the handler's report", rx.recv())
            .await
            .expect("a report");
        assert_eq!(seen.name, "account:7");
        assert_eq!(seen.key, "app:account:7");
        assert_eq!(seen.redis_token, Some(seen.extractor_token), "{seen:?}");
        assert_eq!(seen.extension_token, Some(seen.extractor_token), "{seen:?}");
        assert_eq!(seen.ext_trait_token, Some(seen.extractor_token), "{seen:?}");
        assert_eq!(seen.current_token, Some(seen.extractor_token), "{seen:?}");
        assert!(seen.owner_in_redis && seen.held, "{seen:?}");
        tokens.push(seen.extractor_token);
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must grow: {tokens:?}"
    );
}

#[tokio::test]
async fn the_extractor_without_a_lock_is_a_500_naming_the_cause() {
    let server = support::server();
    let client = prefixed_client(&server, Duration::from_secs(5), Duration::from_secs(2));
    let app = Router::new()
        // behind the layer, but its key function gives no key for this path
        .route("/accounts", post(|Held(_): Held| async { "unreachable" }))
        .route(
            "/accounts/{id}/maybe",
            post(|held: Option<Held>| async move { format!("some={}", held.is_some()) }),
        )
        .route_layer(account_layer(client))
        // not behind the layer at all
        .route("/plain", post(|Held(_): Held| async { "unreachable" }))
        .route(
            "/plain/maybe",
            post(|held: Option<Held>| async move { format!("some={}", held.is_some()) }),
        );
    let http = HttpServer::start(app).await;
    let client = http_client();
    for path in ["/plain", "/accounts"] {
        let reply = send(&client, "POST", http.url(path)).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (500, MissingHeldLock::MESSAGE),
            "{path}"
        );
    }
    assert!(MissingHeldLock::MESSAGE.contains("not behind lock-tower's LockLayer"));
    let reply = send(&client, "POST", http.url("/plain/maybe")).await;
    assert_eq!((reply.status, reply.body.as_str()), (200, "some=false"));
    let reply = send(&client, "POST", http.url("/accounts/3/maybe")).await;
    assert_eq!((reply.status, reply.body.as_str()), (200, "some=true"));
}

/// A server whose `/accounts/{id}/slow` handler marks its entry, sleeps
/// `work`, then increments the Redis counter `after:{id}`; and whose
/// `/accounts/{id}/fast` answers at once (same lock).
async fn slow_server(
    server: &RedisServer,
    layer: LockLayer<PathSegment, lock_tower::Http>,
    work: Duration,
) -> (HttpServer, mpsc::UnboundedReceiver<Instant>) {
    let observer = raw(server).await;
    let (entered, entries) = mpsc::unbounded_channel::<Instant>();
    let slow = move |axum::extract::Path(id): axum::extract::Path<u64>, Held(held): Held| {
        let (entered, mut observer) = (entered.clone(), observer.clone());
        async move {
            entered.send(Instant::now()).expect("the test listens");
            tokio::time::sleep(work).await;
            let _: i64 = cmd(&mut observer, &["INCR", &format!("after:{id}")]).await;
            format!("held={}", held.is_held())
        }
    };
    let app = Router::new()
        .route("/accounts/{id}/slow", post(slow))
        .route("/accounts/{id}/fast", post(|| async { "fast" }))
        .route_layer(layer);
    (HttpServer::start(app).await, entries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_on_lost_answers_503_and_stops_the_handler() {
    let server = support::server();
    // watchdog 900 ms: renewals every 300 ms notice a deleted lock quickly
    let client = prefixed_client(&server, Duration::from_millis(900), Duration::from_secs(2));
    let work = Duration::from_secs(5);
    let (http, mut entries) =
        slow_server(&server, account_layer(client).cancel_on_lost(), work).await;
    let mut observer = raw(&server).await;
    let http_client = http_client();

    let request = tokio::spawn({
        let (client, url) = (http_client.clone(), http.url("/accounts/1/slow"));
        async move { send(&client, "POST", url).await }
    });
    let entered = within(Duration::from_secs(5), "the handler starts", entries.recv())
        .await
        .expect("an entry");
    let deleted_at = Instant::now();
    let removed: i64 = cmd(&mut observer, &["DEL", "app:account:1"]).await;
    assert_eq!(removed, 1, "the lock was not in Redis");

    let reply = within(Duration::from_secs(3), "the 503 after the DEL", request)
        .await
        .expect("request task");
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (503, "lock lost, request cancelled\n")
    );
    assert!(reply.headers.get("retry-after").is_none());
    assert!(deleted_at.elapsed() < Duration::from_secs(3));

    // Past the moment the handler would have written, nothing was written.
    tokio::time::sleep_until(entered + work + Duration::from_millis(700)).await;
    let after: Option<i64> = cmd(&mut observer, &["GET", "after:1"]).await;
    assert_eq!(after, None, "the cancelled handler ran on after its sleep");

    // The key is usable again at once.
    let reply = send(&http_client, "POST", http.url("/accounts/1/fast")).await;
    assert_eq!((reply.status, reply.body.as_str()), (200, "fast"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cancel_on_lost_the_handler_runs_to_its_end() {
    let server = support::server();
    let client = prefixed_client(&server, Duration::from_millis(900), Duration::from_secs(2));
    let work = Duration::from_millis(1500);
    let (http, mut entries) = slow_server(&server, account_layer(client), work).await;
    let mut observer = raw(&server).await;
    let http_client = http_client();

    let request = tokio::spawn({
        let (client, url) = (http_client.clone(), http.url("/accounts/2/slow"));
        async move { send(&client, "POST", url).await }
    });
    within(Duration::from_secs(5), "the handler starts", entries.recv())
        .await
        .expect("an entry");
    let removed: i64 = cmd(&mut observer, &["DEL", "app:account:2"]).await;
    assert_eq!(removed, 1, "the lock was not in Redis");

    let reply = within(Duration::from_secs(10), "the handler's answer", request)
        .await
        .expect("request task");
    // It ran to its end, and saw that its lock was gone.
    assert_eq!((reply.status, reply.body.as_str()), (200, "held=false"));
    let after: Option<i64> = cmd(&mut observer, &["GET", "after:2"]).await;
    assert_eq!(after, Some(1));
}

/// `LockClient::shutdown` while requests wait behind a held key: the
/// waiting request and every later one are answered `503 shutting down`
/// (another replica can serve them), and the running handler's lock is
/// given back at once (seen by a raw connection), not after its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shut_down_client_answers_503_shutting_down() {
    let server = support::server();
    let client = prefixed_client(&server, Duration::from_secs(30), Duration::from_secs(2));
    let layer = account_layer(client.clone());
    let (http, mut entries) = slow_server(&server, layer, Duration::from_secs(2)).await;
    let http_client = http_client();
    let slow = tokio::spawn({
        let (c, url) = (http_client.clone(), http.url("/accounts/1/slow"));
        async move { send(&c, "POST", url).await }
    });
    within(
        Duration::from_secs(5),
        "the slow handler starts",
        entries.recv(),
    )
    .await;
    let waiting = tokio::spawn({
        let (c, url) = (http_client.clone(), http.url("/accounts/1/fast"));
        async move { send(&c, "POST", url).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let report = client.shutdown(Duration::from_secs(2)).await;
    assert_eq!(report.released, 1, "{report:?}");
    let mut observer = raw(&server).await;
    let exists: i64 = cmd(&mut observer, &["EXISTS", "app:account:1"]).await;
    assert_eq!(exists, 0, "the running handler's lock was not given back");

    let reply = within(Duration::from_secs(2), "the waiting request", waiting)
        .await
        .expect("task");
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (503, "shutting down\n")
    );
    let reply = send(&http_client, "POST", http.url("/accounts/2/fast")).await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (503, "shutting down\n")
    );
    // The running handler finishes; its lock was given up under it.
    let reply = within(Duration::from_secs(5), "the slow request", slow)
        .await
        .expect("task");
    assert_eq!((reply.status, reply.body.as_str()), (200, "held=false"));
}
