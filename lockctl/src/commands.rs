//! `hold`, `status`, `unlock --force` and `list`, plus what `run` shares
//! with them: acquiring with a wait bound, JSON output.

use std::io::Write;
use std::time::Duration;

use std::time::UNIX_EPOCH;

use lock_core::{
    AcquireOptions, FairWaiter, Lock, LockClient, LockGuard, LockMode, LockOwner, LockStatus,
};
use serde_json::{json, Map, Value};

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

/// A lock's status as `status` and `list` print it:
/// `{"name","locked","owners":[{"owner","count"}],"ttl_ms","key"}` for a
/// plain lock (or a free one); a read-write lock's line adds its `mode`
/// (`read` or `write`) after `locked`, each owner's `mode`, and after
/// `owners` its `readers` (`[{"owner","count"}]`) and its `writer`
/// (`{"owner","count"}` or `null`; a writer that downgraded is listed with
/// its read holds as a reader too). A non-empty `queue` (the waiters of a
/// fair lock, first first) adds `"queue":[{"owner","deadline_ms"}]` before
/// `ttl_ms`: `deadline_ms` in ms since the epoch (the waiters' clocks),
/// `null` when the queue names a waiter without a deadline.
pub(crate) fn status_json(status: &LockStatus, queue: &[FairWaiter]) -> Value {
    let rw = matches!(status.mode, Some(LockMode::Read | LockMode::Write));
    let holder = |o: &LockOwner| json!({ "owner": o.owner, "count": o.count });
    let owners: Vec<Value> = status
        .owners
        .iter()
        .map(|o| {
            let mut v = holder(o);
            if rw {
                if let Value::Object(fields) = &mut v {
                    fields.insert("mode".into(), json!(o.mode.as_str()));
                }
            }
            v
        })
        .collect();
    let ttl_ms = ttl_json(status.ttl);
    let mut line = Map::new();
    line.insert("name".into(), json!(status.name));
    line.insert("locked".into(), json!(status.is_locked()));
    if let (true, Some(mode)) = (rw, status.mode) {
        line.insert("mode".into(), json!(mode.as_str()));
    }
    line.insert("owners".into(), Value::Array(owners));
    if rw {
        let side = |mode: LockMode| status.owners.iter().filter(move |o| o.mode == mode);
        let readers: Vec<Value> = side(LockMode::Read).map(holder).collect();
        line.insert("readers".into(), Value::Array(readers));
        let writer = side(LockMode::Write).next().map_or(Value::Null, holder);
        line.insert("writer".into(), writer);
    }
    if !queue.is_empty() {
        let waiters: Vec<Value> = queue.iter().map(waiter_json).collect();
        line.insert("queue".into(), Value::Array(waiters));
    }
    line.insert("ttl_ms".into(), ttl_ms);
    line.insert("key".into(), json!(status.key));
    Value::Object(line)
}

/// A fair lock's waiter as `status` prints it: `{"owner","deadline_ms"}`.
fn waiter_json(waiter: &FairWaiter) -> Value {
    let deadline_ms = waiter
        .deadline
        .and_then(|d| d.duration_since(UNIX_EPOCH).ok())
        .map_or(Value::Null, |d| {
            json!(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        });
    json!({ "owner": waiter.owner, "deadline_ms": deadline_ms })
}

/// A key's time to live as the JSON lines show it (`ttl_ms`): `null` for
/// none (no key), `-1` for a key without expiry ([`Duration::MAX`]), else
/// milliseconds.
pub(crate) fn ttl_json(ttl: Option<Duration>) -> Value {
    match ttl {
        None => Value::Null,
        Some(Duration::MAX) => json!(-1),
        Some(ttl) => json!(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
    }
}

/// The lock `args` ask for on `name`: the plain lock, with `--read` /
/// `--write` that side of the read-write lock `name`, with `--fair` the
/// fair lock `name`.
pub(crate) fn lock_for(
    client: &LockClient,
    name: &str,
    args: &AcquireArgs,
) -> Result<Lock, CliError> {
    Ok(match args.mode() {
        LockMode::Read => client.rw_lock(name)?.read(),
        LockMode::Write => client.rw_lock(name)?.write(),
        _ if args.fair => client.fair_lock(name)?,
        _ => client.lock(name)?,
    })
}

/// Why a single attempt (`--wait 0s`) failed, by the side asked for.
fn busy_message(lock: &Lock) -> String {
    let name = lock.name();
    match lock.mode() {
        LockMode::Read => {
            format!("read-write lock `{name}` is held by a writer (or a writer waits for it)")
        }
        LockMode::Write => format!("read-write lock `{name}` is held by readers or a writer"),
        _ if lock.is_fair() => format!(
            "fair lock `{name}` is held by another owner (or kept for the first in its queue)"
        ),
        _ => format!("lock `{name}` is held by another owner"),
    }
}

/// The wait bound (`--wait 0s`: one attempt) and lease `args` ask for.
pub(crate) fn acquire_options(args: &AcquireArgs) -> AcquireOptions {
    let mut options = AcquireOptions::new();
    match args.wait {
        Some(wait) if wait.is_zero() => options = options.no_wait(),
        Some(wait) => options = options.wait(wait),
        None => {}
    }
    if let Some(lease) = args.lease {
        options = options.lease(lease);
    }
    options
}

/// Acquires `lock` as `args` say, unless SIGINT/SIGTERM comes first (then
/// the exit code is 128 + the signal's number).
pub(crate) async fn acquire(
    lock: &Lock,
    args: &AcquireArgs,
    signals: &mut Signals,
) -> Result<LockGuard, CliError> {
    tokio::select! {
        acquired = lock.acquire_with(acquire_options(args)) => acquired.map_err(|e| match e {
            e if e.is_wait_timeout() && args.wait.is_some_and(|w| w.is_zero()) => {
                CliError::new(WAIT_TIMEOUT, busy_message(lock))
            }
            e => CliError::from(e),
        }),
        sig = signals.recv() => Err(CliError::new(
            SIGNAL_BASE + sig as u8,
            format!("interrupted by {} while waiting for lock `{}`", sig.as_str(), lock.name()),
        )),
    }
}

/// `lockctl hold`: acquire, print the holding, wait for `--for` or a
/// signal, release. The line is `{"name","owner","fencing_token"}`; a side
/// of a read-write lock adds its `mode` (`read` or `write`) after `name`,
/// the fair lock `"fair":true`.
pub(crate) async fn hold(client: &LockClient, args: HoldArgs) -> Result<u8, CliError> {
    let lock = lock_for(client, &args.name, &args.acquire)?;
    let mut signals = Signals::install()?;
    let guard = acquire(&lock, &args.acquire, &mut signals).await?;
    let mut line = Map::new();
    line.insert("name".into(), json!(lock.name()));
    if lock.mode() != LockMode::Exclusive {
        line.insert("mode".into(), json!(lock.mode().as_str()));
    }
    if lock.is_fair() {
        line.insert("fair".into(), json!(true));
    }
    line.insert("owner".into(), json!(guard.owner_id()));
    line.insert("fencing_token".into(), json!(guard.fencing_token()));
    let line = Value::Object(line);
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

/// `lockctl status NAME`. Every name's fair queue is read too, beside the
/// lock (the two reads go out together, so it costs no extra round trip,
/// but they are not one snapshot), so the caller need not know whether
/// NAME is used as a fair lock: a non-empty queue shows as `queue`. A user
/// whose ACL does not reach the queue keys gets the line without it and a
/// note on stderr.
pub(crate) async fn status(client: &LockClient, args: NameArg) -> Result<u8, CliError> {
    let lock = client.lock(&args.name)?;
    let fair = client.fair_lock(&args.name)?;
    let (status, queue) = tokio::join!(lock.status(), fair.fair_queue());
    let status = status?;
    let queue = match queue {
        Ok(queue) => queue,
        Err(e) if e.is_no_permission() => {
            eprintln!(
                "lockctl: note: the fair queue of `{}` is not shown: {}",
                args.name,
                chain(&e)
            );
            Vec::new()
        }
        Err(e) => return Err(e.into()),
    };
    emit(&status_json(&status, &queue))?;
    Ok(0)
}

/// `lockctl unlock --force NAME`: `{"name","removed","key"}`. A read-write
/// lock (its mode read first) is deleted as one, which wakes its waiters on
/// its own channel, and its line adds the `mode` it had after `name`; a
/// lock with a fair queue (read beside the mode) is deleted as the fair
/// lock, which tells the first waiter on its own channel; any other key is
/// deleted as a plain lock, as before read-write locks.
pub(crate) async fn unlock(client: &LockClient, args: UnlockArgs) -> Result<u8, CliError> {
    debug_assert!(args.force, "clap requires --force");
    let lock = client.lock(&args.name)?;
    let fair = client.fair_lock(&args.name)?;
    // A key that is not a lock (or a failed read) is left to the plain
    // force-unlock, which reports Redis' errors itself.
    let (status, queue) = tokio::join!(lock.status(), fair.fair_queue());
    let mode = status.ok().and_then(|s| s.mode);
    let removed = match mode {
        Some(LockMode::Read | LockMode::Write) => {
            client.rw_lock(&args.name)?.force_unlock().await?
        }
        // A fair lock with waiters: its own force-unlock tells the first
        // of them on its channel (the plain one tells nobody it listens to).
        _ if queue.is_ok_and(|q| !q.is_empty()) => fair.force_unlock().await?,
        _ => lock.force_unlock().await?,
    };
    let mut line = Map::new();
    line.insert("name".into(), json!(lock.name()));
    if let Some(mode @ (LockMode::Read | LockMode::Write)) = mode {
        line.insert("mode".into(), json!(mode.as_str()));
    }
    line.insert("removed".into(), json!(removed));
    line.insert("key".into(), json!(lock.key()));
    emit(&Value::Object(line))?;
    Ok(0)
}

/// `lockctl list [--match PATTERN]`
pub(crate) async fn list(client: &LockClient, args: ListArgs) -> Result<u8, CliError> {
    for status in client.scan_locks(&args.pattern).await? {
        // The queues of fair locks are `status`'s alone (one more read per lock).
        emit(&status_json(&status, &[]))?;
    }
    Ok(0)
}
