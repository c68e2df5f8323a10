//! The permit middleware service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use lock_core::AcquireOptions;
use tower_service::Service;

use super::flavour::{AttachPermit, PermitFlavour};
use super::future::{Acquire, PermitFuture};
use super::layer::PermitShared;
use crate::error::LockError;
use crate::key::MakeLockKey;

/// Middleware that lets at most the key's limit of requests with the same
/// key run at once, across every process using the same Redis. Made by
/// [`PermitLayer`](crate::PermitLayer).
///
/// - `poll_ready` delegates to the inner service.
/// - `call` derives the key. No key: the inner service is called at once
///   and nothing else happens. A key: the inner service that was polled
///   ready moves into the [`PermitFuture`] (a clone stays behind), which
///   takes one permit of the key's semaphore (creating it with the layer's
///   permits the first time), hands it to the request ([`AttachPermit`])
///   and only then calls it.
///
/// ```
/// use lock_tower::{PermitLayer, PermitLimit};
/// use tower::{Layer, service_fn};
///
/// # fn demo(client: lock_core::LockClient) {
/// let echo = service_fn(|s: String| async move { Ok::<_, std::io::Error>(s) });
/// let svc: PermitLimit<_, _, lock_tower::Generic> =
///     PermitLayer::generic(client, |s: &String| Some(format!("limit:{s}")), 2).layer(echo);
/// # let _ = svc;
/// # }
/// ```
pub struct PermitLimit<S, K, F> {
    inner: S,
    shared: Arc<PermitShared<K>>,
    wait: Duration,
    flavour: Arc<F>,
}

impl<S, K, F> PermitLimit<S, K, F> {
    pub(crate) fn new(
        inner: S,
        shared: Arc<PermitShared<K>>,
        wait: Duration,
        flavour: Arc<F>,
    ) -> Self {
        PermitLimit {
            inner,
            shared,
            wait,
            flavour,
        }
    }

    /// The wrapped service.
    ///
    /// ```
    /// # use tower::{Layer, service_fn};
    /// # fn demo(client: lock_core::LockClient) {
    /// # let layer = lock_tower::PermitLayer::generic(client, |_: &()| None::<String>, 1);
    /// let svc = layer.layer(service_fn(|()| async { Ok::<_, std::io::Error>(()) }));
    /// let _inner = svc.get_ref();
    /// # }
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    ///
    /// ```
    /// # use tower::{Layer, service_fn};
    /// # fn demo(client: lock_core::LockClient) {
    /// # let layer = lock_tower::PermitLayer::generic(client, |_: &()| None::<String>, 1);
    /// let mut svc = layer.layer(service_fn(|()| async { Ok::<_, std::io::Error>(()) }));
    /// let _inner = svc.get_mut();
    /// # }
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    ///
    /// ```
    /// # use tower::{Layer, service_fn};
    /// # fn demo(client: lock_core::LockClient) {
    /// # let layer = lock_tower::PermitLayer::generic(client, |_: &()| None::<String>, 1);
    /// let svc = layer.layer(service_fn(|()| async { Ok::<_, std::io::Error>(()) }));
    /// let _inner = svc.into_inner();
    /// # }
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, K, F> Clone for PermitLimit<S, K, F> {
    fn clone(&self) -> Self {
        PermitLimit {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            wait: self.wait,
            flavour: self.flavour.clone(),
        }
    }
}

impl<S: fmt::Debug, K, F: fmt::Debug> fmt::Debug for PermitLimit<S, K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitLimit")
            .field("inner", &self.inner)
            .field("client", &self.shared.client)
            .field("permits", &self.shared.seed.permits)
            .field("wait", &self.wait)
            .field("flavour", &self.flavour)
            .finish_non_exhaustive()
    }
}

impl<S, K, F, Req> Service<Req> for PermitLimit<S, K, F>
where
    S: Service<Req> + Clone,
    K: MakeLockKey<Req>,
    F: PermitFlavour<S::Response, S::Error> + AttachPermit<Req>,
{
    type Response = F::Response;
    type Error = F::Error;
    type Future = PermitFuture<S, Req, F>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(|e| self.flavour.error(e))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let flavour = self.flavour.clone();
        let Some(key) = self.shared.key.make_lock_key(&req) else {
            return PermitFuture::passthrough(self.inner.call(req), flavour);
        };
        let sem = match self.shared.client.permit_semaphore(&key) {
            Ok(sem) => sem,
            Err(e) => return PermitFuture::rejected(LockError::for_permit(key, e), flavour),
        };
        let seed = self.shared.seed.clone();
        let options = if self.wait.is_zero() {
            AcquireOptions::new().no_wait()
        } else {
            AcquireOptions::new().wait(self.wait)
        };
        let acquire: Acquire = Box::pin(async move {
            seed.ensure(&sem).await?;
            match sem.acquire_with(1, options).await {
                // No permit within the wait: if the semaphore was missing
                // (deleted, lost in Redis), it exists now; one more try.
                Err(busy) if busy.is_wait_timeout() => match seed.recreate(&sem).await {
                    Ok(true) => sem.try_acquire(1).await?.ok_or(busy),
                    _ => Err(busy),
                },
                taken => taken,
            }
        });
        // The service that was polled ready goes with the request; a clone
        // takes its place (it will be polled ready before the next call).
        let clone = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, clone);
        PermitFuture::acquiring(acquire, service, req, key, flavour)
    }
}
