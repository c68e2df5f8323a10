//! What `#[distributed_lock(key = "...", permits = N)]` generates calls to
//! (re-exported by the hidden `__private` module; not a public API).
//!
//! The generated body makes a `PermitHandle` (the expirable semaphore
//! `key` and its N permits) and calls one of `permitted`,
//! `permitted_cancel_on_lost`, `permitted_or_skip` or
//! `permitted_or_skip_result` — the counterparts of the lock runners, with
//! the same error handling. Each creates the semaphore with N permits when
//! it does not exist (an existing one keeps its count), takes one permit
//! (renewed by the watchdog, or for a fixed lease), runs the body and gives
//! the permit back. A body that panics, or a future dropped mid-body, drops
//! the permit, which goes back in the background. The body runs in no lock
//! section: permits are not re-entrant, and `HeldLock::current()` in the
//! body sees an enclosing lock's hold, if any.

use std::borrow::Borrow;
use std::future::Future;

use crate::__private::Skipped;
use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::options::AcquireOptions;
use crate::semaphore::{PermitSemaphore, Permits};

/// The semaphore a `permits = N` fn takes a permit of, and its N.
#[derive(Debug)]
pub struct PermitHandle {
    semaphore: PermitSemaphore,
    permits: u64,
}

impl PermitHandle {
    /// Creates the semaphore with its permits when it has none yet, then
    /// takes one permit as `options` say.
    async fn acquire(&self, options: AcquireOptions) -> Result<Permits> {
        self.semaphore.try_set_permits(self.permits).await?;
        self.semaphore.acquire_with(1, options).await
    }

    fn name(&self) -> &str {
        self.semaphore.name()
    }

    fn key(&self) -> &str {
        self.semaphore.key()
    }
}

/// The expirable semaphore `name` of `permits` permits on the default client.
pub fn default_permits(name: &str, permits: u64) -> Result<PermitHandle> {
    handle(crate::default_client::default_client()?, name, permits)
}

/// The expirable semaphore `name` of `permits` permits on `client` (a
/// `LockClient`, a reference to one, an `Arc<LockClient>`, ...).
pub fn client_permits<C: Borrow<LockClient> + ?Sized>(
    client: &C,
    name: &str,
    permits: u64,
) -> Result<PermitHandle> {
    handle(client.borrow(), name, permits)
}

fn handle(client: &LockClient, name: &str, permits: u64) -> Result<PermitHandle> {
    Ok(PermitHandle {
        semaphore: client.permit_semaphore(name)?,
        permits,
    })
}

/// `Result` returns: failures to take a permit come back as
/// `Err(E::from(err))`, so does a failed release after a successful body
/// (the body's own error wins over a release failure, which is logged).
pub async fn permitted<T, E, F>(
    handle: Result<PermitHandle>,
    options: AcquireOptions,
    body: F,
) -> std::result::Result<T, E>
where
    E: From<Error>,
    F: Future<Output = std::result::Result<T, E>>,
{
    let handle = handle.map_err(E::from)?;
    let permit = handle.acquire(options).await.map_err(E::from)?;
    let out = body.await;
    finish(&handle, permit, out).await
}

/// `Result` returns with `cancel_on_lost`: like [`permitted`], but when
/// the permit is lost before the body completes, the body is dropped at its
/// current await point and the call returns `Err(E::from(Error::Lost))`.
pub async fn permitted_cancel_on_lost<T, E, F>(
    handle: Result<PermitHandle>,
    options: AcquireOptions,
    body: F,
) -> std::result::Result<T, E>
where
    E: From<Error>,
    F: Future<Output = std::result::Result<T, E>>,
{
    let handle = handle.map_err(E::from)?;
    let permit = handle.acquire(options).await.map_err(E::from)?;
    let out = tokio::select! {
        biased;
        out = body => Some(out),
        _ = permit.lost() => None,
    };
    match out {
        Some(out) => finish(&handle, permit, out).await,
        None => {
            tracing::warn!(
                semaphore = %handle.name(),
                key = %handle.key(),
                "permit lost while the call ran; the call was cancelled"
            );
            // Gives back whatever is left (`Lost` is known).
            let _ = permit.release().await;
            Err(E::from(Error::Lost {
                name: handle.name().to_string(),
            }))
        }
    }
}

/// `()` / `Option<T>` returns with `skip_if_locked`: when no permit is
/// taken the body does not run and the call returns `()` / `None`. Other
/// failures (Redis down, no default client) are logged at `warn`, as are
/// release failures.
pub async fn permitted_or_skip<T, F>(
    handle: Result<PermitHandle>,
    options: AcquireOptions,
    body: F,
) -> T
where
    T: Skipped,
    F: Future<Output = T>,
{
    let handle = match handle {
        Ok(handle) => handle,
        Err(err) => {
            log_skipped(&err, None);
            return T::skipped();
        }
    };
    let permit = match handle.acquire(options).await {
        Ok(permit) => permit,
        Err(err) => {
            log_skipped(&err, Some(&handle));
            return T::skipped();
        }
    };
    let out = body.await;
    if let Err(err) = permit.release().await {
        tracing::warn!(
            semaphore = %handle.name(),
            key = %handle.key(),
            error = %err,
            "permit release after the call failed"
        );
    }
    out
}

/// `Result<(), E>` / `Result<Option<T>, E>` returns with `skip_if_locked`:
/// no free permit returns `Ok(())` / `Ok(None)` without running the body;
/// other failures come back as `Err(E::from(err))`.
pub async fn permitted_or_skip_result<T, E, F>(
    handle: Result<PermitHandle>,
    options: AcquireOptions,
    body: F,
) -> std::result::Result<T, E>
where
    T: Skipped,
    E: From<Error>,
    F: Future<Output = std::result::Result<T, E>>,
{
    let handle = handle.map_err(E::from)?;
    let permit = match handle.acquire(options).await {
        Ok(permit) => permit,
        Err(err) if err.is_wait_timeout() => {
            log_skipped(&err, Some(&handle));
            return Ok(T::skipped());
        }
        Err(err) => return Err(E::from(err)),
    };
    let out = body.await;
    finish(&handle, permit, out).await
}

/// Gives the permit back after the body's result `out`.
async fn finish<T, E>(
    handle: &PermitHandle,
    permit: Permits,
    out: std::result::Result<T, E>,
) -> std::result::Result<T, E>
where
    E: From<Error>,
{
    match (out, permit.release().await) {
        (out, Ok(())) => out,
        (Ok(_), Err(err)) => Err(E::from(err)),
        (Err(body_err), Err(err)) => {
            tracing::warn!(
                semaphore = %handle.name(),
                key = %handle.key(),
                error = %err,
                "permit release after the call failed"
            );
            Err(body_err)
        }
    }
}

fn log_skipped(err: &Error, handle: Option<&PermitHandle>) {
    let name = handle.map(|h| tracing::field::display(h.name()));
    let key = handle.map(|h| tracing::field::display(h.key()));
    if err.is_wait_timeout() {
        tracing::debug!(semaphore = name, key, error = %err, "no permit free; call skipped");
    } else {
        tracing::warn!(semaphore = name, key, error = %err, "permit not acquired; call skipped");
    }
}
