//! `#[distributed_lock]` without `client = ...` uses the process-wide default
//! client. A test binary of its own, since a default client is installed once
//! per process (and belongs to the runtime it was built on).

mod support;

use std::time::Duration;

use crate::support::within;
use lock_core::distributed_lock;

#[derive(Debug)]
struct JobError(lock_core::Error);

impl From<lock_core::Error> for JobError {
    fn from(err: lock_core::Error) -> Self {
        JobError(err)
    }
}

#[distributed_lock(key = "job:{name}")]
async fn run_job(name: &str) -> Result<bool, JobError> {
    let client = lock_core::default_client()?;
    Ok(client
        .lock(format!("job:{name}"))?
        .is_held_by_current_context()
        .await?)
}

#[distributed_lock(key = "cron", skip_if_locked)]
async fn cron() -> Option<u32> {
    Some(1)
}

/// `cancel_on_lost` with the default client and a one-line body.
#[distributed_lock(key = "export:{day}", cancel_on_lost)]
#[rustfmt::skip]
async fn export(day: u32) -> Result<u32, JobError> { Ok(day) }

#[tokio::test]
async fn calls_without_a_client_use_the_installed_default() {
    let env = support::env(5_000);
    assert!(lock_core::default_client()
        .err()
        .is_some_and(|e| e.is_no_default_client()));
    match run_job("before").await {
        Err(JobError(e)) if e.is_no_default_client() => {}
        other => panic!("expected NoDefaultClient, got {other:?}"),
    }
    match export(1).await {
        Err(JobError(e)) if e.is_no_default_client() => {}
        other => panic!("expected NoDefaultClient, got {other:?}"),
    }
    // skip_if_locked with nothing to report through: skipped (and logged).
    assert_eq!(cron().await, None);

    lock_core::install_default(env.client.clone()).unwrap_or_else(|e| panic!("{e}"));
    let second = lock_core::install_default(env.client.clone());
    assert!(
        second.is_err_and(|e| e.is_invalid_input()),
        "installed twice"
    );

    let held = within(Duration::from_secs(10), "run_job", run_job("nightly"))
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(held, "the body ran without the lock");
    assert_eq!(cron().await, Some(1));
    let day = within(Duration::from_secs(10), "export", export(2))
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(day, 2);
    let lock = env
        .client
        .lock("job:nightly")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!lock.is_locked().await.unwrap_or_else(|e| panic!("{e}")));
}
