//! Redis key and channel names of a semaphore and of a count-down latch
//! (Redisson's layout, plus lock-core's own `lockcore_*` helpers that
//! Redisson neither reads nor writes).

use std::sync::Arc;

use super::keys::{prefixed, validate_name, LockKeys};
use crate::error::{Error, Result};

/// Redisson's channel of both semaphore kinds: `redisson_sc:{<name>}`.
pub(crate) const SEM_CHANNEL_KIND: &str = "redisson_sc";
/// lock-core's line of waiting acquisitions (turns between clients).
pub(crate) const LINE_KIND: &str = "lockcore_sem_line";
/// When each acquisition in the line stops counting as alive.
pub(crate) const ALIVE_KIND: &str = "lockcore_sem_alive";
/// Request latches of semaphore calls (applied at most once).
pub(crate) const SEM_REQUEST_KIND: &str = "lockcore_sem_req";
/// The plain kind's grants: request id -> permits (a give-back applies
/// only by deleting its grant).
pub(crate) const GRANTS_KIND: &str = "lockcore_sem_grants";
/// Request latches of count-downs.
pub(crate) const LATCH_REQUEST_KIND: &str = "lockcore_latch_req";
/// Redisson's latch channel prefix: always `<this>{<name>}`, no colon.
const LATCH_CHANNEL_PREFIX: &str = "redisson_countdownlatch__channel__";

/// Which semaphore: Redisson's `RSemaphore` (a counter) or
/// `RPermitExpirableSemaphore` (a counter and leased permit ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SemKind {
    Plain,
    Expirable,
}

/// The Redis names of one semaphore.
#[derive(Debug)]
pub(crate) struct SemKeys {
    /// The user's name, without prefix.
    pub(crate) name: String,
    /// The counter of available permits: prefix + name.
    pub(crate) counter: String,
    /// `{<counter>}:timeout` (`<counter>:timeout` when it has a `{`): the
    /// expirable kind's permit ids by expiry (Redisson's `suffixName`).
    pub(crate) timeout: String,
    /// `redisson_sc:{<counter>}`.
    pub(crate) channel: String,
    /// `lockcore_sem_line:{<counter>}`.
    pub(crate) line: String,
    /// `lockcore_sem_alive:{<counter>}`.
    pub(crate) alive: String,
    /// `lockcore_sem_grants:{<counter>}`.
    pub(crate) grants: String,
    /// `lockcore_sem_req:{<counter>}:`: prefix of request latches.
    request_prefix: String,
    pub(crate) kind: SemKind,
    /// What a permit hold carries for the watchdog and the logs.
    pub(crate) hold_keys: Arc<LockKeys>,
}

impl SemKeys {
    /// Checks `name` and derives every name of the semaphore.
    pub(crate) fn new(prefix: &str, name: &str, max_len: usize, kind: SemKind) -> Result<Self> {
        validate_name(prefix, name, max_len)?;
        let counter = format!("{prefix}{name}");
        let timeout = if counter.contains('{') {
            format!("{counter}:timeout")
        } else {
            format!("{{{counter}}}:timeout")
        };
        let channel = prefixed(SEM_CHANNEL_KIND, &counter);
        let hold_keys = Arc::new(LockKeys::for_permits(name, &timeout, &channel));
        Ok(SemKeys {
            name: name.to_string(),
            line: prefixed(LINE_KIND, &counter),
            alive: prefixed(ALIVE_KIND, &counter),
            grants: prefixed(GRANTS_KIND, &counter),
            request_prefix: format!("{}:", prefixed(SEM_REQUEST_KIND, &counter)),
            timeout,
            channel,
            kind,
            hold_keys,
            counter,
        })
    }

    /// The latch key of the request `id`.
    pub(crate) fn request(&self, id: &str) -> String {
        format!("{}{id}", self.request_prefix)
    }
}

/// The Redis names of one count-down latch.
#[derive(Debug)]
pub(crate) struct LatchKeys {
    /// The user's name, without prefix.
    pub(crate) name: String,
    /// The count: prefix + name.
    pub(crate) counter: String,
    /// `redisson_countdownlatch__channel__{<counter>}`.
    pub(crate) channel: String,
    /// `lockcore_latch_req:{<counter>}:`.
    request_prefix: String,
}

impl LatchKeys {
    /// Checks `name` and derives the latch's names. On a Redis Cluster a
    /// name with a `{` is refused: Redisson's latch channel always adds a
    /// pair of braces, so the channel of such a name hashes to another
    /// slot than the count (sharded pub/sub could not publish it from the
    /// script).
    pub(crate) fn new(prefix: &str, name: &str, max_len: usize, cluster: bool) -> Result<Self> {
        validate_name(prefix, name, max_len)?;
        let counter = format!("{prefix}{name}");
        if cluster && counter.contains('{') {
            return Err(Error::InvalidName {
                reason: format!(
                    "latch name `{counter}` holds a `{{`: Redisson's latch channel \
                     `{LATCH_CHANNEL_PREFIX}{{{counter}}}` would hash to another cluster slot"
                ),
            });
        }
        Ok(LatchKeys {
            name: name.to_string(),
            channel: format!("{LATCH_CHANNEL_PREFIX}{{{counter}}}"),
            request_prefix: format!("{}:", prefixed(LATCH_REQUEST_KIND, &counter)),
            counter,
        })
    }

    /// The latch key of the request `id`.
    pub(crate) fn request(&self, id: &str) -> String {
        format!("{}{id}", self.request_prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_redissons_layout() -> Result<()> {
        let k = SemKeys::new("", "jobs", 100, SemKind::Expirable)?;
        assert_eq!(k.counter, "jobs");
        assert_eq!(k.timeout, "{jobs}:timeout");
        assert_eq!(k.channel, "redisson_sc:{jobs}");
        assert_eq!(k.line, "lockcore_sem_line:{jobs}");
        assert_eq!(k.grants, "lockcore_sem_grants:{jobs}");
        assert_eq!(k.request("r1"), "lockcore_sem_req:{jobs}:r1");
        assert_eq!(k.hold_keys.lock, "{jobs}:timeout");
        let tagged = SemKeys::new("app:", "a{t}", 100, SemKind::Plain)?;
        assert_eq!(tagged.timeout, "app:a{t}:timeout");
        assert_eq!(tagged.channel, "redisson_sc:app:a{t}");
        let latch = LatchKeys::new("", "boot", 100, false)?;
        assert_eq!(latch.channel, "redisson_countdownlatch__channel__{boot}");
        assert_eq!(latch.request("x"), "lockcore_latch_req:{boot}:x");
        Ok(())
    }

    #[test]
    fn a_braced_latch_name_is_refused_on_a_cluster_only() {
        assert!(LatchKeys::new("", "a{t}", 100, false).is_ok());
        assert!(matches!(
            LatchKeys::new("", "a{t}", 100, true),
            Err(Error::InvalidName { .. })
        ));
        assert!(SemKeys::new("", "", 100, SemKind::Plain).is_err());
    }
}
