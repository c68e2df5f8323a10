//! What `#[distributed_lock(key = ["...", "..."])]` generates calls to
//! (re-exported by the hidden `__private` module; not a public API).
//!
//! The generated body makes a [`MultiLock`] of the keys and calls one of
//! `multi_locked`, `multi_locked_cancel_on_lost`, `multi_locked_or_skip` or
//! `multi_locked_or_skip_result` — the counterparts of the lock runners,
//! with the same error handling. Each takes every lock (without deadlock,
//! see [`MultiLock`]), runs the body and releases them. A body that
//! panics, or a future dropped mid-body, drops the guard, which releases
//! every lock in the background. The body runs in no lock section: a
//! multi-lock always takes new holds (it never re-enters), and
//! `HeldLock::current()` in the body sees an enclosing lock's hold, if any.

use std::borrow::Borrow;
use std::future::Future;

use crate::__private::Skipped;
use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::multi_lock::{MultiGuard, MultiLock};
use crate::options::AcquireOptions;

/// A key of the generated code as a `&str` (a literal or a `&String`
/// made by `format!`), so that the keys fit in one array.
pub fn key_str<S: AsRef<str> + ?Sized>(key: &S) -> &str {
    key.as_ref()
}

/// The multi-lock of `names` on the default client.
pub fn default_multi_lock(names: &[&str]) -> Result<MultiLock> {
    crate::default_client::default_client()?.multi_lock(names)
}

/// The multi-lock of `names` on `client` (a `LockClient`, a reference to
/// one, an `Arc<LockClient>`, ...).
pub fn client_multi_lock<C: Borrow<LockClient> + ?Sized>(
    client: &C,
    names: &[&str],
) -> Result<MultiLock> {
    client.borrow().multi_lock(names)
}

/// The names for logs: `a, b`.
fn names_of(multi: &MultiLock) -> String {
    multi.names().join(", ")
}

/// `Result` returns: failures to take the locks come back as
/// `Err(E::from(err))`, so does a failed release after a successful body
/// (the body's own error wins over a release failure, which is logged).
pub async fn multi_locked<T, E, F>(
    multi: Result<MultiLock>,
    options: AcquireOptions,
    body: F,
) -> std::result::Result<T, E>
where
    E: From<Error>,
    F: Future<Output = std::result::Result<T, E>>,
{
    let multi = multi.map_err(E::from)?;
    let guard = multi.acquire_with(options).await.map_err(E::from)?;
    let out = body.await;
    finish(&multi, guard, out).await
}

/// `Result` returns with `cancel_on_lost`: like [`multi_locked`], but when
/// one of the locks is lost before the body completes, the body is dropped
/// at its current await point and the call returns
/// `Err(E::from(Error::Lost))`.
pub async fn multi_locked_cancel_on_lost<T, E, F>(
    multi: Result<MultiLock>,
    options: AcquireOptions,
    body: F,
) -> std::result::Result<T, E>
where
    E: From<Error>,
    F: Future<Output = std::result::Result<T, E>>,
{
    let multi = multi.map_err(E::from)?;
    let guard = multi.acquire_with(options).await.map_err(E::from)?;
    let out = tokio::select! {
        biased;
        out = body => Some(out),
        _ = guard.lost() => None,
    };
    match out {
        Some(out) => finish(&multi, guard, out).await,
        None => {
            let lost = match guard.ensure_held() {
                Err(Error::Lost { name }) => name,
                _ => names_of(&multi),
            };
            tracing::warn!(
                locks = %names_of(&multi),
                lost = %lost,
                "a lock of a multi-lock was lost while the locked call ran; the call was cancelled"
            );
            // Gives back whatever is left (`Lost` is known).
            let _ = guard.release().await;
            Err(E::from(Error::Lost { name: lost }))
        }
    }
}

/// `()` / `Option<T>` returns with `skip_if_locked`: when the locks are
/// not taken the body does not run and the call returns `()` / `None`.
/// Other failures (Redis down, no default client) are logged at `warn`,
/// as are release failures.
pub async fn multi_locked_or_skip<T, F>(
    multi: Result<MultiLock>,
    options: AcquireOptions,
    body: F,
) -> T
where
    T: Skipped,
    F: Future<Output = T>,
{
    let multi = match multi {
        Ok(multi) => multi,
        Err(err) => {
            log_skipped(&err, None);
            return T::skipped();
        }
    };
    let guard = match multi.acquire_with(options).await {
        Ok(guard) => guard,
        Err(err) => {
            log_skipped(&err, Some(&multi));
            return T::skipped();
        }
    };
    let out = body.await;
    if let Err(err) = guard.release().await {
        tracing::warn!(
            locks = %names_of(&multi),
            error = %err,
            "multi-lock release after the locked call failed"
        );
    }
    out
}

/// `Result<(), E>` / `Result<Option<T>, E>` returns with `skip_if_locked`:
/// a lock held elsewhere returns `Ok(())` / `Ok(None)` without running the
/// body; other failures come back as `Err(E::from(err))`.
pub async fn multi_locked_or_skip_result<T, E, F>(
    multi: Result<MultiLock>,
    options: AcquireOptions,
    body: F,
) -> std::result::Result<T, E>
where
    T: Skipped,
    E: From<Error>,
    F: Future<Output = std::result::Result<T, E>>,
{
    let multi = multi.map_err(E::from)?;
    let guard = match multi.acquire_with(options).await {
        Ok(guard) => guard,
        Err(err) if err.is_wait_timeout() => {
            log_skipped(&err, Some(&multi));
            return Ok(T::skipped());
        }
        Err(err) => return Err(E::from(err)),
    };
    let out = body.await;
    finish(&multi, guard, out).await
}

/// Releases every lock after the body's result `out`.
async fn finish<T, E>(
    multi: &MultiLock,
    guard: MultiGuard,
    out: std::result::Result<T, E>,
) -> std::result::Result<T, E>
where
    E: From<Error>,
{
    match (out, guard.release().await) {
        (out, Ok(())) => out,
        (Ok(_), Err(err)) => Err(E::from(err)),
        (Err(body_err), Err(err)) => {
            tracing::warn!(
                locks = %names_of(multi),
                error = %err,
                "multi-lock release after the locked call failed"
            );
            Err(body_err)
        }
    }
}

fn log_skipped(err: &Error, multi: Option<&MultiLock>) {
    let locks = multi.map(|m| tracing::field::display(names_of(m)));
    if err.is_wait_timeout() {
        tracing::debug!(locks, error = %err, "a lock of the multi-lock is held elsewhere; call skipped");
    } else {
        tracing::warn!(locks, error = %err, "multi-lock not acquired; call skipped");
    }
}
