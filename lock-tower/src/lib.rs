//! A tower [`Layer`](tower_layer::Layer) that serializes requests per key
//! across every replica of a service, with a [`lock_core`] lock on Redis;
//! [`MultiLockLayer`], which runs each request under several keys' locks
//! at once (see "Several keys per request"); and [`PermitLayer`], which
//! lets at most N requests per key run at once across every replica (see
//! "Per-key concurrency limit").
//!
//! ```text
//! POST /accounts/7/withdraw ─┐
//! POST /accounts/7/withdraw ─┼─ key "account:7" → one at a time, on every replica
//! POST /accounts/9/withdraw ─── key "account:9" → runs alongside
//! GET  /health               ─── no key         → straight through, no Redis call
//! ```
//!
//! A key function (a closure, or a [`MakeLockKey`] such as [`PathSegment`],
//! [`HeaderKey`], [`QueryParam`], [`MethodPath`], [`MetadataKey`]) maps each
//! request to a lock name or to `None`. For a request with a key the
//! layer's [`ResponseFuture`] takes the lock (waiting at most
//! [`DEFAULT_WAIT`] unless told otherwise), calls the inner service, and
//! releases the lock when the inner service's future completes — or, with
//! [`hold_until_body_end`](LockLayer::hold_until_body_end), when the
//! response body has ended. A client that goes away (the future or body is
//! dropped) gives up its place in the queue or releases the lock at once.
//!
//! Each keyed request runs inside a [`lock_core::LockContext`] section of
//! its lock ([`lock_core::LockContext::enter`]): a handler that takes the
//! same lock again through lock-core (or its attribute macro) re-enters it
//! instead of waiting for itself, while sibling requests driven from one
//! task (two calls of a layered client joined with `join!`) exclude each
//! other. The handler can read the lock it runs under (see "The lock in
//! the handler" below).
//!
//! Same-key requests of one process queue locally in lock-core's client;
//! only the head of the queue contends in Redis, so N concurrent local
//! requests for a key cost about one Redis waiter. Across processes, Redis
//! decides.
//!
//! # Flavours
//!
//! | made by | requests | when the lock cannot be taken | error type |
//! |---|---|---|---|
//! | [`LockLayer::new`] ([`Http`]) | `http::Request` | a response: 503 + `Retry-After` busy, 500 Redis failure, 400 bad key, 503 client shut down (503 lost, with [`cancel_on_lost`](LockLayer::cancel_on_lost)) | the inner service's (axum: `Infallible`) |
//! | [`LockLayer::grpc`] ([`Grpc`], feature `tonic`) | `http::Request` (tonic) | a gRPC status: `UNAVAILABLE` busy, `INTERNAL` Redis failure, `INVALID_ARGUMENT` bad key, `UNAVAILABLE` client shut down (`ABORTED` lost) | the inner service's |
//! | [`LockLayer::generic`] ([`Generic`]) | anything | `Err(BoxError)` holding a [`LockError`] (for `HandleErrorLayer`) | [`BoxError`] |
//!
//! # With `ServiceBuilder`
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use lock_tower::{LockError, LockLayer};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_tower::BoxError> {
//! # let server = lock_tests::RedisServer::start()?;
//! # let redis_url = server.url();
//! let client = lock_core::LockClient::builder(redis_url).build()?;
//!
//! // Jobs for one tenant run one at a time across every worker process.
//! let worker = ServiceBuilder::new()
//!     .layer(
//!         LockLayer::generic(client.clone(), |job: &(u32, &'static str)| {
//!             Some(format!("tenant:{}", job.0))
//!         })
//!         .wait(Duration::from_millis(200)),
//!     )
//!     .service(service_fn(|(tenant, what): (u32, &'static str)| async move {
//!         Ok::<_, Infallible>(format!("{what} done for tenant {tenant}"))
//!     }));
//!
//! let done = worker.clone().oneshot((7, "import")).await?;
//! assert_eq!(done, "import done for tenant 7");
//!
//! // While someone else holds tenant 7's lock, its jobs wait 200 ms, then
//! // fail with a LockError inside the BoxError (for HandleErrorLayer).
//! let held = client.lock("tenant:7")?.acquire().await?;
//! let err = worker.clone().oneshot((7, "export")).await.unwrap_err();
//! assert!(err.downcast_ref::<LockError>().is_some_and(|e| e.is_busy()));
//! held.release().await?;
//! assert!(worker.oneshot((7, "export")).await.is_ok());
//! # Ok(())
//! # }
//! ```
//!
//! # With axum
//!
//! Add the layer with `Router::route_layer`, not `Router::layer`: `layer`
//! also wraps the router's fallback, so requests that match no route (404s,
//! whatever their path) would derive a key and take a lock too.
//!
//! ```
//! use std::time::Duration;
//! use axum::{body::Body, extract::Path, http::Request, routing::post, Router};
//! use lock_tower::LockLayer;
//! use tower::ServiceExt;
//!
//! async fn withdraw(Path(id): Path<u64>) -> String {
//!     format!("withdrew from {id}") // read, check, write: no other replica is in here for this id
//! }
//!
//! fn account_id_from_path(req: &Request<Body>) -> Option<u64> {
//!     req.uri().path().split('/').nth(2)?.parse().ok()
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_tower::BoxError> {
//! # let server = lock_tests::RedisServer::start()?;
//! # let client = lock_core::LockClient::builder(server.url()).build()?;
//! let app = Router::new()
//!     .route("/accounts/{id}/withdraw", post(withdraw))
//!     .route_layer(
//!         LockLayer::new(client.clone(), |req: &Request<Body>| {
//!             account_id_from_path(req).map(|id| format!("account:{id}"))
//!         })
//!         .wait(Duration::from_secs(2)),
//!     );
//!
//! // Serve it with `axum::serve(listener, app)`; here, one request in-process:
//! let req = Request::post("/accounts/7/withdraw").body(Body::empty())?;
//! let res = app.oneshot(req).await?;
//! assert_eq!(res.status(), 200);
//! # Ok(())
//! # }
//! ```
//!
//! The same with a ready-made extractor:
//! `LockLayer::new(client, PathSegment::after("accounts").prefix("account:"))`.
//!
//! In your own tests, build the client on an in-memory server (lock-core's
//! `memory` feature) and call the router with `oneshot`, no Redis needed:
//!
//! ```rust,ignore
//! // [dev-dependencies] lock-core = { version = "0.1", features = ["memory"] }
//! let server = lock_core::MemoryServer::new();
//! let app = accounts_router(lock_core::LockClient::builder(server.url()).build()?);
//! let res = app.oneshot(Request::post("/accounts/7/withdraw").body(Body::empty())?).await?;
//! ```
//!
//! # With tonic
//!
//! ```no_run
//! # #[cfg(feature = "tonic")]
//! # async fn demo(client: lock_core::LockClient, accounts: tonic::service::Routes) -> Result<(), tonic::transport::Error> {
//! use lock_tower::{LockLayer, MetadataKey};
//!
//! // Calls carrying the same `x-account-id` metadata run one at a time.
//! tonic::transport::Server::builder()
//!     .layer(LockLayer::grpc(client, MetadataKey::from_static("x-account-id").prefix("account:")))
//!     .add_routes(accounts) // or .add_service(AccountsServer::new(..))
//!     .serve("127.0.0.1:50051".parse().expect("a socket address"))
//!     .await
//! # }
//! ```
//!
//! # Readers together, writers alone
//!
//! [`LockLayer::read_write`] takes a side of the key's read-write lock
//! ([`lock_core::RwLock`], Redisson's `RReadWriteLock`) instead of its
//! plain lock: by default `GET`, `HEAD` and `OPTIONS` requests read (any
//! number of them run together on one key, in every replica), every other
//! method writes (alone). [`classify`](LockLayer::classify) replaces the
//! rule with a closure `Fn(&Req) -> LockMode` or a [`ClassifyRequest`]
//! such as [`ReadPaths`]. [`LockLayer::grpc_read_write`] and
//! [`LockLayer::generic_read_write`] are the gRPC and generic flavours:
//! their requests say nothing about reading, so all of them write until
//! they are classified ([`AlwaysWrite`]). Every other option works as for
//! the plain layers; the handler's [`HeldLock`](lock_core::HeldLock)
//! tells its side with [`mode`](lock_core::HeldLock::mode).
//!
//! ```
//! use axum::{body::Body, http::Request, routing::get, Router};
//! use lock_core::LockMode;
//! use lock_tower::{Held, LockLayer, PathSegment};
//! use tower::ServiceExt;
//!
//! async fn show(Held(held): Held) -> &'static str {
//!     match held.mode() {
//!         LockMode::Read => "reading, maybe with others",
//!         _ => "unexpected",
//!     }
//! }
//!
//! async fn edit(Held(held): Held) -> String {
//!     // alone: no reader and no other writer of this document, anywhere
//!     format!("{} under token {}", held.mode(), held.fencing_token())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_tower::BoxError> {
//! # let server = lock_tests::RedisServer::start()?;
//! # let client = lock_core::LockClient::builder(server.url()).build()?;
//! let app = Router::new()
//!     .route("/docs/{id}", get(show).post(edit))
//!     .route_layer(LockLayer::read_write(client, PathSegment::after("docs").prefix("doc:")));
//!
//! let res = app.clone().oneshot(Request::get("/docs/7").body(Body::empty())?).await?;
//! assert_eq!(res.status(), 200);
//! let res = app.oneshot(Request::post("/docs/7").body(Body::empty())?).await?;
//! assert_eq!(res.status(), 200);
//! # Ok(())
//! # }
//! ```
//!
//! # The lock in the handler
//!
//! For every request with a key, the handler can read the lock it runs
//! under as a [`lock_core::HeldLock`]: its name, its fencing token (send it
//! with writes, so the store can refuse a stale holder's), whether it is
//! still held, and a signal when it is lost.
//!
//! | flavour | where to read it |
//! |---|---|
//! | [`Http`], [`Grpc`] | the request's extensions: the axum extractor [`Held`] (feature `axum`), [`HeldLockExt::held_lock`] on `http::Request` and `tonic::Request`, or `req.extensions().get::<HeldLock>()` |
//! | [`Generic`] (any request type) | [`HeldLock::current`](lock_core::HeldLock::current) inside the inner service's future |
//!
//! `HeldLock::current()` works in every flavour, but only in the task that
//! runs the handler; the extension travels with the request. Flavours of
//! your own say where the lock goes with [`AttachHeldLock`].
//!
//! ```
//! use axum::{body::Body, extract::Request, routing::post, Router};
//! use lock_core::HeldLock;
//! use lock_tower::{Held, HeldLockExt, LockLayer, PathSegment};
//! use tower::ServiceExt;
//!
//! async fn withdraw(Held(held): Held) -> String {
//!     // the token goes with the write; the store keeps the highest it saw
//!     format!("token {}", held.fencing_token())
//! }
//!
//! async fn deposit(req: Request) -> String {
//!     let held: &HeldLock = req.held_lock().expect("behind the layer");
//!     assert_eq!(HeldLock::current().map(|h| h.fencing_token()), Some(held.fencing_token()));
//!     format!("token {}", held.fencing_token())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_tower::BoxError> {
//! # let server = lock_tests::RedisServer::start()?;
//! # let client = lock_core::LockClient::builder(server.url()).build()?;
//! let app = Router::new()
//!     .route("/accounts/{id}/withdraw", post(withdraw))
//!     .route("/accounts/{id}/deposit", post(deposit))
//!     .route_layer(LockLayer::new(client, PathSegment::after("accounts").prefix("account:")));
//!
//! for path in ["/accounts/7/withdraw", "/accounts/7/deposit"] {
//!     let res = app.clone().oneshot(Request::post(path).body(Body::empty())?).await?;
//!     assert_eq!(res.status(), 200);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Cancelling on a lost lock
//!
//! A lock can be lost while its request runs (Redis forgot it, a renewal
//! could not reach Redis before the lease ran out, a fixed
//! [`lease`](LockLayer::lease) passed). By default the handler runs on and
//! the loss is only reported by lock-core; with
//! [`cancel_on_lost`](LockLayer::cancel_on_lost) the layer drops the
//! handler's future as soon as the loss is known and answers with the
//! flavour's "lost" rejection (HTTP 503, gRPC `ABORTED`, generic
//! [`LockError::is_lost`]). It covers the handler up to its response, not a
//! body streamed under [`hold_until_body_end`](LockLayer::hold_until_body_end).
//!
//! # Several keys per request
//!
//! [`MultiLockLayer`] runs each request under several locks at once: its
//! key function ([`MakeLockKeys`]: a closure returning a `Vec` or an
//! array of names, an `Option` of one, or a tuple of single-key
//! extractors) maps the request to a list of lock names, and the request
//! runs once it holds all of them, across every replica. A transfer
//! between two accounts locks both; requests whose key sets overlap run
//! one at a time, disjoint sets run together, an empty list passes
//! straight through with no Redis call.
//!
//! The locks are taken through [`lock_core::LockClient::multi_lock`]: all
//! or nothing, the names sorted, nothing held while waiting, so a
//! transfer from `a` to `b` and one from `b` to `a` never deadlock. Each
//! name is an ordinary lock: a [`LockLayer`] of one of the names excludes
//! the request and is excluded by it. The options, the answers (503 +
//! `Retry-After` / `UNAVAILABLE` / a [`LockError`] whose
//! [`keys`](LockError::keys) name the request's keys) and the release
//! (when the response is produced, or with
//! [`hold_until_body_end`](MultiLockLayer::hold_until_body_end) at the
//! body's end; at once when the client goes away) are the lock layer's.
//! The handler finds its locks as a [`HeldLocks`] in the request's
//! extensions (axum: `Extension<HeldLocks>`): names, fencing tokens,
//! `is_held`, a lost signal.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use lock_tower::{LockError, MultiLockLayer};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! /// Move `amount` from one account to another.
//! struct Transfer { from: u64, to: u64, amount: u64 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_tower::BoxError> {
//! # let server = lock_tests::RedisServer::start()?;
//! # let redis_url = server.url();
//! let client = lock_core::LockClient::builder(redis_url).build()?;
//!
//! // Both accounts of a transfer, in whatever order: no deadlock.
//! let transfers = ServiceBuilder::new()
//!     .layer(
//!         MultiLockLayer::generic(client.clone(), |t: &Transfer| {
//!             [format!("account:{}", t.from), format!("account:{}", t.to)]
//!         })
//!         .wait(Duration::from_millis(200)),
//!     )
//!     .service(service_fn(|t: Transfer| async move {
//!         // read, check, write both balances: nobody else is in either account
//!         Ok::<_, Infallible>(format!("moved {} from {} to {}", t.amount, t.from, t.to))
//!     }));
//!
//! let done = transfers.clone().oneshot(Transfer { from: 17, to: 4, amount: 5 }).await?;
//! assert_eq!(done, "moved 5 from 17 to 4");
//!
//! // While account 4 is held elsewhere, transfers touching it wait 200 ms,
//! // then fail with a LockError naming both keys.
//! let held = client.lock("account:4")?.acquire().await?;
//! let err = transfers.clone().oneshot(Transfer { from: 4, to: 9, amount: 1 }).await.unwrap_err();
//! let err = err.downcast_ref::<LockError>().expect("a LockError");
//! assert!(err.is_busy());
//! assert_eq!(err.keys(), ["account:4", "account:9"]);
//! held.release().await?;
//! assert!(transfers.oneshot(Transfer { from: 4, to: 9, amount: 1 }).await.is_ok());
//! # Ok(())
//! # }
//! ```
//!
//! | made by | when the locks cannot be taken | the locks in the handler |
//! |---|---|---|
//! | [`MultiLockLayer::new`] ([`Http`]) | as [`LockLayer::new`]: 503 + `Retry-After` busy, 400 invalid key, 500 Redis failure | `Extension<HeldLocks>`, `req.extensions().get::<HeldLocks>()` |
//! | [`MultiLockLayer::grpc`] ([`Grpc`], feature `tonic`) | as [`LockLayer::grpc`]: `UNAVAILABLE`, `INVALID_ARGUMENT`, `INTERNAL` | `request.extensions().get::<HeldLocks>()` |
//! | [`MultiLockLayer::generic`] ([`Generic`]) | `Err(BoxError)` holding a [`LockError`] ([`is_multi`](LockError::is_multi), [`keys`](LockError::keys)) | [`HeldLock::current_for`](lock_core::HeldLock::current_for), one lock at a time |
//!
//! A multi-lock takes new holds only: nested in a [`LockLayer`] (or
//! another multi-lock layer) of one of its keys, it waits for the outer
//! request's own lock and answers "busy". Put it outside.
//!
//! # Per-key concurrency limit
//!
//! [`PermitLayer`] is tower's `ConcurrencyLimitLayer` per key and across
//! replicas: requests that map to the same key share the key's `permits`
//! permits of an expirable semaphore in Redis
//! ([`lock_core::PermitSemaphore`], Redisson's
//! `RPermitExpirableSemaphore`), so at most that many run at once on all
//! replicas together. The same key functions, flavours and options as
//! [`LockLayer`]:
//!
//! | made by | when no permit comes within the wait bound ([`DEFAULT_PERMIT_WAIT`], 1 s) | the permit in the handler |
//! |---|---|---|
//! | [`PermitLayer::new`] ([`Http`]) | `503` + `Retry-After` (whole seconds, at least 1) | `Extension<RequestPermit>`, `req.extensions().get::<RequestPermit>()` |
//! | [`PermitLayer::grpc`] ([`Grpc`], feature `tonic`) | `RESOURCE_EXHAUSTED` | `request.extensions().get::<RequestPermit>()` |
//! | [`PermitLayer::generic`] ([`Generic`]) | `Err(BoxError)` holding a [`LockError`] (`is_busy()`, `is_permit_limit()`) | not carried |
//!
//! Other failures are answered as the lock layer answers them (400 invalid
//! key, 500 Redis failed, 503 client shut down). Each permit is renewed by
//! the client's watchdog while its request runs (a crashed replica's
//! permits come back within one lease) and goes back when the response is
//! produced, or with [`hold_until_body_end`](PermitLayer::hold_until_body_end)
//! when its body ends; also when the handler fails, panics or is
//! cancelled. The first time a layer sees a key it creates the key's
//! semaphore with its `permits` ([`try_set_permits`](lock_core::PermitSemaphore::try_set_permits)):
//! a semaphore that exists keeps its count, so a changed limit applies to
//! new keys only (see [`PermitLayer`], "The limit of each key"). Give its
//! keys a prefix of their own: a lock and a semaphore of one name share a
//! Redis key.
//!
//! ```
//! use std::time::Duration;
//! use axum::{body::Body, extract::Path, http::Request, routing::post, Extension, Router};
//! use lock_tower::{PathSegment, PermitLayer, RequestPermit};
//! use tower::ServiceExt;
//!
//! async fn render(Path(id): Path<u64>, Extension(permit): Extension<RequestPermit>) -> String {
//!     // one of at most 4 renders of this document, on every replica together
//!     format!("rendered {id} under {}", permit.name())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_tower::BoxError> {
//! # let server = lock_tests::RedisServer::start()?;
//! # let client = lock_core::LockClient::builder(server.url()).build()?;
//! let app = Router::new()
//!     .route("/docs/{id}/render", post(render))
//!     .route_layer(
//!         PermitLayer::new(client, PathSegment::after("docs").prefix("renders:"), 4)
//!             .wait(Duration::from_millis(500)), // then 503 + Retry-After: 1
//!     );
//!
//! let res = app.oneshot(Request::post("/docs/7/render").body(Body::empty())?).await?;
//! assert_eq!(res.status(), 200);
//! # Ok(())
//! # }
//! ```
//!
//! # Logging
//!
//! The layer emits one [`tracing`](https://docs.rs/tracing) event (target
//! `lock_tower`) per request it rejects or cancels, with the fields `lock` (the lock
//! name the request mapped to; for a [`MultiLockLayer`], its names joined
//! with `, `) and `reason` ([`LockError::reason`]):
//!
//! | `reason` | level | when |
//! |---|---|---|
//! | `busy` | DEBUG | the wait bound passed: another request held the key (ordinary contention) |
//! | `invalid_key` | DEBUG | the key is not a valid lock name (usually the client's input) |
//! | `lost` | INFO | [`cancel_on_lost`](LockLayer::cancel_on_lost) cancelled a request (lock-core reports the loss itself, at WARN) |
//! | `closed` | INFO | the lock client was shut down ([`LockError::is_closed`]): 503 / `UNAVAILABLE` |
//! | `not_replicated` | WARN | too few replicas acknowledged the lock ([`LockError::is_not_replicated`]): 503 / `UNAVAILABLE` |
//! | `upgrade_refused` | WARN, with an `error` field | a read-write layer's request asked for the write side under its own read ([`LockError::is_upgrade_refused`]): a mistake in the service |
//! | `redis` | WARN, with an `error` field | Redis failed |
//!
//! A [`PermitLayer`]'s rejections are the same events with the field
//! `limit` (the key) instead of `lock`; `busy` means the limit stayed full
//! for the whole wait bound.
//!
//! Contention and bad input are the normal life of a locked service, so
//! they stay at DEBUG; a Redis failure is the server's fault and turns into
//! 500s, so it is the one rejection logged at WARN. Requests that take
//! their lock log nothing in the layer.
//!
//! # Metrics
//!
//! With the feature `metrics`, the layer counts its rejections through the
//! [`metrics`](https://docs.rs/metrics) facade (install any recorder, such
//! as a Prometheus exporter):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `lock_tower_rejections_total` | counter | `reason`: `busy`, `invalid_key`, `lost`, `closed`, `not_replicated`, `upgrade_refused`, `redis` (as in "Logging"): a [`LockLayer`]'s and a [`MultiLockLayer`]'s rejections |
//! | `lock_tower_permit_rejections_total` | counter | `reason`, as above: a [`PermitLayer`]'s rejections (`busy`: the limit was full) |
//!
//! Incremented once per rejection, by every layer of the process. There
//! is no per-key label: keys are unbounded (one per account, tenant, ...)
//! and would make one time series each.
//!
//! # Features
//!
//! - `http` (default): the [`Http`] flavour (of [`LockLayer`],
//!   [`MultiLockLayer`] and [`PermitLayer`]), [`LockBody`], the key extractors and [`HeldLockExt`].
//! - `axum` (default, implies `http`): the [`Held`] extractor, through
//!   `axum-core` (no dependency on axum itself).
//! - `tonic`: the [`Grpc`] flavour (implies `http`), and [`HeldLockExt`]
//!   on `tonic::Request`.
//! - `metrics`: the rejection counter (see "Metrics").
#![deny(missing_docs)]

mod error;
mod flavour;
mod key;
mod lock;
mod mode;
mod multi;
mod observe;
mod permit;

#[cfg(feature = "http")]
mod body;
#[cfg(feature = "http")]
mod extract;
#[cfg(feature = "tonic")]
mod grpc;
#[cfg(feature = "http")]
mod held;
#[cfg(feature = "http")]
mod http;

pub use error::{BoxError, LockError};
pub use flavour::{AttachHeldLock, Flavour, Generic};
pub use key::MakeLockKey;
pub use lock::{Lock, LockLayer, ResponseFuture, DEFAULT_WAIT};
pub use mode::{AlwaysWrite, ClassifyRequest, ReadWrite};
#[cfg(feature = "http")]
pub use mode::{ReadPaths, SafeMethodsRead};
pub use multi::{
    AttachHeldLocks, HeldLocks, IntoLockKeys, MakeLockKeys, MultiFlavour, MultiLockFuture,
    MultiLockLayer, MultiLockService,
};
pub use permit::{
    AttachPermit, PermitFlavour, PermitFuture, PermitLayer, PermitLimit, RequestPermit,
    DEFAULT_PERMIT_WAIT,
};

#[cfg(feature = "http")]
pub use body::LockBody;
#[cfg(feature = "http")]
pub use extract::{HeaderKey, MetadataKey, MethodPath, PathSegment, QueryParam};
#[cfg(feature = "tonic")]
pub use grpc::Grpc;
#[cfg(feature = "http")]
pub use held::HeldLockExt;
#[cfg(feature = "axum")]
pub use held::{Held, MissingHeldLock};
#[cfg(feature = "http")]
pub use http::{Http, DEFAULT_RETRY_AFTER};
