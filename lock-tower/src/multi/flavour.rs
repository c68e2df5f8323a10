//! How a [`MultiLockService`](crate::MultiLockService) answers: the lock
//! layer's [`Flavour`] (errors, rejections), plus what happens to the
//! guard of every lock and where the request's [`HeldLocks`] go.

use lock_core::MultiGuard;

use super::held::HeldLocks;
use crate::error::BoxError;
use crate::flavour::{Flavour, Generic};

/// A [`Flavour`] that can also serve a
/// [`MultiLockLayer`](crate::MultiLockLayer): it maps the inner service's
/// response given the guard of every lock of the request
/// ([`MultiGuard`]) instead of one lock's guard. Keep the guard (in the
/// response body, to hold the locks longer) or drop it (every lock is
/// released in the background).
///
/// Rejections and inner errors go through the [`Flavour`] methods; a
/// multi-lock layer's [`LockError`](crate::LockError)s have
/// [`is_multi`](crate::LockError::is_multi) set and name every key.
///
/// ```
/// use lock_tower::{AttachHeldLocks, Flavour, HeldLocks, LockError, MultiFlavour};
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
/// impl<Res> MultiFlavour<Res, String> for Strings {
///     fn multi_response(&self, res: Res, _guard: Option<lock_core::MultiGuard>) -> Res { res }
/// }
///
/// impl AttachHeldLocks<String> for Strings {
///     fn attach_locks(&self, _req: &mut String, _locks: &HeldLocks) {}
/// }
/// ```
pub trait MultiFlavour<Res, E>: Flavour<Res, E> {
    /// Maps the inner service's response. `guard` holds every lock of the
    /// request (`None` for requests without a key): dropping it releases
    /// them.
    ///
    /// ```
    /// use lock_tower::{Generic, MultiFlavour};
    /// let res = <Generic as MultiFlavour<u8, std::io::Error>>::multi_response(&Generic, 7, None);
    /// assert_eq!(res, 7);
    /// ```
    fn multi_response(&self, res: Res, guard: Option<MultiGuard>) -> Self::Response;
}

/// Hands a request's [`HeldLocks`] to the request before the inner
/// service is called. The HTTP and gRPC flavours insert a clone into the
/// request's extensions; the generic flavour, whose requests have none,
/// does nothing (the handler finds each lock with
/// [`HeldLock::current_for`](lock_core::HeldLock::current_for)).
///
/// ```
/// use lock_tower::{AttachHeldLocks, HeldLocks};
///
/// /// Transfers that carry the fencing tokens of their two accounts.
/// struct Transfer { from: u64, to: u64, tokens: Vec<u64> }
/// struct Transfers; // a flavour (its other impls left out)
///
/// impl AttachHeldLocks<Transfer> for Transfers {
///     fn attach_locks(&self, t: &mut Transfer, locks: &HeldLocks) {
///         t.tokens = locks.locks().iter().map(|l| l.fencing_token()).collect();
///     }
/// }
/// ```
pub trait AttachHeldLocks<Req> {
    /// Puts `locks` (or a clone) into `req`, or does nothing. Called once
    /// per request with keys, after every lock was taken, before the
    /// inner service is called.
    ///
    /// ```
    /// use lock_tower::{AttachHeldLocks, Generic};
    /// # fn demo(locks: lock_tower::HeldLocks) {
    /// let mut job = 7_u32;
    /// Generic.attach_locks(&mut job, &locks); // the generic flavour attaches nothing
    /// assert_eq!(job, 7);
    /// # }
    /// ```
    fn attach_locks(&self, req: &mut Req, locks: &HeldLocks);
}

/// The locks are released when the inner service's future completes.
impl<Res, E> MultiFlavour<Res, E> for Generic
where
    E: Into<BoxError>,
{
    fn multi_response(&self, res: Res, guard: Option<MultiGuard>) -> Res {
        drop(guard);
        res
    }
}

/// Attaches nothing: requests of any type have nowhere to carry them.
impl<Req> AttachHeldLocks<Req> for Generic {
    fn attach_locks(&self, _req: &mut Req, _locks: &HeldLocks) {}
}
