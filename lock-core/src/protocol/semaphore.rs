//! The semaphores' and the count-down latch's scripts: `sem_acquire.lua`,
//! `sem_add.lua`, `sem_release.lua`, `sem_cancel.lua`, `sem_leave.lua`,
//! `sem_set.lua` and `latch_count_down.lua`, each call typed and each
//! reply parsed once.

use redis::{Cmd, Value};

use super::sem_keys::{LatchKeys, SemKeys, SemKind};
use super::{unexpected, Script};
use crate::error::Result;

/// One acquire of `n` permits (see `sem_acquire.lua`).
#[derive(Debug)]
pub(crate) struct SemAcquireCall<'a> {
    pub(crate) keys: &'a SemKeys,
    /// The request's latch key.
    pub(crate) latch: &'a str,
    pub(crate) n: u32,
    /// The expirable kind's lease in ms (ignored for the plain kind).
    pub(crate) lease_ms: u64,
    /// The acquisition's member of the line (`""`: it never waits).
    pub(crate) member: &'a str,
    /// How long it counts as alive in the line without asking again.
    pub(crate) alive_ms: u64,
    /// Join the line when refused.
    pub(crate) join: bool,
    /// How long the latch refuses a late copy of a refused request.
    pub(crate) refuse_ms: u64,
    pub(crate) publish: &'static str,
    /// The request id (the plain kind's grant).
    pub(crate) request: &'a str,
    /// The permit ids (expirable kind): `n` of them, 16 bytes each.
    pub(crate) ids: &'a [[u8; 16]],
}

impl SemAcquireCall<'_> {
    pub(crate) fn cmd(&self, script: &Script) -> Cmd {
        let k = self.keys;
        let lease = match k.kind {
            SemKind::Plain => 0,
            SemKind::Expirable => self.lease_ms.max(1),
        };
        let mut cmd = script.evalsha(
            &[
                k.counter.as_str(),
                k.timeout.as_str(),
                k.channel.as_str(),
                k.line.as_str(),
                k.alive.as_str(),
                self.latch,
                k.grants.as_str(),
            ],
            (
                self.n,
                lease,
                self.member,
                self.alive_ms,
                if self.join { "1" } else { "0" },
                self.refuse_ms,
                self.publish,
                self.request,
            ),
        );
        if k.kind == SemKind::Expirable {
            add_ids(&mut cmd, self.ids);
        }
        cmd
    }
}

/// What an acquire answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SemAcquireReply {
    /// Granted; `available` permits are left.
    Granted { available: i64 },
    /// Not enough permits (or others are ahead in the line); the nearest
    /// permit expiry, when there is one (expirable kind).
    Refused {
        available: i64,
        nearest_expiry_ms: Option<u64>,
    },
    /// A late copy of a cancelled request.
    Cancelled,
}

impl SemAcquireReply {
    pub(crate) fn parse(reply: &Value) -> Result<Self> {
        let ints = ints(reply).ok_or_else(|| unexpected("semaphore acquire", reply))?;
        match ints.as_slice() {
            [1, available] => Ok(SemAcquireReply::Granted {
                available: *available,
            }),
            [0, available, wait] => Ok(SemAcquireReply::Refused {
                available: *available,
                nearest_expiry_ms: u64::try_from(*wait).ok(),
            }),
            [-2, _] => Ok(SemAcquireReply::Cancelled),
            _ => Err(unexpected("semaphore acquire", reply)),
        }
    }
}

/// Adds `n` permits to the counter (see `sem_add.lua`).
#[derive(Debug)]
pub(crate) struct SemAddCall<'a> {
    pub(crate) keys: &'a SemKeys,
    /// The request's latch key.
    pub(crate) latch: &'a str,
    pub(crate) n: i64,
    pub(crate) latch_ms: u64,
    pub(crate) publish: &'static str,
}

impl SemAddCall<'_> {
    pub(crate) fn cmd(&self, script: &Script) -> Cmd {
        let k = self.keys;
        script.evalsha(
            &[
                k.counter.as_str(),
                k.timeout.as_str(),
                k.channel.as_str(),
                self.latch,
            ],
            (
                self.n,
                if k.kind == SemKind::Expirable {
                    "1"
                } else {
                    "0"
                },
                self.latch_ms,
                self.publish,
            ),
        )
    }
}

/// What an add answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SemAddReply {
    /// Applied now; `available` after it.
    Applied { available: i64 },
    /// A retry: the request was applied before.
    AppliedBefore { available: i64 },
    /// Refused: the counter would go below zero.
    BelowZero { available: i64 },
}

impl SemAddReply {
    pub(crate) fn parse(reply: &Value) -> Result<Self> {
        match ints(reply).as_deref() {
            Some([1, v]) => Ok(SemAddReply::Applied { available: *v }),
            Some([0, v]) => Ok(SemAddReply::AppliedBefore { available: *v }),
            Some([-1, v]) => Ok(SemAddReply::BelowZero { available: *v }),
            _ => Err(unexpected("semaphore add", reply)),
        }
    }
}

/// Gives back permit ids of the expirable kind (see `sem_release.lua`).
#[derive(Debug)]
pub(crate) struct PermitReleaseCall<'a> {
    pub(crate) keys: &'a SemKeys,
    pub(crate) publish: &'static str,
    pub(crate) ids: &'a [[u8; 16]],
}

impl PermitReleaseCall<'_> {
    pub(crate) fn cmd(&self, script: &Script) -> Cmd {
        let k = self.keys;
        let mut cmd = script.evalsha(
            &[k.counter.as_str(), k.timeout.as_str(), k.channel.as_str()],
            self.publish,
        );
        add_ids(&mut cmd, self.ids);
        cmd
    }
}

/// How many of the ids a permit release gave back (the others had
/// expired or were gone).
pub(crate) fn parse_permit_release(reply: &Value) -> Result<usize> {
    match ints(reply).as_deref() {
        Some([released, _]) => {
            usize::try_from(*released).map_err(|_| unexpected("permit release", reply))
        }
        _ => Err(unexpected("permit release", reply)),
    }
}

/// Gives back one acquisition's permits (see `sem_cancel.lua`): the
/// cancellation of an acquire whose reply was lost, a plain release.
#[derive(Debug)]
pub(crate) struct SemCancelCall<'a> {
    pub(crate) keys: &'a SemKeys,
    /// The acquisition's latch key and request id.
    pub(crate) latch: &'a str,
    pub(crate) request: &'a str,
    pub(crate) member: &'a str,
    pub(crate) refuse_ms: u64,
    pub(crate) publish: &'static str,
    pub(crate) ids: &'a [[u8; 16]],
}

impl SemCancelCall<'_> {
    pub(crate) fn cmd(&self, script: &Script) -> Cmd {
        let k = self.keys;
        let mut cmd = script.evalsha(
            &[
                k.counter.as_str(),
                k.timeout.as_str(),
                k.channel.as_str(),
                k.line.as_str(),
                k.alive.as_str(),
                self.latch,
                k.grants.as_str(),
            ],
            (
                if k.kind == SemKind::Expirable {
                    "1"
                } else {
                    "0"
                },
                self.member,
                self.refuse_ms,
                self.publish,
                self.request,
            ),
        );
        if k.kind == SemKind::Expirable {
            add_ids(&mut cmd, self.ids);
        }
        cmd
    }
}

/// How many permits a cancellation gave back.
pub(crate) fn parse_cancel(reply: &Value) -> Result<u64> {
    match reply {
        Value::Int(n) => u64::try_from(*n).map_err(|_| unexpected("semaphore cancel", reply)),
        _ => Err(unexpected("semaphore cancel", reply)),
    }
}

/// An acquisition leaves the line (see `sem_leave.lua`).
pub(crate) fn leave_cmd(keys: &SemKeys, member: &str, publish: &str, script: &Script) -> Cmd {
    script.evalsha(
        &[
            keys.counter.as_str(),
            keys.line.as_str(),
            keys.alive.as_str(),
            keys.channel.as_str(),
        ],
        (member, publish),
    )
}

/// Sets a counter when absent (see `sem_set.lua`): a semaphore's permits
/// (its message: the value) or a latch's count (message `1`).
pub(crate) fn set_cmd(
    counter: &str,
    channel: &str,
    value: u64,
    message: u64,
    publish: &str,
    script: &Script,
) -> Cmd {
    script.evalsha(&[counter, channel], (value, message, publish))
}

/// One count-down (see `latch_count_down.lua`).
pub(crate) fn count_down_cmd(
    keys: &LatchKeys,
    latch: &str,
    latch_ms: u64,
    publish: &str,
    script: &Script,
) -> Cmd {
    script.evalsha(
        &[keys.counter.as_str(), keys.channel.as_str(), latch],
        (latch_ms, publish),
    )
}

/// The count after a count-down, and whether this request counted (false:
/// a retry of one that did).
pub(crate) fn parse_count_down(reply: &Value) -> Result<(bool, u64)> {
    match ints(reply).as_deref() {
        Some([applied @ (0 | 1), count]) => Ok((
            *applied == 1,
            u64::try_from(*count).map_err(|_| unexpected("latch count-down", reply))?,
        )),
        _ => Err(unexpected("latch count-down", reply)),
    }
}

/// Appends permit ids, each one argument of 16 bytes.
fn add_ids(cmd: &mut Cmd, ids: &[[u8; 16]]) {
    for id in ids {
        cmd.arg(&id[..]);
    }
}

/// A reply of integers only.
fn ints(reply: &Value) -> Option<Vec<i64>> {
    match reply {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::Int(i) => Some(*i),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arr(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|i| Value::Int(*i)).collect())
    }

    #[test]
    fn every_acquire_answer_parses() -> Result<()> {
        assert_eq!(
            SemAcquireReply::parse(&arr(&[1, 4]))?,
            SemAcquireReply::Granted { available: 4 }
        );
        assert_eq!(
            SemAcquireReply::parse(&arr(&[0, 1, 250]))?,
            SemAcquireReply::Refused {
                available: 1,
                nearest_expiry_ms: Some(250)
            }
        );
        assert_eq!(
            SemAcquireReply::parse(&arr(&[0, 0, -1]))?,
            SemAcquireReply::Refused {
                available: 0,
                nearest_expiry_ms: None
            }
        );
        assert_eq!(
            SemAcquireReply::parse(&arr(&[-2, 0]))?,
            SemAcquireReply::Cancelled
        );
        assert!(SemAcquireReply::parse(&arr(&[3, 0])).is_err());
        assert!(SemAcquireReply::parse(&Value::Nil).is_err());
        Ok(())
    }

    #[test]
    fn every_add_release_cancel_and_count_down_answer_parses() -> Result<()> {
        assert_eq!(
            SemAddReply::parse(&arr(&[1, 5]))?,
            SemAddReply::Applied { available: 5 }
        );
        assert_eq!(
            SemAddReply::parse(&arr(&[0, 5]))?,
            SemAddReply::AppliedBefore { available: 5 }
        );
        assert_eq!(
            SemAddReply::parse(&arr(&[-1, 2]))?,
            SemAddReply::BelowZero { available: 2 }
        );
        assert!(SemAddReply::parse(&arr(&[2, 2])).is_err());
        assert_eq!(parse_permit_release(&arr(&[2, 7]))?, 2);
        assert!(parse_permit_release(&arr(&[-1, 7])).is_err());
        assert_eq!(parse_cancel(&Value::Int(3))?, 3);
        assert!(parse_cancel(&Value::Nil).is_err());
        assert_eq!(parse_count_down(&arr(&[1, 0]))?, (true, 0));
        assert_eq!(parse_count_down(&arr(&[0, 2]))?, (false, 2));
        assert!(parse_count_down(&arr(&[2, 2])).is_err());
        Ok(())
    }
}
