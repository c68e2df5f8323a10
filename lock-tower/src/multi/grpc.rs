//! The gRPC flavour of the multi-lock layer: `tonic::Status` answers as
//! the lock layer's, the locks in the request's extensions.

use std::sync::Arc;

use http::{Request, Response};
use lock_core::{LockClient, MultiGuard};
use tonic::Status;

use super::flavour::{AttachHeldLocks, MultiFlavour};
use super::held::HeldLocks;
use super::layer::MultiLockLayer;
use crate::body::LockBody;
use crate::error::LockError;
use crate::grpc::Grpc;

impl<B, E> MultiFlavour<Response<B>, E> for Grpc {
    fn multi_response(&self, res: Response<B>, guard: Option<MultiGuard>) -> Self::Response {
        let guard = if self.hold_body { guard } else { None };
        res.map(|body| LockBody::with_locks(body, guard))
    }
}

/// Inserts a clone of the locks into the request's extensions; tonic
/// copies them into the method's `tonic::Request`.
impl<B> AttachHeldLocks<Request<B>> for Grpc {
    fn attach_locks(&self, req: &mut Request<B>, locks: &HeldLocks) {
        req.extensions_mut().insert(locks.clone());
    }
}

impl<K> MultiLockLayer<K, Grpc> {
    /// A multi-lock layer of the [`Grpc`] flavour, for tonic servers: a
    /// call whose locks cannot all be taken is answered with a gRPC status
    /// as by [`LockLayer::grpc`](crate::LockLayer::grpc) (`UNAVAILABLE`
    /// busy, `INTERNAL` Redis failure, `INVALID_ARGUMENT` invalid key).
    /// The method reads its locks with
    /// `request.extensions().get::<HeldLocks>()`.
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// use lock_tower::{MetadataKey, MultiLockLayer};
    /// // Calls lock the accounts named by two metadata entries.
    /// let layer = MultiLockLayer::grpc(
    ///     client,
    ///     (
    ///         MetadataKey::from_static("x-from-account").prefix("account:"),
    ///         MetadataKey::from_static("x-to-account").prefix("account:"),
    ///     ),
    /// );
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn grpc(client: LockClient, keys: K) -> Self {
        Self::with_flavour(client, keys, Grpc::default())
    }

    /// Keeps every lock until the response body (the message stream and
    /// its trailers) has ended, or is dropped: for server-streaming calls.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::MultiLockLayer<lock_tower::MetadataKey, lock_tower::Grpc>) {
    /// let layer = layer.hold_until_body_end();
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn hold_until_body_end(mut self) -> Self {
        self.flavour_mut().hold_body = true;
        self
    }

    /// Answers calls whose locks cannot be taken (or, with
    /// [`cancel_on_lost`](MultiLockLayer::cancel_on_lost), one was lost)
    /// with `f`'s status instead of the default one
    /// ([`Grpc::default_status`]).
    ///
    /// ```
    /// # fn demo(layer: lock_tower::MultiLockLayer<lock_tower::MetadataKey, lock_tower::Grpc>) {
    /// let layer = layer.on_rejection(|err| {
    ///     if err.is_busy() {
    ///         tonic::Status::aborted(format!("busy: {}", err.key()))
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
