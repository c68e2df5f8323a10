//! The HTTP flavour of the multi-lock layer: answers as the lock layer's
//! [`Http`] flavour does, the locks in the request's extensions.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use lock_core::{LockClient, MultiGuard};

use super::flavour::{AttachHeldLocks, MultiFlavour};
use super::held::HeldLocks;
use super::layer::MultiLockLayer;
use crate::body::LockBody;
use crate::error::LockError;
use crate::http::Http;

impl<B, E> MultiFlavour<Response<B>, E> for Http {
    fn multi_response(&self, res: Response<B>, guard: Option<MultiGuard>) -> Self::Response {
        let guard = if self.hold_body { guard } else { None };
        res.map(|body| LockBody::with_locks(body, guard))
    }
}

/// Inserts a clone of the locks into the request's extensions (axum:
/// `Extension<HeldLocks>`).
impl<B> AttachHeldLocks<Request<B>> for Http {
    fn attach_locks(&self, req: &mut Request<B>, locks: &HeldLocks) {
        req.extensions_mut().insert(locks.clone());
    }
}

impl<K> MultiLockLayer<K, Http> {
    /// A multi-lock layer of the [`Http`] flavour, for `http::Request`s
    /// (axum, hyper): a request whose locks cannot all be taken is
    /// answered as by [`LockLayer::new`](crate::LockLayer::new) (`503` +
    /// `Retry-After` busy, `500` Redis failure, `400` invalid key), so
    /// the inner error type is kept.
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// use axum::body::Body;
    /// use http::Request;
    /// use lock_tower::MultiLockLayer;
    ///
    /// // `x-accounts: 17,4`: both accounts' locks.
    /// let layer = MultiLockLayer::new(client, |req: &Request<Body>| {
    ///     req.headers()
    ///         .get("x-accounts")
    ///         .and_then(|v| v.to_str().ok())
    ///         .map(|v| v.split(',').map(|a| format!("account:{}", a.trim())).collect::<Vec<_>>())
    /// });
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn new(client: LockClient, keys: K) -> Self {
        Self::with_flavour(client, keys, Http::default())
    }

    /// Keeps every lock until the response body has yielded its last
    /// frame (or is dropped because the client went away), not just until
    /// the inner service has produced the response head.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::MultiLockLayer<fn(&http::Request<()>) -> Vec<String>, lock_tower::Http>) {
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
    /// seconds, at least 1; default
    /// [`DEFAULT_RETRY_AFTER`](crate::DEFAULT_RETRY_AFTER)).
    ///
    /// ```
    /// # fn demo(layer: lock_tower::MultiLockLayer<fn(&http::Request<()>) -> Vec<String>, lock_tower::Http>) {
    /// let layer = layer.retry_after(std::time::Duration::from_secs(3));
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.flavour_mut().retry_after = retry_after;
        self
    }

    /// Answers requests whose locks cannot be taken (or, with
    /// [`cancel_on_lost`](MultiLockLayer::cancel_on_lost), one was lost)
    /// with `f`'s response instead of the default one
    /// ([`Http::default_rejection`] gives the default for the cases `f`
    /// leaves alone). [`LockError::keys`] names the request's keys.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::{Response, StatusCode};
    /// use lock_tower::Http;
    ///
    /// # fn demo(layer: lock_tower::MultiLockLayer<fn(&http::Request<()>) -> Vec<String>, Http>) {
    /// let layer = layer.on_rejection(|err| {
    ///     if err.is_busy() {
    ///         let mut res = Response::new(Bytes::from(format!("busy: {}", err.keys().join(" "))));
    ///         *res.status_mut() = StatusCode::CONFLICT;
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
