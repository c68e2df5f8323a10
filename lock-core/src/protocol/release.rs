//! `release.lua`: release one count of a hold, naming the count the client
//! knows the hold has (see the script's header and
//! `docs/architecture.md`, "Applied at most once").

use redis::{Cmd, Value};

use super::keys::{LockKeys, Rule, UNLOCK_MESSAGE};
use super::{text, unexpected, Script};
use crate::error::Result;

/// One call of the release script.
#[derive(Debug)]
pub(crate) struct ReleaseCall<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) owner: &'a str,
    /// The lease the remaining counts keep at least.
    pub(crate) lease_ms: u64,
    /// The releasing client's id (the turn never goes to it).
    pub(crate) client_id: &'a str,
    /// How long the next waiting client's turn is kept for it.
    pub(crate) turn_ms: u64,
    /// The counts the hold has before this release, as the client knows
    /// them: 1 ends the hold, whatever count Redis has; more takes one off
    /// only when Redis has exactly that many.
    pub(crate) counts: u32,
    /// `publish` or `spublish`.
    pub(crate) publish: &'static str,
}

impl ReleaseCall<'_> {
    /// The `EVALSHA` command.
    /// (`release.lua`, or `rw_release.lua` for a side of a read-write
    /// lock: `script` is the one the keys' rule names.)
    pub(crate) fn cmd(&self, script: &Script) -> Cmd {
        if self.keys.rule == Rule::Fair {
            return super::fair::release_cmd(self, script);
        }
        if self.keys.rule != Rule::Exclusive {
            return script.evalsha(
                &[
                    self.keys.lock.as_str(),
                    self.keys.channel.as_str(),
                    self.keys.queue.as_str(),
                    self.keys.turn.as_str(),
                ],
                (
                    self.owner,
                    self.lease_ms,
                    self.keys.rule.side(),
                    self.client_id,
                    self.turn_ms,
                    self.counts.max(1),
                    self.publish,
                    self.keys.rw_prefix.as_str(),
                ),
            );
        }
        script.evalsha(
            &[
                self.keys.lock.as_str(),
                self.keys.channel.as_str(),
                self.keys.queue.as_str(),
                self.keys.turn.as_str(),
            ],
            (
                self.owner,
                self.lease_ms,
                UNLOCK_MESSAGE,
                self.client_id,
                self.turn_ms,
                self.counts.max(1),
                self.publish,
            ),
        )
    }
}

/// What the release script answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// The hold ended and the lock is free; the unlock message reached
    /// `told` subscribed clients.
    Freed { told: usize },
    /// The hold ended and the lock is free; Redis refused to publish the
    /// unlock message (ACL): `refusal` is its error text.
    FreedUntold { refusal: String },
    /// Counts of the hold remain (also for a repeated request).
    HoldsRemain,
    /// The hold ended; other holds of the lock remain (readers of a
    /// read-write lock, or a writer's own downgraded reads).
    EndedSharing,
    /// The owner does not hold the lock.
    NotHeld,
}

impl ReleaseReply {
    /// Parses a reply; anything else is an `Error::Protocol`.
    pub(crate) fn parse(reply: &Value) -> Result<Self> {
        match reply {
            Value::Nil => Ok(ReleaseReply::NotHeld),
            Value::Int(0) => Ok(ReleaseReply::HoldsRemain),
            Value::Int(-1) => Ok(ReleaseReply::EndedSharing),
            Value::Int(n) if *n >= 1 => Ok(ReleaseReply::Freed {
                told: usize::try_from(n - 1).unwrap_or(usize::MAX),
            }),
            other => match text(other) {
                Some(refusal) => Ok(ReleaseReply::FreedUntold { refusal }),
                None => Err(unexpected("release", other)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_reply_parses() -> Result<()> {
        assert_eq!(ReleaseReply::parse(&Value::Nil)?, ReleaseReply::NotHeld);
        assert_eq!(
            ReleaseReply::parse(&Value::Int(0))?,
            ReleaseReply::HoldsRemain
        );
        assert_eq!(
            ReleaseReply::parse(&Value::Int(1))?,
            ReleaseReply::Freed { told: 0 }
        );
        assert_eq!(
            ReleaseReply::parse(&Value::Int(4))?,
            ReleaseReply::Freed { told: 3 }
        );
        assert_eq!(
            ReleaseReply::parse(&Value::SimpleString("NOPERM".into()))?,
            ReleaseReply::FreedUntold {
                refusal: "NOPERM".into()
            }
        );
        // rw_release.lua: the hold ended, others still hold the lock
        assert_eq!(
            ReleaseReply::parse(&Value::Int(-1))?,
            ReleaseReply::EndedSharing
        );
        for bad in [Value::Int(-2), Value::Array(vec![])] {
            assert!(ReleaseReply::parse(&bad).is_err(), "{bad:?}");
        }
        Ok(())
    }

    #[test]
    fn the_count_named_is_at_least_one() -> Result<()> {
        let keys = LockKeys::new("", "k", 100)?;
        let scripts = super::super::Scripts::new();
        let call = ReleaseCall {
            keys: &keys,
            owner: "o:1",
            lease_ms: 30_000,
            client_id: "c",
            turn_ms: 20,
            counts: 0,
            publish: "publish",
        };
        let cmd = call.cmd(&scripts.release);
        let args = super::super::test_support::args(&cmd);
        // EVALSHA sha 4 keys(4) owner lease message client turn counts publish
        assert_eq!(args[2], "4");
        assert_eq!(args[12], "1");
        assert_eq!(args[13], "publish");
        Ok(())
    }
}
