//! lock-tower's `PermitLayer` (a per-key concurrency limit across
//! replicas) behind real axum servers on loopback, with real HTTP clients
//! and private redis-servers; judged by an independent observer
//! ([`LimitProbe`]: a count in the test process and a Redis counter on a
//! raw connection) and by raw reads of the semaphore's keys.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::layer::{client, http_client, send, HttpServer, LimitProbe, Reply};
use crate::support::{cmd, commands_but_info, raw, script_calls, server, within};
use axum::body::Body;
use axum::extract::Request;
use axum::routing::{get, post};
use axum::{Extension, Router};
use bytes::Bytes;
use futures_util::future::join_all;
use lock_core::LockClient;
use lock_tower::{PathSegment, PermitLayer, RequestPermit};
use tokio::io::AsyncWriteExt;

/// The semaphore's counter of available permits and its set of held
/// permit ids, read with a raw connection.
async fn semaphore_state(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> (i64, i64) {
    let available: Option<i64> = cmd(conn, &["GET", name]).await;
    let held: i64 = cmd(conn, &["ZCARD", &format!("{{{name}}}:timeout")]).await;
    (available.unwrap_or(-1), held)
}

/// Waits (at most `limit`) until the semaphore `name` has `available`
/// permits free and `held` held; panics with what it last saw otherwise.
async fn await_semaphore(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    available: i64,
    held: i64,
    limit: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        let seen = semaphore_state(conn, name).await;
        if seen == (available, held) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "semaphore `{name}`: (available, held) is {seen:?}, not ({available}, {held}), after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `POST /reports/{id}`: one probe section of `work` under the limit
/// `limit:report:{id}`; the handler checks the permit it was given.
fn reports_app(
    client: LockClient,
    probe: Arc<LimitProbe>,
    work: Duration,
    permits: u64,
    wait: Duration,
) -> Router {
    let report = move |Extension(permit): Extension<RequestPermit>, req: Request| {
        let probe = probe.clone();
        async move {
            assert!(permit.is_held(), "the handler's permit is not held");
            assert_eq!(permit.count(), 1);
            assert_eq!(permit.ids().len(), 1);
            assert!(
                permit.name().starts_with("limit:report:"),
                "{}",
                permit.name()
            );
            assert!(req.extensions().get::<RequestPermit>().is_some());
            probe.section(work).await;
            "done"
        }
    };
    Router::new()
        .route("/reports/{id}", post(report))
        .route_layer(
            PermitLayer::new(
                client,
                PathSegment::after("reports").prefix("limit:report:"),
                permits,
            )
            .wait(wait),
        )
}

/// A reply and how long it took.
async fn timed(http: &crate::support::layer::HttpClient, url: String) -> (Reply, Duration) {
    let started = Instant::now();
    let reply = send(http, "POST", url).await;
    (reply, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_never_let_more_than_the_limit_in() {
    let redis_server = server();
    let mut obs = raw(&redis_server).await;
    const LIMIT: u64 = 4;
    const N: usize = 100;
    let probe = LimitProbe::new(&redis_server, "report-1", LIMIT as i64).await;
    let work = Duration::from_millis(100);
    let wait = Duration::from_millis(400);
    // Three replicas, each with its own lock client, on one redis-server.
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let app = reports_app(client(&redis_server), probe.clone(), work, LIMIT, wait);
        replicas.push(HttpServer::start(app).await);
    }
    let http = http_client();
    let scripts_before = script_calls(&redis_server);
    let started = Instant::now();
    let replies = within(
        Duration::from_secs(60),
        "100 requests",
        join_all((0..N).map(|i| timed(&http, replicas[i % 3].url("/reports/1")))),
    )
    .await;
    let elapsed = started.elapsed();

    let (mut served, mut refused) = (0, 0);
    let (mut slowest_served, mut refused_after) = (Duration::ZERO, Vec::new());
    for (reply, took) in &replies {
        match reply.status {
            200 => {
                assert_eq!(reply.body, "done");
                served += 1;
                slowest_served = slowest_served.max(*took);
            }
            503 => {
                refused += 1;
                let retry_after: u64 = reply.headers["retry-after"]
                    .to_str()
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("bad Retry-After: {reply:?}"));
                assert!(retry_after >= 1, "{reply:?}");
                assert_eq!(reply.body, "concurrency limit reached, retry later\n");
                refused_after.push(*took);
            }
            other => panic!("unexpected answer {other}: {reply:?}"),
        }
    }
    refused_after.sort();
    println!(
        "{N} requests, limit {LIMIT}, 3 replicas, wait {wait:?}, work {work:?}: {served} served \
         (slowest {slowest_served:?}), {refused} answered 503 (after {:?} .. {:?}); {elapsed:?} in all; \
         at most {} inside; {} script calls",
        refused_after.first(),
        refused_after.last(),
        probe.max_inside(),
        script_calls(&redis_server) - scripts_before,
    );

    // The invariant, as the observer saw it.
    assert_eq!(
        probe.violations().await,
        (0, 0),
        "more than {LIMIT} inside at once"
    );
    assert!(probe.max_inside() <= LIMIT as i64);
    // (On a loaded machine the permits may change hands too slowly for all
    // four to be inside at once; more than one is always seen.)
    assert!(probe.max_inside() >= 2, "requests never ran together");
    assert_eq!(
        probe.entered(),
        served as u64,
        "a refused request ran its handler"
    );
    // Everyone either got in within the bound or was told to come back.
    assert!(served >= LIMIT as usize, "only {served} served");
    assert!(
        refused > 0,
        "{N} requests of {work:?} cannot all start within {wait:?} at {LIMIT} at once"
    );
    assert!(
        slowest_served < wait + work + Duration::from_secs(2),
        "{slowest_served:?}"
    );
    for took in &refused_after {
        assert!(*took >= wait, "refused before its wait bound: {took:?}");
        assert!(
            *took < wait + Duration::from_secs(2),
            "refused late: {took:?}"
        );
    }
    // Every permit is back: the counter at the limit, no held id, no
    // waiter left in lock-core's line.
    let back = await_semaphore(
        &mut obs,
        "limit:report:1",
        LIMIT as i64,
        0,
        Duration::from_secs(5),
    )
    .await;
    // Waiters that gave up leave the line (in the background, at most a
    // little after their answer).
    let line = within(Duration::from_secs(5), "the line empties", async {
        loop {
            let line: i64 = cmd(&mut obs, &["ZCARD", "lockcore_sem_line:{limit:report:1}"]).await;
            if line == 0 {
                return line;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(line, 0);
    println!("all permits back {back:?} after the last answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_keys_do_not_limit_each_other() {
    let redis_server = server();
    let probe = LimitProbe::new(&redis_server, "keys", 8).await;
    // One permit per key and no wait: a second request of a key is refused at once.
    let app = reports_app(
        client(&redis_server),
        probe.clone(),
        Duration::from_millis(300),
        1,
        Duration::ZERO,
    );
    let server = HttpServer::start(app).await;
    let http = http_client();
    let replies = within(
        Duration::from_secs(30),
        "8 keys",
        join_all((0..8).map(|i| send(&http, "POST", server.url(&format!("/reports/{i}"))))),
    )
    .await;
    for r in &replies {
        assert_eq!((r.status, r.body.as_str()), (200, "done"), "{r:?}");
    }
    assert!(probe.max_inside() > 1, "different keys never ran together");
    // The control: two requests of one key, one permit, no wait.
    let replies = within(
        Duration::from_secs(30),
        "one key twice",
        join_all((0..2).map(|_| send(&http, "POST", server.url("/reports/9")))),
    )
    .await;
    let mut statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    statuses.sort();
    assert_eq!(statuses, [200, 503]);
}

#[tokio::test]
async fn an_existing_semaphore_keeps_its_count_and_a_deleted_one_is_set_again() {
    let redis_server = server();
    let mut obs = raw(&redis_server).await;
    let lock_client = client(&redis_server);
    // Set before the layer saw the key (another deployment's limit): 2.
    let sem = lock_client
        .permit_semaphore("limit:report:5")
        .expect("name");
    assert!(sem.try_set_permits(2).await.expect("set"));
    let probe = LimitProbe::new(&redis_server, "kept", 2).await;
    let app = reports_app(
        lock_client.clone(),
        probe.clone(),
        Duration::from_millis(100),
        4,
        Duration::from_secs(5),
    );
    let server = HttpServer::start(app).await;
    let http = http_client();
    let replies = within(
        Duration::from_secs(30),
        "8 requests",
        join_all((0..8).map(|_| send(&http, "POST", server.url("/reports/5")))),
    )
    .await;
    assert!(replies.iter().all(|r| r.status == 200), "{replies:?}");
    assert_eq!(
        probe.max_inside(),
        2,
        "the existing count of 2 was not kept"
    );
    assert_eq!(probe.violations().await, (0, 0));
    await_semaphore(&mut obs, "limit:report:5", 2, 0, Duration::from_secs(5)).await;

    // Redis forgets the semaphore: a request waits out its bound, finds it
    // missing, sets the layer's count (4) and gets in.
    let _: i64 = cmd(&mut obs, &["DEL", "limit:report:5"]).await;
    let quick = reports_app(
        lock_client,
        probe.clone(),
        Duration::ZERO,
        4,
        Duration::from_millis(200),
    );
    let quick = HttpServer::start(quick).await;
    let _ = send(&http, "POST", quick.url("/reports/5")).await; // first sight: sets nothing (it existed)
    let _: i64 = cmd(&mut obs, &["DEL", "limit:report:5"]).await;
    let (reply, took) = timed(&http, quick.url("/reports/5")).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(took >= Duration::from_millis(200), "{took:?}");
    await_semaphore(&mut obs, "limit:report:5", 4, 0, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn keyless_requests_pass_through_and_invalid_keys_are_400() {
    let redis_server = server();
    let lock_client = LockClient::builder(redis_server.url())
        .max_name_len(24)
        .build()
        .expect("client");
    let app = Router::new()
        .route("/reports/{id}", post(|| async { "done" }))
        .route("/health", get(|| async { "ok" }))
        .layer(PermitLayer::new(
            lock_client,
            PathSegment::after("reports").prefix("limit:"),
            2,
        ));
    let server = HttpServer::start(app).await;
    let http = http_client();
    assert_eq!(
        send(&http, "POST", server.url("/reports/1")).await.status,
        200
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = commands_but_info(&redis_server);
    for _ in 0..10 {
        assert_eq!(send(&http, "GET", server.url("/health")).await.status, 200);
    }
    assert_eq!(
        before,
        commands_but_info(&redis_server),
        "a keyless request used Redis"
    );
    let r = send(
        &http,
        "POST",
        server.url(&format!("/reports/{}", "x".repeat(40))),
    )
    .await;
    assert_eq!((r.status, r.body.as_str()), (400, "invalid limit key\n"));
}

/// An app whose `GET /stream` answers at once with a body that ends when
/// the test says so, and `GET /quick` answers at once; both under the one
/// permit of `limit:stream`, with a 100 ms wait.
fn streaming_app(
    client: LockClient,
    hold_body: bool,
) -> (
    Router,
    tokio::sync::mpsc::Sender<tokio::sync::oneshot::Receiver<()>>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<tokio::sync::oneshot::Receiver<()>>(1);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
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
    let layer = PermitLayer::new(client, |_: &Request| Some("limit:stream"), 1)
        .wait(Duration::from_millis(100));
    let layer = if hold_body {
        layer.hold_until_body_end()
    } else {
        layer
    };
    let app = Router::new()
        .route("/stream", get(stream))
        .route("/quick", get(|| async { "quick" }))
        .route_layer(layer);
    (app, tx)
}

/// Starts `GET /stream` and returns its response, head received, body not.
async fn open_stream(
    server: &HttpServer,
    tx: &tokio::sync::mpsc::Sender<tokio::sync::oneshot::Receiver<()>>,
) -> (
    http::Response<hyper::body::Incoming>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (finish, done) = tokio::sync::oneshot::channel();
    tx.send(done).await.expect("handler input");
    let req = http::Request::get(server.url("/stream"))
        .body(http_body_util::Full::new(Bytes::new()))
        .expect("request");
    let res = within(
        Duration::from_secs(10),
        "response head",
        http_client().request(req),
    )
    .await
    .expect("response");
    assert_eq!(res.status(), 200);
    (res, finish)
}

async fn read_to_end(res: http::Response<hyper::body::Incoming>) -> Bytes {
    within(
        Duration::from_secs(10),
        "body",
        http_body_util::BodyExt::collect(res.into_body()),
    )
    .await
    .expect("body")
    .to_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_until_body_end_keeps_the_permit_until_the_body_is_consumed() {
    let redis_server = server();
    let mut obs = raw(&redis_server).await;
    let (app, tx) = streaming_app(client(&redis_server), true);
    let server = HttpServer::start(app).await;
    let http = http_client();
    let (res, finish) = open_stream(&server, &tx).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        semaphore_state(&mut obs, "limit:stream").await,
        (0, 1),
        "given back while the body streams"
    );
    let r = send(&http, "GET", server.url("/quick")).await;
    assert_eq!(
        r.status, 503,
        "another request got in while the body streamed: {r:?}"
    );
    let _ = finish.send(());
    assert_eq!(&read_to_end(res).await[..], b"first last");
    await_semaphore(&mut obs, "limit:stream", 1, 0, Duration::from_secs(5)).await;
    assert_eq!(send(&http, "GET", server.url("/quick")).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_permit_goes_back_with_the_response_head() {
    let redis_server = server();
    let mut obs = raw(&redis_server).await;
    let (app, tx) = streaming_app(client(&redis_server), false);
    let server = HttpServer::start(app).await;
    let http = http_client();
    let (res, finish) = open_stream(&server, &tx).await;
    await_semaphore(&mut obs, "limit:stream", 1, 0, Duration::from_secs(5)).await;
    let r = send(&http, "GET", server.url("/quick")).await;
    assert_eq!((r.status, r.body.as_str()), (200, "quick"));
    let _ = finish.send(());
    assert_eq!(&read_to_end(res).await[..], b"first last");
}

/// Sends `method path` on a raw connection and returns it, so that the
/// test can drop it (the client goes away) at a chosen moment.
async fn raw_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-length: 0\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_or_abandoned_handler_gives_its_permit_back_at_once() {
    let redis_server = server();
    let mut obs = raw(&redis_server).await;
    // A 30 s watchdog lease: only a release brings the permit back quickly.
    let lock_client = LockClient::builder(redis_server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let app = Router::new()
        .route(
            "/panic",
            get(|| async {
                if std::hint::black_box(true) {
                    panic!("the handler panics (on purpose)");
                }
                "unreachable"
            }),
        )
        .route(
            "/hang",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(120)).await;
                "late"
            }),
        )
        .route_layer(PermitLayer::new(
            lock_client,
            |_: &Request| Some("limit:fragile"),
            1,
        ));
    let server = HttpServer::start(app).await;

    let conn = raw_request(server.addr, "GET", "/panic").await;
    let back = await_semaphore(&mut obs, "limit:fragile", 1, 0, Duration::from_secs(3)).await;
    println!("permit back {back:?} after the handler panicked (lease 30 s)");
    drop(conn);

    let conn = raw_request(server.addr, "GET", "/hang").await;
    await_semaphore(&mut obs, "limit:fragile", 0, 1, Duration::from_secs(5)).await;
    drop(conn);
    let back = await_semaphore(&mut obs, "limit:fragile", 1, 0, Duration::from_secs(3)).await;
    println!("permit back {back:?} after the client went away (lease 30 s)");
}

const ROLE: &str = "LOCK_TEST_CHILD_ROLE";
const URL: &str = "LOCK_TEST_URL";

/// Entry point of the replica processes started (and killed) by the crash
/// test; does nothing unless started by it.
#[test]
#[ignore = "entry point of child processes started by the permit crash test"]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "replica", "unknown role {role}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(child_replica());
}

/// A replica whose handlers hang (holding their permits, renewed by a 1 s
/// watchdog lease) until the process is killed; says where it listens.
async fn child_replica() {
    let client = LockClient::builder(crate::support::env_var(URL))
        .watchdog_timeout(Duration::from_millis(1000))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let app = Router::new()
        .route(
            "/reports/{id}",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(120)).await;
                "late"
            }),
        )
        .route_layer(PermitLayer::new(
            client,
            PathSegment::after("reports").prefix("limit:report:"),
            2,
        ));
    let server = HttpServer::start(app).await;
    println!("LISTENING {}", server.addr);
    tokio::time::sleep(Duration::from_secs(120)).await;
}

/// A child process killed when the test ends, also when it fails.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_permits_come_back_within_one_lease() {
    let redis_server = server();
    let mut obs = raw(&redis_server).await;
    let mut child = crate::support::spawn_child(
        module_path!(),
        &[(ROLE, "replica".to_string()), (URL, redis_server.url())],
        std::process::Stdio::null(),
    );
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("piped stdout"));
    let mut child = KillOnDrop(child);
    let line = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| Some(l.split_once("LISTENING ")?.1.trim().to_string()))
    });
    let addr: std::net::SocketAddr = within(Duration::from_secs(30), "the replica's address", line)
        .await
        .unwrap_or_else(|e| panic!("reader: {e}"))
        .unwrap_or_else(|| panic!("the replica exited without listening"))
        .parse()
        .expect("address");
    // Both permits of the key go to the doomed replica's hanging requests.
    let _conns = [
        raw_request(addr, "POST", "/reports/3").await,
        raw_request(addr, "POST", "/reports/3").await,
    ];
    await_semaphore(&mut obs, "limit:report:3", 0, 2, Duration::from_secs(10)).await;
    child.0.kill().unwrap_or_else(|e| panic!("kill: {e}"));
    let _ = child.0.wait();
    let killed = Instant::now();
    // A live replica's request waits; the dead replica's permits expire
    // within its 1 s lease (nobody renews them) and come back.
    let probe = LimitProbe::new(&redis_server, "crash", 2).await;
    let app = reports_app(
        client(&redis_server),
        probe.clone(),
        Duration::ZERO,
        2,
        Duration::from_secs(5),
    );
    let live = HttpServer::start(app).await;
    let reply = send(&http_client(), "POST", live.url("/reports/3")).await;
    let took = killed.elapsed();
    assert_eq!(reply.status, 200, "{reply:?}");
    println!(
        "a live replica served {took:?} after the holder of every permit was killed (lease 1 s)"
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
    await_semaphore(&mut obs, "limit:report:3", 2, 0, Duration::from_secs(5)).await;
}
