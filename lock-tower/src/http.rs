//! The HTTP flavour: lock failures become responses, so the service keeps
//! the inner service's error type (axum's routers need `Infallible`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use lock_core::{HeldLock, LockClient, LockGuard};

use crate::body::LockBody;
use crate::error::LockError;
use crate::flavour::{AttachHeldLock, Flavour};
use crate::lock::LockLayer;
use crate::mode::{ReadWrite, SafeMethodsRead};

/// The `Retry-After` of the default "busy" response: 1 second.
///
/// ```
/// assert_eq!(lock_tower::DEFAULT_RETRY_AFTER.as_secs(), 1);
/// ```
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

type Rejection = Arc<dyn Fn(&LockError) -> Response<Bytes> + Send + Sync>;

/// The HTTP flavour, made by [`LockLayer::new`]: responses are
/// `http::Response<LockBody<B>>` and the error type is the inner
/// service's. When the lock cannot be taken it answers:
///
/// | cause | status | body |
/// |---|---|---|
/// | busy: the wait bound passed ([`LockError::is_busy`]) | `503 Service Unavailable` + `Retry-After: 1` | `lock busy, retry later` |
/// | invalid key: empty or too long ([`LockError::is_invalid_key`]) | `400 Bad Request` | `invalid lock key` |
/// | lost while the handler ran, with [`cancel_on_lost`](LockLayer::cancel_on_lost) ([`LockError::is_lost`]) | `503 Service Unavailable`, no `Retry-After` | `lock lost, request cancelled` |
/// | the lock client was shut down ([`LockError::is_closed`]): this replica is going away | `503 Service Unavailable` | `shutting down` |
/// | too few replicas acknowledged the lock ([`LockError::is_not_replicated`]; the lock client has `wait_for_replicas`) | `503 Service Unavailable` | `lock not acknowledged by replicas` |
/// | a write refused under the request's own read ([`LockError::is_upgrade_refused`]; read-write layers) | `500 Internal Server Error` | `lock upgrade refused` |
/// | Redis failed ([`LockError::is_redis`]) or anything else | `500 Internal Server Error` | `lock unavailable` |
///
/// Contention is a 503 with `Retry-After` because that is what clients and
/// proxies know to retry later; a Redis failure is a 500 because it is the
/// server's fault and should show up as an error, not as load. A request
/// cancelled because its lock was lost is a 503 too (the server could not
/// finish it; trying again may work), but without `Retry-After`: the
/// request may have done part of its work, so whether to retry it is the
/// client's call, not an invitation, and how long the cause lasts (an
/// expired lease, a Redis failover) is unknown. Change the `Retry-After`
/// with [`LockLayer::retry_after`], or the whole answer with
/// [`LockLayer::on_rejection`].
///
/// The request's lock goes into the request's extensions before the inner
/// service is called (see [`AttachHeldLock`]).
///
/// The same flavour serves a [`PermitLayer`](crate::PermitLayer) (made by
/// [`PermitLayer::new`](crate::PermitLayer::new)), with the same statuses
/// and texts that name the limit ([`LockError::is_permit_limit`]): busy,
/// no permit within the wait bound, `503` + `Retry-After` `concurrency
/// limit reached, retry later`; invalid key `400` `invalid limit key`;
/// client shut down `503` `shutting down`; Redis failed `500` `limit
/// unavailable`. The request's [`RequestPermit`](crate::RequestPermit)
/// goes into its extensions.
///
/// ```
/// use lock_tower::{Http, LockError};
/// let busy = LockError::new("k", lock_core::Error::WaitTimeout { name: "k".into(), waited: Default::default() });
/// let res = Http::default_rejection(&busy, lock_tower::DEFAULT_RETRY_AFTER);
/// assert_eq!(res.status(), 503);
/// assert_eq!(res.headers()["retry-after"], "1");
/// ```
#[derive(Clone)]
pub struct Http {
    pub(crate) hold_body: bool,
    pub(crate) retry_after: Duration,
    pub(crate) rejection: Option<Rejection>,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            hold_body: false,
            retry_after: DEFAULT_RETRY_AFTER,
            rejection: None,
        }
    }
}

impl fmt::Debug for Http {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Http")
            .field("hold_body", &self.hold_body)
            .field("retry_after", &self.retry_after)
            .field("custom_rejection", &self.rejection.is_some())
            .finish()
    }
}

impl Http {
    /// The default answer to `err` (see the table above), with
    /// `Retry-After` set from `retry_after` (whole seconds, at least 1) on
    /// the busy answer. Handy inside a custom
    /// [`on_rejection`](LockLayer::on_rejection) that changes one case only.
    ///
    /// ```
    /// use lock_tower::{Http, LockError};
    /// let down = LockError::new("k", lock_core::Error::PoolTimeout);
    /// let res = Http::default_rejection(&down, std::time::Duration::from_secs(1));
    /// assert_eq!(res.status(), 500);
    /// assert!(res.headers().get("retry-after").is_none());
    /// ```
    pub fn default_rejection(err: &LockError, retry_after: Duration) -> Response<Bytes> {
        let (status, text) = if err.is_permit_limit() {
            Self::permit_answer(err)
        } else {
            Self::lock_answer(err)
        };
        let mut res = Response::new(Bytes::from_static(text.as_bytes()));
        *res.status_mut() = status;
        res.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if err.is_busy() {
            let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
            res.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        res
    }
}

impl Http {
    /// A lock layer's answers (the table above).
    fn lock_answer(err: &LockError) -> (StatusCode, &'static str) {
        if err.is_busy() {
            (StatusCode::SERVICE_UNAVAILABLE, "lock busy, retry later\n")
        } else if err.is_invalid_key() {
            (StatusCode::BAD_REQUEST, "invalid lock key\n")
        } else if err.is_lost() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "lock lost, request cancelled\n",
            )
        } else if err.is_closed() {
            (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
        } else if err.is_not_replicated() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "lock not acknowledged by replicas\n",
            )
        } else if err.is_upgrade_refused() {
            (StatusCode::INTERNAL_SERVER_ERROR, "lock upgrade refused\n")
        } else {
            (StatusCode::INTERNAL_SERVER_ERROR, "lock unavailable\n")
        }
    }

    /// A [`PermitLayer`](crate::PermitLayer)'s answers: the same statuses,
    /// texts that say "limit".
    fn permit_answer(err: &LockError) -> (StatusCode, &'static str) {
        if err.is_busy() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "concurrency limit reached, retry later\n",
            )
        } else if err.is_invalid_key() {
            (StatusCode::BAD_REQUEST, "invalid limit key\n")
        } else if err.is_closed() {
            (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
        } else if err.is_lost() || err.is_not_replicated() {
            (StatusCode::SERVICE_UNAVAILABLE, "permit unavailable\n")
        } else {
            (StatusCode::INTERNAL_SERVER_ERROR, "limit unavailable\n")
        }
    }
}

impl<B, E> Flavour<Response<B>, E> for Http {
    type Response = Response<LockBody<B>>;
    type Error = E;

    fn response(&self, res: Response<B>, guard: Option<LockGuard>) -> Self::Response {
        let guard = if self.hold_body { guard } else { None };
        res.map(|body| LockBody::new(body, guard))
    }

    fn error(&self, err: E) -> E {
        err
    }

    fn rejection(&self, err: LockError) -> Result<Self::Response, E> {
        let res = match &self.rejection {
            Some(f) => f(&err),
            None => Self::default_rejection(&err, self.retry_after),
        };
        Ok(res.map(LockBody::full))
    }
}

/// Inserts the lock into the request's extensions, where the handler
/// finds it ([`HeldLockExt`](crate::HeldLockExt), axum's
/// [`Held`](crate::Held) or `Extension<HeldLock>`).
impl<B> AttachHeldLock<Request<B>> for Http {
    fn attach(&self, req: &mut Request<B>, held: &HeldLock) {
        req.extensions_mut().insert(held.clone());
    }
}

impl<K> LockLayer<ReadWrite<K, SafeMethodsRead>, Http> {
    /// A read-write layer of the [`Http`] flavour: each request with a key
    /// takes a side of the read-write lock of that name
    /// ([`LockClient::rw_lock`], Redisson's `RReadWriteLock`). `GET`,
    /// `HEAD` and `OPTIONS` requests read: any number of them run together
    /// on one key, in every replica. Every other method writes: alone,
    /// while no request reads or writes the key ([`SafeMethodsRead`];
    /// change it with [`classify`](LockLayer::classify)).
    ///
    /// Everything else is as for [`LockLayer::new`]: the same options
    /// (`wait`, `lease`, `cancel_on_lost`, `hold_until_body_end`,
    /// `retry_after`, `on_rejection`), the same answers, the handler's
    /// [`HeldLock`] in the request's extensions, whose
    /// [`mode`](HeldLock::mode) says which side it holds. A handler that
    /// takes the write side of its request's lock again under a read
    /// request is refused at once
    /// ([`Error::UpgradeRefused`](lock_core::Error::UpgradeRefused), a
    /// 500); a read under a write is granted.
    ///
    /// The key must be the same for the reads and the writes of one
    /// resource (not [`MethodPath`](crate::MethodPath), which has the
    /// method in it), and used only by read-write layers: the plain lock
    /// and the read-write lock of one name do not exclude each other.
    ///
    /// ```
    /// use axum::{body::Body, extract::Path, http::Request, routing::get, Router};
    /// use lock_core::LockMode;
    /// use lock_tower::{Held, LockLayer, PathSegment};
    /// use tower::ServiceExt;
    ///
    /// // Any number of GETs of one price at once, across every replica ...
    /// async fn price(Path(sku): Path<String>, Held(held): Held) -> String {
    ///     assert_eq!(held.mode(), LockMode::Read);
    ///     format!("price of {sku}")
    /// }
    ///
    /// // ... and a PUT alone: it waits for the readers, new readers wait for it.
    /// async fn set_price(Path(sku): Path<String>, Held(held): Held) -> String {
    ///     assert_eq!(held.mode(), LockMode::Write);
    ///     format!("new price of {sku} under token {}", held.fencing_token())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_tower::BoxError> {
    /// # let server = lock_tests::RedisServer::start()?;
    /// # let client = lock_core::LockClient::builder(server.url()).build()?;
    /// let app = Router::new()
    ///     .route("/prices/{sku}", get(price).put(set_price))
    ///     .route_layer(LockLayer::read_write(client, PathSegment::after("prices").prefix("price:")));
    ///
    /// let res = app.clone().oneshot(Request::get("/prices/42").body(Body::empty())?).await?;
    /// assert_eq!(res.status(), 200);
    /// let res = app.oneshot(Request::put("/prices/42").body(Body::empty())?).await?;
    /// assert_eq!(res.status(), 200);
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_write(client: LockClient, key: K) -> Self {
        Self::with_flavour(
            client,
            ReadWrite::new(key, SafeMethodsRead),
            Http::default(),
        )
    }
}

impl<K> LockLayer<K, Http> {
    /// A layer of the [`Http`] flavour, for `http::Request`s (axum, hyper,
    /// tonic when gRPC status answers are not needed): a request whose lock
    /// cannot be taken is answered with a response (503 busy, 500 Redis
    /// failure, 400 invalid key), so the inner error type is kept.
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// use lock_tower::{LockLayer, PathSegment};
    /// let layer = LockLayer::new(client, PathSegment::after("accounts").prefix("account:"));
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn new(client: LockClient, key: K) -> Self {
        Self::with_flavour(client, key, Http::default())
    }

    /// Keeps the lock until the response body has yielded its last frame
    /// (or is dropped because the client went away), not just until the
    /// inner service has produced the response head. Use it for streaming
    /// bodies whose production must be exclusive too.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::LockLayer<lock_tower::MethodPath, lock_tower::Http>) {
    /// let layer = layer.hold_until_body_end();
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn hold_until_body_end(mut self) -> Self {
        self.flavour_mut().hold_body = true;
        self
    }

    /// The `Retry-After` of the default "busy" answer (rounded up to whole
    /// seconds; default [`DEFAULT_RETRY_AFTER`]).
    ///
    /// ```
    /// # fn demo(layer: lock_tower::LockLayer<lock_tower::MethodPath, lock_tower::Http>) {
    /// let layer = layer.retry_after(std::time::Duration::from_secs(3));
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.flavour_mut().retry_after = retry_after;
        self
    }

    /// Answers requests whose lock cannot be taken (or, with
    /// [`cancel_on_lost`](LockLayer::cancel_on_lost), was lost) with `f`'s
    /// response instead of the default one.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::{Response, StatusCode};
    /// use lock_tower::Http;
    ///
    /// # fn demo(layer: lock_tower::LockLayer<lock_tower::MethodPath, Http>) {
    /// let layer = layer.on_rejection(|err| {
    ///     if err.is_busy() {
    ///         let mut res = Response::new(Bytes::from_static(b"{\"error\":\"busy\"}"));
    ///         *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    ///         res
    ///     } else {
    ///         Http::default_rejection(err, lock_tower::DEFAULT_RETRY_AFTER)
    ///     }
    /// });
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn on_rejection(
        mut self,
        f: impl Fn(&LockError) -> Response<Bytes> + Send + Sync + 'static,
    ) -> Self {
        self.flavour_mut().rejection = Some(Arc::new(f));
        self
    }
}
