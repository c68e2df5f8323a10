//! Reading the request's lock in a handler: the [`HeldLockExt`] accessor
//! for `http` and `tonic` requests, and the axum extractor [`Held`].

use lock_core::HeldLock;

/// Reads the [`HeldLock`] the HTTP or gRPC flavour put into a request's
/// extensions: the lock the request runs under, with its name, fencing
/// token and lost signal. `None` when the request is not behind a
/// [`LockLayer`](crate::LockLayer) of those flavours, or its key function
/// gave no key (no lock was taken).
///
/// Implemented for `http::Request`, `http::request::Parts` and (feature
/// `tonic`) `tonic::Request`, whose extensions tonic copies from the HTTP
/// request. Inside the handler's future,
/// [`HeldLock::current`] returns the same lock in every flavour.
///
/// ```
/// use lock_tower::HeldLockExt;
///
/// fn fencing_token<B>(req: &http::Request<B>) -> Option<u64> {
///     req.held_lock().map(|held| held.fencing_token())
/// }
/// assert_eq!(fencing_token(&http::Request::new(())), None); // not behind the layer
/// ```
///
/// In a tonic service method:
///
/// ```
/// # #[cfg(feature = "tonic")]
/// # mod demo {
/// use lock_tower::HeldLockExt;
///
/// fn check(request: &tonic::Request<()>) -> Result<u64, tonic::Status> {
///     let held = request
///         .held_lock()
///         .ok_or_else(|| tonic::Status::internal("not behind the lock layer"))?;
///     held.ensure_held().map_err(|_| tonic::Status::aborted("lock lost"))?;
///     Ok(held.fencing_token())
/// }
/// # }
/// ```
pub trait HeldLockExt {
    /// The request's lock, if the layer took one for it.
    ///
    /// ```
    /// use lock_tower::HeldLockExt;
    /// let (parts, ()) = http::Request::new(()).into_parts();
    /// assert!(parts.held_lock().is_none());
    /// ```
    fn held_lock(&self) -> Option<&HeldLock>;
}

impl<B> HeldLockExt for http::Request<B> {
    fn held_lock(&self) -> Option<&HeldLock> {
        self.extensions().get()
    }
}

impl HeldLockExt for http::request::Parts {
    fn held_lock(&self) -> Option<&HeldLock> {
        self.extensions.get()
    }
}

#[cfg(feature = "tonic")]
impl<T> HeldLockExt for tonic::Request<T> {
    fn held_lock(&self) -> Option<&HeldLock> {
        self.extensions().get()
    }
}

#[cfg(feature = "axum")]
pub use self::axum::{Held, MissingHeldLock};

#[cfg(feature = "axum")]
mod axum {
    use std::fmt;

    use axum_core::extract::{FromRequestParts, OptionalFromRequestParts};
    use axum_core::response::{IntoResponse, Response};
    use http::request::Parts;
    use http::StatusCode;
    use lock_core::HeldLock;

    /// The axum extractor of the request's lock (feature `axum`): the
    /// [`HeldLock`] the [`LockLayer`](crate::LockLayer) took for this
    /// request, with its name, fencing token and lost signal.
    ///
    /// It reads the request's extensions (where the HTTP and gRPC flavours
    /// put the lock), else the lock of the section the handler runs in
    /// ([`HeldLock::current`], which also covers the generic flavour).
    /// Neither, because the route is not behind the layer or its key
    /// function gave no key: the request is answered with a 500 and
    /// [`MissingHeldLock`]'s message. Take an `Option<Held>` for routes
    /// where a missing lock is expected.
    ///
    /// ```
    /// use axum::{body::Body, http::Request, routing::post, Router};
    /// use lock_tower::{Held, LockLayer, PathSegment};
    /// use tower::ServiceExt;
    ///
    /// async fn withdraw(Held(held): Held) -> String {
    ///     // send the token with the write: the store rejects older tokens
    ///     format!("{} under token {}", held.name(), held.fencing_token())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_tower::BoxError> {
    /// # let server = lock_tests::RedisServer::start()?;
    /// # let client = lock_core::LockClient::builder(server.url()).build()?;
    /// let app = Router::new()
    ///     .route("/accounts/{id}/withdraw", post(withdraw))
    ///     .route_layer(LockLayer::new(client, PathSegment::after("accounts").prefix("account:")));
    ///
    /// let req = Request::post("/accounts/7/withdraw").body(Body::empty())?;
    /// let res = app.oneshot(req).await?;
    /// assert_eq!(res.status(), 200);
    /// # Ok(())
    /// # }
    /// ```
    #[derive(Clone, Debug)]
    pub struct Held(pub HeldLock);

    impl std::ops::Deref for Held {
        type Target = HeldLock;

        fn deref(&self) -> &HeldLock {
            &self.0
        }
    }

    impl Held {
        /// The request's lock in `parts`' extensions, else the current
        /// section's.
        fn find(parts: &Parts) -> Option<Held> {
            parts
                .extensions
                .get::<HeldLock>()
                .cloned()
                .or_else(HeldLock::current)
                .map(Held)
        }
    }

    impl<S: Send + Sync> FromRequestParts<S> for Held {
        type Rejection = MissingHeldLock;

        async fn from_request_parts(
            parts: &mut Parts,
            _state: &S,
        ) -> Result<Self, Self::Rejection> {
            Held::find(parts).ok_or(MissingHeldLock(()))
        }
    }

    /// `Option<Held>`: `None` instead of a rejection when the request runs
    /// under no lock.
    impl<S: Send + Sync> OptionalFromRequestParts<S> for Held {
        type Rejection = std::convert::Infallible;

        async fn from_request_parts(
            parts: &mut Parts,
            _state: &S,
        ) -> Result<Option<Self>, Self::Rejection> {
            Ok(Held::find(parts))
        }
    }

    /// The rejection of the [`Held`] extractor: the request runs under no
    /// lock of lock-tower's layer. A server-side mistake (a route without
    /// the layer, or a key function that gave no key for it), so the
    /// answer is `500 Internal Server Error` with [`MissingHeldLock::MESSAGE`].
    ///
    /// ```
    /// use axum::{extract::FromRequestParts, response::IntoResponse};
    /// use lock_tower::{Held, MissingHeldLock};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (mut parts, ()) = axum::http::Request::new(()).into_parts(); // no layer, no lock
    /// let rejection = Held::from_request_parts(&mut parts, &()).await.unwrap_err();
    /// assert_eq!(rejection.to_string(), MissingHeldLock::MESSAGE);
    /// assert_eq!(rejection.into_response().status(), 500);
    /// # }
    /// ```
    #[derive(Debug)]
    pub struct MissingHeldLock(());

    impl MissingHeldLock {
        /// The rejection's message, also its response body.
        ///
        /// ```
        /// assert!(lock_tower::MissingHeldLock::MESSAGE.contains("LockLayer"));
        /// ```
        pub const MESSAGE: &'static str = "no held lock for this request: the route is not behind \
            lock-tower's LockLayer (add it with Router::route_layer), or the layer's key function \
            gave no key for this request";
    }

    impl fmt::Display for MissingHeldLock {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(Self::MESSAGE)
        }
    }

    impl std::error::Error for MissingHeldLock {}

    impl IntoResponse for MissingHeldLock {
        fn into_response(self) -> Response {
            (StatusCode::INTERNAL_SERVER_ERROR, Self::MESSAGE).into_response()
        }
    }
}
