//! The request's permit, as the handler sees it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::Permits;

/// The permit a request runs under, behind a [`PermitLayer`](crate::PermitLayer):
/// one permit of its key's limit (an expirable semaphore permit, renewed
/// by the client's watchdog while held).
///
/// The HTTP and gRPC flavours put it into the request's extensions before
/// the handler is called: take it in axum with
/// `Extension<RequestPermit>` (or `Option<Extension<RequestPermit>>` on
/// routes where the key function may give no key), read it with
/// `req.extensions().get::<RequestPermit>()` on an `http::Request` or a
/// `tonic::Request`. The generic flavour has nowhere to put it.
///
/// It is a cheap clone of one shared handle (an `Arc` around the
/// [`Permits`] guard). The permit goes back to the limit when the layer's
/// own reference and every clone have been dropped: the layer drops its
/// reference when the response is produced, or when its body ends with
/// [`hold_until_body_end`](crate::PermitLayer::hold_until_body_end), and
/// also when the handler fails, panics or is cancelled (the client went
/// away). A clone that the handler keeps past its response (moved into a
/// spawned task, say) keeps the permit until it is dropped: work done
/// there still counts against the limit. Drop it when that work is done.
///
/// ```
/// use axum::{body::Body, http::Request, routing::post, Extension, Router};
/// use lock_tower::{PathSegment, PermitLayer, RequestPermit};
/// use tower::ServiceExt;
///
/// async fn export(Extension(permit): Extension<RequestPermit>) -> String {
///     // one of at most 4 exports of this tenant running now, on every replica
///     format!("{} permit of {}, held: {}", permit.count(), permit.name(), permit.is_held())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_tower::BoxError> {
/// # let server = lock_tests::RedisServer::start()?;
/// # let client = lock_core::LockClient::builder(server.url()).build()?;
/// let app = Router::new()
///     .route("/tenants/{id}/export", post(export))
///     .route_layer(PermitLayer::new(client, PathSegment::after("tenants").prefix("exports:"), 4));
///
/// let res = app.oneshot(Request::post("/tenants/7/export").body(Body::empty())?).await?;
/// assert_eq!(res.status(), 200);
/// let body = axum::body::to_bytes(res.into_body(), 1024).await?;
/// assert_eq!(&body[..], b"1 permit of exports:7, held: true");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RequestPermit {
    permits: Arc<Permits>,
}

impl RequestPermit {
    pub(crate) fn new(permits: Permits) -> Self {
        RequestPermit {
            permits: Arc::new(permits),
        }
    }

    /// The limit's name: the key the request mapped to (the semaphore's
    /// name, without the client's key prefix).
    ///
    /// ```
    /// # fn demo(permit: &lock_tower::RequestPermit) {
    /// println!("running under the limit {}", permit.name());
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.permits.name()
    }

    /// How many permits the request holds (the layer takes 1).
    ///
    /// ```
    /// # fn demo(permit: &lock_tower::RequestPermit) {
    /// assert_eq!(permit.count(), 1);
    /// # }
    /// ```
    pub fn count(&self) -> u32 {
        self.permits.count()
    }

    /// The permit ids in the semaphore's `{name}:timeout` set (32 hex
    /// digits each, as Redisson shows them).
    ///
    /// ```
    /// # fn demo(permit: &lock_tower::RequestPermit) {
    /// assert_eq!(permit.ids().len(), 1);
    /// # }
    /// ```
    pub fn ids(&self) -> &[String] {
        self.permits.ids()
    }

    /// Whether the permit is still held: not known lost, its validity
    /// deadline (the lease from the last renewal, less a margin) not
    /// passed. A local check, no Redis call.
    ///
    /// ```
    /// # fn demo(permit: &lock_tower::RequestPermit) {
    /// if !permit.is_held() {
    ///     eprintln!("over the limit now: stop early");
    /// }
    /// # }
    /// ```
    pub fn is_held(&self) -> bool {
        self.permits.is_held()
    }

    /// `Ok(())` while held, else [`lock_core::Error::Lost`]: call it
    /// before a step that must run within the limit.
    ///
    /// ```
    /// # fn demo(permit: &lock_tower::RequestPermit) -> lock_core::Result<()> {
    /// permit.ensure_held()?;
    /// # Ok(()) }
    /// ```
    pub fn ensure_held(&self) -> lock_core::Result<()> {
        self.permits.ensure_held()
    }

    /// Time left before the validity deadline (zero once lost).
    ///
    /// ```
    /// # fn demo(permit: &lock_tower::RequestPermit) {
    /// println!("valid for {:?} unless renewed", permit.remaining());
    /// # }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.permits.remaining()
    }

    /// Resolves when the permit is lost: its validity deadline passed
    /// (renewals could not reach Redis), Redis says it is gone, or the
    /// client shut down. Pending while it is held. Use it to stop work
    /// that must not run over the limit.
    ///
    /// ```
    /// # async fn work() {}
    /// # async fn demo(permit: lock_tower::RequestPermit) -> Result<(), &'static str> {
    /// tokio::select! {
    ///     _ = work() => Ok(()),
    ///     _ = permit.lost() => Err("permit lost: stopped"),
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) {
        self.permits.lost().await
    }
}

impl fmt::Debug for RequestPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestPermit")
            .field("name", &self.name())
            .field("count", &self.count())
            .field("held", &self.is_held())
            .finish()
    }
}
