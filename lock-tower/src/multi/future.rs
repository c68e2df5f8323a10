//! The multi-lock layer's response future: takes every lock, then runs
//! the inner service.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use lock_core::{LockContext, MultiGuard};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::flavour::{AttachHeldLocks, MultiFlavour};
use super::held::HeldLocks;
use crate::error::LockError;
use crate::lock::in_context;
use crate::observe;

/// Taking every lock: lock-core's `acquire_with`, an `async fn` whose
/// future has no name on stable Rust, so boxed: once per keyed request,
/// next to at least one Redis round trip.
pub(crate) type Acquire = Pin<Box<dyn Future<Output = lock_core::Result<MultiGuard>> + Send>>;

/// [`HeldLocks::lost`] of the request's locks, with `cancel_on_lost`
/// only: boxed for the same reason.
type Lost = Pin<Box<dyn Future<Output = ()> + Send>>;

pin_project! {
    #[project = StateProj]
    #[project_replace = StateOwned]
    enum State<S: Service<Req>, Req> {
        // No key: the inner service was called at once; no lock, no context.
        Passthrough { #[pin] future: S::Future },
        // Waiting for every lock. The inner service (the clone that was
        // polled ready) is called only once they are all held.
        Acquiring {
            acquire: Acquire,
            service: S,
            req: Req,
            keys: Vec<String>,
            ctx: LockContext,
            cancel_on_lost: bool,
        },
        // Every lock is held; the inner future runs inside a section of
        // each, raced against the loss of any with `cancel_on_lost`.
        Running {
            #[pin] future: S::Future,
            guard: Option<MultiGuard>,
            keys: Vec<String>,
            ctx: LockContext,
            lost: Option<Lost>,
        },
        // The locks could not even be asked for (an invalid key).
        Rejected { error: LockError },
        Done,
    }
}

pin_project! {
    /// Response future of [`MultiLockService`](crate::MultiLockService):
    /// takes every lock of the request at once (bounded by the layer's
    /// wait), hands them to the request ([`HeldLocks`]), calls the inner
    /// service inside a lock section of each, and hands the guard of all
    /// of them to the flavour with the response. With
    /// [`cancel_on_lost`](crate::MultiLockLayer::cancel_on_lost), a lock
    /// lost before the inner future completes drops that future and
    /// answers with the flavour's rejection.
    ///
    /// Dropping it (the client went away) drops the acquisition —
    /// lock-core gives back the locks taken meanwhile — or the guard,
    /// which releases every lock in the background.
    ///
    /// ```
    /// # use tower::{service_fn, ServiceBuilder, Service};
    /// # use lock_tower::MultiLockLayer;
    /// # fn demo(client: lock_core::LockClient) {
    /// let mut svc = ServiceBuilder::new()
    ///     .layer(MultiLockLayer::generic(client, |n: &u32| [format!("n:{n}"), format!("n:{}", n + 1)]))
    ///     .service(service_fn(|n: u32| async move { Ok::<_, std::convert::Infallible>(n) }));
    /// let fut: lock_tower::MultiLockFuture<_, u32, lock_tower::Generic> = svc.call(7);
    /// # let _ = fut;
    /// # }
    /// ```
    pub struct MultiLockFuture<S: Service<Req>, Req, F> {
        #[pin]
        state: State<S, Req>,
        flavour: Arc<F>,
    }
}

impl<S: Service<Req>, Req, F> MultiLockFuture<S, Req, F> {
    pub(crate) fn passthrough(future: S::Future, flavour: Arc<F>) -> Self {
        MultiLockFuture {
            state: State::Passthrough { future },
            flavour,
        }
    }

    pub(crate) fn acquiring(
        acquire: Acquire,
        service: S,
        req: Req,
        keys: Vec<String>,
        ctx: LockContext,
        cancel_on_lost: bool,
        flavour: Arc<F>,
    ) -> Self {
        MultiLockFuture {
            state: State::Acquiring {
                acquire,
                service,
                req,
                keys,
                ctx,
                cancel_on_lost,
            },
            flavour,
        }
    }

    pub(crate) fn rejected(error: LockError, flavour: Arc<F>) -> Self {
        MultiLockFuture {
            state: State::Rejected { error },
            flavour,
        }
    }
}

impl<S: Service<Req>, Req, F> fmt::Debug for MultiLockFuture<S, Req, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Passthrough { .. } => "passthrough",
            State::Acquiring { .. } => "acquiring",
            State::Running { .. } => "running",
            State::Rejected { .. } => "rejected",
            State::Done => "done",
        };
        f.debug_struct("MultiLockFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S, Req, F> Future for MultiLockFuture<S, Req, F>
where
    S: Service<Req>,
    F: MultiFlavour<S::Response, S::Error> + AttachHeldLocks<Req>,
{
    type Output = Result<F::Response, F::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Passthrough { future } => {
                    let out = ready!(future.poll(cx));
                    this.state.set(State::Done);
                    return Poll::Ready(finish(&**this.flavour, out, None));
                }
                StateProj::Acquiring { acquire, keys, .. } => {
                    let guard = match ready!(acquire.as_mut().poll(cx)) {
                        Ok(guard) => guard,
                        Err(e) => {
                            let error = LockError::for_keys(std::mem::take(keys), e);
                            this.state.set(State::Done);
                            return Poll::Ready(reject(&**this.flavour, error));
                        }
                    };
                    let StateOwned::Acquiring {
                        service,
                        req,
                        keys,
                        ctx,
                        cancel_on_lost,
                        ..
                    } = this.state.as_mut().project_replace(State::Done)
                    else {
                        unreachable!("the state was Acquiring a moment ago");
                    };
                    let (mut service, mut req) = (service, req);
                    let held = HeldLocks::new(&guard);
                    this.flavour.attach_locks(&mut req, &held);
                    let lost = cancel_on_lost
                        .then(|| -> Lost { Box::pin(async move { held.lost().await }) });
                    // The handler runs inside a section of each lock.
                    let ctx = guard.guards().iter().fold(ctx, |ctx, g| ctx.enter(g));
                    let future = match in_context(&ctx, cx, |_| Poll::Ready(service.call(req))) {
                        Poll::Ready(future) => future,
                        Poll::Pending => unreachable!("a scoped closure that is ready is ready"),
                    };
                    this.state.set(State::Running {
                        future,
                        guard: Some(guard),
                        keys,
                        ctx,
                        lost,
                    });
                }
                StateProj::Running {
                    future,
                    guard,
                    ctx,
                    lost,
                    ..
                } => {
                    // The handler first: an answer ready in the same poll as
                    // the loss is kept (its work is done either way).
                    if let Poll::Ready(out) = in_context(ctx, cx, |cx| future.poll(cx)) {
                        let guard = guard.take();
                        this.state.set(State::Done);
                        return Poll::Ready(finish(&**this.flavour, out, guard));
                    }
                    match lost {
                        Some(lost) => ready!(lost.as_mut().poll(cx)),
                        None => return Poll::Pending,
                    }
                    // One lock lost: the handler's future is dropped here,
                    // at its current await, before the guard (whose drop
                    // releases the other locks in the background).
                    let StateOwned::Running { guard, keys, .. } =
                        this.state.as_mut().project_replace(State::Done)
                    else {
                        unreachable!("the state was Running a moment ago");
                    };
                    let source = guard
                        .as_ref()
                        .and_then(|g| g.ensure_held().err())
                        .unwrap_or_else(|| lock_core::Error::Lost {
                            name: keys.join(", "),
                        });
                    drop(guard);
                    let error = LockError::for_keys(keys, source);
                    return Poll::Ready(reject(&**this.flavour, error));
                }
                StateProj::Rejected { .. } => {
                    let StateOwned::Rejected { error } =
                        this.state.as_mut().project_replace(State::Done)
                    else {
                        unreachable!("the state was Rejected a moment ago");
                    };
                    return Poll::Ready(reject(&**this.flavour, error));
                }
                StateProj::Done => panic!("lock_tower::MultiLockFuture polled after completion"),
            }
        }
    }
}

/// The flavour's answer to `error`, reported first (one log event, one
/// count).
fn reject<F, R, E>(flavour: &F, error: LockError) -> Result<F::Response, F::Error>
where
    F: MultiFlavour<R, E>,
{
    observe::rejection(&error);
    flavour.rejection(error)
}

fn finish<F, R, E>(
    flavour: &F,
    out: Result<R, E>,
    guard: Option<MultiGuard>,
) -> Result<F::Response, F::Error>
where
    F: MultiFlavour<R, E>,
{
    match out {
        Ok(res) => Ok(flavour.multi_response(res, guard)),
        Err(err) => {
            drop(guard);
            Err(flavour.error(err))
        }
    }
}
