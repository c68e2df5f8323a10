//! Read-write layers: which side of a read-write lock a request takes.
//!
//! [`ReadWrite`] pairs a key function with a classifier
//! ([`ClassifyRequest`]); as the layer's key function it maps a request to
//! its key *and* to [`LockMode::Read`] or [`LockMode::Write`], so that
//! requests on one key share the lock or have it alone.

use std::fmt;
use std::sync::Arc;

use lock_core::LockMode;

use crate::key::MakeLockKey;

/// Decides which side of a read-write lock a request takes:
/// [`LockMode::Read`] (shared with the other readers of its key) or
/// [`LockMode::Write`] (alone). Used by the layers of
/// [`LockLayer::read_write`](crate::LockLayer::read_write) and its gRPC and
/// generic siblings; change it with
/// [`LockLayer::classify`](crate::LockLayer::classify).
///
/// Closures `Fn(&Req) -> LockMode` implement it; so do [`AlwaysWrite`],
/// and with the `http` feature [`SafeMethodsRead`] and [`ReadPaths`].
/// Any other mode ([`LockMode::Exclusive`]) takes the plain lock of the
/// key, as a layer without a classifier does.
///
/// ```
/// use lock_core::LockMode;
/// use lock_tower::ClassifyRequest;
///
/// struct Job { tenant: u32, dry_run: bool }
///
/// // Dry runs only read the tenant's data: they may run together.
/// let by_kind = |job: &Job| if job.dry_run { LockMode::Read } else { LockMode::Write };
/// assert_eq!(by_kind.lock_mode(&Job { tenant: 7, dry_run: true }), LockMode::Read);
/// ```
pub trait ClassifyRequest<Req> {
    /// The side `req` takes.
    ///
    /// ```
    /// use lock_core::LockMode;
    /// use lock_tower::ClassifyRequest;
    /// let odd_reads = |n: &u32| if n % 2 == 1 { LockMode::Read } else { LockMode::Write };
    /// assert_eq!(odd_reads.lock_mode(&4), LockMode::Write);
    /// ```
    fn lock_mode(&self, req: &Req) -> LockMode;
}

impl<F, Req> ClassifyRequest<Req> for F
where
    F: Fn(&Req) -> LockMode,
{
    fn lock_mode(&self, req: &Req) -> LockMode {
        self(req)
    }
}

/// Every request takes the write side: the default classifier of
/// [`LockLayer::grpc_read_write`](crate::LockLayer::grpc_read_write) and
/// [`LockLayer::generic_read_write`](crate::LockLayer::generic_read_write),
/// whose requests say nothing about reading or writing. Requests then
/// exclude each other as with the plain lock, but on the read-write lock's
/// keys, so that readers classified as such (here or in another service:
/// a Java `RReadWriteLock`, the `mode = "read"` attribute) share it.
///
/// ```
/// use lock_core::LockMode;
/// use lock_tower::{AlwaysWrite, ClassifyRequest};
/// assert_eq!(AlwaysWrite.lock_mode(&"anything"), LockMode::Write);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct AlwaysWrite;

impl<Req> ClassifyRequest<Req> for AlwaysWrite {
    fn lock_mode(&self, _req: &Req) -> LockMode {
        LockMode::Write
    }
}

/// A key function with a classifier: the key comes from `K`, the side of
/// the read-write lock from `C`. The key function of the read-write
/// layers ([`LockLayer::read_write`](crate::LockLayer::read_write),
/// [`grpc_read_write`](crate::LockLayer::grpc_read_write),
/// [`generic_read_write`](crate::LockLayer::generic_read_write)); it can
/// also be given to any layer constructor directly.
///
/// The key must not tell readers and writers apart (a key with the method
/// in it, such as [`MethodPath`](crate::MethodPath)'s, would put a `GET`
/// and a `POST` of one resource on two locks that never meet).
///
/// ```
/// use lock_core::LockMode;
/// use lock_tower::{MakeLockKey, ReadWrite};
///
/// let key = ReadWrite::new(
///     |n: &u32| Some(format!("n:{}", n / 10)),
///     |n: &u32| if n % 2 == 0 { LockMode::Read } else { LockMode::Write },
/// );
/// assert_eq!(key.make_lock_key(&42).as_deref(), Some("n:4"));
/// assert_eq!(key.lock_mode(&42), LockMode::Read);
/// assert_eq!(key.lock_mode(&43), LockMode::Write);
/// ```
pub struct ReadWrite<K, C> {
    key: Arc<K>,
    classifier: C,
}

impl<K, C> ReadWrite<K, C> {
    /// Keys from `key`, sides from `classifier`.
    ///
    /// ```
    /// let key = lock_tower::ReadWrite::new(|n: &u8| Some(n.to_string()), lock_tower::AlwaysWrite);
    /// # let _ = key;
    /// ```
    pub fn new(key: K, classifier: C) -> Self {
        ReadWrite {
            key: Arc::new(key),
            classifier,
        }
    }

    /// The key function.
    ///
    /// ```
    /// use lock_tower::MakeLockKey;
    /// let key = lock_tower::ReadWrite::new(|n: &u8| Some(n.to_string()), lock_tower::AlwaysWrite);
    /// assert_eq!(key.key().make_lock_key(&3).as_deref(), Some("3"));
    /// ```
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The classifier.
    ///
    /// ```
    /// use lock_tower::ClassifyRequest;
    /// let key = lock_tower::ReadWrite::new(|n: &u8| Some(n.to_string()), lock_tower::AlwaysWrite);
    /// assert_eq!(key.classifier().lock_mode(&3), lock_core::LockMode::Write);
    /// ```
    pub fn classifier(&self) -> &C {
        &self.classifier
    }

    /// The same key function with another classifier.
    pub(crate) fn with_classifier<C2>(&self, classifier: C2) -> ReadWrite<K, C2> {
        ReadWrite {
            key: self.key.clone(),
            classifier,
        }
    }
}

impl<K, C: Clone> Clone for ReadWrite<K, C> {
    fn clone(&self) -> Self {
        self.with_classifier(self.classifier.clone())
    }
}

impl<K, C: fmt::Debug> fmt::Debug for ReadWrite<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWrite")
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl<K, C, Req> MakeLockKey<Req> for ReadWrite<K, C>
where
    K: MakeLockKey<Req>,
    C: ClassifyRequest<Req>,
{
    fn make_lock_key(&self, req: &Req) -> Option<String> {
        self.key.make_lock_key(req)
    }

    fn lock_mode(&self, req: &Req) -> LockMode {
        self.classifier.lock_mode(req)
    }
}

#[cfg(feature = "http")]
pub use self::http_classifiers::{ReadPaths, SafeMethodsRead};

#[cfg(feature = "http")]
mod http_classifiers {
    use std::collections::HashSet;
    use std::sync::Arc;

    use http::{Method, Request};
    use lock_core::LockMode;

    use super::ClassifyRequest;

    /// HTTP's safe methods read, every other method writes: `GET`, `HEAD`
    /// and `OPTIONS` take the read side, `POST`, `PUT`, `PATCH`, `DELETE`
    /// (and any other) the write side. The default classifier of
    /// [`LockLayer::read_write`](crate::LockLayer::read_write).
    ///
    /// gRPC calls are all `POST`: behind this classifier they would all
    /// write (the gRPC layer's default, [`AlwaysWrite`](crate::AlwaysWrite),
    /// says so plainly; classify gRPC calls by method path with
    /// [`ReadPaths`]).
    ///
    /// ```
    /// use lock_core::LockMode;
    /// use lock_tower::{ClassifyRequest, SafeMethodsRead};
    ///
    /// let get = http::Request::get("/prices/7").body(()).unwrap();
    /// let put = http::Request::put("/prices/7").body(()).unwrap();
    /// assert_eq!(SafeMethodsRead.lock_mode(&get), LockMode::Read);
    /// assert_eq!(SafeMethodsRead.lock_mode(&put), LockMode::Write);
    /// ```
    #[derive(Clone, Copy, Debug, Default)]
    pub struct SafeMethodsRead;

    impl<B> ClassifyRequest<Request<B>> for SafeMethodsRead {
        fn lock_mode(&self, req: &Request<B>) -> LockMode {
            let method = req.method();
            if method == Method::GET || method == Method::HEAD || method == Method::OPTIONS {
                LockMode::Read
            } else {
                LockMode::Write
            }
        }
    }

    /// Requests whose URI path is one of a set read; every other request
    /// writes. Made for gRPC, whose calls are all `POST` to
    /// `/<package>.<Service>/<Method>`: list the methods that only read.
    /// The path is compared exactly, as it arrives (no decoding, no
    /// trailing-slash folding).
    ///
    /// ```
    /// use lock_core::LockMode;
    /// use lock_tower::{ClassifyRequest, ReadPaths};
    ///
    /// let reads = ReadPaths::new(["/bank.Accounts/Balance", "/bank.Accounts/History"]);
    /// let balance = http::Request::post("/bank.Accounts/Balance").body(()).unwrap();
    /// let withdraw = http::Request::post("/bank.Accounts/Withdraw").body(()).unwrap();
    /// assert_eq!(reads.lock_mode(&balance), LockMode::Read);
    /// assert_eq!(reads.lock_mode(&withdraw), LockMode::Write);
    /// ```
    #[derive(Clone, Debug)]
    pub struct ReadPaths {
        paths: Arc<HashSet<String>>,
    }

    impl ReadPaths {
        /// Reads for the requests to `paths`, writes for the others.
        ///
        /// ```
        /// let reads = lock_tower::ReadPaths::new(["/bank.Accounts/Balance"]);
        /// # let _ = reads;
        /// ```
        pub fn new<I>(paths: I) -> Self
        where
            I: IntoIterator,
            I::Item: Into<String>,
        {
            ReadPaths {
                paths: Arc::new(paths.into_iter().map(Into::into).collect()),
            }
        }
    }

    impl<B> ClassifyRequest<Request<B>> for ReadPaths {
        fn lock_mode(&self, req: &Request<B>) -> LockMode {
            if self.paths.contains(req.uri().path()) {
                LockMode::Read
            } else {
                LockMode::Write
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_keys_from_its_key_function_and_sides_from_its_classifier() {
        let key = ReadWrite::new(|n: &u32| (*n > 0).then(|| format!("n:{n}")), AlwaysWrite);
        assert_eq!(key.make_lock_key(&0), None);
        assert_eq!(key.lock_mode(&1), LockMode::Write);
        let reads = key.with_classifier(|_: &u32| LockMode::Read);
        assert_eq!(reads.make_lock_key(&1).as_deref(), Some("n:1"));
        assert_eq!(reads.lock_mode(&1), LockMode::Read);
        // a key function alone takes the plain lock
        let plain = |n: &u32| Some(n.to_string());
        assert_eq!(plain.lock_mode(&1), LockMode::Exclusive);
    }

    #[cfg(feature = "http")]
    #[test]
    fn safe_methods_read() {
        for (method, mode) in [
            (http::Method::GET, LockMode::Read),
            (http::Method::HEAD, LockMode::Read),
            (http::Method::OPTIONS, LockMode::Read),
            (http::Method::POST, LockMode::Write),
            (http::Method::PUT, LockMode::Write),
            (http::Method::PATCH, LockMode::Write),
            (http::Method::DELETE, LockMode::Write),
            (http::Method::TRACE, LockMode::Write),
        ] {
            let mut req = http::Request::new(());
            *req.method_mut() = method.clone();
            assert_eq!(SafeMethodsRead.lock_mode(&req), mode, "{method}");
        }
    }
}
