//! `cancel.lua`: undo an acquisition or re-entry whose outcome is unknown,
//! and make sure a late copy of it is never applied.

use redis::{Cmd, Value};

use super::keys::{LockKeys, Rule, UNLOCK_MESSAGE};
use super::{unexpected, Script};
use crate::error::Result;

/// Which kind of acquisition a cancellation undoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CancelMode {
    /// A fresh acquisition (or hand-off) of a new hold.
    New,
    /// A re-entry of an existing hold.
    Reentry,
}

impl CancelMode {
    pub(super) fn as_arg(self) -> &'static str {
        match self {
            CancelMode::New => "new",
            CancelMode::Reentry => "re",
        }
    }
}

/// One call of the cancel script.
#[derive(Debug)]
pub(crate) struct CancelCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// The cancelled request's latch key.
    pub(crate) latch: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) mode: CancelMode,
    /// How long the latch refuses a late copy of the request.
    pub(crate) latch_ms: u64,
    /// `publish` or `spublish`.
    pub(crate) publish: &'static str,
}

impl CancelCall<'_> {
    /// The `EVALSHA` command.
    /// (`cancel.lua`, or `rw_cancel.lua` for a side of a read-write lock:
    /// `script` is the one the keys' rule names.)
    pub(crate) fn cmd(&self, script: &Script) -> Cmd {
        if self.keys.rule == Rule::Fair {
            return super::fair::cancel_cmd(self, script);
        }
        if self.keys.rule != Rule::Exclusive {
            return script.evalsha(
                &[
                    self.keys.lock.as_str(),
                    self.keys.channel.as_str(),
                    self.latch,
                ],
                (
                    self.owner,
                    self.mode.as_arg(),
                    self.keys.rule.side(),
                    self.latch_ms,
                    self.publish,
                    self.keys.rw_prefix.as_str(),
                ),
            );
        }
        script.evalsha(
            &[
                self.keys.lock.as_str(),
                self.keys.channel.as_str(),
                self.latch,
            ],
            (
                self.owner,
                self.mode.as_arg(),
                UNLOCK_MESSAGE,
                self.latch_ms,
                self.publish,
            ),
        )
    }
}

/// What the cancel script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CancelReply {
    /// The request had been applied and is undone.
    Undone,
    /// Nothing to undo (never applied, or undone already); a late copy is
    /// refused either way.
    NothingApplied,
}

impl CancelReply {
    /// Parses a reply; anything else is an `Error::Protocol`.
    pub(crate) fn parse(reply: &Value) -> Result<Self> {
        match reply {
            Value::Int(1) => Ok(CancelReply::Undone),
            Value::Int(0) => Ok(CancelReply::NothingApplied),
            other => Err(unexpected("cancel", other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_reply_parses() -> Result<()> {
        assert_eq!(CancelReply::parse(&Value::Int(1))?, CancelReply::Undone);
        assert_eq!(
            CancelReply::parse(&Value::Int(0))?,
            CancelReply::NothingApplied
        );
        for bad in [Value::Int(2), Value::Nil, Value::Okay] {
            assert!(CancelReply::parse(&bad).is_err(), "{bad:?}");
        }
        Ok(())
    }
}
