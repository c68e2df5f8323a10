//! What `#[leader_only(election = "...")]` generates calls to (re-exported
//! by the hidden `__private` module; not a public API), and
//! [`Leadership::current`], the leadership a `#[leader_only]` body runs
//! under.
//!
//! The generated body makes the election handle and the leader's value,
//! then calls [`leader_only`] with a closure that makes one run of the
//! original body (over fresh clones of the arguments it uses). That is
//! [`Election::run_as_leader`]: campaign, run the body while leader, drop
//! the run when the leadership is lost and campaign again, resign when the
//! body returns; each run is scoped with its [`Leadership`], which
//! [`Leadership::current`] returns inside it.

use std::borrow::Borrow;
use std::future::Future;

use crate::client::LockClient;
use crate::election::{Election, Leadership};
use crate::error::{Error, Result};

tokio::task_local! {
    static CURRENT: Leadership;
}

/// The election `name` on the default client.
pub fn default_election(name: &str) -> Result<Election> {
    crate::default_client::default_client()?.election(name)
}

/// The election `name` on `client` (a `LockClient`, a reference to one, an
/// `Arc<LockClient>`, ...).
pub fn client_election<C: Borrow<LockClient> + ?Sized>(client: &C, name: &str) -> Result<Election> {
    client.borrow().election(name)
}

/// `value = "..."`, built.
pub fn leader_value(value: &str) -> String {
    value.to_owned()
}

/// The value without `value = "..."`: `<hostname>:<pid>` (the host name as
/// the kernel has it, else `$HOSTNAME`, else `localhost`).
pub fn default_leader_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// `Result` returns: campaigns in `election` as `value` and runs a fresh
/// `body()` while leader, again after each lost leadership (the run in
/// progress is dropped at its current await point); returns the body's
/// output once a run completes, after resigning. What cannot be campaigned
/// for at all (no default client, an invalid name) comes back as
/// `Err(E::from(err))`; transient failures are retried by `run_as_leader`.
pub async fn leader_only<T, E, F, Fut>(
    election: Result<Election>,
    value: String,
    mut body: F,
) -> std::result::Result<T, E>
where
    E: From<Error>,
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
{
    let election = election.map_err(E::from)?;
    let out = election
        .run_as_leader(value, |leadership: Leadership| {
            CURRENT.scope(leadership, body())
        })
        .await;
    match out {
        Ok(out) => out,
        Err(err) => Err(E::from(err)),
    }
}

impl Leadership {
    /// The leadership the current task's `#[leader_only]` body runs under
    /// (feature `macros`), with no call to Redis: its term (the fencing
    /// token), `is_leader()`, `lost()`, `fence()` for writes Redis applies
    /// only while it lasts, `cancellation_token()` for tasks the body
    /// spawns. `None` outside such a body, and in a task spawned from one
    /// (pass the `Leadership` into the task instead).
    ///
    /// ```no_run
    /// # #[cfg(feature = "macros")]
    /// # mod demo {
    /// use lock_core::{leader_only, Leadership};
    ///
    /// #[leader_only(election = "outbox-relay")]
    /// async fn relay() -> lock_core::Result<u64> {
    ///     let leadership = Leadership::current().expect("runs as leader");
    ///     // a write Redis applies only while this leadership lasts
    ///     leadership.fence().incr_by("relay:{outbox-relay}:runs", 1).await?;
    ///     Ok(leadership.term())
    /// }
    /// # }
    /// ```
    pub fn current() -> Option<Leadership> {
        CURRENT.try_with(Clone::clone).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_value_names_this_process() {
        let value = default_leader_value();
        let (host, pid) = value.rsplit_once(':').unwrap_or_default();
        assert!(!host.is_empty(), "{value}");
        assert_eq!(pid, std::process::id().to_string());
    }

    #[tokio::test]
    async fn no_leadership_outside_a_body() {
        assert!(Leadership::current().is_none());
    }
}
