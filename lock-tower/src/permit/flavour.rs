//! How a [`PermitLimit`](crate::PermitLimit) service answers: the lock
//! layer's [`Flavour`] (errors, rejections), plus where the request's
//! permit goes.

use crate::flavour::{Flavour, Generic};
use crate::BoxError;

use super::handle::RequestPermit;

/// A [`Flavour`] that can also serve a [`PermitLayer`](crate::PermitLayer):
/// it maps the inner service's response given the request's permit
/// instead of a lock guard. The permit handed to
/// [`permit_response`](Self::permit_response) is the layer's own
/// reference: keep it (in the response body, to hold the permit longer) or
/// drop it (the permit goes back once the handler's clones are gone too).
///
/// Rejections and inner errors go through the [`Flavour`] methods; a
/// permit layer's [`LockError`](crate::LockError)s have
/// [`is_permit_limit`](crate::LockError::is_permit_limit) set.
///
/// ```
/// use lock_tower::{AttachHeldLock, AttachPermit, Flavour, LockError, PermitFlavour, RequestPermit};
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
/// impl<Res> PermitFlavour<Res, String> for Strings {
///     fn permit_response(&self, res: Res, _permit: Option<RequestPermit>) -> Res { res }
/// }
///
/// impl AttachPermit<String> for Strings {
///     fn attach_permit(&self, _req: &mut String, _permit: &RequestPermit) {}
/// }
/// ```
pub trait PermitFlavour<Res, E>: Flavour<Res, E> {
    /// Maps the inner service's response. `permit` is the layer's reference
    /// to the request's permit (`None` for requests without a key).
    ///
    /// ```
    /// use lock_tower::{Generic, PermitFlavour};
    /// let res = <Generic as PermitFlavour<u8, std::io::Error>>::permit_response(&Generic, 7, None);
    /// assert_eq!(res, 7);
    /// ```
    fn permit_response(&self, res: Res, permit: Option<RequestPermit>) -> Self::Response;
}

/// Hands a request's [`RequestPermit`] to the request before the inner
/// service is called. The HTTP and gRPC flavours insert a clone into the
/// request's extensions; the generic flavour, whose requests have none,
/// does nothing.
///
/// ```
/// use lock_tower::{AttachPermit, RequestPermit};
///
/// /// Jobs that record which limit they ran under.
/// struct Job { limit: Option<String> }
/// struct Jobs; // a flavour (its other impls left out)
///
/// impl AttachPermit<Job> for Jobs {
///     fn attach_permit(&self, job: &mut Job, permit: &RequestPermit) {
///         job.limit = Some(permit.name().to_string());
///     }
/// }
/// ```
pub trait AttachPermit<Req> {
    /// Puts `permit` (or a clone: a clone kept alive keeps the permit)
    /// into `req`, or does nothing. Called once per request with a key,
    /// after the permit was taken, before the inner service is called.
    ///
    /// ```
    /// use lock_tower::{AttachPermit, Generic};
    /// # fn demo(permit: lock_tower::RequestPermit) {
    /// let mut job = 7_u32;
    /// Generic.attach_permit(&mut job, &permit); // the generic flavour attaches nothing
    /// # }
    /// ```
    fn attach_permit(&self, req: &mut Req, permit: &RequestPermit);
}

/// The permit goes back when the inner service's future completes.
impl<Res, E> PermitFlavour<Res, E> for Generic
where
    E: Into<BoxError>,
{
    fn permit_response(&self, res: Res, permit: Option<RequestPermit>) -> Res {
        drop(permit);
        res
    }
}

/// Attaches nothing: requests of any type have nowhere to carry it.
impl<Req> AttachPermit<Req> for Generic {
    fn attach_permit(&self, _req: &mut Req, _permit: &RequestPermit) {}
}
