//! The layer: configuration shared by every service it makes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, LockClient, MAX_LEASE};
use tower_layer::Layer;

use super::service::Lock;
use crate::flavour::Generic;

/// How long a request waits for its lock by default before it is answered
/// "busy": 5 seconds. Long enough to ride out a burst of requests on one
/// key, short enough to answer well before common client and proxy
/// time-outs (30–60 s). Change it with [`LockLayer::wait`].
///
/// ```
/// assert_eq!(lock_tower::DEFAULT_WAIT, std::time::Duration::from_secs(5));
/// ```
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// What every service made by one layer shares: the client (whose local
/// per-key queues and pub/sub connection are shared by all of them) and
/// the key function. axum clones a layer for every route; they all point
/// at this one value.
pub(crate) struct Shared<K> {
    pub(crate) client: LockClient,
    pub(crate) key: K,
}

/// The wait bound and the lease.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    wait: Duration,
    lease: Option<Duration>,
}

impl Settings {
    pub(crate) fn acquire_options(self) -> AcquireOptions {
        let options = if self.wait.is_zero() {
            AcquireOptions::new().no_wait()
        } else {
            AcquireOptions::new().wait(self.wait)
        };
        match self.lease {
            Some(lease) => options.lease(lease.clamp(Duration::from_millis(1), MAX_LEASE)),
            None => options,
        }
    }
}

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
    /// [`MAX_LEASE`]): the lock expires then even if the request still
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

    #[test]
    fn a_zero_wait_is_one_attempt_and_leases_are_clamped() {
        let s = Settings {
            wait: Duration::ZERO,
            lease: Some(Duration::ZERO),
        };
        assert_eq!(
            s.acquire_options(),
            AcquireOptions::new()
                .no_wait()
                .lease(Duration::from_millis(1))
        );
        let s = Settings {
            wait: Duration::from_secs(1),
            lease: Some(Duration::MAX),
        };
        assert_eq!(
            s.acquire_options(),
            AcquireOptions::new()
                .wait(Duration::from_secs(1))
                .lease(MAX_LEASE)
        );
    }

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
