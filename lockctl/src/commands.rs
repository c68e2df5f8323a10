//! `hold`, `status`, `unlock --force` and `list`, plus what `run` shares
//! with them: acquiring with a wait bound, JSON output.

use std::io::Write;
use std::time::Duration;

use lock_core::{AcquireOptions, Lock, LockClient, LockGuard, LockStatus};
use serde_json::{json, Value};

use crate::cli::{AcquireArgs, HoldArgs, ListArgs, NameArg, UnlockArgs};
use crate::exit::{chain, CliError, IO, LOST, SIGNAL_BASE, WAIT_TIMEOUT};
use crate::signals::Signals;

/// Writes one JSON line to stdout and flushes it (a reader waiting for the
/// line must not wait for a buffer to fill).
pub(crate) fn emit(value: &Value) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{value}")
        .and_then(|()| out.flush())
        .map_err(|e| CliError::new(IO, format!("cannot write to stdout: {e}")))
}

/// A lock's status as `status` and `list` print it.
pub(crate) fn status_json(status: &LockStatus) -> Value {
    let owners: Vec<Value> = status
        .owners
        .iter()
        .map(|o| json!({ "owner": o.owner, "count": o.count }))
        .collect();
    let ttl_ms = match status.ttl {
        None => Value::Null,
        Some(Duration::MAX) => json!(-1),
        Some(ttl) => json!(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
    };
    json!({
        "name": status.name,
        "locked": status.is_locked(),
        "owners": owners,
        "ttl_ms": ttl_ms,
        "key": status.key,
    })
}

/// Acquires `lock` as `args` say, unless SIGINT/SIGTERM comes first (then
/// the exit code is 128 + the signal's number).
pub(crate) async fn acquire(
    lock: &Lock,
    args: &AcquireArgs,
    signals: &mut Signals,
) -> Result<LockGuard, CliError> {
    let mut options = AcquireOptions::new();
    match args.wait {
        Some(wait) if wait.is_zero() => options = options.no_wait(),
        Some(wait) => options = options.wait(wait),
        None => {}
    }
    if let Some(lease) = args.lease {
        options = options.lease(lease);
    }
    tokio::select! {
        acquired = lock.acquire_with(options) => acquired.map_err(|e| match e {
            e if e.is_wait_timeout() && args.wait.is_some_and(|w| w.is_zero()) => CliError::new(
                WAIT_TIMEOUT,
                format!("lock `{}` is held by another owner", lock.name()),
            ),
            e => CliError::from(e),
        }),
        sig = signals.recv() => Err(CliError::new(
            SIGNAL_BASE + sig as u8,
            format!("interrupted by {} while waiting for lock `{}`", sig.as_str(), lock.name()),
        )),
    }
}

/// `lockctl hold`: acquire, print the holding, wait for `--for` or a
/// signal, release.
pub(crate) async fn hold(client: &LockClient, args: HoldArgs) -> Result<u8, CliError> {
    let lock = client.lock(&args.name)?;
    let mut signals = Signals::install()?;
    let guard = acquire(&lock, &args.acquire, &mut signals).await?;
    let line = json!({
        "name": lock.name(),
        "owner": guard.owner_id(),
        "fencing_token": guard.fencing_token(),
    });
    if let Err(e) = emit(&line) {
        // Nobody can learn that we hold it: give it back.
        let _ = guard.release().await;
        return Err(e);
    }
    let until = async {
        match args.hold_for {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = until => {}
        _ = signals.recv() => {}
        _ = guard.lost() => {
            return Err(CliError::new(LOST, format!("lock `{}` was lost while held", lock.name())));
        }
    }
    match guard.release().await {
        Ok(()) => Ok(0),
        Err(e) if e.is_lost() => Err(CliError::new(
            LOST,
            format!("lock `{}` was lost while held", lock.name()),
        )),
        Err(e) => {
            let message = format!("could not release lock `{}`: {}", lock.name(), chain(&e));
            Err(CliError::new(CliError::from(e).code, message))
        }
    }
}

/// `lockctl status NAME`
pub(crate) async fn status(client: &LockClient, args: NameArg) -> Result<u8, CliError> {
    let status = client.lock(&args.name)?.status().await?;
    emit(&status_json(&status))?;
    Ok(0)
}

/// `lockctl unlock --force NAME`
pub(crate) async fn unlock(client: &LockClient, args: UnlockArgs) -> Result<u8, CliError> {
    debug_assert!(args.force, "clap requires --force");
    let lock = client.lock(&args.name)?;
    let removed = lock.force_unlock().await?;
    emit(&json!({ "name": lock.name(), "removed": removed, "key": lock.key() }))?;
    Ok(0)
}

/// `lockctl list [--match PATTERN]`
pub(crate) async fn list(client: &LockClient, args: ListArgs) -> Result<u8, CliError> {
    for status in client.scan_locks(&args.pattern).await? {
        emit(&status_json(&status))?;
    }
    Ok(0)
}
