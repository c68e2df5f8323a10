//! lock-tower behind real axum servers on loopback, with real HTTP clients
//! and private redis-servers.

use std::sync::Arc;
use std::time::Duration;

use crate::support::layer::{client, http_client, send, HttpServer, Probe};
use crate::support::{commands_but_info, eventually, script_calls, server, within};
use axum::body::Body;
use axum::error_handling::HandleErrorLayer;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use futures_util::future::join_all;
use lock_core::LockClient;
use lock_tower::{BoxError, LockError, LockLayer, PathSegment};
use tokio::io::AsyncWriteExt;
use tower::ServiceBuilder;

/// The id in `/accounts/{id}/...`.
fn account_id_from_path(req: &Request<Body>) -> Option<u64> {
    req.uri().path().split('/').nth(2)?.parse().ok()
}

/// The account service: `POST /accounts/{id}/withdraw` runs one
/// probe section of `work` under the lock `account:{id}`; `GET /health`
/// has no key.
fn accounts_app(client: LockClient, probe: Arc<Probe>, work: Duration, wait: Duration) -> Router {
    let withdraw = move |axum::extract::Path(id): axum::extract::Path<u64>| {
        let probe = probe.clone();
        async move {
            probe.section(&format!("account:{id}"), work).await;
            "withdrawn"
        }
    };
    Router::new()
        .route("/accounts/{id}/withdraw", post(withdraw))
        .route("/health", get(|| async { "ok" }))
        .layer(
            LockLayer::new(client, |req: &Request<Body>| {
                account_id_from_path(req).map(|id| format!("account:{id}"))
            })
            .wait(wait),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_requests_through_two_servers_never_overlap() {
    let redis_server = server();
    let probe = Probe::new();
    let work = Duration::from_millis(5);
    let wait = Duration::from_secs(30);
    let a = HttpServer::start(accounts_app(
        client(&redis_server),
        probe.clone(),
        work,
        wait,
    ))
    .await;
    let b = HttpServer::start(accounts_app(
        client(&redis_server),
        probe.clone(),
        work,
        wait,
    ))
    .await;
    let http = http_client();
    const N: usize = 40;
    let replies = within(
        Duration::from_secs(60),
        "40 withdrawals",
        join_all((0..N).map(|i| {
            let server = if i % 2 == 0 { &a } else { &b };
            send(&http, "POST", server.url("/accounts/7/withdraw"))
        })),
    )
    .await;
    for r in &replies {
        assert_eq!((r.status, r.body.as_str()), (200, "withdrawn"));
    }
    assert_eq!(
        probe.overlaps(),
        0,
        "two withdrawals of one account were inside at once"
    );
    assert_eq!(probe.counter("account:7"), N as u64, "lost updates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_keys_run_concurrently_over_http() {
    let redis_server = server();
    let probe = Probe::new();
    let app = accounts_app(
        client(&redis_server),
        probe.clone(),
        Duration::from_millis(200),
        Duration::from_secs(10),
    );
    let server = HttpServer::start(app).await;
    let http = http_client();
    let replies = within(
        Duration::from_secs(30),
        "8 accounts",
        join_all((0..8).map(|i| {
            send(
                &http,
                "POST",
                server.url(&format!("/accounts/{i}/withdraw")),
            )
        })),
    )
    .await;
    assert!(replies.iter().all(|r| r.status == 200), "{replies:?}");
    assert!(
        probe.max_running() > 1,
        "different accounts never ran together"
    );
}

#[tokio::test]
async fn requests_without_a_key_pass_through_with_no_redis_command() {
    let redis_server = server();
    let probe = Probe::new();
    let app = accounts_app(
        client(&redis_server),
        probe,
        Duration::ZERO,
        Duration::from_secs(5),
    );
    let server = HttpServer::start(app).await;
    let http = http_client();
    assert_eq!(
        send(&http, "POST", server.url("/accounts/1/withdraw"))
            .await
            .status,
        200
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = commands_but_info(&redis_server);
    for _ in 0..20 {
        let r = send(&http, "GET", server.url("/health")).await;
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    }
    // An unknown path has no key either (the fallback passes through too).
    assert_eq!(send(&http, "GET", server.url("/nowhere")).await.status, 404);
    assert_eq!(before, commands_but_info(&redis_server));
}

#[tokio::test]
async fn the_wait_bound_answers_503_with_retry_after_or_the_configured_response() {
    let redis_server = server();
    let client = client(&redis_server);
    let probe = Probe::new();
    let held = client
        .lock("account:3")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let http = http_client();

    let default = HttpServer::start(accounts_app(
        client.clone(),
        probe.clone(),
        Duration::ZERO,
        Duration::from_millis(200),
    ))
    .await;
    let r = send(&http, "POST", default.url("/accounts/3/withdraw")).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(r.body, "lock busy, retry later\n");

    // The configured answer.
    let custom_app = Router::new()
        .route("/accounts/{id}/withdraw", post(|| async { "withdrawn" }))
        .layer(
            LockLayer::new(
                client.clone(),
                PathSegment::after("accounts").prefix("account:"),
            )
            .wait(Duration::from_millis(200))
            .on_rejection(|err: &LockError| {
                let mut res = http::Response::new(Bytes::from(format!("busy: {}", err.key())));
                *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                res.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static("7"));
                res
            }),
        );
    let custom = HttpServer::start(custom_app).await;
    let r = send(&http, "POST", custom.url("/accounts/3/withdraw")).await;
    assert_eq!((r.status, r.body.as_str()), (429, "busy: account:3"));
    assert_eq!(r.headers["retry-after"], "7");

    assert_eq!(probe.entered(), 0, "a rejected request ran its handler");
    held.release().await.expect("release");
    assert_eq!(
        send(&http, "POST", default.url("/accounts/3/withdraw"))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn redis_down_answers_500_not_503() {
    let mut redis_server = server();
    let client = LockClient::builder(redis_server.url())
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let app = accounts_app(client, Probe::new(), Duration::ZERO, Duration::from_secs(5));
    let server = HttpServer::start(app).await;
    let http = http_client();
    assert_eq!(
        send(&http, "POST", server.url("/accounts/1/withdraw"))
            .await
            .status,
        200
    );
    redis_server.kill();
    let r = send(&http, "POST", server.url("/accounts/1/withdraw")).await;
    assert_eq!((r.status, r.body.as_str()), (500, "lock unavailable\n"));
    assert!(r.headers.get("retry-after").is_none());
    // Keyless requests do not need Redis at all.
    assert_eq!(send(&http, "GET", server.url("/health")).await.status, 200);
}

#[tokio::test]
async fn an_invalid_key_answers_400() {
    let redis_server = server();
    let client = LockClient::builder(redis_server.url())
        .max_name_len(16)
        .build()
        .expect("client");
    let app = Router::new()
        .route("/orders/{id}", post(|| async { "ok" }))
        .layer(LockLayer::new(client, PathSegment::after("orders")));
    let server = HttpServer::start(app).await;
    let http = http_client();
    assert_eq!(
        send(&http, "POST", server.url("/orders/short"))
            .await
            .status,
        200
    );
    let r = send(
        &http,
        "POST",
        server.url(&format!("/orders/{}", "x".repeat(40))),
    )
    .await;
    assert_eq!((r.status, r.body.as_str()), (400, "invalid lock key\n"));
}

/// Sends a request on a raw connection and returns the connection, so that
/// the test can drop it (the client disconnects) at a chosen moment.
async fn raw_request(server: &HttpServer, path: &str) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let request = format!("POST {path} HTTP/1.1\r\nhost: test\r\ncontent-length: 0\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_while_holding_releases_the_lock_promptly() {
    let redis_server = server();
    // A long watchdog lease: only a release frees the lock quickly.
    let client = LockClient::builder(redis_server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let app = accounts_app(
        client.clone(),
        Probe::new(),
        Duration::from_secs(120),
        Duration::from_secs(5),
    );
    let server = HttpServer::start(app).await;
    let lock = client.lock("account:9").expect("name");
    let conn = raw_request(&server, "/accounts/9/withdraw").await;
    eventually(Duration::from_secs(10), || async {
        lock.is_locked().await.unwrap_or(false)
    })
    .await
    .expect("the request took the lock");
    drop(conn);
    let freed = eventually(Duration::from_secs(5), || async {
        !lock.is_locked().await.unwrap_or(true)
    })
    .await
    .expect("the lock stayed held after the client disconnected");
    println!("lock freed {freed:?} after the client disconnected (lease 30 s)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_while_waiting_gives_up_its_place() {
    let redis_server = server();
    let client = client(&redis_server);
    let probe = Probe::new();
    let app = accounts_app(
        client.clone(),
        probe.clone(),
        Duration::ZERO,
        Duration::from_secs(10),
    );
    let server = HttpServer::start(app).await;
    let held = client
        .lock("account:4")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let gone = raw_request(&server, "/accounts/4/withdraw").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(gone);
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.expect("release");
    let http = http_client();
    let r = within(
        Duration::from_secs(10),
        "the next request",
        send(&http, "POST", server.url("/accounts/4/withdraw")),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        probe.entered(),
        1,
        "the disconnected request ran its handler"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_until_body_end_keeps_a_streaming_response_exclusive() {
    let redis_server = server();
    let client = client(&redis_server);
    let (tx, rx) = tokio::sync::mpsc::channel::<tokio::sync::oneshot::Receiver<()>>(1);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    // The handler answers at once with a body that ends when the test says so.
    let stream = move || {
        let rx = rx.clone();
        async move {
            let done = rx.lock().await.recv().await;
            let (mut sender, body) = http_body_util::Channel::<Bytes>::new(2);
            tokio::spawn(async move {
                let _ = sender.send_data(Bytes::from_static(b"first ")).await;
                if let Some(done) = done {
                    let _ = done.await;
                }
                let _ = sender.send_data(Bytes::from_static(b"last")).await;
            });
            Body::new(body)
        }
    };
    let app = Router::new()
        .route("/report", get(stream))
        .layer(LockLayer::new(client.clone(), lock_tower::MethodPath::new()).hold_until_body_end());
    let server = HttpServer::start(app).await;
    let lock = client.lock("GET /report").expect("name");
    let (finish, done) = tokio::sync::oneshot::channel();
    tx.send(done).await.expect("handler input");
    let http = http_client();
    let req = http::Request::get(server.url("/report"))
        .body(http_body_util::Full::new(Bytes::new()))
        .expect("request");
    let res = within(Duration::from_secs(10), "response head", http.request(req))
        .await
        .expect("response");
    assert_eq!(res.status(), 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        lock.is_locked().await.expect("EXISTS"),
        "released while the body streams"
    );
    let _ = finish.send(());
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(&body[..], b"first last");
    eventually(Duration::from_secs(5), || async {
        !lock.is_locked().await.unwrap_or(true)
    })
    .await
    .expect("released once the body ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_queueing_over_http_keeps_script_calls_near_one_per_request() {
    let redis_server = server();
    let client = client(&redis_server);
    let probe = Probe::new();
    let app = accounts_app(
        client.clone(),
        probe.clone(),
        Duration::from_millis(2),
        Duration::from_secs(30),
    );
    let server = HttpServer::start(app).await;
    let http = http_client();
    assert_eq!(
        send(&http, "POST", server.url("/accounts/0/withdraw"))
            .await
            .status,
        200
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    const N: u64 = 32;
    let before = script_calls(&redis_server);
    let replies = within(
        Duration::from_secs(60),
        "32 same-key requests",
        join_all((0..N).map(|_| send(&http, "POST", server.url("/accounts/5/withdraw")))),
    )
    .await;
    assert!(replies.iter().all(|r| r.status == 200), "{replies:?}");
    let lock = client.lock("account:5").expect("name");
    eventually(Duration::from_secs(5), || async {
        !lock.is_locked().await.unwrap_or(true)
    })
    .await
    .expect("released");
    let used = script_calls(&redis_server) - before;
    println!("{N} concurrent same-key HTTP requests, one server: {used} lock-script calls");
    assert_eq!(probe.counter("account:5"), N);
    assert!(
        used <= 2 * N + 8,
        "{used} lock-script calls for {N} requests"
    );
}

#[tokio::test]
async fn the_generic_flavour_works_with_handle_error_layer() {
    let redis_server = server();
    let client = client(&redis_server);
    let held = client
        .lock("job")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let app = Router::new().route("/job", post(|| async { "ran" })).layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(|err: BoxError| async move {
                match err.downcast_ref::<LockError>() {
                    Some(e) if e.is_busy() => (StatusCode::CONFLICT, format!("{e}")),
                    _ => (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
                }
            }))
            .layer(
                LockLayer::generic(client.clone(), |_: &Request| Some("job"))
                    .wait(Duration::from_millis(100)),
            ),
    );
    let server = HttpServer::start(app).await;
    let http = http_client();
    let r = send(&http, "POST", server.url("/job")).await;
    assert_eq!((r.status, r.body.as_str()), (409, "lock `job` is busy"));
    held.release().await.expect("release");
    let r = send(&http, "POST", server.url("/job")).await;
    assert_eq!((r.status, r.body.as_str()), (200, "ran"));
}
