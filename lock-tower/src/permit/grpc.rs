//! The gRPC flavour of the permit layer: `RESOURCE_EXHAUSTED` when the
//! limit is full, the permit in the request's extensions.

use std::sync::Arc;

use http::{Request, Response};
use lock_core::LockClient;
use tonic::Status;

use super::flavour::{AttachPermit, PermitFlavour};
use super::handle::RequestPermit;
use super::layer::PermitLayer;
use crate::body::LockBody;
use crate::error::LockError;
use crate::grpc::Grpc;

impl<B, E> PermitFlavour<Response<B>, E> for Grpc {
    fn permit_response(&self, res: Response<B>, permit: Option<RequestPermit>) -> Self::Response {
        let permit = if self.hold_body { permit } else { None };
        res.map(|body| LockBody::with_permit(body, permit))
    }
}

/// Inserts a clone of the permit into the request's extensions; tonic
/// copies them into the method's `tonic::Request`.
impl<B> AttachPermit<Request<B>> for Grpc {
    fn attach_permit(&self, req: &mut Request<B>, permit: &RequestPermit) {
        req.extensions_mut().insert(permit.clone());
    }
}

impl<K> PermitLayer<K, Grpc> {
    /// A permit layer of the [`Grpc`] flavour, for tonic servers: at most
    /// `permits` calls of one key run at once, on every replica together;
    /// a call that gets no permit within the wait bound is answered
    /// `RESOURCE_EXHAUSTED`. Key it with [`MetadataKey`](crate::MetadataKey)
    /// or a closure over the `http::Request` (the method's path, say).
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// use lock_tower::{MetadataKey, PermitLayer};
    /// // At most 3 calls per tenant at once.
    /// let layer = PermitLayer::grpc(client, MetadataKey::from_static("x-tenant").prefix("limit:"), 3);
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn grpc(client: LockClient, key: K, permits: u64) -> Self {
        Self::with_flavour(client, key, permits, Grpc::default())
    }

    /// Keeps the permit until the response body (the message stream and
    /// its trailers) has ended, or is dropped: for server-streaming calls.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::PermitLayer<lock_tower::MetadataKey, lock_tower::Grpc>) {
    /// let layer = layer.hold_until_body_end();
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn hold_until_body_end(mut self) -> Self {
        self.flavour_mut().hold_body = true;
        self
    }

    /// Answers calls that get no permit with `f`'s status instead of the
    /// default one ([`Grpc::default_status`]).
    ///
    /// ```
    /// # fn demo(layer: lock_tower::PermitLayer<lock_tower::MetadataKey, lock_tower::Grpc>) {
    /// let layer = layer.on_rejection(|err| {
    ///     if err.is_busy() {
    ///         tonic::Status::unavailable("try another replica")
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
    use crate::flavour::Flavour;
    use tonic::Code;

    #[test]
    fn a_full_limit_is_resource_exhausted_the_rest_as_for_locks() {
        let busy = LockError::for_permit(
            "limit:k",
            lock_core::Error::WaitTimeout {
                name: "limit:k".into(),
                waited: Default::default(),
            },
        );
        let res = <Grpc as Flavour<Response<String>, ()>>::rejection(&Grpc::default(), busy)
            .unwrap_or_else(|()| panic!("rejections are responses"));
        assert_eq!(res.headers()["grpc-status"], "8");
        let status = Status::from_header_map(res.headers());
        assert_eq!(status.map(|s| s.code()), Some(Code::ResourceExhausted));
        let codes = [
            (
                lock_core::Error::InvalidName { reason: "e".into() },
                Code::InvalidArgument,
            ),
            (lock_core::Error::PoolTimeout, Code::Internal),
            (lock_core::Error::Closed, Code::Unavailable),
        ]
        .map(|(e, code)| {
            (
                Grpc::default_status(&LockError::for_permit("k", e)).code(),
                code,
            )
        });
        for (seen, wanted) in codes {
            assert_eq!(seen, wanted);
        }
        let lock_busy = LockError::new(
            "k",
            lock_core::Error::WaitTimeout {
                name: "k".into(),
                waited: Default::default(),
            },
        );
        assert_eq!(Grpc::default_status(&lock_busy).code(), Code::Unavailable);
    }
}
