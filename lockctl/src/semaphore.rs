//! Semaphores: `run --permits N` takes one permit, `semaphore status`,
//! `semaphore set` and `semaphore add` show and set one up. All on
//! lock-core's `PermitSemaphore` (Redisson's `RPermitExpirableSemaphore`);
//! `status`, `set` and `add` work on a plain `RSemaphore` too, which has
//! the same counter and no held permits to list.

use std::time::Duration;

use lock_core::{LockClient, PermitSemaphore, Permits};
use serde_json::{json, Map, Value};

use crate::cli::{
    AcquireArgs, SemaphoreAddArgs, SemaphoreCommand, SemaphoreSetArgs, SemaphoreStatusArgs,
};
use crate::commands::{acquire_options, emit};
use crate::exit::{chain, CliError, DATA, SIGNAL_BASE, WAIT_TIMEOUT};
use crate::signals::Signals;

/// `lockctl semaphore ...`
pub(crate) async fn semaphore(
    client: &LockClient,
    command: SemaphoreCommand,
) -> Result<u8, CliError> {
    match command {
        SemaphoreCommand::Status(args) => status(client, args).await,
        SemaphoreCommand::Set(args) => set(client, args).await,
        SemaphoreCommand::Add(args) => add(client, args).await,
    }
}

/// Creates `semaphore` with `permits` when it does not exist, then takes
/// one permit as `args` say, unless SIGINT/SIGTERM comes first (then the
/// exit code is 128 + the signal's number).
pub(crate) async fn acquire_permit(
    semaphore: &PermitSemaphore,
    permits: u32,
    args: &AcquireArgs,
    signals: &mut Signals,
) -> Result<Permits, CliError> {
    let name = semaphore.name();
    semaphore
        .try_set_permits(u64::from(permits))
        .await
        .map_err(|e| semaphore_error(e, name))?;
    tokio::select! {
        acquired = semaphore.acquire_with(1, acquire_options(args)) => acquired.map_err(|e| match e {
            lock_core::Error::WaitTimeout { .. } if args.wait.is_some_and(|w| w.is_zero()) => {
                CliError::new(WAIT_TIMEOUT, format!("no permit of semaphore `{name}` is free"))
            }
            lock_core::Error::WaitTimeout { waited, .. } => {
                // the bound asked for, as `run` without --permits says it
                let bound = args.wait.unwrap_or(waited);
                CliError::new(
                    WAIT_TIMEOUT,
                    format!("timed out after {bound:?} waiting for a permit of semaphore `{name}`"),
                )
            }
            e => semaphore_error(e, name),
        }),
        sig = signals.recv() => Err(CliError::new(
            SIGNAL_BASE + sig as u8,
            format!(
                "interrupted by {} while waiting for a permit of semaphore `{name}`",
                sig.as_str()
            ),
        )),
    }
}

/// A lock-core error about the semaphore `name`: a key of another type
/// (a lock, a list), or a counter that is not a number, is exit 65 like
/// `status` of a key that is not a lock; the rest as any lock-core error.
fn semaphore_error(err: lock_core::Error, name: &str) -> CliError {
    if err.is_redis() {
        let text = chain(&err);
        let why = if text.contains("WRONGTYPE") {
            Some("its key (or its `:timeout` set) holds another type")
        } else if text.contains("is not an integer") {
            Some("its counter is not an integer")
        } else {
            None
        };
        if let Some(why) = why {
            return CliError::new(DATA, format!("key `{name}` is not a semaphore: {why}"));
        }
    }
    CliError::from(err)
}

/// `lockctl semaphore status NAME`:
/// `{"name","available","held_total","held":[{"id","ttl_ms"}],"key"}`;
/// `ttl_ms` is `null` for a permit without a lease (a Redisson client's).
async fn status(client: &LockClient, args: SemaphoreStatusArgs) -> Result<u8, CliError> {
    let semaphore = client.permit_semaphore(&args.name)?;
    let status = semaphore
        .status(args.limit)
        .await
        .map_err(|e| semaphore_error(e, &args.name))?;
    let held: Vec<Value> = status
        .held
        .iter()
        .map(|p| json!({ "id": p.id, "ttl_ms": p.expires_in.map(millis) }))
        .collect();
    let mut line = Map::new();
    line.insert("name".into(), json!(semaphore.name()));
    line.insert("available".into(), json!(status.available));
    line.insert("held_total".into(), json!(status.held_total));
    line.insert("held".into(), Value::Array(held));
    line.insert("key".into(), json!(semaphore.key()));
    emit(&Value::Object(line))?;
    Ok(0)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `lockctl semaphore set NAME N`: `{"name","set","available","key"}`;
/// `set` is false when the semaphore existed (its count is unchanged).
async fn set(client: &LockClient, args: SemaphoreSetArgs) -> Result<u8, CliError> {
    let semaphore = client.permit_semaphore(&args.name)?;
    let set = semaphore
        .try_set_permits(args.permits)
        .await
        .map_err(|e| semaphore_error(e, &args.name))?;
    let available = semaphore
        .available()
        .await
        .map_err(|e| semaphore_error(e, &args.name))?;
    let mut line = Map::new();
    line.insert("name".into(), json!(semaphore.name()));
    line.insert("set".into(), json!(set));
    line.insert("available".into(), json!(available));
    line.insert("key".into(), json!(semaphore.key()));
    emit(&Value::Object(line))?;
    Ok(0)
}

/// `lockctl semaphore add NAME DELTA`: `{"name","available","key"}` with
/// the permits available after.
async fn add(client: &LockClient, args: SemaphoreAddArgs) -> Result<u8, CliError> {
    let semaphore = client.permit_semaphore(&args.name)?;
    let available = semaphore
        .add_permits(args.delta)
        .await
        .map_err(|e| semaphore_error(e, &args.name))?;
    let mut line = Map::new();
    line.insert("name".into(), json!(semaphore.name()));
    line.insert("available".into(), json!(available));
    line.insert("key".into(), json!(semaphore.key()));
    emit(&Value::Object(line))?;
    Ok(0)
}
