//! Helpers of the lock-tower suites: in-process invariant probes, loopback
//! axum and tonic servers, an HTTP client, and the layer's error type.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use lock_tower::{BoxError, LockError};

use super::client_for;
use tokio::sync::oneshot;

/// What a critical section records, to check exclusion: an "inside"
/// marker per key (seeing it set on entry is an overlap), a counter per
/// key updated with a read, a pause and a write (lost updates show), and
/// the number of sections running at once (any key).
#[derive(Default)]
pub struct Probe {
    inside: std::sync::Mutex<HashMap<String, Arc<AtomicBool>>>,
    counters: std::sync::Mutex<HashMap<String, Arc<AtomicU64>>>,
    pub overlaps: AtomicU64,
    pub entered: AtomicU64,
    running: AtomicU64,
    pub max_running: AtomicU64,
}

impl Probe {
    pub fn new() -> Arc<Self> {
        Arc::new(Probe::default())
    }

    fn marker(&self, key: &str) -> Arc<AtomicBool> {
        let mut map = self.inside.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_string()).or_default().clone()
    }

    fn counter_cell(&self, key: &str) -> Arc<AtomicU64> {
        let mut map = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_string()).or_default().clone()
    }

    /// The counter of `key`.
    pub fn counter(&self, key: &str) -> u64 {
        self.counter_cell(key).load(Ordering::SeqCst)
    }

    /// One critical section for `key` lasting about `work`.
    pub async fn section(&self, key: &str, work: Duration) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let marker = self.marker(key);
        if marker.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let cell = self.counter_cell(key);
        let seen = cell.load(Ordering::SeqCst);
        tokio::time::sleep(work).await;
        cell.store(seen + 1, Ordering::SeqCst);
        self.running.fetch_sub(1, Ordering::SeqCst);
        marker.store(false, Ordering::SeqCst);
    }

    pub fn overlaps(&self) -> u64 {
        self.overlaps.load(Ordering::SeqCst)
    }

    pub fn entered(&self) -> u64 {
        self.entered.load(Ordering::SeqCst)
    }

    pub fn max_running(&self) -> u64 {
        self.max_running.load(Ordering::SeqCst)
    }
}

/// An axum server on a loopback port; stops when dropped.
pub struct HttpServer {
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl HttpServer {
    pub async fn start(app: axum::Router) -> HttpServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        HttpServer { addr, _stop: stop }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn http_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

/// Sends `method url`, reads the whole answer; at most 30 s.
pub async fn send(client: &HttpClient, method: &str, url: String) -> Reply {
    let req = http::Request::builder()
        .method(method)
        .uri(&url)
        .body(Full::new(Bytes::new()))
        .expect("a valid request");
    let res = tokio::time::timeout(Duration::from_secs(30), client.request(req))
        .await
        .unwrap_or_else(|_| panic!("{method} {url}: no answer within 30 s"))
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = tokio::time::timeout(Duration::from_secs(30), res.into_body().collect())
        .await
        .unwrap_or_else(|_| panic!("{method} {url}: body not done within 30 s"))
        .unwrap_or_else(|e| panic!("{method} {url}: body: {e}"))
        .to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A tonic server of the accounts service behind `layer`, on a loopback
/// port; it stops when the returned sender is dropped.
pub async fn start_grpc<K, S>(
    layer: lock_tower::LockLayer<K, lock_tower::Grpc>,
    service: S,
) -> (SocketAddr, oneshot::Sender<()>)
where
    K: lock_tower::MakeLockKey<http::Request<tonic::body::Body>> + Send + Sync + 'static,
    S: lock_examples::proto::accounts_server::Accounts,
{
    let incoming =
        tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().expect("addr"))
            .expect("bind");
    let addr = incoming.local_addr().expect("local addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .layer(layer)
        .add_service(lock_examples::proto::accounts_server::AccountsServer::new(
            service,
        ))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stopped.await;
        });
    tokio::spawn(server);
    (addr, stop)
}

/// The lock-tower suites' lock client: [`client_for`] with a 5 s watchdog
/// timeout.
pub fn client(server: &lock_tests::RedisServer) -> lock_core::LockClient {
    client_for(server, 5_000)
}

/// The [`LockError`] inside a service error; a test failure if it is
/// something else.
pub fn lock_error(err: &BoxError) -> &LockError {
    err.downcast_ref::<LockError>()
        .unwrap_or_else(|| panic!("expected a LockError, got {err}"))
}

/// An independent observer of "never more than `limit` inside", kept
/// outside the library: an in-process count (shared by every app of the
/// test process) and a Redis counter updated with INCR / DECR on a raw
/// connection of its own. Every handler section enters and leaves it;
/// an entry that finds more than `limit` inside (either count) is a
/// violation.
pub struct LimitProbe {
    limit: i64,
    inside: std::sync::atomic::AtomicI64,
    max_inside: std::sync::atomic::AtomicI64,
    over: AtomicU64,
    entered: AtomicU64,
    conn: redis::aio::MultiplexedConnection,
    key: String,
}

impl LimitProbe {
    /// A probe of `limit` whose Redis counter is `observer:limit:<name>`.
    pub async fn new(server: &lock_tests::RedisServer, name: &str, limit: i64) -> Arc<Self> {
        let mut conn = super::raw(server).await;
        let key = format!("observer:limit:{name}");
        let _: () = super::cmd(&mut conn, &["DEL", &key, &format!("{key}:over")]).await;
        Arc::new(LimitProbe {
            limit,
            inside: Default::default(),
            max_inside: Default::default(),
            over: AtomicU64::new(0),
            entered: AtomicU64::new(0),
            conn,
            key,
        })
    }

    /// Enters; the returned guard leaves when dropped (also when the
    /// handler is cancelled or panics).
    pub async fn enter(self: &Arc<Self>) -> LimitSection {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_inside.fetch_max(now, Ordering::SeqCst);
        if now > self.limit {
            self.over.fetch_add(1, Ordering::SeqCst);
        }
        let mut conn = self.conn.clone();
        let in_redis: i64 = super::cmd(&mut conn, &["INCR", &self.key]).await;
        if in_redis > self.limit {
            let _: i64 = super::cmd(&mut conn, &["INCR", &format!("{}:over", self.key)]).await;
        }
        LimitSection(Some(self.clone()))
    }

    /// One section of about `work`: enters, waits, leaves (the Redis
    /// counter is decremented before this returns, so before the request's
    /// permit can go back).
    pub async fn section(self: &Arc<Self>, work: Duration) {
        let inside = self.enter().await;
        tokio::time::sleep(work).await;
        inside.leave().await;
    }

    /// The most sections seen inside at once (in-process count).
    pub fn max_inside(&self) -> i64 {
        self.max_inside.load(Ordering::SeqCst)
    }

    /// Sections inside now (in-process count).
    pub fn inside(&self) -> i64 {
        self.inside.load(Ordering::SeqCst)
    }

    pub fn entered(&self) -> u64 {
        self.entered.load(Ordering::SeqCst)
    }

    /// Entries that found more than the limit inside: (in-process, Redis).
    pub async fn violations(&self) -> (u64, i64) {
        let mut conn = self.conn.clone();
        let in_redis: Option<i64> =
            super::cmd(&mut conn, &["GET", &format!("{}:over", self.key)]).await;
        (self.over.load(Ordering::SeqCst), in_redis.unwrap_or(0))
    }
}

/// One section inside a [`LimitProbe`]: [`leave`](Self::leave) it; when
/// dropped instead (a cancelled or panicking handler) it leaves in the
/// background.
pub struct LimitSection(Option<Arc<LimitProbe>>);

impl LimitSection {
    /// Leaves: both counts are down when this returns.
    pub async fn leave(mut self) {
        if let Some(probe) = self.0.take() {
            probe.inside.fetch_sub(1, Ordering::SeqCst);
            let mut conn = probe.conn.clone();
            let _: i64 = super::cmd(&mut conn, &["DECR", &probe.key]).await;
        }
    }
}

impl Drop for LimitSection {
    fn drop(&mut self) {
        let Some(probe) = self.0.take() else {
            return;
        };
        probe.inside.fetch_sub(1, Ordering::SeqCst);
        let mut conn = probe.conn.clone();
        let key = probe.key.clone();
        tokio::spawn(async move {
            let _: i64 = super::cmd(&mut conn, &["DECR", &key]).await;
        });
    }
}
