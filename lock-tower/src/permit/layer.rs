//! The permit layer: configuration shared by every service it makes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockClient;
use tower_layer::Layer;

use super::seed::Seed;
use super::service::PermitLimit;
use crate::flavour::Generic;

/// How long a request waits for a permit by default before it is answered
/// "busy" (HTTP 503 + `Retry-After`, gRPC `RESOURCE_EXHAUSTED`): 1 second.
///
/// Shorter than the lock layer's [`DEFAULT_WAIT`](crate::DEFAULT_WAIT): a
/// concurrency limit sheds load. A second rides out a burst shorter than
/// a typical handler, and a limit that stays full is answered quickly, so
/// that clients back off (the default `Retry-After` is one second too)
/// instead of piling up waiting requests on every replica. Change it with
/// [`PermitLayer::wait`]; zero makes one attempt.
///
/// ```
/// assert_eq!(lock_tower::DEFAULT_PERMIT_WAIT, std::time::Duration::from_secs(1));
/// ```
pub const DEFAULT_PERMIT_WAIT: Duration = Duration::from_secs(1);

/// What every service made by one layer shares: the client, the key
/// function, and each key's limit with the keys already set.
pub(crate) struct PermitShared<K> {
    pub(crate) client: LockClient,
    pub(crate) key: K,
    pub(crate) seed: Arc<Seed>,
}

/// A tower [`Layer`] that limits how many requests of one key run at once
/// across every replica of a service: tower's `ConcurrencyLimitLayer`, per
/// key and distributed. Requests whose key function gives the same key
/// share `permits` permits of an expirable semaphore in Redis
/// ([`LockClient::permit_semaphore`], Redisson's
/// `RPermitExpirableSemaphore`); each takes one for as long as it runs.
/// Different keys have limits of their own; requests without a key pass
/// straight through with no Redis call.
///
/// - **Waiting.** A request waits at most [`DEFAULT_PERMIT_WAIT`] (change
///   it with [`wait`](Self::wait)) for a permit; waiters take turns in
///   arrival order across replicas. Then it is answered "busy": HTTP `503`
///   with `Retry-After` (whole seconds, at least 1), gRPC
///   `RESOURCE_EXHAUSTED`, generic `Err` holding a
///   [`LockError`](crate::LockError) whose `is_busy()` and
///   `is_permit_limit()` are true. Other failures are answered as the
///   [`LockLayer`](crate::LockLayer) answers them (400 / `INVALID_ARGUMENT`
///   for an invalid key, 500 / `INTERNAL` when Redis failed, 503 /
///   `UNAVAILABLE` when the client was shut down).
/// - **Holding.** The permit is renewed by the client's watchdog while the
///   request runs; a replica that crashes stops renewing, and its permits
///   come back within one watchdog lease. It goes back when the inner
///   service has produced the response or, with
///   [`hold_until_body_end`](Self::hold_until_body_end), when the response
///   body has ended; and in any case when the handler fails, panics or is
///   cancelled (the client went away). A client that goes away while
///   waiting gives up its turn.
/// - **In the handler.** The HTTP and gRPC flavours put a
///   [`RequestPermit`](crate::RequestPermit) into the request's
///   extensions (axum: `Extension<RequestPermit>`): its name, count,
///   whether it is still held, a lost signal.
///
/// # The limit of each key
///
/// The first time a layer sees a key it creates the key's semaphore with
/// `permits` permits ([`try_set_permits`](lock_core::PermitSemaphore::try_set_permits)):
/// a semaphore that exists already keeps its count, whoever set it. So
/// changing `permits` (a new deployment) changes nothing for keys whose
/// semaphore exists: while replicas of the old and the new configuration
/// run together, the first to create a key's semaphore sets its limit.
/// Change the limit of existing keys yourself, once, by the difference
/// ([`PermitSemaphore::add_permits`](lock_core::PermitSemaphore::add_permits);
/// it refuses to take the available count below zero, so lower a limit
/// while enough of its permits are free), or delete the key's semaphore
/// (its counter key) while it is idle so that requests create it afresh.
///
/// A request that found no permit within its wait bound checks whether its
/// key's semaphore still exists (one `try_set_permits`): when it was
/// missing (deleted, or lost in Redis: a flush, a failover without
/// persistence) it is created with the layer's `permits` and the request
/// tries once more; otherwise it is answered "busy". So a layer that had
/// seen a key before it went missing serves it again after one wait
/// bound. A layer remembers up to 4096 keys as set; beyond that it forgets
/// them all and sets each again at its next request (one call).
///
/// # Keys
///
/// Keys come from the same key functions as the lock layer's (closures
/// and [`MakeLockKey`](crate::MakeLockKey) extractors with their
/// `.prefix(..)`); [`MakeLockKey::lock_mode`](crate::MakeLockKey::lock_mode)
/// is not asked. A key is a semaphore name, checked like a lock name
/// (invalid: 400). Its Redis keys are the client's key prefix + the key
/// (the counter of available permits, a string), `{<prefix><key>}:timeout`
/// (the held permit ids by expiry, a sorted set), lock-core's line of
/// waiters and the channel `redisson_sc:{<prefix><key>}`. A lock and a
/// semaphore of the same name would share the first key: give the keys of
/// a permit layer a prefix of their own (`"limit:"`, `"exports:"`),
/// distinct from those of any [`LockLayer`](crate::LockLayer).
///
/// With axum, add it with `Router::route_layer` (see
/// [`LockLayer`](crate::LockLayer)).
///
/// ```
/// use std::time::Duration;
/// use axum::{body::Body, http::Request, routing::post, Router};
/// use lock_tower::{PathSegment, PermitLayer};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_tower::BoxError> {
/// # let server = lock_tests::RedisServer::start()?;
/// # let client = lock_core::LockClient::builder(server.url()).build()?;
/// // At most 4 reports per tenant at once, on all replicas together.
/// let app = Router::new()
///     .route("/tenants/{id}/report", post(|| async { "report" }))
///     .route_layer(
///         PermitLayer::new(client.clone(), PathSegment::after("tenants").prefix("reports:"), 4)
///             .wait(Duration::from_millis(250)),
///     );
///
/// // The first request of tenant 7 creates its semaphore with 4 permits.
/// let res = app.clone().oneshot(Request::post("/tenants/7/report").body(Body::empty())?).await?;
/// assert_eq!(res.status(), 200);
/// // Someone holds all four ...
/// let all = client.permit_semaphore("reports:7")?.acquire(4).await?;
/// let res = app.clone().oneshot(Request::post("/tenants/7/report").body(Body::empty())?).await?;
/// assert_eq!(res.status(), 503);
/// assert_eq!(res.headers()["retry-after"], "1");
/// // ... tenant 8 has permits of its own.
/// let res = app.clone().oneshot(Request::post("/tenants/8/report").body(Body::empty())?).await?;
/// assert_eq!(res.status(), 200);
/// all.release().await?;
/// let res = app.oneshot(Request::post("/tenants/7/report").body(Body::empty())?).await?;
/// assert_eq!(res.status(), 200);
/// # Ok(())
/// # }
/// ```
pub struct PermitLayer<K, F> {
    shared: Arc<PermitShared<K>>,
    wait: Duration,
    flavour: Arc<F>,
}

impl<K> PermitLayer<K, Generic> {
    /// A layer of the [`Generic`] flavour: for any request type; a request
    /// that gets no permit fails with a boxed
    /// [`LockError`](crate::LockError) (`is_permit_limit()`), for
    /// `HandleErrorLayer`. The inner service does not see the permit
    /// (requests of any type have no extensions to carry it).
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// // At most 2 imports per tenant at once, across every worker.
    /// let layer = lock_tower::PermitLayer::generic(client, |job: &(u32, String)| {
    ///     Some(format!("imports:{}", job.0))
    /// }, 2);
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn generic(client: LockClient, key: K, permits: u64) -> Self {
        Self::with_flavour(client, key, permits, Generic)
    }
}

impl<K, F> PermitLayer<K, F> {
    /// A layer answering in the flavour `flavour` (one of the crate's, or
    /// your own [`PermitFlavour`](crate::PermitFlavour)); each key's
    /// semaphore is created with `permits` permits (see "The limit of each
    /// key" above; 0 answers every keyed request "busy").
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// let layer = lock_tower::PermitLayer::with_flavour(
    ///     client,
    ///     |n: &u64| Some(format!("limit:{n}")),
    ///     3,
    ///     lock_tower::Generic,
    /// );
    /// assert_eq!(layer.permits(), 3);
    /// # }
    /// ```
    pub fn with_flavour(client: LockClient, key: K, permits: u64, flavour: F) -> Self {
        PermitLayer {
            shared: Arc::new(PermitShared {
                client,
                key,
                seed: Arc::new(Seed::new(permits)),
            }),
            wait: DEFAULT_PERMIT_WAIT,
            flavour: Arc::new(flavour),
        }
    }

    /// Waits at most `wait` for a permit, then answers "busy". Zero makes
    /// one attempt only: a request whose limit is full is answered at once.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::PermitLayer<fn(&u8) -> Option<String>, lock_tower::Generic>) {
    /// let layer = layer.wait(std::time::Duration::from_millis(200));
    /// # let _ = layer;
    /// # }
    /// ```
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The permits each key's semaphore is created with.
    ///
    /// ```
    /// # fn demo(client: lock_core::LockClient) {
    /// let layer = lock_tower::PermitLayer::generic(client, |_: &()| Some("limit:all"), 8);
    /// assert_eq!(layer.permits(), 8);
    /// # }
    /// ```
    pub fn permits(&self) -> u64 {
        self.shared.seed.permits
    }

    /// The client the layer takes its permits with.
    ///
    /// ```
    /// # fn demo(layer: lock_tower::PermitLayer<fn(&u8) -> Option<String>, lock_tower::Generic>) {
    /// println!("permits on {}", layer.client().config().url);
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

impl<K, F> Clone for PermitLayer<K, F> {
    fn clone(&self) -> Self {
        PermitLayer {
            shared: self.shared.clone(),
            wait: self.wait,
            flavour: self.flavour.clone(),
        }
    }
}

impl<K, F: fmt::Debug> fmt::Debug for PermitLayer<K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitLayer")
            .field("client", &self.shared.client)
            .field("permits", &self.shared.seed.permits)
            .field("wait", &self.wait)
            .field("flavour", &self.flavour)
            .finish_non_exhaustive()
    }
}

impl<S, K, F> Layer<S> for PermitLayer<K, F> {
    type Service = PermitLimit<S, K, F>;

    fn layer(&self, inner: S) -> Self::Service {
        PermitLimit::new(inner, self.shared.clone(), self.wait, self.flavour.clone())
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
        let layer = PermitLayer::generic(client, |n: &u64| Some(n.to_string()), 2);
        let service = layer.layer(());
        for debug in [format!("{layer:?}"), format!("{service:?}")] {
            assert!(!debug.contains("s3cr3t-pw"), "{debug}");
            assert!(debug.contains("permits: 2"), "{debug}");
        }
    }
}
