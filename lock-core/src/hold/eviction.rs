//! The eviction check: a Redis that may evict keys can drop a held lock.
//!
//! Every lock key has a TTL (its lease), so under memory pressure the
//! `volatile-*` policies (which evict keys with a TTL) pick lock keys first,
//! and the `allkeys-*` policies may pick them too: the lock then vanishes
//! while its guard still thinks it holds it, and a second owner gets in.
//! Only `noeviction` (Redis's default) keeps locks until they are released
//! or expire; under memory pressure it refuses writes instead, which the
//! lock reports as errors.
//!
//! [`LockClient::ping`](crate::LockClient::ping) (and so
//! [`LockClient::connect`](crate::LockClient::connect)) reads
//! `CONFIG GET maxmemory-policy` and reports any other policy through
//! tracing (`warn`) and the error hook, once per policy seen. A user
//! without the right to run `CONFIG GET` (ACL `NOPERM`), or a server
//! without the command (renamed away, as managed services do), is not an
//! error: the check is skipped, and not asked again.

use std::sync::Mutex;

use redis::Value;

use crate::error::Error;
use crate::hold::shared::Core;

/// The one policy that never evicts a key.
const NO_EVICTION: &str = "noeviction";

/// What a client learnt about the server's eviction policy.
#[derive(Debug, Default)]
pub(crate) struct EvictionCheck {
    state: Mutex<State>,
}

#[derive(Debug, Default, PartialEq, Eq)]
enum State {
    /// Not read yet (or the last read failed for a passing reason).
    #[default]
    Unknown,
    /// The user may not read it, or the server has no `CONFIG`: never asked again.
    Unavailable,
    /// The policy last read (and reported, unless `noeviction`).
    Seen(String),
}

impl EvictionCheck {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The report for an evicting policy.
pub(crate) fn eviction_error(policy: &str) -> Error {
    Error::EvictionPolicy {
        policy: policy.to_string(),
    }
}

/// Reads the server's `maxmemory-policy` and reports an evicting one
/// (tracing and the error hook), once per policy seen. Never fails: the
/// check is advice, and a refusal or a failure only skips it.
pub(crate) async fn check(core: &Core, eviction: &EvictionCheck) {
    if *eviction.state() == State::Unavailable {
        return;
    }
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    let policy = match core
        .run_cmd_on(crate::transport::connection::Lane::Inspect, &cmd)
        .await
    {
        Ok(reply) => match policy_of(&reply) {
            Some(policy) => policy,
            None => {
                tracing::debug!(reply = ?reply, "CONFIG GET maxmemory-policy: unexpected reply; eviction check skipped");
                return;
            }
        },
        Err(e) if is_unavailable(&e) => {
            tracing::debug!(error = %e, "CONFIG GET maxmemory-policy refused or unknown; eviction check skipped");
            *eviction.state() = State::Unavailable;
            return;
        }
        Err(e) => {
            tracing::debug!(error = %e, "CONFIG GET maxmemory-policy failed; eviction check skipped this time");
            return;
        }
    };
    {
        let mut state = eviction.state();
        if matches!(&*state, State::Seen(p) if *p == policy) {
            return;
        }
        *state = State::Seen(policy.clone());
    }
    if policy.eq_ignore_ascii_case(NO_EVICTION) {
        return;
    }
    tracing::warn!(policy = %policy, "Redis may evict lock keys under memory pressure (maxmemory-policy is not noeviction): a held lock can vanish");
    core.report(&eviction_error(&policy));
}

/// The policy in a `CONFIG GET` reply: `["maxmemory-policy", "<policy>"]`
/// (RESP2) or a map (RESP3).
fn policy_of(reply: &Value) -> Option<String> {
    let value = match reply {
        Value::Array(items) => items.get(1)?,
        Value::Map(pairs) => &pairs.first()?.1,
        _ => return None,
    };
    match value {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// `NOPERM` (ACL), or no `CONFIG` command at all (renamed or disabled).
fn is_unavailable(e: &Error) -> bool {
    if e.is_no_permission() {
        return true;
    }
    match e {
        Error::Redis(r) => {
            let text = r.to_string().to_ascii_lowercase();
            text.contains("unknown command") || text.contains("unknown subcommand")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_policy_from_resp2_and_resp3_replies() {
        let resp2 = Value::Array(vec![
            Value::BulkString(b"maxmemory-policy".to_vec()),
            Value::BulkString(b"volatile-lru".to_vec()),
        ]);
        assert_eq!(policy_of(&resp2).as_deref(), Some("volatile-lru"));
        let resp3 = Value::Map(vec![(
            Value::BulkString(b"maxmemory-policy".to_vec()),
            Value::BulkString(b"noeviction".to_vec()),
        )]);
        assert_eq!(policy_of(&resp3).as_deref(), Some("noeviction"));
        assert_eq!(policy_of(&Value::Array(vec![])), None);
        assert_eq!(policy_of(&Value::Nil), None);
    }

    #[test]
    fn refusals_and_missing_commands_are_not_errors() {
        let noperm = Error::Redis(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "no permission",
        )));
        assert!(is_unavailable(&noperm));
        let unknown = Error::Redis(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "unknown command 'CONFIG', with args beginning with: 'GET'".to_string(),
        )));
        assert!(is_unavailable(&unknown));
        assert!(!is_unavailable(&Error::CommandTimeout));
    }

    #[test]
    fn the_report_names_the_policy_and_the_fix() {
        let text = eviction_error("allkeys-lru").to_string();
        assert!(
            text.contains("allkeys-lru") && text.contains("noeviction"),
            "{text}"
        );
    }
}
