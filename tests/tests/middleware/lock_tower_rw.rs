//! The read-write layers (`LockLayer::read_write`, `generic_read_write`)
//! behind real axum servers on loopback and at the tower level, on private
//! redis-servers, judged by an independent observer (`support::RwInside`,
//! a script on its own Redis connection): GETs of one key overlap, POSTs
//! are alone, the handler sees its side, a custom classifier is honoured,
//! the builder options work, a write under the request's own read is
//! refused.

use std::time::Duration;

use crate::support::layer::{client, http_client, lock_error, send, HttpServer};
use crate::support::{server, within, RwInside};
use axum::body::Body;
use axum::extract::Request;
use axum::routing::{get, post};
use axum::Router;
use futures_util::future::join_all;
use lock_core::{HeldLock, LockClient, LockMode};
use lock_tower::{Held, LockLayer, PathSegment};
use tower::{service_fn, Layer, ServiceExt};

/// How long a reader stays inside waiting for the others to join it.
const MEET: Duration = Duration::from_secs(3);

/// `GET /docs/{id}` reads, staying inside until `together` readers have
/// been inside at once (at most [`MEET`]); `POST /docs/{id}` writes for
/// `work`. Both answer with their side and whether the readers met.
fn docs_app(client: LockClient, observer: RwInside, together: i64, work: Duration) -> Router {
    let reader = observer.clone();
    let show = move |Held(held): Held| {
        let mut observer = reader.clone();
        async move {
            observer.enter_read().await;
            let met = observer.await_max_readers(together, MEET).await;
            observer.leave_read().await;
            format!("{} met={met}", held.mode())
        }
    };
    let edit = move |Held(held): Held| {
        let mut observer = observer.clone();
        async move {
            observer.enter_write().await;
            tokio::time::sleep(work).await;
            observer.leave_write().await;
            held.mode().to_string()
        }
    };
    Router::new()
        .route("/docs/{id}", get(show).post(edit))
        .route_layer(
            LockLayer::read_write(client, PathSegment::after("docs").prefix("doc:"))
                .wait(Duration::from_secs(30)),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_of_one_key_overlap_across_two_servers() {
    let redis = server();
    let observer = RwInside::new(&redis, "layer-gets").await;
    let together = 4;
    let work = Duration::from_millis(5);
    let a = HttpServer::start(docs_app(client(&redis), observer.clone(), together, work)).await;
    let b = HttpServer::start(docs_app(client(&redis), observer.clone(), together, work)).await;
    let http = http_client();
    let replies = within(
        Duration::from_secs(20),
        "four GETs",
        join_all((0..together).map(|i| {
            let server = if i % 2 == 0 { &a } else { &b };
            send(&http, "GET", server.url("/docs/7"))
        })),
    )
    .await;
    for r in &replies {
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, "read met=true", "GETs excluded each other");
    }
    let mut observer = observer;
    assert_eq!(observer.max_readers().await, together);
    assert_eq!(observer.violations().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_is_alone_among_gets_and_posts() {
    let redis = server();
    let observer = RwInside::new(&redis, "layer-mixed").await;
    let work = Duration::from_millis(15);
    // `together` 1: readers do not wait for each other, they just read.
    let a = HttpServer::start(docs_app(client(&redis), observer.clone(), 1, work)).await;
    let b = HttpServer::start(docs_app(client(&redis), observer.clone(), 1, work)).await;
    let http = http_client();
    let (gets, posts, rounds) = (6usize, 3usize, 3usize);
    let mut replies = Vec::new();
    for round in 0..rounds {
        let requests = (0..gets + posts).map(|i| {
            let server = if (i + round) % 2 == 0 { &a } else { &b };
            let method = if i < gets { "GET" } else { "POST" };
            let url = server.url("/docs/8");
            let http = &http;
            async move { (method, send(http, method, url).await) }
        });
        replies.extend(within(Duration::from_secs(30), "a round", join_all(requests)).await);
    }
    // The observer first: what the requests did, whatever they think they held.
    let mut observer = observer;
    assert_eq!(
        observer.violations().await,
        0,
        "a POST was inside with another request"
    );
    for (method, r) in &replies {
        assert_eq!(r.status, 200, "{method}: {r:?}");
        let expected = if *method == "GET" {
            "read met=true"
        } else {
            "write"
        };
        assert_eq!(r.body, expected, "{method}");
    }
    assert_eq!(
        observer.entries().await,
        ((gets * rounds) as i64, (posts * rounds) as i64)
    );
}

#[tokio::test]
async fn a_custom_classifier_is_honoured() {
    let redis = server();
    let observer = RwInside::new(&redis, "layer-classify").await;
    let together = 3;
    // POST /docs/{id}/search only reads; every other request writes, GETs too.
    let search = {
        let observer = observer.clone();
        move |Held(held): Held| {
            let mut observer = observer.clone();
            async move {
                observer.enter_read().await;
                let met = observer.await_max_readers(together, MEET).await;
                observer.leave_read().await;
                format!("{} met={met}", held.mode())
            }
        }
    };
    let app = Router::new()
        .route("/docs/{id}/search", post(search))
        .route(
            "/docs/{id}",
            get(|Held(held): Held| async move { held.mode().to_string() }),
        )
        .route_layer(
            LockLayer::read_write(client(&redis), PathSegment::after("docs").prefix("doc:"))
                .classify(|req: &Request<Body>| {
                    if req.uri().path().ends_with("/search") {
                        LockMode::Read
                    } else {
                        LockMode::Write
                    }
                })
                .wait(Duration::from_secs(30)),
        );
    let server = HttpServer::start(app).await;
    let http = http_client();
    let replies = within(
        Duration::from_secs(20),
        "searches",
        join_all((0..together).map(|_| send(&http, "POST", server.url("/docs/9/search")))),
    )
    .await;
    for r in &replies {
        assert_eq!((r.status, r.body.as_str()), (200, "read met=true"));
    }
    let r = send(&http, "GET", server.url("/docs/9")).await;
    assert_eq!((r.status, r.body.as_str()), (200, "write"));
    let mut observer = observer;
    assert_eq!(observer.max_readers().await, together);
}

#[tokio::test]
async fn wait_zero_answers_busy_only_where_the_sides_exclude() {
    let redis = server();
    let other = client(&redis);
    let rw = other.rw_lock("doc:10").unwrap_or_else(|e| panic!("{e}"));
    let app = Router::new()
        .route(
            "/docs/{id}",
            get(|Held(held): Held| async move { held.mode().to_string() })
                .post(|Held(held): Held| async move { held.mode().to_string() }),
        )
        .route_layer(
            LockLayer::read_write(client(&redis), PathSegment::after("docs").prefix("doc:"))
                .wait(Duration::ZERO)
                .lease(Duration::from_secs(10)),
        );
    let server = HttpServer::start(app).await;
    let http = http_client();
    let url = server.url("/docs/10");

    // Another replica reads: GETs share, POSTs are busy at once.
    let reading = rw.read().acquire().await.unwrap_or_else(|e| panic!("{e}"));
    let r = send(&http, "GET", url.clone()).await;
    assert_eq!((r.status, r.body.as_str()), (200, "read"));
    let r = send(&http, "POST", url.clone()).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.headers["retry-after"], "1");
    reading.release().await.unwrap_or_else(|e| panic!("{e}"));

    // Another replica writes: both are busy.
    let writing = rw.write().acquire().await.unwrap_or_else(|e| panic!("{e}"));
    for method in ["GET", "POST"] {
        let r = send(&http, method, url.clone()).await;
        assert_eq!(r.status, 503, "{method}: {r:?}");
    }
    writing.release().await.unwrap_or_else(|e| panic!("{e}"));

    // Free again; and the layer's holds are gone after each request.
    let r = send(&http, "POST", url.clone()).await;
    assert_eq!((r.status, r.body.as_str()), (200, "write"));
    let status = rw.status().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(status.owners.is_empty(), "{status:?}");
}

#[tokio::test]
async fn a_write_under_the_requests_own_read_is_refused_at_once() {
    let redis = server();
    let locks = client(&redis);
    // The handler tries to upgrade by hand ...
    let by_hand = {
        let locks = locks.clone();
        move |Held(held): Held| {
            let locks = locks.clone();
            async move {
                let rw = locks.rw_lock(held.name()).unwrap_or_else(|e| panic!("{e}"));
                match rw.write().acquire_timeout(Duration::from_secs(5)).await {
                    Ok(_) => "upgraded".to_string(),
                    Err(lock_core::Error::UpgradeRefused { .. }) => "refused".to_string(),
                    Err(e) => format!("other error: {e}"),
                }
            }
        }
    };
    let key = || PathSegment::after("docs").prefix("doc:");
    let app = Router::new()
        .route("/docs/{id}", get(by_hand))
        // ... and a nested write layer on the same key under the read one.
        .route(
            "/docs/{id}/nested",
            get(|| async { "ran" }).route_layer(
                LockLayer::read_write(locks.clone(), key())
                    .classify(|_: &Request<Body>| LockMode::Write),
            ),
        )
        .route_layer(LockLayer::read_write(locks.clone(), key()));
    let server = HttpServer::start(app).await;
    let http = http_client();
    let started = std::time::Instant::now();
    let r = send(&http, "GET", server.url("/docs/11")).await;
    assert_eq!((r.status, r.body.as_str()), (200, "refused"));
    let r = send(&http, "GET", server.url("/docs/11/nested")).await;
    assert_eq!((r.status, r.body.as_str()), (500, "lock upgrade refused\n"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at once"
    );
}

#[tokio::test]
async fn the_generic_read_write_layer_writes_unless_classified() {
    let redis = server();
    let observer = RwInside::new(&redis, "generic").await;
    // The inner service reads its side from its section.
    let inner = service_fn(|_job: (u32, &'static str)| async move {
        let held = HeldLock::current().unwrap_or_else(|| panic!("runs under a lock"));
        Ok::<_, std::convert::Infallible>(held.mode())
    });
    let key = |job: &(u32, &'static str)| Some(format!("tenant:{}", job.0));
    let plain = LockLayer::generic_read_write(client(&redis), key).layer(inner);
    let mode = plain
        .clone()
        .oneshot((1, "report"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mode, LockMode::Write);

    // Classified: reports read together.
    let together = 3;
    let reports = LockLayer::generic_read_write(client(&redis), key)
        .classify(|job: &(u32, &'static str)| {
            if job.1 == "report" {
                LockMode::Read
            } else {
                LockMode::Write
            }
        })
        .wait(Duration::from_secs(10))
        .layer(service_fn(move |job: (u32, &'static str)| {
            let mut observer = observer.clone();
            async move {
                let held = HeldLock::current().unwrap_or_else(|| panic!("runs under a lock"));
                let met = if held.mode() == LockMode::Read {
                    observer.enter_read().await;
                    let met = observer.await_max_readers(together, MEET).await;
                    observer.leave_read().await;
                    met
                } else {
                    observer.enter_write().await;
                    observer.leave_write().await;
                    true
                };
                Ok::<_, std::convert::Infallible>((job.1, held.mode(), met))
            }
        }));
    let out = within(
        Duration::from_secs(20),
        "reports",
        join_all((0..together).map(|_| reports.clone().oneshot((2, "report")))),
    )
    .await;
    for r in out {
        let r = r.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r, ("report", LockMode::Read, true));
    }
    let import = reports
        .clone()
        .oneshot((2, "import"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(import, ("import", LockMode::Write, true));

    // A busy write is a LockError as for the plain generic layer.
    let held = client(&redis)
        .rw_lock("tenant:2")
        .unwrap_or_else(|e| panic!("{e}"))
        .read()
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = LockLayer::generic_read_write(client(&redis), key)
        .wait(Duration::ZERO)
        .layer(service_fn(|_: (u32, &'static str)| async {
            Ok::<_, std::convert::Infallible>(())
        }))
        .oneshot((2, "import"))
        .await
        .expect_err("a write while another replica reads is busy");
    assert!(lock_error(&err).is_busy(), "{err}");
    held.release().await.unwrap_or_else(|e| panic!("{e}"));
}
