//! `handoff.lua`: end a hold (its last count) by giving the lock to the next
//! owner, a waiter of the same client.

use redis::{Cmd, Value};

use super::keys::{LockKeys, UNLOCK_MESSAGE};
use super::{pair, unexpected, Script};
use crate::error::Result;

/// One call of the hand-off script.
#[derive(Debug)]
pub(crate) struct HandOffCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// This request's latch (a retry reads the first result from it).
    pub(crate) latch: &'a str,
    pub(crate) latch_ms: u64,
    pub(crate) owner: &'a str,
    /// The new hold's owner id.
    pub(crate) next: &'a str,
    pub(crate) next_lease_ms: u64,
    pub(crate) token_retention_ms: u64,
    /// `publish` or `spublish`.
    pub(crate) publish: &'static str,
}

impl HandOffCall<'_> {
    /// The `EVALSHA` command.
    pub(crate) fn cmd(&self, script: &Script) -> Cmd {
        let next_latch = self.keys.latch(self.next);
        script.evalsha(
            &[
                self.keys.lock.as_str(),
                self.keys.token.as_str(),
                self.latch,
                next_latch.as_str(),
                self.keys.channel.as_str(),
            ],
            (
                self.owner,
                self.latch_ms,
                self.next,
                self.next_lease_ms,
                self.token_retention_ms,
                UNLOCK_MESSAGE,
                self.publish,
            ),
        )
    }
}

/// What the hand-off script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandOffReply {
    /// The lock went to the next owner, with this fencing token.
    Given { token: u64 },
    /// The lock was freed instead (the hand-off had been cancelled).
    Freed,
    /// The owner did not hold the lock.
    NotHeld,
}

impl HandOffReply {
    /// Parses a reply; anything else is an `Error::Protocol`.
    pub(crate) fn parse(reply: &Value) -> Result<Self> {
        let bad = || unexpected("handoff", reply);
        match pair(reply).ok_or_else(bad)? {
            (3, token) => Ok(HandOffReply::Given {
                token: u64::try_from(token).map_err(|_| bad())?,
            }),
            (4, _) => Ok(HandOffReply::Freed),
            (-1, _) => Ok(HandOffReply::NotHeld),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_support::reply;

    #[test]
    fn every_documented_reply_parses() -> Result<()> {
        assert_eq!(
            HandOffReply::parse(&reply(3, 42))?,
            HandOffReply::Given { token: 42 }
        );
        assert_eq!(HandOffReply::parse(&reply(4, 0))?, HandOffReply::Freed);
        assert_eq!(HandOffReply::parse(&reply(-1, 0))?, HandOffReply::NotHeld);
        // {0, 0} ("holds remain") is no longer an answer: a hand-off only
        // ever ends a hold.
        for bad in [reply(0, 0), reply(3, -1), Value::Nil] {
            assert!(HandOffReply::parse(&bad).is_err(), "{bad:?}");
        }
        Ok(())
    }
}
