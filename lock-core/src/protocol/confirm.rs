//! `confirm.lua`: a write of an unchanged count by the holder, for a
//! `WAIT` on the same connection to count (see `replicas.rs`).

use redis::{Cmd, Value};

use super::keys::LockKeys;
use super::{unexpected, Script};
use crate::error::Result;

/// The confirm script call for the hold `owner` of the lock `keys`.
pub(crate) fn confirm_cmd(script: &Script, keys: &LockKeys, owner: &str) -> Cmd {
    script.evalsha(&[keys.lock.as_str()], keys.field(owner).as_ref())
}

/// What the confirm script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConfirmReply {
    /// The owner holds the lock; its count was written again.
    Held,
    /// The owner no longer holds it.
    Gone,
}

impl ConfirmReply {
    /// Parses a reply; anything else is an `Error::Protocol`.
    pub(crate) fn parse(reply: &Value) -> Result<Self> {
        match reply {
            Value::Int(1) => Ok(ConfirmReply::Held),
            Value::Int(0) => Ok(ConfirmReply::Gone),
            other => Err(unexpected("confirm", other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_reply_parses() -> Result<()> {
        assert_eq!(ConfirmReply::parse(&Value::Int(1))?, ConfirmReply::Held);
        assert_eq!(ConfirmReply::parse(&Value::Int(0))?, ConfirmReply::Gone);
        assert!(ConfirmReply::parse(&Value::Nil).is_err());
        Ok(())
    }
}
