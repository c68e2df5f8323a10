//! lock-tower at the tower level: `ServiceBuilder`, `service_fn` and
//! `oneshot` against private redis-servers. The HTTP and gRPC suites
//! (`lock_tower_http`, `lock_tower_grpc`) run the same layer behind real
//! servers on loopback.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::support::layer::{client, lock_error, Probe};
use crate::support::{commands_but_info, eventually, script_calls, server, within};
use bytes::Bytes;
use futures_util::future::join_all;
use http_body_util::{BodyExt, Channel};
use lock_core::{LockClient, LockContext};
use lock_tower::{BoxError, LockError, LockLayer};
use tokio::time::Instant;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};

/// A generic-flavour service over `Option<String>` requests (the request
/// is its own key) whose handler runs one probe section of `work`.
fn probed(
    client: LockClient,
    probe: Arc<Probe>,
    work: Duration,
) -> impl Service<Option<String>, Response = (), Error = BoxError, Future: Send> + Clone {
    ServiceBuilder::new()
        .layer(
            LockLayer::generic(client, |key: &Option<String>| key.clone())
                .wait(Duration::from_secs(20)),
        )
        .service(service_fn(move |key: Option<String>| {
            let probe = probe.clone();
            async move {
                probe.section(key.as_deref().unwrap_or("-"), work).await;
                Ok::<_, Infallible>(())
            }
        }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_requests_never_overlap_across_two_clients() {
    let server = server();
    let probe = Probe::new();
    let a = probed(client(&server), probe.clone(), Duration::from_millis(5));
    let b = probed(client(&server), probe.clone(), Duration::from_millis(5));
    const N: usize = 24;
    let calls = (0..N).map(|i| {
        let svc = if i % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(svc.oneshot(Some("account:1".into())))
    });
    for r in within(
        Duration::from_secs(60),
        "24 same-key requests",
        join_all(calls),
    )
    .await
    {
        r.expect("task").expect("request");
    }
    assert_eq!(
        probe.overlaps(),
        0,
        "two requests for one key were inside at once"
    );
    assert_eq!(probe.counter("account:1"), N as u64, "lost updates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_keys_run_concurrently() {
    let server = server();
    let probe = Probe::new();
    let svc = probed(client(&server), probe.clone(), Duration::from_millis(200));
    let calls = (0..8).map(|i| tokio::spawn(svc.clone().oneshot(Some(format!("account:{i}")))));
    for r in within(Duration::from_secs(30), "8 keys", join_all(calls)).await {
        r.expect("task").expect("request");
    }
    assert!(probe.max_running() > 1, "different keys never ran together");
    assert_eq!(probe.overlaps(), 0);
}

#[tokio::test]
async fn requests_without_a_key_pass_through_without_any_redis_command() {
    let server = server();
    let probe = Probe::new();
    let svc = probed(client(&server), probe.clone(), Duration::ZERO);
    // Warm up: connections made, scripts loaded.
    svc.clone()
        .oneshot(Some("warm".into()))
        .await
        .expect("keyed request");
    tokio::time::sleep(Duration::from_millis(200)).await; // background release done
    let before = commands_but_info(&server);
    for _ in 0..20 {
        svc.clone().oneshot(None).await.expect("keyless request");
    }
    let after = commands_but_info(&server);
    assert_eq!(before, after, "keyless requests sent commands to Redis");
    assert_eq!(probe.entered(), 21);
}

#[tokio::test]
async fn the_wait_bound_passes_with_a_busy_lock_error() {
    let server = server();
    let client = client(&server);
    let probe = Probe::new();
    let held = client
        .lock("busy")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let probe2 = probe.clone();
    let svc = ServiceBuilder::new()
        .layer(
            LockLayer::generic(client.clone(), |k: &&'static str| Some(*k))
                .wait(Duration::from_millis(300)),
        )
        .service(service_fn(move |k: &'static str| {
            let probe = probe2.clone();
            async move {
                probe.section(k, Duration::ZERO).await;
                Ok::<_, Infallible>(())
            }
        }));
    let started = Instant::now();
    let err = svc
        .clone()
        .oneshot("busy")
        .await
        .expect_err("the key is held");
    let waited = started.elapsed();
    let err = lock_error(&err);
    assert!(err.is_busy() && !err.is_redis(), "{err:?}");
    assert_eq!(err.key(), "busy");
    assert!(
        waited >= Duration::from_millis(300),
        "gave up after {waited:?}"
    );

    // Zero: one attempt only.
    let once = ServiceBuilder::new()
        .layer(LockLayer::generic(client.clone(), |k: &&'static str| Some(*k)).wait(Duration::ZERO))
        .service(service_fn(|_: &'static str| async {
            Ok::<_, Infallible>(())
        }));
    let err = once.oneshot("busy").await.expect_err("the key is held");
    assert!(lock_error(&err).is_busy());
    assert_eq!(probe.entered(), 0, "a rejected request ran its handler");

    held.release().await.expect("release");
    svc.oneshot("busy").await.expect("free again");
    assert_eq!(probe.entered(), 1);
}

#[tokio::test]
async fn redis_down_is_a_redis_error_not_busy() {
    let mut server = server();
    let client = LockClient::builder(server.url())
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let svc = ServiceBuilder::new()
        .layer(LockLayer::generic(client, |k: &&'static str| Some(*k)))
        .service(service_fn(|_: &'static str| async {
            Ok::<_, Infallible>(())
        }));
    svc.clone().oneshot("k").await.expect("redis up");
    server.kill();
    let err = within(
        Duration::from_secs(30),
        "request with redis down",
        svc.oneshot("k"),
    )
    .await
    .expect_err("redis is down");
    let err = lock_error(&err);
    assert!(err.is_redis() && !err.is_busy(), "{err:?}");
}

#[tokio::test]
async fn an_invalid_key_is_rejected_before_redis() {
    let server = server();
    let before = commands_but_info(&server);
    let svc = ServiceBuilder::new()
        .layer(LockLayer::generic(client(&server), |_: &()| Some("")))
        .service(service_fn(|()| async { Ok::<_, Infallible>(()) }));
    let err = svc.oneshot(()).await.expect_err("empty key");
    assert!(lock_error(&err).is_invalid_key());
    assert_eq!(before, commands_but_info(&server));
}

/// A service that does its work in `call` (as tower's `Buffer` does), not
/// in its future.
#[derive(Clone)]
struct EagerCall(Arc<AtomicU64>);

impl Service<()> for EagerCall {
    type Response = ();
    type Error = Infallible;
    type Future = std::future::Ready<Result<(), Infallible>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, (): ()) -> Self::Future {
        self.0.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(()))
    }
}

#[tokio::test]
async fn the_inner_service_is_called_only_once_the_lock_is_held() {
    let server = server();
    let client = client(&server);
    let calls = Arc::new(AtomicU64::new(0));
    let svc = LockLayer::generic(client.clone(), |_: &()| Some("eager"))
        .layer_service(EagerCall(calls.clone()));
    let held = client
        .lock("eager")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let pending = tokio::spawn(svc.oneshot(()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "called while another holder had the lock"
    );
    held.release().await.expect("release");
    within(Duration::from_secs(10), "request after release", pending)
        .await
        .expect("task")
        .expect("request");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// `LockLayer::layer` without importing `tower::Layer` at every call site.
trait LayerService<S> {
    type Service;
    fn layer_service(&self, inner: S) -> Self::Service;
}

impl<S, L: tower::Layer<S>> LayerService<S> for L {
    type Service = L::Service;
    fn layer_service(&self, inner: S) -> L::Service {
        self.layer(inner)
    }
}

/// A service that is never ready: its `poll_ready` fails.
#[derive(Clone)]
struct NotReady;

impl Service<()> for NotReady {
    type Response = ();
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<(), std::io::Error>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Err(std::io::Error::other("inner not ready")))
    }
    fn call(&mut self, (): ()) -> Self::Future {
        std::future::ready(Ok(()))
    }
}

#[tokio::test]
async fn poll_ready_delegates_to_the_inner_service() {
    let server = server();
    let generic = LockLayer::generic(client(&server), |_: &()| Some("k")).layer_service(NotReady);
    let err = generic.oneshot(()).await.expect_err("inner not ready");
    assert_eq!(err.to_string(), "inner not ready");
    assert!(err.downcast_ref::<LockError>().is_none());

    // The HTTP flavour keeps the inner error type as it is.
    #[derive(Clone)]
    struct HttpNotReady;
    impl Service<http::Request<()>> for HttpNotReady {
        type Response = http::Response<String>;
        type Error = std::io::Error;
        type Future = std::future::Ready<Result<Self::Response, std::io::Error>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
            Poll::Ready(Err(std::io::Error::other("inner not ready")))
        }
        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            std::future::ready(Ok(http::Response::new(String::new())))
        }
    }
    let http =
        LockLayer::new(client(&server), lock_tower::MethodPath::new()).layer_service(HttpNotReady);
    let err: std::io::Error = http
        .oneshot(http::Request::new(()))
        .await
        .expect_err("inner not ready");
    assert_eq!(err.to_string(), "inner not ready");
}

#[tokio::test]
async fn a_handler_reenters_its_request_lock() {
    let server = server();
    let client = client(&server);
    let inner_client = client.clone();
    let svc = ServiceBuilder::new()
        .layer(LockLayer::generic(client.clone(), |k: &&'static str| {
            Some(*k)
        }))
        .service(service_fn(move |k: &'static str| {
            let client = inner_client.clone();
            async move {
                assert!(
                    LockContext::current().is_some(),
                    "no lock context in the handler"
                );
                let lock = client.lock(k)?;
                // Held by this request already: re-enters at once.
                let guard = lock.acquire_timeout(Duration::from_secs(2)).await?;
                let count = lock.hold_count().await?;
                guard.release().await?;
                Ok::<_, lock_core::Error>(count)
            }
        }));
    let count = within(
        Duration::from_secs(10),
        "re-entry",
        svc.oneshot("reentrant"),
    )
    .await
    .expect("the handler re-entered");
    assert_eq!(count, 2);
    assert!(eventually(Duration::from_secs(5), || async {
        !client
            .lock("reentrant")
            .expect("name")
            .is_locked()
            .await
            .unwrap_or(true)
    })
    .await
    .is_some());
}

#[tokio::test]
async fn nested_layers_with_the_same_key_reenter() {
    let server = server();
    let client = client(&server);
    let svc = ServiceBuilder::new()
        .layer(
            LockLayer::generic(client.clone(), |_: &()| Some("nested"))
                .wait(Duration::from_secs(2)),
        )
        .layer(
            LockLayer::generic(client.clone(), |_: &()| Some("nested"))
                .wait(Duration::from_secs(2)),
        )
        .service(service_fn(|()| async {
            Ok::<_, Infallible>("inside both")
        }));
    let out = within(Duration::from_secs(10), "nested layers", svc.oneshot(()))
        .await
        .expect("inner layer re-entered the outer one's lock");
    assert_eq!(out, "inside both");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_while_waiting_frees_its_place() {
    let server = server();
    let client = client(&server);
    let probe = Probe::new();
    let svc = probed(client.clone(), probe.clone(), Duration::ZERO);
    let held = client
        .lock("queue")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    // Three requests wait; two of them go away.
    let gone_a = tokio::spawn(svc.clone().oneshot(Some("queue".into())));
    let gone_b = tokio::spawn(svc.clone().oneshot(Some("queue".into())));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stays = tokio::spawn(svc.clone().oneshot(Some("queue".into())));
    tokio::time::sleep(Duration::from_millis(100)).await;
    gone_a.abort();
    gone_b.abort();
    held.release().await.expect("release");
    within(Duration::from_secs(10), "the remaining waiter", stays)
        .await
        .expect("task")
        .expect("request");
    assert_eq!(probe.entered(), 1, "a dropped request ran its handler");
    let lock = client.lock("queue").expect("name");
    assert!(
        eventually(Duration::from_secs(5), || async {
            !lock.is_locked().await.unwrap_or(true)
        })
        .await
        .is_some(),
        "a dropped waiter left the lock held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_while_holding_releases_the_lock_promptly() {
    let server = server();
    // A long watchdog lease: only an actual release frees the lock quickly.
    let client = LockClient::builder(server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let svc = ServiceBuilder::new()
        .layer(LockLayer::generic(client.clone(), |_: &()| Some("slow")))
        .service(service_fn(|()| async {
            tokio::time::sleep(Duration::from_secs(120)).await;
            Ok::<_, Infallible>(())
        }));
    let lock = client.lock("slow").expect("name");
    let running = tokio::spawn(svc.oneshot(()));
    eventually(Duration::from_secs(10), || async {
        lock.is_locked().await.unwrap_or(false)
    })
    .await
    .expect("the request took the lock");
    running.abort();
    let freed = eventually(Duration::from_secs(5), || async {
        !lock.is_locked().await.unwrap_or(true)
    })
    .await
    .expect("the lock stayed held after the request was dropped");
    println!("lock freed {freed:?} after the request was dropped (lease 30 s)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_queueing_keeps_lock_script_calls_near_one_per_request() {
    let server = server();
    let client = client(&server);
    let probe = Probe::new();
    let svc = probed(client.clone(), probe.clone(), Duration::from_millis(2));
    svc.clone()
        .oneshot(Some("warm".into()))
        .await
        .expect("warm up");
    tokio::time::sleep(Duration::from_millis(200)).await;
    const N: u64 = 32;
    let before = script_calls(&server);
    let calls = (0..N).map(|_| tokio::spawn(svc.clone().oneshot(Some("hot".into()))));
    for r in within(
        Duration::from_secs(60),
        "32 same-key requests",
        join_all(calls),
    )
    .await
    {
        r.expect("task").expect("request");
    }
    // Dropped guards release in the background: let the last one land.
    let lock = client.lock("hot").expect("name");
    eventually(Duration::from_secs(5), || async {
        !lock.is_locked().await.unwrap_or(true)
    })
    .await
    .expect("released");
    let used = script_calls(&server) - before;
    println!("{N} concurrent same-key requests in one process: {used} lock-script calls (acquire + release)");
    assert_eq!(probe.counter("hot"), N);
    assert_eq!(probe.overlaps(), 0);
    // One acquire and one release per request, plus a little slack for
    // the head of the local queue retrying in Redis: no retry storm.
    assert!(
        used <= 2 * N + 8,
        "{used} lock-script calls for {N} requests"
    );
}

#[tokio::test]
async fn an_explicit_lease_is_used_instead_of_the_watchdog() {
    let server = server();
    let client = client(&server); // watchdog timeout 5 s
    let lock = client.lock("leased").expect("name");
    let seen = Arc::new(std::sync::Mutex::new(None));
    let seen2 = seen.clone();
    let lock2 = lock.clone();
    let svc = ServiceBuilder::new()
        .layer(
            LockLayer::generic(client.clone(), |_: &()| Some("leased"))
                .lease(Duration::from_millis(1500)),
        )
        .service(service_fn(move |()| {
            let (lock, seen) = (lock2.clone(), seen2.clone());
            async move {
                let ttl = lock.remaining_ttl().await?;
                *seen.lock().unwrap_or_else(|e| e.into_inner()) = ttl;
                Ok::<_, lock_core::Error>(())
            }
        }));
    svc.oneshot(()).await.expect("request");
    let ttl = seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .expect("locked while the handler ran");
    assert!(
        ttl <= Duration::from_millis(1500) && ttl > Duration::ZERO,
        "ttl {ttl:?}"
    );
}

/// An HTTP service whose response body is a channel the test feeds.
fn streaming(
    body: Arc<std::sync::Mutex<Option<Channel<Bytes>>>>,
) -> impl Service<
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
async fn hold_until_body_end_keeps_the_lock_until_the_body_is_done() {
    let server = server();
    let client = client(&server);
    let lock = client.lock("POST /stream").expect("name");
    let is_locked = || async { lock.is_locked().await.unwrap_or(false) };

    // Held while the body streams; released at its end.
    let (mut tx, rx) = Channel::<Bytes>::new(4);
    let slot = Arc::new(std::sync::Mutex::new(Some(rx)));
    let svc = LockLayer::new(client.clone(), lock_tower::MethodPath::new())
        .hold_until_body_end()
        .layer_service(streaming(slot));
    let req = http::Request::post("/stream").body(()).expect("request");
    let res = svc.oneshot(req).await.expect("response");
    assert!(res.body().holds_lock());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(is_locked().await, "released before the body ended");
    tx.send_data(Bytes::from_static(b"part"))
        .await
        .expect("send");
    drop(tx);
    let body = res.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"part");
    eventually(Duration::from_secs(5), || async { !is_locked().await })
        .await
        .expect("released after the body ended");

    // Without the option: released once the response head is ready.
    let (_tx, rx) = Channel::<Bytes>::new(4);
    let slot = Arc::new(std::sync::Mutex::new(Some(rx)));
    let svc = LockLayer::new(client.clone(), lock_tower::MethodPath::new())
        .layer_service(streaming(slot));
    let req = http::Request::post("/stream").body(()).expect("request");
    let res = svc.oneshot(req).await.expect("response");
    assert!(!res.body().holds_lock());
    eventually(Duration::from_secs(5), || async { !is_locked().await })
        .await
        .expect("released while the body is still open");

    // A body dropped half-way (client gone) releases too.
    let (mut tx, rx) = Channel::<Bytes>::new(4);
    let slot = Arc::new(std::sync::Mutex::new(Some(rx)));
    let svc = LockLayer::new(client.clone(), lock_tower::MethodPath::new())
        .hold_until_body_end()
        .layer_service(streaming(slot));
    let res = svc
        .oneshot(http::Request::post("/stream").body(()).expect("request"))
        .await
        .expect("response");
    tx.send_data(Bytes::from_static(b"half"))
        .await
        .expect("send");
    assert!(is_locked().await);
    drop(res);
    eventually(Duration::from_secs(5), || async { !is_locked().await })
        .await
        .expect("released when the body was dropped");
}

#[tokio::test]
async fn the_http_flavour_answers_with_responses_and_keeps_the_error_type() {
    let server = server();
    let client = client(&server);
    let held = client
        .lock("GET /busy")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let ok = service_fn(|_: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(String::from("ok")))
    });
    let svc = LockLayer::new(client.clone(), lock_tower::MethodPath::new())
        .wait(Duration::from_millis(100))
        .retry_after(Duration::from_millis(2500))
        .layer_service(ok);
    // Error type Infallible: what axum needs.
    let res: Result<_, Infallible> = svc
        .clone()
        .oneshot(http::Request::get("/busy").body(()).expect("req"))
        .await;
    let res = match res {
        Ok(res) => res,
        Err(never) => match never {},
    };
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "3");
    let body = res.into_body().collect().await.map(|c| c.to_bytes());
    assert_eq!(body.ok().as_deref(), Some(&b"lock busy, retry later\n"[..]));

    let custom = LockLayer::new(client.clone(), lock_tower::MethodPath::new())
        .wait(Duration::from_millis(100))
        .on_rejection(|err| {
            let mut res =
                http::Response::new(Bytes::from(format!("{{\"busy\":\"{}\"}}", err.key())));
            *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
            res
        })
        .layer_service(service_fn(|_: http::Request<()>| async {
            Ok::<_, Infallible>(http::Response::new(String::new()))
        }));
    let res = custom
        .oneshot(http::Request::get("/busy").body(()).expect("req"))
        .await
        .expect("infallible");
    assert_eq!(res.status(), 429);
    let body = res.into_body().collect().await.map(|c| c.to_bytes());
    assert_eq!(body.ok().as_deref(), Some(&br#"{"busy":"GET /busy"}"#[..]));
    held.release().await.expect("release");
}
