//! The permit layer's response future: takes a permit, then runs the
//! inner service.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use lock_core::Permits;
use pin_project_lite::pin_project;
use tower_service::Service;

use super::flavour::{AttachPermit, PermitFlavour};
use super::handle::RequestPermit;
use crate::error::LockError;
use crate::observe;

/// Setting the key's limit (the first time) and taking one permit: async
/// lock-core calls, whose futures have no name on stable Rust, so boxed:
/// once per keyed request, next to at least one Redis round trip.
pub(crate) type Acquire = Pin<Box<dyn Future<Output = lock_core::Result<Permits>> + Send>>;

pin_project! {
    #[project = StateProj]
    #[project_replace = StateOwned]
    enum State<S: Service<Req>, Req> {
        // No key: the inner service was called at once; no permit.
        Passthrough { #[pin] future: S::Future },
        // Waiting for a permit. The inner service (the clone that was
        // polled ready) is called only once the permit is held.
        Acquiring {
            acquire: Acquire,
            service: S,
            req: Req,
            key: String,
        },
        // The permit is held (here, and in the request's extensions).
        Running {
            #[pin] future: S::Future,
            permit: Option<RequestPermit>,
        },
        // The permit could not even be asked for (invalid key).
        Rejected { error: LockError },
        Done,
    }
}

pin_project! {
    /// Response future of [`PermitLimit`](crate::PermitLimit): takes one
    /// permit of the request's key (bounded by the layer's wait), hands it
    /// to the request, calls the inner service, and hands the layer's
    /// reference to the permit to the flavour with the response.
    ///
    /// Dropping it (the client went away) drops the acquisition — lock-core
    /// gives back a permit granted meanwhile and the request's turn — or
    /// the permit, which goes back in the background.
    ///
    /// ```
    /// # use tower::{service_fn, ServiceBuilder, Service};
    /// # use lock_tower::PermitLayer;
    /// # fn demo(client: lock_core::LockClient) {
    /// let mut svc = ServiceBuilder::new()
    ///     .layer(PermitLayer::generic(client, |n: &u32| Some(format!("limit:{n}")), 2))
    ///     .service(service_fn(|n: u32| async move { Ok::<_, std::convert::Infallible>(n) }));
    /// let fut: lock_tower::PermitFuture<_, u32, lock_tower::Generic> = svc.call(7);
    /// # let _ = fut;
    /// # }
    /// ```
    pub struct PermitFuture<S: Service<Req>, Req, F> {
        #[pin]
        state: State<S, Req>,
        flavour: Arc<F>,
    }
}

impl<S: Service<Req>, Req, F> PermitFuture<S, Req, F> {
    pub(crate) fn passthrough(future: S::Future, flavour: Arc<F>) -> Self {
        PermitFuture {
            state: State::Passthrough { future },
            flavour,
        }
    }

    pub(crate) fn acquiring(
        acquire: Acquire,
        service: S,
        req: Req,
        key: String,
        flavour: Arc<F>,
    ) -> Self {
        PermitFuture {
            state: State::Acquiring {
                acquire,
                service,
                req,
                key,
            },
            flavour,
        }
    }

    pub(crate) fn rejected(error: LockError, flavour: Arc<F>) -> Self {
        PermitFuture {
            state: State::Rejected { error },
            flavour,
        }
    }
}

impl<S: Service<Req>, Req, F> fmt::Debug for PermitFuture<S, Req, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Passthrough { .. } => "passthrough",
            State::Acquiring { .. } => "acquiring",
            State::Running { .. } => "running",
            State::Rejected { .. } => "rejected",
            State::Done => "done",
        };
        f.debug_struct("PermitFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S, Req, F> Future for PermitFuture<S, Req, F>
where
    S: Service<Req>,
    F: PermitFlavour<S::Response, S::Error> + AttachPermit<Req>,
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
                    let permits = match ready!(acquire.as_mut().poll(cx)) {
                        Ok(permits) => permits,
                        Err(e) => {
                            let error = LockError::for_permit(std::mem::take(key), e);
                            this.state.set(State::Done);
                            return Poll::Ready(reject(&**this.flavour, error));
                        }
                    };
                    let StateOwned::Acquiring { service, req, .. } =
                        this.state.as_mut().project_replace(State::Done)
                    else {
                        unreachable!("the state was Acquiring a moment ago");
                    };
                    let (mut service, mut req) = (service, req);
                    let permit = RequestPermit::new(permits);
                    this.flavour.attach_permit(&mut req, &permit);
                    let future = service.call(req);
                    this.state.set(State::Running {
                        future,
                        permit: Some(permit),
                    });
                }
                StateProj::Running { future, permit } => {
                    let out = ready!(future.poll(cx));
                    let permit = permit.take();
                    this.state.set(State::Done);
                    return Poll::Ready(finish(&**this.flavour, out, permit));
                }
                StateProj::Rejected { .. } => {
                    let StateOwned::Rejected { error } =
                        this.state.as_mut().project_replace(State::Done)
                    else {
                        unreachable!("the state was Rejected a moment ago");
                    };
                    return Poll::Ready(reject(&**this.flavour, error));
                }
                StateProj::Done => panic!("lock_tower::PermitFuture polled after completion"),
            }
        }
    }
}

/// The flavour's answer to `error`, reported first (one log event, one
/// count).
fn reject<F, R, E>(flavour: &F, error: LockError) -> Result<F::Response, F::Error>
where
    F: PermitFlavour<R, E>,
{
    observe::rejection(&error);
    flavour.rejection(error)
}

fn finish<F, R, E>(
    flavour: &F,
    out: Result<R, E>,
    permit: Option<RequestPermit>,
) -> Result<F::Response, F::Error>
where
    F: PermitFlavour<R, E>,
{
    match out {
        Ok(res) => Ok(flavour.permit_response(res, permit)),
        Err(err) => {
            drop(permit);
            Err(flavour.error(err))
        }
    }
}
