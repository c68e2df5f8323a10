//! The fair lock's calls (Redisson's `RFairLock`): `fair_acquire.lua`,
//! `fair_release.lua`, `fair_cancel.lua` and `fair_force_unlock.lua`, built
//! from the same typed calls as the lock's (`AcquireCall`, `ReleaseCall`,
//! `CancelCall`) and answering in the same shapes, so the engine parses
//! them with the lock's reply enums.
//!
//! Deadlines in the queue are milliseconds of the clients' clocks, as
//! Redisson writes them: every call carries the caller's clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Cmd;

use super::acquire::{AcquireCall, AcquireMode, Line};
use super::cancel::CancelCall;
use super::keys::{LockKeys, UNLOCK_MESSAGE};
use super::release::ReleaseCall;
use super::Script;

/// How often a waiting fair acquisition asks Redis again at the latest
/// (a lost message costs at most this long).
pub(crate) const FAIR_RECHECK: Duration = Duration::from_secs(1);

/// How long a lock-core waiter's liveness mark lasts (ms of the server's
/// clock): three re-checks. A waiter of a killed process leaves the queue
/// this long after its last attempt, however far its deadline is.
pub(crate) const FAIR_ALIVE_MS: u64 = 3 * FAIR_RECHECK.as_millis() as u64;

/// The caller's clock in milliseconds since the epoch (0 before it).
pub(crate) fn clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `fair_acquire.lua`'s mode argument.
fn acquire_mode(mode: AcquireMode) -> &'static str {
    match mode {
        AcquireMode::New(Line::Once) => "once",
        AcquireMode::New(Line::Head | Line::PlaceKept) => "wait",
        AcquireMode::Reentry => "re",
    }
}

/// The `EVALSHA` of `fair_acquire.lua` for `call`.
pub(crate) fn acquire_cmd(call: &AcquireCall<'_>, script: &Script) -> Cmd {
    let keys = call.keys;
    script.evalsha(
        &[
            keys.lock.as_str(),
            keys.token.as_str(),
            call.latch,
            keys.fair_queue.as_str(),
            keys.fair_timeouts.as_str(),
            keys.fair_alive.as_str(),
            keys.channel.as_str(),
        ],
        (
            call.lease_ms,
            call.owner,
            acquire_mode(call.mode),
            call.token_retention_ms,
            call.latch_ms,
            keys.fair_wait_ms,
            clock_ms(),
            FAIR_ALIVE_MS,
            UNLOCK_MESSAGE,
            call.publish,
        ),
    )
}

/// The `EVALSHA` of `fair_release.lua` for `call`.
pub(crate) fn release_cmd(call: &ReleaseCall<'_>, script: &Script) -> Cmd {
    let keys = call.keys;
    script.evalsha(
        &[
            keys.lock.as_str(),
            keys.channel.as_str(),
            keys.fair_queue.as_str(),
            keys.fair_timeouts.as_str(),
            keys.fair_alive.as_str(),
        ],
        (
            call.owner,
            call.lease_ms,
            UNLOCK_MESSAGE,
            clock_ms(),
            call.counts.max(1),
            call.publish,
        ),
    )
}

/// The `EVALSHA` of `fair_cancel.lua` for `call`.
pub(crate) fn cancel_cmd(call: &CancelCall<'_>, script: &Script) -> Cmd {
    let keys = call.keys;
    script.evalsha(
        &[
            keys.lock.as_str(),
            keys.channel.as_str(),
            call.latch,
            keys.fair_queue.as_str(),
            keys.fair_timeouts.as_str(),
            keys.fair_alive.as_str(),
        ],
        (
            call.owner,
            call.mode.as_arg(),
            UNLOCK_MESSAGE,
            call.latch_ms,
            call.publish,
            keys.fair_wait_ms,
            clock_ms(),
        ),
    )
}

/// The `EVALSHA` of `fair_force_unlock.lua` for the fair lock `keys`.
pub(crate) fn force_unlock_cmd(script: &Script, keys: &LockKeys, publish: &'static str) -> Cmd {
    script.evalsha(
        &[
            keys.lock.as_str(),
            keys.channel.as_str(),
            keys.fair_queue.as_str(),
            keys.fair_timeouts.as_str(),
            keys.fair_alive.as_str(),
        ],
        (UNLOCK_MESSAGE, publish, clock_ms()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::keys::Rule;
    use crate::protocol::test_support;

    fn fair_keys() -> LockKeys {
        let mut keys = LockKeys::with_rule("", "stock", 100, Rule::Fair).expect("a valid name");
        keys.fair_wait_ms = 300_000;
        keys
    }

    #[test]
    fn keys_follow_redissons_fair_layout() {
        let keys = fair_keys();
        assert_eq!(keys.fair_queue, "redisson_lock_queue:{stock}");
        assert_eq!(keys.fair_timeouts, "redisson_lock_timeout:{stock}");
        assert_eq!(keys.fair_alive, "lockcore_fair_alive:{stock}");
        assert_eq!(
            keys.fair_channel("u:1"),
            "redisson_lock__channel:{stock}:u:1"
        );
    }

    #[test]
    fn acquire_names_its_mode_and_the_allowance() {
        let keys = fair_keys();
        let scripts = crate::protocol::Scripts::new();
        for (mode, arg) in [
            (AcquireMode::New(Line::Once), "once"),
            (AcquireMode::New(Line::Head), "wait"),
            (AcquireMode::Reentry, "re"),
        ] {
            let call = AcquireCall {
                keys: &keys,
                latch: "latch",
                owner: "u:1",
                mode,
                lease_ms: 30_000,
                token_retention_ms: 60_000,
                latch_ms: 1_000,
                client_id: "u",
                publish: "spublish",
            };
            let args = test_support::args(&call.cmd(&scripts.fair_acquire));
            assert_eq!(args[2], "7");
            assert_eq!(args[6], "redisson_lock_queue:{stock}");
            assert_eq!(args[9], "redisson_lock__channel:{stock}");
            assert_eq!(args[12], arg);
            assert_eq!(args[15], "300000");
            assert_eq!(args[19], "spublish");
        }
    }
}
