//! `force_unlock.lua`: delete a lock whoever holds it, and wake its
//! waiters.

use redis::{Cmd, Value};

use super::keys::{LockKeys, UNLOCK_MESSAGE};
use super::{text, unexpected, Script};
use crate::error::Result;

/// The force-unlock script call for the lock `keys`; `publish` is
/// `publish` or `spublish`.
pub(crate) fn force_unlock_cmd(script: &Script, keys: &LockKeys, publish: &'static str) -> Cmd {
    script.evalsha(
        &[keys.lock.as_str(), keys.channel.as_str()],
        (UNLOCK_MESSAGE, publish),
    )
}

/// What the force-unlock script answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ForceUnlockReply {
    /// A lock was deleted and its waiters told.
    Deleted,
    /// A lock was deleted; Redis refused to publish the unlock message
    /// (ACL): `refusal` is its error text.
    DeletedUntold { refusal: String },
    /// There was no lock.
    NotFound,
}

impl ForceUnlockReply {
    /// Parses a reply; anything else is an `Error::Protocol`.
    pub(crate) fn parse(reply: &Value) -> Result<Self> {
        match reply {
            Value::Int(1) => Ok(ForceUnlockReply::Deleted),
            Value::Int(0) => Ok(ForceUnlockReply::NotFound),
            other => match text(other) {
                Some(refusal) => Ok(ForceUnlockReply::DeletedUntold { refusal }),
                None => Err(unexpected("force_unlock", other)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_reply_parses() -> Result<()> {
        assert_eq!(
            ForceUnlockReply::parse(&Value::Int(1))?,
            ForceUnlockReply::Deleted
        );
        assert_eq!(
            ForceUnlockReply::parse(&Value::Int(0))?,
            ForceUnlockReply::NotFound
        );
        assert_eq!(
            ForceUnlockReply::parse(&Value::BulkString(b"NOPERM no".to_vec()))?,
            ForceUnlockReply::DeletedUntold {
                refusal: "NOPERM no".into()
            }
        );
        assert!(ForceUnlockReply::parse(&Value::Int(2)).is_err());
        assert!(ForceUnlockReply::parse(&Value::Nil).is_err());
        Ok(())
    }
}
