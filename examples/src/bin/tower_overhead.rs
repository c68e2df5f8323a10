//! Measures what lock-tower's `LockLayer` costs per request: the median
//! (and p90/p99) latency of one trivial handler, called one request at a
//! time, in the same run:
//!
//! - `bare`: the handler without the layer;
//! - `layer, no key`: through the layer, the key function says `None`;
//! - `layer, key`: through the layer with a key (a lock per request);
//! - `by hand`: no layer, the handler takes the same lock itself with
//!   lock-core (`in_context`, `acquire_with`, guard dropped at the end) —
//!   what the layer does, written out;
//!
//! once in-process (tower `Service::call`, no network) and once over HTTP
//! (axum on loopback, a keep-alive hyper client). Variants take turns
//! request by request, each going first in turn, so that drift and
//! background work (dropped guards are released in the background) hit
//! them alike. Keys rotate over 1000
//! names, so each request takes a free lock (no contention is measured
//! here: that is Redis round trips, not the layer).
//!
//! Run it with `cargo run --release -p lock-examples --bin tower_overhead`
//! (`-- 5000` for more requests per variant; default 2000). It uses the
//! Redis at `$REDIS_URL` when set, otherwise it starts a private
//! `redis-server` for the run.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::routing::get;
use axum::Router;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use lock_core::{AcquireOptions, LockClient};
use lock_examples::BoxError;
use lock_tower::LockLayer;
use tower::{service_fn, Layer, Service, ServiceExt};

const KEYS: usize = 1000;

fn key_for(i: usize) -> String {
    format!("overhead:{}", i % KEYS)
}

/// Latency figures of one variant, in microseconds.
struct Figures {
    name: &'static str,
    samples: Vec<Duration>,
}

impl Figures {
    fn new(name: &'static str, n: usize) -> Self {
        Figures {
            name,
            samples: Vec::with_capacity(n),
        }
    }

    fn percentile(&self, p: f64) -> f64 {
        let mut s = self.samples.clone();
        s.sort_unstable();
        let idx = ((s.len().saturating_sub(1)) as f64 * p).round() as usize;
        s.get(idx).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    }
}

fn report(level: &str, figures: &[Figures]) {
    let base = figures.first().map_or(0.0, |f| f.percentile(0.5));
    println!(
        "{level}: median / p90 / p99 latency per request (µs), overhead = median - bare median"
    );
    for f in figures {
        let median = f.percentile(0.5);
        println!(
            "  {:<16} {:>9.1} {:>9.1} {:>9.1}   overhead {:>+9.1}",
            f.name,
            median,
            f.percentile(0.9),
            f.percentile(0.99),
            median - base
        );
    }
}

async fn timed<F: std::future::Future<Output = Result<(), BoxError>>>(
    figures: &mut Figures,
    fut: F,
) -> Result<(), BoxError> {
    let start = Instant::now();
    fut.await?;
    figures.samples.push(start.elapsed());
    Ok(())
}

/// One call of `svc`, once it is ready.
async fn call<S>(svc: &mut S, i: usize) -> Result<(), BoxError>
where
    S: Service<usize>,
    S::Error: Into<BoxError>,
{
    svc.ready().await.map_err(Into::into)?;
    svc.call(i).await.map_err(Into::into)?;
    Ok(())
}

/// In-process: the tower service, called directly.
async fn tower_level(client: &LockClient, n: usize) -> Result<(), BoxError> {
    let handler = service_fn(|_: usize| async { Ok::<_, Infallible>("ok") });
    let mut bare = handler;
    let mut no_key = LockLayer::generic(client.clone(), |_: &usize| None::<String>).layer(handler);
    let mut keyed =
        LockLayer::generic(client.clone(), |i: &usize| Some(key_for(*i))).layer(handler);
    let by_hand_client = client.clone();
    let mut by_hand = service_fn(move |i: usize| {
        let client = by_hand_client.clone();
        lock_core::in_context(async move {
            let lock = client.lock(key_for(i))?;
            let guard = lock
                .acquire_with(AcquireOptions::new().wait(lock_tower::DEFAULT_WAIT))
                .await?;
            let out = "ok";
            drop(guard);
            Ok::<_, BoxError>(out)
        })
    });

    let mut figures = [
        Figures::new("bare", n),
        Figures::new("layer, no key", n),
        Figures::new("layer, key", n),
        Figures::new("by hand", n),
    ];
    for i in 0..n {
        // Each variant goes first in turn.
        for v in (0..4).map(|k| (i + k) % 4) {
            let fig = &mut figures[v];
            match v {
                0 => timed(fig, async { call(&mut bare, i).await }).await?,
                1 => timed(fig, async { call(&mut no_key, i).await }).await?,
                2 => timed(fig, async { call(&mut keyed, i).await }).await?,
                _ => timed(fig, async { call(&mut by_hand, i).await }).await?,
            }
        }
    }
    report("in-process (tower Service::call)", &figures);
    Ok(())
}

/// Over HTTP: four axum routes on one loopback server.
async fn http_level(client: &LockClient, n: usize) -> Result<(), BoxError> {
    let key_from_path = |req: &Request<Body>| {
        let last = req.uri().path().rsplit('/').next()?;
        last.parse::<usize>().ok().map(key_for)
    };
    let by_hand_client = client.clone();
    let app = Router::new()
        .route("/bare/{i}", get(|| async { "ok" }))
        .merge(
            Router::new()
                .route("/nokey/{i}", get(|| async { "ok" }))
                .route_layer(LockLayer::new(client.clone(), |_: &Request<Body>| {
                    None::<String>
                })),
        )
        .merge(
            Router::new()
                .route("/key/{i}", get(|| async { "ok" }))
                .route_layer(LockLayer::new(client.clone(), key_from_path)),
        )
        .route(
            "/hand/{i}",
            get(move |axum::extract::Path(i): axum::extract::Path<usize>| {
                let client = by_hand_client.clone();
                async move {
                    let locked = lock_core::in_context(async {
                        let lock = client.lock(key_for(i))?;
                        let guard = lock
                            .acquire_with(AcquireOptions::new().wait(lock_tower::DEFAULT_WAIT))
                            .await?;
                        drop(guard);
                        Ok::<_, lock_core::Error>(())
                    })
                    .await;
                    match locked {
                        Ok(()) => (axum::http::StatusCode::OK, "ok"),
                        Err(_) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "lock"),
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let http: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();

    let mut figures = [
        Figures::new("bare", n),
        Figures::new("layer, no key", n),
        Figures::new("layer, key", n),
        Figures::new("by hand", n),
    ];
    let routes = ["bare", "nokey", "key", "hand"];
    for i in 0..n {
        for v in (0..4).map(|k| (i + k) % 4) {
            let (route, fig) = (routes[v], &mut figures[v]);
            let uri = format!("http://{addr}/{route}/{i}");
            timed(fig, async {
                let res = http.get(uri.parse()?).await?;
                let status = res.status();
                res.into_body().collect().await?;
                if status != 200 {
                    return Err(format!("{route}: {status}").into());
                }
                Ok(())
            })
            .await?;
        }
    }
    server.abort();
    report("over HTTP (axum, loopback, keep-alive)", &figures);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let n: usize = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 2000,
    };
    let (url, _redis_server) = lock_examples::redis_url()?;
    let client = LockClient::builder(url.as_str())
        .key_prefix(format!("overhead-{}:", lock_examples::ledger::run_id()))
        .build()?;
    client.ping().await?;
    println!(
        "{n} requests per variant, one at a time{}",
        if cfg!(debug_assertions) {
            " (debug build: use --release for real figures)"
        } else {
            ""
        }
    );
    tower_level(&client, n).await?;
    http_level(&client, n).await?;
    Ok(())
}
