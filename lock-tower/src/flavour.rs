//! Flavours: how a [`Lock`](crate::Lock) service answers.
//!
//! The layer itself only takes and holds locks; a flavour decides what the
//! response and error types are, what happens to the lock when the inner
//! service has answered, and what is answered when the lock cannot be
//! taken. Three come with the crate: [`Http`](crate::Http) (responses,
//! keeps the inner error type — for axum), [`Grpc`](crate::Grpc)
//! (`tonic::Status` answers) and [`Generic`] (boxed errors, for any request
//! type and `HandleErrorLayer`).
//!
//! A flavour also says where a request's [`HeldLock`] goes before the inner
//! service is called ([`AttachHeldLock`]): the HTTP and gRPC flavours put
//! it into the request's extensions; the generic flavour, which knows
//! nothing of its requests, leaves it to [`HeldLock::current`].

use lock_core::{HeldLock, LockGuard};

use crate::error::{BoxError, LockError};

/// How a [`Lock`](crate::Lock) service answers: it maps the inner service's
/// response and error, and turns a [`LockError`] into an answer.
///
/// Implement it to answer in a way of your own; the lock guard handed to
/// [`response`](Flavour::response) must be kept (to hold the lock longer)
/// or dropped (to release it in the background). A flavour also
/// implements [`AttachHeldLock`] for the requests it serves (an empty
/// `attach` is fine: the inner service still finds the lock with
/// [`HeldLock::current`]).
///
/// ```
/// use lock_tower::{AttachHeldLock, Flavour, LockError};
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
///
/// // Requests are strings; they carry nothing.
/// impl AttachHeldLock<String> for Strings {
///     fn attach(&self, _req: &mut String, _held: &lock_core::HeldLock) {}
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

/// Hands a request's [`HeldLock`] to the request before the inner service
/// is called, so that the handler can read the lock's name and fencing
/// token, or stop when it is lost.
///
/// | flavour | where the lock goes |
/// |---|---|
/// | [`Http`](crate::Http), [`Grpc`](crate::Grpc) | `http::Request::extensions()`: read it with [`HeldLockExt::held_lock`](crate::HeldLockExt::held_lock), the axum extractor [`Held`](crate::Held), or `tonic::Request::extensions()` (tonic copies the HTTP extensions) |
/// | [`Generic`] | nowhere: requests of any type carry no extensions |
///
/// Whatever the flavour, the inner service's future also runs inside the
/// lock's section, so [`HeldLock::current`] returns the lock there (but
/// not in tasks the handler spawns: pass the handle along).
///
/// Implement it for a flavour of your own, for each request type it
/// serves:
///
/// ```
/// use lock_core::HeldLock;
/// use lock_tower::AttachHeldLock;
///
/// /// Jobs that carry the token of the lock they run under.
/// struct Job { tenant: u32, fencing_token: Option<u64> }
///
/// struct Jobs; // a flavour (its `Flavour` impl left out)
///
/// impl AttachHeldLock<Job> for Jobs {
///     fn attach(&self, job: &mut Job, held: &HeldLock) {
///         job.fencing_token = Some(held.fencing_token());
///     }
/// }
/// ```
pub trait AttachHeldLock<Req> {
    /// Puts `held` (the request's lock, just taken) into `req`, or does
    /// nothing. Called once per request that has a key, after the lock was
    /// taken and before the inner service is called.
    ///
    /// ```
    /// use lock_tower::{AttachHeldLock, Generic};
    /// # fn demo(held: lock_core::HeldLock) {
    /// let mut job = 7_u32;
    /// Generic.attach(&mut job, &held); // the generic flavour attaches nothing
    /// assert_eq!(job, 7);
    /// # }
    /// ```
    fn attach(&self, req: &mut Req, held: &HeldLock);
}

/// The generic flavour, for any request and response type: the lock is
/// released when the inner service's future completes, and a request whose
/// lock cannot be taken fails with a [`BoxError`] holding a [`LockError`]
/// (inner errors are boxed too). Made by
/// [`LockLayer::generic`](crate::LockLayer::generic); pair it with
/// `tower::ServiceBuilder`'s `HandleErrorLayer` where the error type must
/// be `Infallible`. The inner service finds the request's lock with
/// [`HeldLock::current`] (requests of any type have no extensions to carry
/// it).
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

/// Attaches nothing: requests of any type have nowhere to carry it. Inside
/// the inner service, [`HeldLock::current`] returns the request's lock.
impl<Req> AttachHeldLock<Req> for Generic {
    fn attach(&self, _req: &mut Req, _held: &HeldLock) {}
}
