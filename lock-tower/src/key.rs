//! Deriving a lock key from a request.

use lock_core::LockMode;

/// Maps a request to the name of the lock it must hold, or to `None` when
/// it needs no lock (it then passes straight through, with no Redis call).
///
/// Requests that map to the same key run one at a time across every
/// process that uses the same Redis (and the same key prefix); requests
/// with different keys run concurrently. A [`PermitLayer`](crate::PermitLayer)
/// takes the same key functions: there the key names the request's
/// concurrency limit (a semaphore), shared by at most that many requests.
///
/// Closures `Fn(&Req) -> Option<T>` with `T: Into<String>` implement it, so
/// a key function is usually just a closure; ready-made extractors for HTTP
/// requests ([`HeaderKey`](crate::HeaderKey), [`PathSegment`](crate::PathSegment),
/// [`QueryParam`](crate::QueryParam), [`MethodPath`](crate::MethodPath),
/// [`MetadataKey`](crate::MetadataKey)) live behind the `http` feature.
///
/// ```
/// use lock_tower::MakeLockKey;
///
/// struct Job { tenant: u32, kind: &'static str }
///
/// // a closure ...
/// let by_tenant = |job: &Job| Some(format!("tenant:{}", job.tenant));
/// assert_eq!(by_tenant.make_lock_key(&Job { tenant: 7, kind: "x" }).as_deref(), Some("tenant:7"));
///
/// // ... or a type of your own
/// struct OnlyImports;
/// impl MakeLockKey<Job> for OnlyImports {
///     fn make_lock_key(&self, job: &Job) -> Option<String> {
///         (job.kind == "import").then(|| format!("import:{}", job.tenant))
///     }
/// }
/// assert_eq!(OnlyImports.make_lock_key(&Job { tenant: 1, kind: "export" }), None);
/// ```
pub trait MakeLockKey<Req> {
    /// The lock name for `req`, or `None` for "no lock".
    ///
    /// ```
    /// use lock_tower::MakeLockKey;
    /// let key = |n: &u32| (*n > 10).then(|| format!("big:{n}"));
    /// assert_eq!(key.make_lock_key(&3), None);
    /// ```
    fn make_lock_key(&self, req: &Req) -> Option<String>;

    /// Which lock `req` takes under its key: [`LockMode::Exclusive`] (the
    /// default) for the key's plain lock, [`LockMode::Read`] or
    /// [`LockMode::Write`] for a side of the read-write lock of that name.
    /// Asked only for requests with a key. [`ReadWrite`](crate::ReadWrite)
    /// answers with its classifier; a key type of your own can override it
    /// to classify requests itself.
    ///
    /// ```
    /// use lock_core::LockMode;
    /// use lock_tower::MakeLockKey;
    ///
    /// let key = |n: &u32| Some(format!("n:{n}"));
    /// assert_eq!(key.lock_mode(&3), LockMode::Exclusive);
    ///
    /// /// Keys by resource; lists read, everything else writes.
    /// struct Resources;
    /// impl MakeLockKey<(&'static str, u32)> for Resources {
    ///     fn make_lock_key(&self, req: &(&'static str, u32)) -> Option<String> {
    ///         Some(format!("resource:{}", req.1))
    ///     }
    ///     fn lock_mode(&self, req: &(&'static str, u32)) -> LockMode {
    ///         if req.0 == "list" { LockMode::Read } else { LockMode::Write }
    ///     }
    /// }
    /// assert_eq!(Resources.lock_mode(&("list", 1)), LockMode::Read);
    /// ```
    fn lock_mode(&self, req: &Req) -> LockMode {
        let _ = req;
        LockMode::Exclusive
    }
}

impl<F, Req, T> MakeLockKey<Req> for F
where
    F: Fn(&Req) -> Option<T>,
    T: Into<String>,
{
    fn make_lock_key(&self, req: &Req) -> Option<String> {
        self(req).map(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closures_returning_str_or_string_are_key_functions() {
        let fixed = |_: &()| Some("one");
        let owned = |n: &u8| Some(format!("n:{n}"));
        let none = |_: &()| None::<String>;
        assert_eq!(fixed.make_lock_key(&()).as_deref(), Some("one"));
        assert_eq!(owned.make_lock_key(&4).as_deref(), Some("n:4"));
        assert_eq!(none.make_lock_key(&()), None);
    }
}
