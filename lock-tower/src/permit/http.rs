//! The HTTP flavour of the permit layer: answers as the lock layer's
//! [`Http`] flavour does, the permit in the request's extensions.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use lock_core::LockClient;

use super::flavour::{AttachPermit, PermitFlavour};
use super::handle::RequestPermit;
use super::layer::PermitLayer;
use crate::body::LockBody;
use crate::error::LockError;
use crate::http::Http;

impl<B, E> PermitFlavour<Response<B>, E> for Http {
    fn permit_response(&self, res: Response<B>, permit: Option<RequestPermit>) -> Self::Response {
        let permit = if self.hold_body { permit } else { None };
        res.map(|body| LockBody::with_permit(body, permit))
    }
}

/// Inserts a clone of the permit into the request's extensions (axum:
/// `Extension<RequestPermit>`).
impl<B> AttachPermit<Request<B>> for Http {
    fn attach_permit(&self, req: &mut Request<B>, permit: &RequestPermit) {
        req.extensions_mut().insert(permit.clone());
    }
}

impl<K> PermitLayer<K, Http> {
    /// A permit layer of the [`Http`] flavour, for `http::Request`s (axum,
    /// hyper): at most `permits` requests of one key run at once, on every
    /// replica together. A request that gets no permit within the wait
    /// bound is answered `503 Service Unavailable` with `Retry-After`; the
    /// inner error type is kept.
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// use lock_tower::{HeaderKey, PermitLayer};
    /// // At most 10 requests per API key at once.
    /// let layer = PermitLayer::new(client, HeaderKey::from_static("x-api-key").prefix("limit:"), 10);
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn new(client: LockClient, key: K, permits: u64) -> Self {
        Self::with_flavour(client, key, permits, Http::default())
    }

    /// Keeps the permit until the response body has yielded its last frame
    /// (or is dropped because the client went away), not just until the
    /// inner service has produced the response head: for streaming bodies
    /// whose production must count against the limit too.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::PermitLayer<lock_tower::MethodPath, lock_tower::Http>) {
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
    /// # fn demo(layer: lock_tower::PermitLayer<lock_tower::MethodPath, lock_tower::Http>) {
    /// let layer = layer.retry_after(std::time::Duration::from_secs(5));
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.flavour_mut().retry_after = retry_after;
        self
    }

    /// Answers requests that get no permit with `f`'s response instead of
    /// the default one ([`Http::default_rejection`] gives the default for
    /// the cases `f` leaves alone).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::{Response, StatusCode};
    /// use lock_tower::Http;
    ///
    /// # fn demo(layer: lock_tower::PermitLayer<lock_tower::MethodPath, Http>) {
    /// let layer = layer.on_rejection(|err| {
    ///     if err.is_busy() {
    ///         let mut res = Response::new(Bytes::from_static(b"{\"error\":\"too many at once\"}"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flavour::Flavour;

    fn busy() -> LockError {
        LockError::for_permit(
            "limit:k",
            lock_core::Error::WaitTimeout {
                name: "limit:k".into(),
                waited: Duration::from_millis(10),
            },
        )
    }

    #[test]
    fn a_full_limit_is_a_503_with_retry_after_in_whole_seconds() {
        let res = Http::default_rejection(&busy(), Duration::from_millis(1500));
        assert_eq!(res.status(), 503);
        assert_eq!(res.headers()["retry-after"], "2");
        assert_eq!(&res.body()[..], b"concurrency limit reached, retry later\n");
        let res = Http::default_rejection(&busy(), Duration::ZERO);
        assert_eq!(res.headers()["retry-after"], "1", "at least 1 second");
    }

    #[test]
    fn other_permit_failures_answer_as_the_lock_layer_does() {
        let cases = [
            (
                lock_core::Error::InvalidName { reason: "e".into() },
                400,
                "invalid limit key\n",
            ),
            (lock_core::Error::PoolTimeout, 500, "limit unavailable\n"),
            (lock_core::Error::Closed, 503, "shutting down\n"),
        ];
        for (source, status, text) in cases {
            let err = LockError::for_permit("limit:k", source);
            let res = Http::default_rejection(&err, Duration::from_secs(1));
            assert_eq!(
                (res.status().as_u16(), &res.body()[..]),
                (status, text.as_bytes())
            );
            assert!(res.headers().get("retry-after").is_none());
            let res = <Http as Flavour<Response<String>, ()>>::rejection(&Http::default(), err)
                .unwrap_or_else(|()| panic!("rejections are responses"));
            assert_eq!(res.status(), status);
        }
        let lock = Http::default_rejection(
            &LockError::new("k", lock_core::Error::PoolTimeout),
            Duration::from_secs(1),
        );
        assert_eq!(
            &lock.body()[..],
            b"lock unavailable\n",
            "lock texts unchanged"
        );
    }
}
