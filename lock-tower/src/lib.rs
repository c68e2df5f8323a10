//! A tower [`Layer`](tower_layer::Layer) that serializes requests per key
//! across every replica of a service, with a [`lock_core`] lock on Redis.
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
//! other.
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
//! | [`LockLayer::new`] ([`Http`]) | `http::Request` | a response: 503 + `Retry-After` busy, 500 Redis failure, 400 bad key | the inner service's (axum: `Infallible`) |
//! | [`LockLayer::grpc`] ([`Grpc`], feature `tonic`) | `http::Request` (tonic) | a gRPC status: `UNAVAILABLE` busy, `INTERNAL` Redis failure, `INVALID_ARGUMENT` bad key | the inner service's |
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
//!     .layer(
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
//! # Features
//!
//! - `http` (default): the [`Http`] flavour, [`LockBody`] and the key
//!   extractors.
//! - `tonic`: the [`Grpc`] flavour (implies `http`).
#![deny(missing_docs)]

mod error;
mod flavour;
mod key;
mod lock;

#[cfg(feature = "http")]
mod body;
#[cfg(feature = "http")]
mod extract;
#[cfg(feature = "tonic")]
mod grpc;
#[cfg(feature = "http")]
mod http;

pub use error::{BoxError, LockError};
pub use flavour::{Flavour, Generic};
pub use key::MakeLockKey;
pub use lock::{Lock, LockLayer, ResponseFuture, DEFAULT_WAIT};

#[cfg(feature = "http")]
pub use body::LockBody;
#[cfg(feature = "http")]
pub use extract::{HeaderKey, MetadataKey, MethodPath, PathSegment, QueryParam};
#[cfg(feature = "tonic")]
pub use grpc::Grpc;
#[cfg(feature = "http")]
pub use http::{Http, DEFAULT_RETRY_AFTER};
