//! Every lock a request runs under, as its handler sees them.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use lock_core::{HeldLock, MultiGuard};

/// Every lock a request runs under, behind a
/// [`MultiLockLayer`](crate::MultiLockLayer): one [`HeldLock`] per key
/// (its name, fencing token, validity, lost signal), in the order they
/// were taken (sorted by name; on a Redis Cluster by hash slot first).
///
/// The HTTP and gRPC flavours put it into the request's extensions before
/// the handler is called: take it in axum with `Extension<HeldLocks>` (or
/// `Option<Extension<HeldLocks>>` on routes where the key function may
/// give no key), read it with `req.extensions().get::<HeldLocks>()` on an
/// `http::Request` or a `tonic::Request`. In every flavour, the handler's
/// future also runs inside a lock section of each of them: lock-core's
/// [`HeldLock::current_for`] finds one by its lock.
///
/// A cheap clone (one `Arc`), `Send + Sync + 'static`; it cannot release
/// the locks: the layer does, when the response is produced (or its body
/// has ended, with
/// [`hold_until_body_end`](crate::MultiLockLayer::hold_until_body_end)).
///
/// ```
/// use axum::{body::Body, http::Request, routing::post, Extension, Router};
/// use lock_tower::{HeldLocks, MultiLockLayer};
/// use tower::ServiceExt;
///
/// async fn transfer(Extension(locks): Extension<HeldLocks>) -> String {
///     // send each token with the write to its account
///     let from = locks.fencing_token("account:17").expect("held");
///     let to = locks.fencing_token("account:4").expect("held");
///     format!("{:?} held: {}, tokens {from} and {to}", locks.names(), locks.is_held())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_tower::BoxError> {
/// # let server = lock_tests::RedisServer::start()?;
/// # let client = lock_core::LockClient::builder(server.url()).build()?;
/// let app = Router::new()
///     .route("/transfer", post(transfer))
///     .route_layer(MultiLockLayer::new(client, |_: &Request<Body>| ["account:17", "account:4"]));
///
/// let res = app.oneshot(Request::post("/transfer").body(Body::empty())?).await?;
/// let body = axum::body::to_bytes(res.into_body(), 1024).await?;
/// assert!(body.starts_with(b"[\"account:17\", \"account:4\"] held: true"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct HeldLocks {
    locks: Arc<[HeldLock]>,
}

impl HeldLocks {
    pub(crate) fn new(guard: &MultiGuard) -> Self {
        HeldLocks {
            locks: guard.guards().iter().map(|g| g.held_lock()).collect(),
        }
    }

    /// The lock names (without the client's key prefix), in the order the
    /// locks were taken.
    ///
    /// ```
    /// # fn demo(locks: &lock_tower::HeldLocks) {
    /// for name in locks.names() {
    ///     println!("running under {name}");
    /// }
    /// # }
    /// ```
    pub fn names(&self) -> Vec<&str> {
        self.locks.iter().map(HeldLock::name).collect()
    }

    /// Each lock, in the order they were taken.
    ///
    /// ```
    /// # fn demo(locks: &lock_tower::HeldLocks) {
    /// for held in locks.locks() {
    ///     println!("{} under token {}", held.name(), held.fencing_token());
    /// }
    /// # }
    /// ```
    pub fn locks(&self) -> &[HeldLock] {
        &self.locks
    }

    /// The lock `name`, if the request holds it.
    ///
    /// ```
    /// # fn demo(locks: &lock_tower::HeldLocks) {
    /// if let Some(held) = locks.get("account:7") {
    ///     assert_eq!(held.name(), "account:7");
    /// }
    /// # }
    /// ```
    pub fn get(&self, name: &str) -> Option<&HeldLock> {
        self.locks.iter().find(|h| h.name() == name)
    }

    /// The fencing token of the lock `name`, if the request holds it: send
    /// it with the writes that lock guards, so that the store can refuse a
    /// stale holder's.
    ///
    /// ```
    /// # fn demo(locks: &lock_tower::HeldLocks) {
    /// let token: Option<u64> = locks.fencing_token("account:7");
    /// # let _ = token;
    /// # }
    /// ```
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.get(name).map(HeldLock::fencing_token)
    }

    /// Whether every lock is still held (see [`HeldLock::is_held`]). A
    /// local check, no Redis call. Never true again once false.
    ///
    /// ```
    /// # fn demo(locks: &lock_tower::HeldLocks) {
    /// if !locks.is_held() {
    ///     eprintln!("a lock was lost: stop writing");
    /// }
    /// # }
    /// ```
    pub fn is_held(&self) -> bool {
        self.locks.iter().all(HeldLock::is_held)
    }

    /// `Ok(())` while every lock is held, else [`lock_core::Error::Lost`]
    /// naming one that is not: call it before each step that must run
    /// under all of them.
    ///
    /// ```
    /// # fn demo(locks: &lock_tower::HeldLocks) -> lock_core::Result<()> {
    /// locks.ensure_held()?;
    /// # Ok(()) }
    /// ```
    pub fn ensure_held(&self) -> lock_core::Result<()> {
        self.locks.iter().try_for_each(HeldLock::ensure_held)
    }

    /// Resolves as soon as one of the locks is lost (see
    /// [`HeldLock::lost`]); pending while every lock is held. Cancel-safe.
    ///
    /// ```
    /// # async fn work() {}
    /// # async fn demo(locks: lock_tower::HeldLocks) -> Result<(), &'static str> {
    /// tokio::select! {
    ///     _ = work() => Ok(()),
    ///     _ = locks.lost() => Err("a lock was lost: stopped"),
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) {
        let mut each: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = self
            .locks
            .iter()
            .map(|h| -> Pin<Box<dyn Future<Output = ()> + Send + '_>> { Box::pin(h.lost()) })
            .collect();
        std::future::poll_fn(|cx| {
            if each.iter_mut().any(|f| f.as_mut().poll(cx).is_ready()) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

impl fmt::Debug for HeldLocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldLocks")
            .field("locks", &self.locks)
            .finish()
    }
}
