//! lock-tower's `MultiLockLayer` behind real axum servers on loopback,
//! with real HTTP clients and private redis-servers: transfers between
//! two accounts locked together, the answers, the locks in the handler,
//! the body hold and clients that go away.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::multi_lock_tower::KeysObserver;
use crate::support::layer::{client, http_client, send, HttpServer};
use crate::support::{cmd, commands_but_info, eventually, raw, server, within};
use axum::extract::Path;
use axum::routing::{get, post};
use axum::{Extension, Router};
use bytes::Bytes;
use futures_util::future::join_all;
use http_body_util::{BodyExt, Channel};
use lock_core::LockClient;
use lock_tower::{HeldLocks, MultiLockLayer, PathSegment};
use tokio::io::AsyncWriteExt;
use tower::{service_fn, Layer, ServiceExt};

/// The two accounts of `/transfers/{from}/{to}`.
fn accounts() -> (PathSegment, PathSegment) {
    (
        PathSegment::new(1).prefix("account:"),
        PathSegment::new(2).prefix("account:"),
    )
}

/// `POST /transfers/{from}/{to}` runs one observer section of `work`
/// under the locks of both accounts (their names read from the
/// handler's `HeldLocks`); `GET /health` has no key.
fn transfers_app(
    client: LockClient,
    observer: Arc<KeysObserver>,
    work: Duration,
    wait: Duration,
) -> Router {
    let transfer = move |Extension(locks): Extension<HeldLocks>| {
        let observer = observer.clone();
        async move {
            let names: Vec<String> = locks.names().into_iter().map(String::from).collect();
            observer.section(&names, work).await;
            "moved"
        }
    };
    Router::new()
        .route("/transfers/{from}/{to}", post(transfer))
        .route(
            "/health",
            get(|locks: Option<Extension<HeldLocks>>| async move {
                if locks.is_none() {
                    "ok"
                } else {
                    "locked?"
                }
            }),
        )
        .layer(MultiLockLayer::new(client, accounts()).wait(wait))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_transfers_through_two_servers_never_overlap() {
    let redis_server = server();
    let observer = KeysObserver::new(&redis_server).await;
    let (work, wait) = (Duration::from_millis(5), Duration::from_secs(30));
    let a = HttpServer::start(transfers_app(
        client(&redis_server),
        observer.clone(),
        work,
        wait,
    ))
    .await;
    let b = HttpServer::start(transfers_app(
        client(&redis_server),
        observer.clone(),
        work,
        wait,
    ))
    .await;
    let http = http_client();
    let paths = ["/transfers/a/b", "/transfers/b/a", "/transfers/b/c"];
    const N: usize = 30;
    let replies = within(
        Duration::from_secs(60),
        "30 transfers",
        join_all((0..N).map(|i| {
            let server = if i % 2 == 0 { &a } else { &b };
            send(&http, "POST", server.url(paths[i % 3]))
        })),
    )
    .await;
    for r in &replies {
        assert_eq!((r.status, r.body.as_str()), (200, "moved"), "{r:?}");
    }
    assert_eq!(
        observer.violations().await,
        (0, 0, 0),
        "overlap or lock missing"
    );
    assert_eq!(observer.counter("account:a"), 20, "lost updates on a");
    assert_eq!(observer.counter("account:b"), N as u64, "lost updates on b");
    assert_eq!(observer.counter("account:c"), 10, "lost updates on c");
    // No key: no lock, no HeldLocks.
    let r = send(&http, "GET", a.url("/health")).await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_is_a_503_with_retry_after_and_an_invalid_key_a_400() {
    let redis_server = server();
    let lock_client = LockClient::builder(redis_server.url())
        .max_name_len(16)
        .build()
        .expect("client");
    let observer = KeysObserver::new(&redis_server).await;
    let app = transfers_app(
        lock_client.clone(),
        observer.clone(),
        Duration::ZERO,
        Duration::from_millis(200),
    );
    let custom = Router::new()
        .route("/transfers/{from}/{to}", post(|| async { "moved" }))
        .layer(
            MultiLockLayer::new(lock_client.clone(), accounts())
                .wait(Duration::from_millis(200))
                .retry_after(Duration::from_millis(2500))
                .on_rejection(|err| {
                    let mut res =
                        http::Response::new(Bytes::from(format!("busy: {}", err.keys().join(" "))));
                    *res.status_mut() = http::StatusCode::CONFLICT;
                    res
                }),
        );
    let retry = Router::new()
        .route("/transfers/{from}/{to}", post(|| async { "moved" }))
        .layer(
            MultiLockLayer::new(lock_client.clone(), accounts())
                .wait(Duration::from_millis(200))
                .retry_after(Duration::from_millis(2500)),
        );
    let (app, custom, retry) = (
        HttpServer::start(app).await,
        HttpServer::start(custom).await,
        HttpServer::start(retry).await,
    );
    let http = http_client();
    let other = client(&redis_server);
    let held = other
        .lock("account:y")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let r = send(&http, "POST", app.url("/transfers/x/y")).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (503, "lock busy, retry later\n")
    );
    assert_eq!(r.headers["retry-after"], "1");
    let r = send(&http, "POST", retry.url("/transfers/y/z")).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.headers["retry-after"], "3");
    let r = send(&http, "POST", custom.url("/transfers/y/x")).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (409, "busy: account:x account:y")
    );
    assert_eq!(observer.entered(), 0, "a rejected request ran its handler");
    // A transfer that does not touch y runs.
    let r = send(&http, "POST", app.url("/transfers/x/z")).await;
    assert_eq!((r.status, r.body.as_str()), (200, "moved"));
    held.release().await.expect("release");
    let r = send(&http, "POST", app.url("/transfers/x/y")).await;
    assert_eq!((r.status, r.body.as_str()), (200, "moved"));

    // One key too long for the client (16 bytes): the whole request is a
    // 400, before any Redis call.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = commands_but_info(&redis_server);
    let long = "x".repeat(40);
    let r = send(&http, "POST", app.url(&format!("/transfers/short/{long}"))).await;
    assert_eq!((r.status, r.body.as_str()), (400, "invalid lock key\n"));
    assert_eq!(before, commands_but_info(&redis_server));
    assert_eq!(observer.entered(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_sees_every_lock_with_the_tokens_in_redis() {
    let redis_server = server();
    let lock_client = client(&redis_server);
    let observer = raw(&redis_server).await;
    let transfer = move |Path((from, to)): Path<(String, String)>,
                         Extension(locks): Extension<HeldLocks>| {
        let mut observer = observer.clone();
        async move {
            let mut lines = vec![format!("{from}->{to} held={}", locks.is_held())];
            for held in locks.locks() {
                let token_key = format!("redisson_lock_token:{{{}}}", held.key());
                let in_redis: Option<u64> = cmd(&mut observer, &["GET", &token_key]).await;
                lines.push(format!(
                    "{} {} {}",
                    held.name(),
                    held.fencing_token(),
                    in_redis.map_or("none".to_string(), |t| t.to_string())
                ));
            }
            assert_eq!(
                locks.fencing_token(&format!("account:{from}")),
                locks
                    .get(&format!("account:{from}"))
                    .map(|h| h.fencing_token())
            );
            lines.join("\n")
        }
    };
    let app = Router::new()
        .route("/transfers/{from}/{to}", post(transfer))
        .route_layer(MultiLockLayer::new(lock_client, accounts()));
    let server = HttpServer::start(app).await;
    let http = http_client();
    let mut last = [0_u64, 0];
    for _ in 0..3 {
        let r = send(&http, "POST", server.url("/transfers/9/4")).await;
        assert_eq!(r.status, 200, "{r:?}");
        let lines: Vec<&str> = r.body.lines().collect();
        assert_eq!(lines[0], "9->4 held=true");
        assert_eq!(lines.len(), 3, "{lines:?}");
        // sorted: account:4 before account:9
        for (i, (line, name)) in lines[1..]
            .iter()
            .zip(["account:4", "account:9"])
            .enumerate()
        {
            let parts: Vec<&str> = line.split(' ').collect();
            assert_eq!(parts[0], name);
            assert_eq!(parts[1], parts[2], "{name}: token differs from Redis'");
            let token: u64 = parts[1].parse().expect("a token");
            assert!(token > last[i], "{name}: tokens must grow");
            last[i] = token;
        }
    }
}

/// An HTTP service whose response body is a channel the test feeds.
fn streaming(
    body: Arc<std::sync::Mutex<Option<Channel<Bytes>>>>,
) -> impl tower::Service<
    http::Request<()>,
    Response = http::Response<Channel<Bytes>>,
    Error = Infallible,
    Future: Send,
> + Clone {
    service_fn(move |_: http::Request<()>| {
        let body = body.lock().unwrap_or_else(|e| e.into_inner()).take();
        async move { Ok::<_, Infallible>(http::Response::new(body.expect("one request per body"))) }
    })
}

#[tokio::test]
async fn hold_until_body_end_keeps_every_lock_until_the_body_is_done() {
    let redis_server = server();
    let lock_client = client(&redis_server);
    let conn = raw(&redis_server).await;
    let held = || {
        let mut conn = conn.clone();
        async move { cmd::<i64, _>(&mut conn, &["EXISTS", "account:1", "account:2"]).await }
    };
    let layer = || MultiLockLayer::new(lock_client.clone(), accounts());
    let request = || {
        http::Request::post("/transfers/2/1")
            .body(())
            .expect("request")
    };

    // Held while the body streams; both released at its end.
    let (mut tx, rx) = Channel::<Bytes>::new(4);
    let svc = layer()
        .hold_until_body_end()
        .layer(streaming(Arc::new(std::sync::Mutex::new(Some(rx)))));
    let res = svc.oneshot(request()).await.expect("response");
    assert!(res.body().holds_lock());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(held().await, 2, "released before the body ended");
    tx.send_data(Bytes::from_static(b"part"))
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(held().await, 2, "released before the body ended");
    drop(tx);
    let body = res.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"part");
    eventually(Duration::from_secs(5), || async { held().await == 0 })
        .await
        .expect("released after the body ended");

    // Without the option: released once the response head is ready.
    let (_tx, rx) = Channel::<Bytes>::new(4);
    let svc = layer().layer(streaming(Arc::new(std::sync::Mutex::new(Some(rx)))));
    let res = svc.oneshot(request()).await.expect("response");
    assert!(!res.body().holds_lock());
    eventually(Duration::from_secs(5), || async { held().await == 0 })
        .await
        .expect("released while the body is still open");

    // A body dropped half-way (client gone) releases both.
    let (mut tx, rx) = Channel::<Bytes>::new(4);
    let svc = layer()
        .hold_until_body_end()
        .layer(streaming(Arc::new(std::sync::Mutex::new(Some(rx)))));
    let res = svc.oneshot(request()).await.expect("response");
    tx.send_data(Bytes::from_static(b"half"))
        .await
        .expect("send");
    assert_eq!(held().await, 2);
    drop(res);
    eventually(Duration::from_secs(5), || async { held().await == 0 })
        .await
        .expect("released when the body was dropped");
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
async fn a_client_that_disconnects_releases_every_lock_or_gives_up_waiting() {
    let redis_server = server();
    // A long watchdog lease: only a release frees the locks quickly.
    let lock_client = LockClient::builder(redis_server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let entered = Arc::new(AtomicU64::new(0));
    let entered2 = entered.clone();
    let app = Router::new()
        .route(
            "/transfers/{from}/{to}",
            post(move || {
                let entered = entered2.clone();
                async move {
                    entered.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(120)).await;
                    "moved"
                }
            }),
        )
        .route_layer(
            MultiLockLayer::new(lock_client.clone(), accounts()).wait(Duration::from_secs(30)),
        );
    let server = HttpServer::start(app).await;
    let conn = raw(&redis_server).await;
    let exist = |keys: &'static [&'static str]| {
        let mut conn = conn.clone();
        async move {
            let mut args = vec!["EXISTS"];
            args.extend(keys);
            cmd::<i64, _>(&mut conn, &args).await
        }
    };

    // Holding: the handler sleeps; the client goes away.
    let holding = raw_request(&server, "/transfers/5/6").await;
    eventually(Duration::from_secs(10), || async {
        exist(&["account:5", "account:6"]).await == 2
    })
    .await
    .expect("the request took both locks");
    drop(holding);
    let freed = eventually(Duration::from_secs(5), || async {
        exist(&["account:5", "account:6"]).await == 0
    })
    .await
    .expect("locks stayed held after the client disconnected");
    println!("2 locks freed {freed:?} after the client disconnected (lease 30 s)");

    // Waiting: account 8 is held elsewhere; the client goes away.
    let other = client(&redis_server);
    let held = other
        .lock("account:8")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let waiting = raw_request(&server, "/transfers/7/8").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(waiting);
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        exist(&["account:7", "account:8"]).await,
        0,
        "a request whose client went away took its locks"
    );
    assert_eq!(entered.load(Ordering::SeqCst), 1, "the gone waiter ran");
}
