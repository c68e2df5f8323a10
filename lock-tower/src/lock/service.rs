//! The middleware service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use lock_core::{LockContext, LockMode};
use tower_service::Service;

use super::future::ResponseFuture;
use super::settings::{Settings, Shared};
use crate::error::LockError;
use crate::flavour::{AttachHeldLock, Flavour};
use crate::key::MakeLockKey;

/// Middleware that runs requests with the same key one at a time, across
/// every process using the same Redis. Made by [`LockLayer`](crate::LockLayer).
///
/// - `poll_ready` delegates to the inner service.
/// - `call` derives the key. No key: the inner service is called at once
///   and nothing else happens. A key: its lock is the key's plain lock, or
///   the side of its read-write lock that
///   [`MakeLockKey::lock_mode`](crate::MakeLockKey::lock_mode) names (the
///   read-write layers' classifier); the inner service that was polled
///   ready is moved into the [`ResponseFuture`] (a clone stays behind),
///   which takes the lock, hands it to the request
///   ([`AttachHeldLock`]) and only then calls it, inside a
///   [`LockContext`] (the caller's, or a new one) section of the lock.
///
/// ```
/// use lock_tower::{Lock, LockLayer};
/// use tower::{Layer, service_fn};
///
/// # fn demo(client: lock_core::LockClient) {
/// let echo = service_fn(|s: String| async move { Ok::<_, std::io::Error>(s) });
/// let svc: Lock<_, _, lock_tower::Generic> =
///     LockLayer::generic(client, |s: &String| Some(s.clone())).layer(echo);
/// # let _ = svc;
/// # }
/// ```
pub struct Lock<S, K, F> {
    inner: S,
    shared: Arc<Shared<K>>,
    settings: Settings,
    flavour: Arc<F>,
}

impl<S, K, F> Lock<S, K, F> {
    pub(crate) fn new(
        inner: S,
        shared: Arc<Shared<K>>,
        settings: Settings,
        flavour: Arc<F>,
    ) -> Self {
        Lock {
            inner,
            shared,
            settings,
            flavour,
        }
    }

    /// The wrapped service.
    ///
    /// ```
    /// # use tower::{Layer, service_fn};
    /// # fn demo(client: lock_core::LockClient) {
    /// # let layer = lock_tower::LockLayer::generic(client, |_: &()| None::<String>);
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
    /// # let layer = lock_tower::LockLayer::generic(client, |_: &()| None::<String>);
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
    /// # let layer = lock_tower::LockLayer::generic(client, |_: &()| None::<String>);
    /// let svc = layer.layer(service_fn(|()| async { Ok::<_, std::io::Error>(()) }));
    /// let _inner = svc.into_inner();
    /// # }
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, K, F> Clone for Lock<S, K, F> {
    fn clone(&self) -> Self {
        Lock {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            settings: self.settings,
            flavour: self.flavour.clone(),
        }
    }
}

impl<S: fmt::Debug, K, F: fmt::Debug> fmt::Debug for Lock<S, K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("inner", &self.inner)
            .field("client", &self.shared.client)
            .field("settings", &self.settings)
            .field("flavour", &self.flavour)
            .finish_non_exhaustive()
    }
}

impl<S, K, F, Req> Service<Req> for Lock<S, K, F>
where
    S: Service<Req> + Clone,
    K: MakeLockKey<Req>,
    F: Flavour<S::Response, S::Error> + AttachHeldLock<Req>,
{
    type Response = F::Response;
    type Error = F::Error;
    type Future = ResponseFuture<S, Req, F>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(|e| self.flavour.error(e))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let flavour = self.flavour.clone();
        let Some(key) = self.shared.key.make_lock_key(&req) else {
            return ResponseFuture::passthrough(self.inner.call(req), flavour);
        };
        let client = &self.shared.client;
        let lock = match self.shared.key.lock_mode(&req) {
            LockMode::Read => client.rw_lock(&key).map(|rw| rw.read()),
            LockMode::Write => client.rw_lock(&key).map(|rw| rw.write()),
            _ => client.lock(&key),
        };
        let lock = match lock {
            Ok(lock) => lock,
            Err(e) => return ResponseFuture::rejected(LockError::new(key, e), flavour),
        };
        // Nested layers (or a caller already in a context) share the
        // caller's context; the lock is taken for a section, so a layer or
        // handler nested in it re-enters while sibling requests driven from
        // one task exclude each other.
        let ctx = LockContext::current().unwrap_or_else(LockContext::new);
        let options = self.settings.acquire_options().for_section();
        let acquire = Box::pin(
            ctx.clone()
                .scope(async move { lock.acquire_with(options).await }),
        );
        // The service that was polled ready goes with the request; a clone
        // takes its place (it will be polled ready before the next call).
        let clone = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::acquiring(
            acquire,
            service,
            req,
            key,
            ctx,
            self.settings.cancel_on_lost,
            flavour,
        )
    }
}
