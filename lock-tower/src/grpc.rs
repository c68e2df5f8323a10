//! The gRPC flavour: lock failures become `tonic::Status` answers.

use std::fmt;
use std::sync::Arc;

use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Request, Response};
use lock_core::{HeldLock, LockClient, LockGuard};
use tonic::{Code, Status};

use crate::body::LockBody;
use crate::error::LockError;
use crate::flavour::{AttachHeldLock, Flavour};
use crate::lock::LockLayer;
use crate::mode::{AlwaysWrite, ReadWrite};

type Rejection = Arc<dyn Fn(&LockError) -> Status + Send + Sync>;

/// The gRPC flavour, made by [`LockLayer::grpc`], for
/// `tonic::transport::Server::builder().layer(..)`: responses are
/// `http::Response<LockBody<B>>`, the error type is the inner service's,
/// and a call whose lock cannot be taken is answered with a gRPC status
/// (a "trailers-only" response):
///
/// | cause | status |
/// |---|---|
/// | busy: the wait bound passed | `UNAVAILABLE` (clients may retry the call as is) |
/// | invalid key: empty or too long | `INVALID_ARGUMENT` |
/// | lost while the handler ran, with [`cancel_on_lost`](LockLayer::cancel_on_lost) | `ABORTED` (retry at a higher level: the call may have done part of its work) |
/// | the lock client was shut down ([`LockError::is_closed`]) | `UNAVAILABLE` (another replica can take the call) |
/// | too few replicas acknowledged the lock ([`LockError::is_not_replicated`]) | `UNAVAILABLE` |
/// | a write refused under the call's own read ([`LockError::is_upgrade_refused`]; read-write layers) | `INTERNAL` |
/// | Redis failed, or anything else | `INTERNAL` |
///
/// This follows the HTTP flavour (503 / 400 / 500) through gRPC's own
/// HTTP mapping; a lost lock is `ABORTED`, gRPC's code for a concurrency
/// conflict that ended the operation. Change it with
/// [`LockLayer::on_rejection`].
///
/// The call's lock goes into the request's extensions before the service
/// is called; tonic copies them into its `tonic::Request`, where
/// [`HeldLockExt::held_lock`](crate::HeldLockExt::held_lock) reads it.
///
/// Behind a [`PermitLayer`](crate::PermitLayer) (made by
/// [`PermitLayer::grpc`](crate::PermitLayer::grpc)) a call that gets no
/// permit within the wait bound is answered `RESOURCE_EXHAUSTED` (gRPC's
/// code for a quota or limit; clients retry it only when told to); the
/// other causes get the codes above. The call's
/// [`RequestPermit`](crate::RequestPermit) goes into its extensions
/// (`request.extensions().get::<RequestPermit>()`).
///
/// ```
/// use lock_tower::{Grpc, LockError};
/// let down = LockError::new("k", lock_core::Error::PoolTimeout);
/// assert_eq!(Grpc::default_status(&down).code(), tonic::Code::Internal);
/// ```
#[derive(Clone, Default)]
pub struct Grpc {
    pub(crate) hold_body: bool,
    pub(crate) rejection: Option<Rejection>,
}

impl fmt::Debug for Grpc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grpc")
            .field("hold_body", &self.hold_body)
            .field("custom_rejection", &self.rejection.is_some())
            .finish()
    }
}

impl Grpc {
    /// The default status for `err` (see the table above).
    ///
    /// ```
    /// use lock_tower::{Grpc, LockError};
    /// let busy = LockError::new("k", lock_core::Error::WaitTimeout { name: "k".into(), waited: Default::default() });
    /// assert_eq!(Grpc::default_status(&busy).code(), tonic::Code::Unavailable);
    /// ```
    pub fn default_status(err: &LockError) -> Status {
        if err.is_permit_limit() {
            return Self::permit_status(err);
        }
        if err.is_busy() {
            Status::unavailable("lock busy, retry later")
        } else if err.is_invalid_key() {
            Status::invalid_argument("invalid lock key")
        } else if err.is_lost() {
            Status::aborted("lock lost, call cancelled")
        } else if err.is_closed() {
            Status::unavailable("shutting down")
        } else if err.is_not_replicated() {
            Status::unavailable("lock not acknowledged by replicas")
        } else if err.is_upgrade_refused() {
            Status::internal("lock upgrade refused")
        } else {
            Status::internal("lock unavailable")
        }
    }
}

impl Grpc {
    /// A [`PermitLayer`](crate::PermitLayer)'s statuses: `RESOURCE_EXHAUSTED`
    /// for a full limit, the lock layer's codes otherwise.
    fn permit_status(err: &LockError) -> Status {
        if err.is_busy() {
            Status::resource_exhausted("concurrency limit reached, retry later")
        } else if err.is_invalid_key() {
            Status::invalid_argument("invalid limit key")
        } else if err.is_closed() {
            Status::unavailable("shutting down")
        } else if err.is_lost() || err.is_not_replicated() {
            Status::unavailable("permit unavailable")
        } else {
            Status::internal("limit unavailable")
        }
    }
}

/// A trailers-only gRPC response carrying `status`.
fn status_response<B>(status: Status) -> Response<LockBody<B>> {
    let mut res = Response::new(LockBody::empty());
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    if status.add_header(res.headers_mut()).is_err() {
        // Metadata that cannot be a header: send the code alone.
        let bare = Status::new(status.code(), "");
        if bare.add_header(res.headers_mut()).is_err() {
            res.headers_mut()
                .insert("grpc-status", HeaderValue::from(Code::Internal as i32));
        }
    }
    res.extensions_mut().insert(status);
    res
}

impl<B, E> Flavour<Response<B>, E> for Grpc {
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
        let status = match &self.rejection {
            Some(f) => f(&err),
            None => Self::default_status(&err),
        };
        Ok(status_response(status))
    }
}

/// Inserts the lock into the request's extensions; tonic hands them on to
/// the service method's `tonic::Request` (see [`HeldLockExt`](crate::HeldLockExt)).
impl<B> AttachHeldLock<Request<B>> for Grpc {
    fn attach(&self, req: &mut Request<B>, held: &HeldLock) {
        req.extensions_mut().insert(held.clone());
    }
}

impl<K> LockLayer<ReadWrite<K, AlwaysWrite>, Grpc> {
    /// A read-write layer of the [`Grpc`] flavour: each call with a key
    /// takes a side of the read-write lock of that name (see
    /// [`LockLayer::read_write`]). gRPC calls are all `POST`s and say
    /// nothing about reading, so every call writes ([`AlwaysWrite`]) until
    /// [`classify`](LockLayer::classify) is given a classifier: list the
    /// methods that only read with [`ReadPaths`](crate::ReadPaths), or
    /// write a closure over the `http::Request`. The method reads its side
    /// from [`HeldLockExt::held_lock`](crate::HeldLockExt::held_lock)'s
    /// [`mode`](HeldLock::mode).
    ///
    /// ```
    /// use lock_tower::{LockLayer, MetadataKey, ReadPaths};
    ///
    /// # fn demo(client: lock_core::LockClient) {
    /// // Balance and history calls of one account run together; the others alone.
    /// let layer = LockLayer::grpc_read_write(client, MetadataKey::from_static("x-account-id").prefix("account:"))
    ///     .classify(ReadPaths::new(["/bank.Accounts/Balance", "/bank.Accounts/History"]));
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn grpc_read_write(client: LockClient, key: K) -> Self {
        Self::with_flavour(client, ReadWrite::new(key, AlwaysWrite), Grpc::default())
    }
}

impl<K> LockLayer<K, Grpc> {
    /// A layer of the [`Grpc`] flavour, for tonic servers: a call whose
    /// lock cannot be taken is answered with a gRPC status
    /// (`UNAVAILABLE` busy, `INTERNAL` Redis failure, `INVALID_ARGUMENT`
    /// invalid key). Key it with [`MetadataKey`](crate::MetadataKey).
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// use lock_tower::{LockLayer, MetadataKey};
    /// let layer = LockLayer::grpc(client, MetadataKey::from_static("x-account-id").prefix("account:"));
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn grpc(client: LockClient, key: K) -> Self {
        Self::with_flavour(client, key, Grpc::default())
    }

    /// Keeps the lock until the response body (the message stream and its
    /// trailers) has ended, or is dropped: for server-streaming calls.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::LockLayer<lock_tower::MetadataKey, lock_tower::Grpc>) {
    /// let layer = layer.hold_until_body_end();
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn hold_until_body_end(mut self) -> Self {
        self.flavour_mut().hold_body = true;
        self
    }

    /// Answers calls whose lock cannot be taken (or, with
    /// [`cancel_on_lost`](LockLayer::cancel_on_lost), was lost) with `f`'s
    /// status instead of the default one.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::LockLayer<lock_tower::MetadataKey, lock_tower::Grpc>) {
    /// let layer = layer.on_rejection(|err| {
    ///     if err.is_busy() {
    ///         tonic::Status::resource_exhausted("account busy")
    ///     } else {
    ///         lock_tower::Grpc::default_status(err)
    ///     }
    /// });
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn on_rejection(
        mut self,
        f: impl Fn(&LockError) -> Status + Send + Sync + 'static,
    ) -> Self {
        self.flavour_mut().rejection = Some(Arc::new(f));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_are_trailers_only_responses() {
        let busy = LockError::new(
            "k",
            lock_core::Error::WaitTimeout {
                name: "k".into(),
                waited: Default::default(),
            },
        );
        let res = <Grpc as Flavour<Response<String>, ()>>::rejection(&Grpc::default(), busy)
            .unwrap_or_else(|()| panic!("rejections are responses"));
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "application/grpc");
        assert_eq!(res.headers()["grpc-status"], "14");
        let status = Status::from_header_map(res.headers());
        assert_eq!(status.map(|s| s.code()), Some(Code::Unavailable));
    }
}
