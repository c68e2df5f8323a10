//! The multi-lock layer: configuration shared by every service it makes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockClient;
use tower_layer::Layer;

use super::service::MultiLockService;
use crate::flavour::Generic;
use crate::lock::{Settings, Shared, DEFAULT_WAIT};

/// A tower [`Layer`] that runs each request under several locks at once:
/// its key function ([`MakeLockKeys`](crate::MakeLockKeys)) maps the
/// request to a list of lock names, and the request runs only once it
/// holds every one of them, across every process using the same Redis.
/// Requests whose key sets overlap run one at a time; disjoint sets run
/// concurrently; an empty list passes straight through with no Redis
/// call. A transfer between two accounts, a job touching a few tenants.
///
/// - **All or nothing, no deadlock.** The locks are taken through
///   [`LockClient::multi_lock`]: the names are deduplicated and sorted,
///   and nothing is held while waiting, so two requests over `["a", "b"]`
///   and `["b", "a"]` never block each other for good. Each name is an
///   ordinary lock (Redisson's `RLock` hash, with its own fencing token):
///   a [`LockLayer`](crate::LockLayer), a lock-core
///   [`Lock`](lock_core::Lock) or a Java `RLock` of one of the names
///   excludes the request and is excluded by it.
/// - **Waiting.** At most [`DEFAULT_WAIT`] (change it with
///   [`wait`](Self::wait)) for all of them together; then the request is
///   answered "busy" as by a [`LockLayer`](crate::LockLayer): HTTP `503`
///   with `Retry-After`, gRPC `UNAVAILABLE`, generic `Err` holding a
///   [`LockError`](crate::LockError) whose [`keys`](crate::LockError::keys)
///   are the request's keys. An invalid key fails the whole request
///   before any Redis call (400, `INVALID_ARGUMENT`).
/// - **Holding.** The watchdog renews every lock while the request runs
///   (or each has a fixed [`lease`](Self::lease)); they are released
///   together when the inner service's future completes or, with
///   [`hold_until_body_end`](Self::hold_until_body_end), when the
///   response body has ended. A client that goes away gives up its turn
///   while waiting (locks taken meanwhile are given back) or releases
///   every lock at once while holding.
/// - **In the handler.** The HTTP and gRPC flavours put a
///   [`HeldLocks`](crate::HeldLocks) into the request's extensions
///   (axum: `Extension<HeldLocks>`): names, fencing tokens, `is_held`,
///   a lost signal. The handler's future runs inside a lock section of
///   each lock, as behind a [`LockLayer`](crate::LockLayer): a handler (or
///   a nested [`LockLayer`](crate::LockLayer)) that takes one of them
///   again through lock-core re-enters it, and
///   [`HeldLock::current_for`](lock_core::HeldLock::current_for) finds it
///   in every flavour.
///
/// A multi-lock takes new holds only: nested inside a
/// [`LockLayer`](crate::LockLayer) or another multi-lock layer of one of
/// the same keys (on one task), it waits for the outer request's own lock
/// and is answered "busy". Put the multi-lock layer outside, or give
/// nested layers disjoint keys. The keys are plain locks:
/// [`MakeLockKey::lock_mode`](crate::MakeLockKey::lock_mode) is not asked.
///
/// With axum, add it with `Router::route_layer` (see
/// [`LockLayer`](crate::LockLayer)).
///
/// ```
/// use std::time::Duration;
/// use axum::{body::Body, http::Request, routing::post, Router};
/// use lock_tower::{MultiLockLayer, PathSegment};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_tower::BoxError> {
/// # let server = lock_tests::RedisServer::start()?;
/// # let client = lock_core::LockClient::builder(server.url()).build()?;
/// // POST /transfers/from/17/to/4: both accounts, in any order, on every replica.
/// let app = Router::new()
///     .route("/transfers/from/{from}/to/{to}", post(|| async { "moved" }))
///     .route_layer(
///         MultiLockLayer::new(
///             client.clone(),
///             (PathSegment::after("from").prefix("account:"), PathSegment::after("to").prefix("account:")),
///         )
///         .wait(Duration::from_millis(200)),
///     );
///
/// let res = app.clone().oneshot(Request::post("/transfers/from/17/to/4").body(Body::empty())?).await?;
/// assert_eq!(res.status(), 200);
/// // While someone holds account 4, transfers touching it are busy ...
/// let held = client.lock("account:4")?.acquire().await?;
/// let res = app.clone().oneshot(Request::post("/transfers/from/4/to/9").body(Body::empty())?).await?;
/// assert_eq!(res.status(), 503);
/// // ... and the others run.
/// let res = app.oneshot(Request::post("/transfers/from/17/to/9").body(Body::empty())?).await?;
/// assert_eq!(res.status(), 200);
/// held.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct MultiLockLayer<K, F> {
    shared: Arc<Shared<K>>,
    settings: Settings,
    flavour: Arc<F>,
}

impl<K> MultiLockLayer<K, Generic> {
    /// A layer of the [`Generic`] flavour: for any request type; a request
    /// whose locks cannot be taken fails with a boxed
    /// [`LockError`](crate::LockError) naming its keys, for
    /// `HandleErrorLayer`. The inner service finds each lock with
    /// [`HeldLock::current_for`](lock_core::HeldLock::current_for).
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// // A job over several tenants runs alone on each of them.
    /// let layer = lock_tower::MultiLockLayer::generic(client, |job: &Vec<u32>| {
    ///     job.iter().map(|t| format!("tenant:{t}")).collect::<Vec<_>>()
    /// });
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn generic(client: LockClient, keys: K) -> Self {
        Self::with_flavour(client, keys, Generic)
    }
}

impl<K, F> MultiLockLayer<K, F> {
    /// A layer answering in the flavour `flavour` (one of the crate's, or
    /// your own [`MultiFlavour`](crate::MultiFlavour)).
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// let layer = lock_tower::MultiLockLayer::with_flavour(
    ///     client,
    ///     |n: &u64| vec![format!("n:{n}"), format!("n:{}", n + 1)],
    ///     lock_tower::Generic,
    /// );
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn with_flavour(client: LockClient, keys: K, flavour: F) -> Self {
        MultiLockLayer {
            shared: Arc::new(Shared { client, key: keys }),
            settings: Settings {
                wait: DEFAULT_WAIT,
                lease: None,
                cancel_on_lost: false,
            },
            flavour: Arc::new(flavour),
        }
    }

    /// Waits at most `wait` for every lock, then answers "busy". Zero
    /// makes one attempt only: a request one of whose keys is held is
    /// answered at once.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::MultiLockLayer<fn(&u8) -> Vec<String>, lock_tower::Generic>) {
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
    /// [`MAX_LEASE`](lock_core::MAX_LEASE)): they expire then even if the
    /// request still runs, and are never renewed. Without it (the
    /// default) the client's watchdog keeps them for as long as the
    /// request holds them.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::MultiLockLayer<fn(&u8) -> Vec<String>, lock_tower::Generic>) {
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
    /// long as the request holds the locks.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::MultiLockLayer<fn(&u8) -> Vec<String>, lock_tower::Generic>) {
    /// let layer = layer.lease(std::time::Duration::from_secs(1)).watchdog_lease();
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn watchdog_lease(mut self) -> Self {
        self.settings.lease = None;
        self
    }

    /// Cancels a request as soon as one of its locks is lost while its
    /// handler runs, as [`LockLayer::cancel_on_lost`](crate::LockLayer::cancel_on_lost)
    /// does for one lock: the inner service's future is dropped at its
    /// current `.await`, the other locks are released, and the request is
    /// answered with the flavour's "lost" rejection (HTTP `503`, gRPC
    /// `ABORTED`, generic [`LockError::is_lost`](crate::LockError::is_lost)).
    /// It covers the handler up to its response, not a body streamed with
    /// [`hold_until_body_end`](Self::hold_until_body_end).
    ///
    /// ```
    /// # fn demo(layer: lock_tower::MultiLockLayer<fn(&u8) -> Vec<String>, lock_tower::Generic>) {
    /// let layer = layer.cancel_on_lost();
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
    /// # fn demo(layer: lock_tower::MultiLockLayer<fn(&u8) -> Vec<String>, lock_tower::Generic>) {
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

impl<K, F> Clone for MultiLockLayer<K, F> {
    fn clone(&self) -> Self {
        MultiLockLayer {
            shared: self.shared.clone(),
            settings: self.settings,
            flavour: self.flavour.clone(),
        }
    }
}

impl<K, F: fmt::Debug> fmt::Debug for MultiLockLayer<K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockLayer")
            .field("client", &self.shared.client)
            .field("settings", &self.settings)
            .field("flavour", &self.flavour)
            .finish_non_exhaustive()
    }
}

impl<S, K, F> Layer<S> for MultiLockLayer<K, F> {
    type Service = MultiLockService<S, K, F>;

    fn layer(&self, inner: S) -> Self::Service {
        MultiLockService::new(
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
        let layer = MultiLockLayer::generic(client, |n: &u64| vec![n.to_string()]);
        let service = layer.layer(());
        for debug in [format!("{layer:?}"), format!("{service:?}")] {
            assert!(!debug.contains("s3cr3t-pw"), "{debug}");
            assert!(debug.contains("MultiLock"), "{debug}");
        }
    }
}
