//! The multi-lock middleware service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use lock_core::LockContext;
use tower_service::Service;

use super::flavour::{AttachHeldLocks, MultiFlavour};
use super::future::MultiLockFuture;
use super::keys::MakeLockKeys;
use crate::error::LockError;
use crate::lock::{Settings, Shared};

/// Middleware that runs each request under every lock its key function
/// names, across every process using the same Redis. Made by
/// [`MultiLockLayer`](crate::MultiLockLayer).
///
/// - `poll_ready` delegates to the inner service.
/// - `call` derives the keys. None: the inner service is called at once
///   and nothing else happens. Some: they make one
///   [`MultiLock`](lock_core::MultiLock) (an invalid key rejects the
///   request before any Redis call); the inner service that was polled
///   ready moves into the [`MultiLockFuture`] (a clone stays behind),
///   which takes every lock, hands them to the request
///   ([`AttachHeldLocks`]) and only then calls it, inside a lock section
///   of each lock.
///
/// ```
/// use lock_tower::{MultiLockLayer, MultiLockService};
/// use tower::{Layer, service_fn};
///
/// # fn demo(client: lock_core::LockClient) {
/// let echo = service_fn(|s: String| async move { Ok::<_, std::io::Error>(s) });
/// let svc: MultiLockService<_, _, lock_tower::Generic> =
///     MultiLockLayer::generic(client, |s: &String| s.split(',').map(String::from).collect::<Vec<_>>())
///         .layer(echo);
/// # let _ = svc;
/// # }
/// ```
pub struct MultiLockService<S, K, F> {
    inner: S,
    shared: Arc<Shared<K>>,
    settings: Settings,
    flavour: Arc<F>,
}

impl<S, K, F> MultiLockService<S, K, F> {
    pub(crate) fn new(
        inner: S,
        shared: Arc<Shared<K>>,
        settings: Settings,
        flavour: Arc<F>,
    ) -> Self {
        MultiLockService {
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
    /// # let layer = lock_tower::MultiLockLayer::generic(client, |_: &()| Vec::<String>::new());
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
    /// # let layer = lock_tower::MultiLockLayer::generic(client, |_: &()| Vec::<String>::new());
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
    /// # let layer = lock_tower::MultiLockLayer::generic(client, |_: &()| Vec::<String>::new());
    /// let svc = layer.layer(service_fn(|()| async { Ok::<_, std::io::Error>(()) }));
    /// let _inner = svc.into_inner();
    /// # }
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, K, F> Clone for MultiLockService<S, K, F> {
    fn clone(&self) -> Self {
        MultiLockService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            settings: self.settings,
            flavour: self.flavour.clone(),
        }
    }
}

impl<S: fmt::Debug, K, F: fmt::Debug> fmt::Debug for MultiLockService<S, K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockService")
            .field("inner", &self.inner)
            .field("client", &self.shared.client)
            .field("settings", &self.settings)
            .field("flavour", &self.flavour)
            .finish_non_exhaustive()
    }
}

impl<S, K, F, Req> Service<Req> for MultiLockService<S, K, F>
where
    S: Service<Req> + Clone,
    K: MakeLockKeys<Req>,
    F: MultiFlavour<S::Response, S::Error> + AttachHeldLocks<Req>,
{
    type Response = F::Response;
    type Error = F::Error;
    type Future = MultiLockFuture<S, Req, F>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(|e| self.flavour.error(e))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let flavour = self.flavour.clone();
        let mut keys = self.shared.key.make_lock_keys(&req);
        if keys.is_empty() {
            return MultiLockFuture::passthrough(self.inner.call(req), flavour);
        }
        // The keys as errors name them: sorted, each once.
        keys.sort_unstable();
        keys.dedup();
        let multi = match self.shared.client.multi_lock(&keys) {
            Ok(multi) => multi,
            Err(e) => return MultiLockFuture::rejected(LockError::for_keys(keys, e), flavour),
        };
        // The handler runs in the caller's context (nested layers share
        // it), inside a section of each lock it holds.
        let ctx = LockContext::current().unwrap_or_else(LockContext::new);
        let options = self.settings.acquire_options();
        let acquire = Box::pin(async move { multi.acquire_with(options).await });
        // The service that was polled ready goes with the request; a clone
        // takes its place (it will be polled ready before the next call).
        let clone = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, clone);
        MultiLockFuture::acquiring(
            acquire,
            service,
            req,
            keys,
            ctx,
            self.settings.cancel_on_lost,
            flavour,
        )
    }
}
