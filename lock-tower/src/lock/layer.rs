//! The layer: configuration shared by every service it makes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockClient;
use tower_layer::Layer;

use super::service::Lock;
use super::settings::{Settings, Shared};
use crate::flavour::Generic;
use crate::mode::{AlwaysWrite, ReadWrite};

/// How long a request waits for its lock by default before it is answered
/// "busy": 5 seconds. Long enough to ride out a burst of requests on one
/// key, short enough to answer well before common client and proxy
/// time-outs (30–60 s). Change it with [`LockLayer::wait`].
///
/// ```
/// assert_eq!(lock_tower::DEFAULT_WAIT, std::time::Duration::from_secs(5));
/// ```
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// A tower [`Layer`] that serializes requests per key: requests whose key
/// function gives the same key run one at a time across every process
/// using the same Redis; different keys run concurrently; requests without
/// a key pass straight through with no Redis round trip.
///
/// The flavour `F` says how the service answers
/// ([`Http`](crate::Http) from [`LockLayer::new`],
/// [`Grpc`](crate::Grpc) from [`LockLayer::grpc`], [`Generic`] from
/// [`LockLayer::generic`]). Defaults: wait at most [`DEFAULT_WAIT`], keep
/// the lock with the watchdog lease (renewed while the request runs).
///
/// With axum, add it with `Router::route_layer`, not `Router::layer`:
/// `layer` also wraps the router's fallback, so requests that match no
/// route (404s, whatever their path) would derive a key and take a lock
/// too.
///
/// For each request with a key, the inner service runs with the lock
/// held and can read it (name, fencing token, lost signal): from the
/// request's extensions for the HTTP and gRPC flavours
/// ([`AttachHeldLock`](crate::AttachHeldLock)), and from
/// [`HeldLock::current`](lock_core::HeldLock::current) in every flavour.
///
/// Cloning the layer is cheap and the clones share everything: the
/// client's per-key local queues (same-key requests of one process queue
/// in arrival order and only the head contends in Redis), the key
/// function, the flavour.
///
/// ```
/// use std::time::Duration;
/// use lock_tower::LockLayer;
///
/// # fn demo(client: lock_core::LockClient) {
/// let layer = LockLayer::generic(client, |job: &(u32, String)| Some(format!("tenant:{}", job.0)))
///     .wait(Duration::from_millis(500))
///     .lease(Duration::from_secs(30));
/// # let _ = layer;
/// # }
/// ```
pub struct LockLayer<K, F> {
    shared: Arc<Shared<K>>,
    settings: Settings,
    flavour: Arc<F>,
}

impl<K> LockLayer<K, Generic> {
    /// A layer of the [`Generic`] flavour: for any request type; a request
    /// whose lock cannot be taken fails with a boxed [`LockError`](crate::LockError).
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// let layer = lock_tower::LockLayer::generic(client, |n: &u64| Some(format!("n:{n}")));
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn generic(client: LockClient, key: K) -> Self {
        Self::with_flavour(client, key, Generic)
    }
}

impl<K> LockLayer<ReadWrite<K, AlwaysWrite>, Generic> {
    /// A read-write layer of the [`Generic`] flavour: each request with a
    /// key takes a side of the read-write lock of that name (see
    /// [`LockLayer::read_write`]). Requests of any type say nothing about
    /// reading, so every request writes ([`AlwaysWrite`]) until
    /// [`classify`](LockLayer::classify) is given a classifier.
    ///
    /// ```
    /// use lock_core::LockMode;
    ///
    /// # fn demo(client: lock_core::LockClient) {
    /// // Reports read a tenant's data together; imports have it alone.
    /// let layer = lock_tower::LockLayer::generic_read_write(client, |job: &(u32, &str)| {
    ///     Some(format!("tenant:{}", job.0))
    /// })
    /// .classify(|job: &(u32, &str)| if job.1 == "report" { LockMode::Read } else { LockMode::Write });
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn generic_read_write(client: LockClient, key: K) -> Self {
        Self::with_flavour(client, ReadWrite::new(key, AlwaysWrite), Generic)
    }
}

impl<K, C, F> LockLayer<ReadWrite<K, C>, F> {
    /// Classifies requests with `classifier` instead: it decides, for each
    /// request with a key, whether it takes the read side
    /// ([`LockMode::Read`](lock_core::LockMode::Read), shared with the
    /// other readers of the key) or the write side
    /// ([`LockMode::Write`](lock_core::LockMode::Write), alone). A closure
    /// `Fn(&Req) -> LockMode`, or a ready-made
    /// [`ClassifyRequest`](crate::ClassifyRequest) such as
    /// [`SafeMethodsRead`](crate::SafeMethodsRead) or
    /// [`ReadPaths`](crate::ReadPaths) (gRPC methods by path). The other
    /// settings stay.
    ///
    /// ```
    /// use axum::body::Body;
    /// use http::Request;
    /// use lock_core::LockMode;
    /// use lock_tower::{LockLayer, PathSegment};
    ///
    /// # fn demo(client: lock_core::LockClient) {
    /// // Searches are POSTs that only read.
    /// let layer = LockLayer::read_write(client, PathSegment::after("catalogs").prefix("catalog:"))
    ///     .classify(|req: &Request<Body>| {
    ///         if req.method() == http::Method::GET || req.uri().path().ends_with("/search") {
    ///             LockMode::Read
    ///         } else {
    ///             LockMode::Write
    ///         }
    ///     });
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn classify<C2>(self, classifier: C2) -> LockLayer<ReadWrite<K, C2>, F> {
        LockLayer {
            shared: Arc::new(Shared {
                client: self.shared.client.clone(),
                key: self.shared.key.with_classifier(classifier),
            }),
            settings: self.settings,
            flavour: self.flavour,
        }
    }
}

impl<K, F> LockLayer<K, F> {
    /// A layer answering in the flavour `flavour` (one of the crate's or
    /// your own [`Flavour`](crate::Flavour)).
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// let layer = lock_tower::LockLayer::with_flavour(client, |n: &u64| Some(n.to_string()), lock_tower::Generic);
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn with_flavour(client: LockClient, key: K, flavour: F) -> Self {
        LockLayer {
            shared: Arc::new(Shared { client, key }),
            settings: Settings {
                wait: DEFAULT_WAIT,
                lease: None,
                cancel_on_lost: false,
            },
            flavour: Arc::new(flavour),
        }
    }

    /// Waits at most `wait` for the lock, then answers "busy". Zero makes
    /// one attempt only: a request whose key is held is answered at once.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::LockLayer<fn(&u8) -> Option<String>, lock_tower::Generic>) {
    /// let layer = layer.wait(std::time::Duration::from_secs(2));
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.settings.wait = wait;
        self
    }

    /// Holds each lock for at most `lease` (clamped to 1 ms …
    /// [`MAX_LEASE`](lock_core::MAX_LEASE)): the lock expires then even if the request still
    /// runs, and is never renewed. Without it (the default) the client's
    /// watchdog keeps the lock for as long as the request holds it.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::LockLayer<fn(&u8) -> Option<String>, lock_tower::Generic>) {
    /// let layer = layer.lease(std::time::Duration::from_secs(30));
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.settings.lease = Some(lease);
        self
    }

    /// Back to the default lease: renewed by the client's watchdog for as
    /// long as the request holds the lock.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::LockLayer<fn(&u8) -> Option<String>, lock_tower::Generic>) {
    /// let layer = layer.lease(std::time::Duration::from_secs(1)).watchdog_lease();
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn watchdog_lease(mut self) -> Self {
        self.settings.lease = None;
        self
    }

    /// Cancels a request whose lock is lost while its handler runs: the
    /// inner service's future is raced against
    /// [`HeldLock::lost`](lock_core::HeldLock::lost) and, if the lock goes
    /// first (a renewal finds it gone, or its deadline passes: Redis
    /// unreachable, a fixed [`lease`](Self::lease) ran out), the future is
    /// dropped at its current `.await` and the request is answered with
    /// the flavour's "lost" rejection: HTTP `503` (no `Retry-After`), gRPC
    /// `ABORTED`, generic `Err` holding a [`LockError`](crate::LockError)
    /// whose [`is_lost`](crate::LockError::is_lost) is true. Change the
    /// answer like the other rejections, with `on_rejection` (check
    /// [`LockError::is_lost`](crate::LockError::is_lost)). Off by default:
    /// the handler then runs to its end even when the lock was lost
    /// (lock-core reports the loss), and should check
    /// [`HeldLock::ensure_held`](lock_core::HeldLock::ensure_held) itself.
    ///
    /// What it covers: the inner service's future, from the call until it
    /// has produced the response (the head, for HTTP and gRPC). It does
    /// not cover a response body streamed with
    /// [`hold_until_body_end`](Self::hold_until_body_end): once the head
    /// is sent, the answer cannot be changed into a rejection, and cutting
    /// the body short could pass for a complete one. A body producer that
    /// must stop with the lock watches the [`HeldLock`](lock_core::HeldLock)
    /// it took from the request itself (`lost()`, or a
    /// `cancellation_token()`). Work the handler spawned is not cancelled
    /// either.
    ///
    /// Cancelling drops the handler mid-way, as when a client goes away:
    /// use it for handlers whose every `.await` is a safe place to stop
    /// (writes fenced with the lock's token, or transactional).
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// let layer = lock_tower::LockLayer::generic(client, |job: &(u32, String)| Some(format!("tenant:{}", job.0)))
    ///     .cancel_on_lost();
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn cancel_on_lost(mut self) -> Self {
        self.settings.cancel_on_lost = true;
        self
    }

    /// The client the layer takes its locks with.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::LockLayer<fn(&u8) -> Option<String>, lock_tower::Generic>) {
    /// println!("locks on {}", layer.client().config().url);
    /// # }
    /// ```
    pub fn client(&self) -> &LockClient {
        &self.shared.client
    }

    /// The flavour, to change it (copy-on-write: other clones of the layer
    /// keep theirs).
    #[cfg(feature = "http")]
    pub(crate) fn flavour_mut(&mut self) -> &mut F
    where
        F: Clone,
    {
        Arc::make_mut(&mut self.flavour)
    }
}

impl<K, F> Clone for LockLayer<K, F> {
    fn clone(&self) -> Self {
        LockLayer {
            shared: self.shared.clone(),
            settings: self.settings,
            flavour: self.flavour.clone(),
        }
    }
}

impl<K, F: fmt::Debug> fmt::Debug for LockLayer<K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockLayer")
            .field("client", &self.shared.client)
            .field("settings", &self.settings)
            .field("flavour", &self.flavour)
            .finish_non_exhaustive()
    }
}

impl<S, K, F> Layer<S> for LockLayer<K, F> {
    type Service = Lock<S, K, F>;

    fn layer(&self, inner: S) -> Self::Service {
        Lock::new(
            inner,
            self.shared.clone(),
            self.settings,
            self.flavour.clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn debug_hides_the_redis_password() {
        let client = LockClient::builder("redis://alice:s3cr3t-pw@cache.internal:6380/2")
            .build()
            .expect("a valid configuration");
        let layer = LockLayer::generic(client, |n: &u64| Some(n.to_string()));
        let service = layer.layer(());
        for debug in [format!("{layer:?}"), format!("{service:?}")] {
            assert!(!debug.contains("s3cr3t-pw"), "{debug}");
            assert!(
                debug.contains("redis://alice:***@cache.internal:6380/2"),
                "{debug}"
            );
        }
    }
}
