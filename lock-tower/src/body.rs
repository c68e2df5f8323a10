//! The response body of the HTTP and gRPC flavours: the inner service's
//! body, optionally holding the lock until it ends, or a short body of the
//! layer's own (a rejection).

use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use lock_core::{LockGuard, MultiGuard};
use pin_project_lite::pin_project;

use crate::permit::RequestPermit;

/// What a body may keep until it ends: a lock layer's guard, a permit
/// layer's reference to the request's permit, or a multi-lock layer's
/// guard of every lock of the request. Kept for their drop only.
#[allow(dead_code)]
enum Keep {
    Lock(LockGuard),
    Permit(RequestPermit),
    Locks(MultiGuard),
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
    }
}

pin_project! {
    /// A response body that may hold the request's lock (or, behind a
    /// [`PermitLayer`](crate::PermitLayer), its permit; behind a
    /// [`MultiLockLayer`](crate::MultiLockLayer), its locks) until it has
    /// yielded its last frame (or is dropped, when the client goes away).
    ///
    /// The HTTP and gRPC flavours wrap every response body in it; with
    /// [`hold_until_body_end`](crate::LockLayer::hold_until_body_end) the
    /// lock lives in the body, otherwise it is released as soon as the
    /// inner service has produced the response head. Rejections built by
    /// the layer are [`full`](LockBody::full) or [`empty`](LockBody::empty).
    ///
    /// ```
    /// use http_body::Body as _;
    /// use lock_tower::LockBody;
    ///
    /// let body: LockBody<String> = LockBody::full("busy".into());
    /// assert_eq!(body.size_hint().exact(), Some(4));
    /// assert!(!body.holds_lock());
    /// ```
    pub struct LockBody<B> {
        #[pin]
        kind: Kind<B>,
        guard: Option<Keep>,
    }
}

impl<B> LockBody<B> {
    /// Wraps `body`; `guard`, if any, is dropped (the lock released in the
    /// background) when the body ends, fails, or is dropped.
    ///
    /// ```
    /// let body = lock_tower::LockBody::new(String::from("hello"), None);
    /// # let _ = body;
    /// ```
    pub fn new(body: B, guard: Option<LockGuard>) -> Self {
        LockBody {
            kind: Kind::Inner { body },
            guard: guard.map(Keep::Lock),
        }
    }

    /// Wraps `body`; `permit`, if any, is dropped (the permit goes back once
    /// no other clone of it is left) when the body ends, fails, or is
    /// dropped. What a [`PermitLayer`](crate::PermitLayer) with
    /// [`hold_until_body_end`](crate::PermitLayer::hold_until_body_end)
    /// answers with.
    ///
    /// ```
    /// let body = lock_tower::LockBody::with_permit(String::from("hello"), None);
    /// assert!(!body.holds_permit());
    /// ```
    pub fn with_permit(body: B, permit: Option<RequestPermit>) -> Self {
        LockBody {
            kind: Kind::Inner { body },
            guard: permit.map(Keep::Permit),
        }
    }

    /// Wraps `body`; `guard`, if any (the guard of every lock a
    /// [`MultiLockLayer`](crate::MultiLockLayer) took for the request), is
    /// dropped (every lock released in the background) when the body ends,
    /// fails, or is dropped. What a multi-lock layer with
    /// [`hold_until_body_end`](crate::MultiLockLayer::hold_until_body_end)
    /// answers with.
    ///
    /// ```
    /// let body = lock_tower::LockBody::with_locks(String::from("hello"), None);
    /// assert!(!body.holds_lock());
    /// ```
    pub fn with_locks(body: B, guard: Option<MultiGuard>) -> Self {
        LockBody {
            kind: Kind::Inner { body },
            guard: guard.map(Keep::Locks),
        }
    }

    /// A body of the layer's own with these bytes.
    ///
    /// ```
    /// let body: lock_tower::LockBody<String> = lock_tower::LockBody::full("busy".into());
    /// # let _ = body;
    /// ```
    pub fn full(data: Bytes) -> Self {
        LockBody {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
            guard: None,
        }
    }

    /// An empty body (gRPC rejections carry everything in headers).
    ///
    /// ```
    /// use http_body::Body as _;
    /// let body: lock_tower::LockBody<String> = lock_tower::LockBody::empty();
    /// assert!(body.is_end_stream());
    /// ```
    pub fn empty() -> Self {
        Self::full(Bytes::new())
    }

    /// Whether the body still holds the request's lock (behind a
    /// [`MultiLockLayer`](crate::MultiLockLayer), its locks).
    ///
    /// ```
    /// assert!(!lock_tower::LockBody::new(String::new(), None).holds_lock());
    /// ```
    pub fn holds_lock(&self) -> bool {
        matches!(self.guard, Some(Keep::Lock(_) | Keep::Locks(_)))
    }

    /// Whether the body still holds the request's permit (a
    /// [`PermitLayer`](crate::PermitLayer) with
    /// [`hold_until_body_end`](crate::PermitLayer::hold_until_body_end)).
    ///
    /// ```
    /// assert!(!lock_tower::LockBody::<String>::empty().holds_permit());
    /// ```
    pub fn holds_permit(&self) -> bool {
        matches!(self.guard, Some(Keep::Permit(_)))
    }
}

impl<B> Default for LockBody<B> {
    fn default() -> Self {
        Self::empty()
    }
}

impl<B> fmt::Debug for LockBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Full { .. } => "full",
        };
        f.debug_struct("LockBody")
            .field("kind", &kind)
            .field("holds_lock", &self.holds_lock())
            .field("holds_permit", &self.holds_permit())
            .finish()
    }
}

impl<B> Body for LockBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        match this.kind.project() {
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d.into())))),
            KindProj::Inner { mut body } => {
                let frame = ready!(body.as_mut().poll_frame(cx));
                // Release at the end of the stream, on error, or when the
                // frame just read was the last one (HTTP/2 servers stop
                // polling once `is_end_stream` is true).
                if !matches!(frame, Some(Ok(_))) || body.is_end_stream() {
                    this.guard.take();
                }
                Poll::Ready(frame)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
