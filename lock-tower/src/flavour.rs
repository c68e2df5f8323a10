//! Flavours: how a [`Lock`](crate::Lock) service answers.
//!
//! The layer itself only takes and holds locks; a flavour decides what the
//! response and error types are, what happens to the lock when the inner
//! service has answered, and what is answered when the lock cannot be
//! taken. Three come with the crate: [`Http`](crate::Http) (responses,
//! keeps the inner error type — for axum), [`Grpc`](crate::Grpc)
//! (`tonic::Status` answers) and [`Generic`] (boxed errors, for any request
//! type and `HandleErrorLayer`).

use lock_core::LockGuard;

use crate::error::{BoxError, LockError};

/// How a [`Lock`](crate::Lock) service answers: it maps the inner service's
/// response and error, and turns a [`LockError`] into an answer.
///
/// Implement it to answer in a way of your own; the lock guard handed to
/// [`response`](Flavour::response) must be kept (to hold the lock longer)
/// or dropped (to release it in the background).
///
/// ```
/// use lock_tower::{Flavour, LockError};
///
/// /// Answers `Err(reason)` with a plain string.
/// #[derive(Clone)]
/// struct Strings;
///
/// impl<Res> Flavour<Res, String> for Strings {
///     type Response = Res;
///     type Error = String;
///     fn response(&self, res: Res, _guard: Option<lock_core::LockGuard>) -> Res { res }
///     fn error(&self, err: String) -> String { err }
///     fn rejection(&self, err: LockError) -> Result<Res, String> { Err(err.to_string()) }
/// }
/// ```
pub trait Flavour<Res, E> {
    /// What the service answers with.
    type Response;
    /// The service's error type.
    type Error;

    /// Maps the inner service's response. `guard` is the request's lock
    /// (`None` for requests without a key): dropping it releases the lock.
    ///
    /// ```
    /// use lock_tower::{Flavour, Generic};
    /// let res = <Generic as Flavour<u8, std::io::Error>>::response(&Generic, 7, None);
    /// assert_eq!(res, 7);
    /// ```
    fn response(&self, res: Res, guard: Option<LockGuard>) -> Self::Response;

    /// Maps an error of the inner service (from `poll_ready` or its future).
    ///
    /// ```
    /// use lock_tower::{Flavour, Generic};
    /// let err = <Generic as Flavour<(), std::io::Error>>::error(&Generic, std::io::Error::other("x"));
    /// assert_eq!(err.to_string(), "x");
    /// ```
    fn error(&self, err: E) -> Self::Error;

    /// The answer when the request's lock could not be taken.
    ///
    /// ```
    /// use lock_tower::{Flavour, Generic, LockError};
    /// let err = LockError::new("k", lock_core::Error::PoolTimeout);
    /// let answer = <Generic as Flavour<(), std::io::Error>>::rejection(&Generic, err);
    /// assert!(answer.unwrap_err().downcast_ref::<LockError>().is_some());
    /// ```
    fn rejection(&self, err: LockError) -> Result<Self::Response, Self::Error>;
}

/// The generic flavour, for any request and response type: the lock is
/// released when the inner service's future completes, and a request whose
/// lock cannot be taken fails with a [`BoxError`] holding a [`LockError`]
/// (inner errors are boxed too). Made by
/// [`LockLayer::generic`](crate::LockLayer::generic); pair it with
/// `tower::ServiceBuilder`'s `HandleErrorLayer` where the error type must
/// be `Infallible`.
///
/// ```
/// use lock_tower::{BoxError, LockError};
///
/// fn status_for(err: &BoxError) -> u16 {
///     match err.downcast_ref::<LockError>() {
///         Some(e) if e.is_busy() => 503,
///         _ => 500,
///     }
/// }
/// # let _ = status_for;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Generic;

impl<Res, E> Flavour<Res, E> for Generic
where
    E: Into<BoxError>,
{
    type Response = Res;
    type Error = BoxError;

    fn response(&self, res: Res, guard: Option<LockGuard>) -> Res {
        drop(guard);
        res
    }

    fn error(&self, err: E) -> BoxError {
        err.into()
    }

    fn rejection(&self, err: LockError) -> Result<Res, BoxError> {
        Err(Box::new(err))
    }
}
