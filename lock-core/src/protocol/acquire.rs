//! `acquire.lua`: a new hold of a lock, or a re-entry of an existing hold
//! (see the script's header for every case).

use redis::{Cmd, Value};

use super::keys::{LockKeys, Rule};
use super::{pair, unexpected, Script};
use crate::error::{Error, Result};

/// How an attempt for a new hold stands in the line of waiting clients
/// (the script's `ARGV[7]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A single attempt: it does not join the line.
    Once,
    /// The client's waiting head: it takes its client's place in the line
    /// when the lock is held.
    Head,
    /// A waiting head whose client has its place already (it leaves the
    /// line when it gets the lock).
    PlaceKept,
}

impl Line {
    fn as_arg(self) -> &'static str {
        match self {
            Line::Once => "0",
            Line::Head => "1",
            Line::PlaceKept => "2",
        }
    }
}

/// What the call asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireMode {
    /// A new hold under an owner id never used before.
    New(Line),
    /// One more count of an existing hold (never creates it).
    Reentry,
}

/// One call of the acquire script.
#[derive(Debug)]
pub(crate) struct AcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// This request's latch key (a cancellation refers to it).
    pub(crate) latch: &'a str,
    /// The hold's owner id.
    pub(crate) owner: &'a str,
    pub(crate) mode: AcquireMode,
    pub(crate) lease_ms: u64,
    /// How long the last fencing token and the waiting line are kept.
    pub(crate) token_retention_ms: u64,
    /// How long the latch of a re-entry lives.
    pub(crate) latch_ms: u64,
    /// The calling client's id (its place in the line of waiting clients).
    pub(crate) client_id: &'a str,
    /// `publish` or `spublish`: how a fair acquisition tells the queue's
    /// head that the lock is free (unused by the other scripts).
    pub(crate) publish: &'static str,
}

/// How long a waiting writer's mark keeps new readers of lock-core out
/// (`rw_acquire.lua`'s `ARGV[10]`): the writer renews it at every attempt,
/// at least every half of it; a writer that stops waiting (or dies) leaves
/// it to lapse.
pub(crate) const WRITER_MARK_MS: u64 = 2_000;

impl AcquireCall<'_> {
    /// The `EVALSHA` command (`acquire.lua`, or `rw_acquire.lua` for a side
    /// of a read-write lock: `script` is the one the keys' rule names).
    pub(crate) fn cmd(&self, script: &Script) -> Cmd {
        if self.keys.rule == Rule::Fair {
            return super::fair::acquire_cmd(self, script);
        }
        if self.keys.rule != Rule::Exclusive {
            return self.rw_cmd(script);
        }
        let (mode, line) = match self.mode {
            AcquireMode::New(line) => ("new", line),
            AcquireMode::Reentry => ("re", Line::Once),
        };
        script.evalsha(
            &[
                self.keys.lock.as_str(),
                self.keys.token.as_str(),
                self.latch,
                self.keys.queue.as_str(),
                self.keys.turn.as_str(),
            ],
            (
                self.lease_ms,
                self.owner,
                mode,
                self.token_retention_ms,
                self.latch_ms,
                self.client_id,
                line.as_arg(),
            ),
        )
    }
}

impl AcquireCall<'_> {
    fn rw_cmd(&self, script: &Script) -> Cmd {
        let side = self.keys.rule.side();
        let (mode, line) = match self.mode {
            AcquireMode::New(line) => (side.to_string(), line),
            AcquireMode::Reentry => (format!("{side}-re"), Line::Once),
        };
        script.evalsha(
            &[
                self.keys.lock.as_str(),
                self.keys.token.as_str(),
                self.latch,
                self.keys.queue.as_str(),
                self.keys.turn.as_str(),
                self.keys.writer.as_str(),
            ],
            (
                (
                    self.lease_ms,
                    self.owner,
                    mode,
                    self.token_retention_ms,
                    self.latch_ms,
                    self.client_id,
                    line.as_arg(),
                ),
                (
                    self.keys.rw_prefix.as_str(),
                    self.keys.downgrade_from.as_deref().unwrap_or(""),
                    WRITER_MARK_MS,
                ),
            ),
        )
    }
}

/// What the acquire script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// A new hold, with its fencing token.
    Acquired { token: u64 },
    /// Held by another owner (or the turn of another client), who still has
    /// `pttl_ms` (-1: no expiry).
    Held { pttl_ms: i64 },
    /// The hold has one more count.
    Reentered,
    /// The hold to re-enter is gone.
    Gone,
    /// The request's latch existed: it had been cancelled, nothing applied.
    Cancelled,
}

impl AcquireReply {
    /// Parses a reply; anything else is an [`Error::Protocol`].
    pub(crate) fn parse(reply: &Value) -> Result<Self> {
        let bad = || unexpected("acquire", reply);
        match pair(reply).ok_or_else(bad)? {
            (1, token) => Ok(AcquireReply::Acquired {
                token: u64::try_from(token).map_err(|_| bad())?,
            }),
            (0, pttl_ms) => Ok(AcquireReply::Held { pttl_ms }),
            (2, _) => Ok(AcquireReply::Reentered),
            (-1, _) => Ok(AcquireReply::Gone),
            (-2, _) => Ok(AcquireReply::Cancelled),
            _ => Err(bad()),
        }
    }

    /// The error for a reply that does not belong to the call made.
    pub(crate) fn unexpected_here(self) -> Error {
        Error::Protocol(format!("the acquire script answered {self:?} to this call"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_support::{args, reply};

    #[test]
    fn every_documented_reply_parses() -> Result<()> {
        assert_eq!(
            AcquireReply::parse(&reply(1, 1_700_000_000_000_000))?,
            AcquireReply::Acquired {
                token: 1_700_000_000_000_000
            }
        );
        assert_eq!(
            AcquireReply::parse(&reply(0, 2500))?,
            AcquireReply::Held { pttl_ms: 2500 }
        );
        assert_eq!(
            AcquireReply::parse(&reply(0, -1))?,
            AcquireReply::Held { pttl_ms: -1 }
        );
        assert_eq!(AcquireReply::parse(&reply(2, 0))?, AcquireReply::Reentered);
        assert_eq!(AcquireReply::parse(&reply(-1, 0))?, AcquireReply::Gone);
        assert_eq!(AcquireReply::parse(&reply(-2, 0))?, AcquireReply::Cancelled);
        Ok(())
    }

    #[test]
    fn other_replies_are_protocol_errors() {
        for bad in [
            reply(3, 0),
            reply(1, -5),
            Value::Nil,
            Value::Int(1),
            Value::Array(vec![Value::Int(1)]),
        ] {
            let err = AcquireReply::parse(&bad).expect_err("not a reply of acquire.lua");
            assert!(matches!(err, Error::Protocol(_)), "{err:?}");
            assert!(err.to_string().contains("acquire script answered"), "{err}");
        }
    }

    #[test]
    fn modes_and_lines_are_the_scripts_arguments() -> Result<()> {
        let keys = LockKeys::new("", "k", 100)?;
        let scripts = super::super::Scripts::new();
        let call = |mode| AcquireCall {
            keys: &keys,
            latch: "latch",
            owner: "o:1",
            mode,
            lease_ms: 30_000,
            token_retention_ms: 60_000,
            latch_ms: 1_000,
            client_id: "c",
            publish: "publish",
        };
        for (mode, expected) in [
            (AcquireMode::New(Line::Once), ["new", "0"]),
            (AcquireMode::New(Line::Head), ["new", "1"]),
            (AcquireMode::New(Line::PlaceKept), ["new", "2"]),
            (AcquireMode::Reentry, ["re", "0"]),
        ] {
            let a = args(&call(mode).cmd(&scripts.acquire));
            // EVALSHA sha 5 keys(5) lease owner mode token latch client line
            assert_eq!(a[2], "5");
            assert_eq!(a[10], expected[0], "{mode:?}");
            assert_eq!(a[14], expected[1], "{mode:?}");
        }
        Ok(())
    }
}
