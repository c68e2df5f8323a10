//! The response future: takes the lock, then runs the inner service.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use lock_core::{LockContext, LockGuard};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::error::LockError;
use crate::flavour::{AttachHeldLock, Flavour};
use crate::observe;

/// The lock acquisition. lock-core's acquire is an `async fn`, whose future
/// has no name on stable Rust, so it is the one thing boxed: once per keyed
/// request, next to at least one Redis round trip. The inner service's
/// future is never boxed, and requests without a key allocate nothing.
pub(crate) type Acquire = Pin<Box<dyn Future<Output = lock_core::Result<LockGuard>> + Send>>;

/// [`HeldLock::lost`](lock_core::HeldLock::lost) of the request's lock,
/// with `cancel_on_lost` only: boxed for the same reason, once per keyed
/// request of such a layer.
type Lost = Pin<Box<dyn Future<Output = ()> + Send>>;

pin_project! {
    #[project = StateProj]
    #[project_replace = StateOwned]
    enum State<S: Service<Req>, Req> {
        // No key: the inner service was called at once; no lock, no context.
        Passthrough { #[pin] future: S::Future },
        // Waiting for the lock. The inner service (the clone that was
        // polled ready) is called only once the lock is held.
        Acquiring {
            acquire: Acquire,
            service: S,
            req: Req,
            key: String,
            ctx: LockContext,
            cancel_on_lost: bool,
        },
        // The lock is held; the inner future runs inside the lock context,
        // raced against the loss of the lock with `cancel_on_lost`.
        Running {
            #[pin] future: S::Future,
            guard: Option<LockGuard>,
            ctx: LockContext,
            lost: Option<Lost>,
        },
        // The lock could not even be asked for (invalid key).
        Rejected { error: LockError },
        Done,
    }
}

pin_project! {
    /// Response future of [`Lock`](crate::Lock): takes the request's lock
    /// (bounded by the layer's wait), calls the inner service inside the
    /// request's [`LockContext`], and hands the lock guard to the flavour
    /// with the response. With
    /// [`cancel_on_lost`](crate::LockLayer::cancel_on_lost), a lock lost
    /// before the inner future completes drops that future and answers
    /// with the flavour's rejection.
    ///
    /// Dropping it (the client went away) drops the acquisition — lock-core
    /// gives back a lock granted meanwhile — or the guard, which releases
    /// the lock in the background.
    ///
    /// ```
    /// # use tower::{service_fn, ServiceBuilder, Service};
    /// # use lock_tower::LockLayer;
    /// # fn demo(client: lock_core::LockClient) {
    /// let mut svc = ServiceBuilder::new()
    ///     .layer(LockLayer::generic(client, |n: &u32| Some(format!("n:{n}"))))
    ///     .service(service_fn(|n: u32| async move { Ok::<_, std::convert::Infallible>(n) }));
    /// let fut: lock_tower::ResponseFuture<_, u32, lock_tower::Generic> = svc.call(7);
    /// # let _ = fut;
    /// # }
    /// ```
    pub struct ResponseFuture<S: Service<Req>, Req, F> {
        #[pin]
        state: State<S, Req>,
        flavour: Arc<F>,
    }
}

impl<S: Service<Req>, Req, F> ResponseFuture<S, Req, F> {
    pub(crate) fn passthrough(future: S::Future, flavour: Arc<F>) -> Self {
        ResponseFuture {
            state: State::Passthrough { future },
            flavour,
        }
    }

    pub(crate) fn acquiring(
        acquire: Acquire,
        service: S,
        req: Req,
        key: String,
        ctx: LockContext,
        cancel_on_lost: bool,
        flavour: Arc<F>,
    ) -> Self {
        ResponseFuture {
            state: State::Acquiring {
                acquire,
                service,
                req,
                key,
                ctx,
                cancel_on_lost,
            },
            flavour,
        }
    }

    pub(crate) fn rejected(error: LockError, flavour: Arc<F>) -> Self {
        ResponseFuture {
            state: State::Rejected { error },
            flavour,
        }
    }
}

impl<S: Service<Req>, Req, F> fmt::Debug for ResponseFuture<S, Req, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Passthrough { .. } => "passthrough",
            State::Acquiring { .. } => "acquiring",
            State::Running { .. } => "running",
            State::Rejected { .. } => "rejected",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S, Req, F> Future for ResponseFuture<S, Req, F>
where
    S: Service<Req>,
    F: Flavour<S::Response, S::Error> + AttachHeldLock<Req>,
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
                StateProj::Acquiring { acquire, key, .. } => {
                    let acquired = ready!(acquire.as_mut().poll(cx));
                    let guard = match acquired {
                        Ok(guard) => guard,
                        Err(e) => {
                            let error = LockError::new(std::mem::take(key), e);
                            this.state.set(State::Done);
                            return Poll::Ready(reject(&**this.flavour, error));
                        }
                    };
                    let StateOwned::Acquiring {
                        service,
                        req,
                        ctx,
                        cancel_on_lost,
                        ..
                    } = this.state.as_mut().project_replace(State::Done)
                    else {
                        unreachable!("the state was Acquiring a moment ago");
                    };
                    let (mut service, mut req) = (service, req);
                    let held = guard.held_lock();
                    this.flavour.attach(&mut req, &held);
                    let lost = cancel_on_lost
                        .then(|| -> Lost { Box::pin(async move { held.lost().await }) });
                    // The handler runs inside the lock's section.
                    let ctx = ctx.enter(&guard);
                    let future = match in_context(&ctx, cx, |_| Poll::Ready(service.call(req))) {
                        Poll::Ready(future) => future,
                        Poll::Pending => unreachable!("a scoped closure that is ready is ready"),
                    };
                    this.state.set(State::Running {
                        future,
                        guard: Some(guard),
                        ctx,
                        lost,
                    });
                }
                StateProj::Running {
                    future,
                    guard,
                    ctx,
                    lost,
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
                    // Lost: the handler's future is dropped here, at its
                    // current await, before the guard (whose drop gives back
                    // whatever is left of the hold, in the background).
                    let StateOwned::Running { guard, .. } =
                        this.state.as_mut().project_replace(State::Done)
                    else {
                        unreachable!("the state was Running a moment ago");
                    };
                    let Some(guard) = guard else {
                        unreachable!("a running request holds its guard");
                    };
                    let name = guard.name().to_string();
                    drop(guard);
                    let error = LockError::new(name.clone(), lock_core::Error::Lost { name });
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
                StateProj::Done => panic!("lock_tower::ResponseFuture polled after completion"),
            }
        }
    }
}

/// The flavour's answer to `error`, reported first (one log event, one
/// count).
fn reject<F, R, E>(flavour: &F, error: LockError) -> Result<F::Response, F::Error>
where
    F: Flavour<R, E>,
{
    observe::rejection(&error);
    flavour.rejection(error)
}

fn finish<F, R, E>(
    flavour: &F,
    out: Result<R, E>,
    guard: Option<LockGuard>,
) -> Result<F::Response, F::Error>
where
    F: Flavour<R, E>,
{
    match out {
        Ok(res) => Ok(flavour.response(res, guard)),
        Err(err) => {
            drop(guard);
            Err(flavour.error(err))
        }
    }
}

/// Runs `f` with `ctx` as the task's lock context, for the duration of
/// this one poll: a handler that takes the same lock through lock-core's
/// API (or the attribute macro) re-enters it instead of waiting for
/// itself. Done per poll so that the inner future needs no box.
pub(crate) fn in_context<T>(
    ctx: &LockContext,
    cx: &mut Context<'_>,
    f: impl FnOnce(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    let mut f = Some(f);
    let scoped = ctx
        .clone()
        .scope(std::future::poll_fn(move |cx| match f.take() {
            Some(f) => f(cx),
            None => Poll::Pending,
        }));
    std::pin::pin!(scoped).poll(cx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn in_context_sets_the_context_for_one_poll() {
        let ctx = LockContext::new();
        let seen = std::future::poll_fn(|cx| {
            in_context(&ctx, cx, |_| Poll::Ready(LockContext::current()))
        })
        .await;
        assert_eq!(seen, Some(ctx));
        assert_eq!(LockContext::current(), None);
    }
}
