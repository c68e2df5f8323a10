//! `rw_leave.lua`: a client's last waiting writer of a read-write lock
//! stops waiting — out of the line of waiting clients, and its writer's
//! mark taken away, so that new readers are not kept out by a writer that
//! is gone.

use redis::{Cmd, Value};

use super::keys::{LockKeys, UNLOCK_MESSAGE};
use super::{unexpected, Script};
use crate::error::Result;

/// The `EVALSHA` of `rw_leave.lua` for the client `client_id` on the
/// write side `keys`; `publish` is `publish` or `spublish`.
pub(crate) fn rw_leave_cmd(
    script: &Script,
    keys: &LockKeys,
    client_id: &str,
    publish: &'static str,
) -> Cmd {
    script.evalsha(
        &[
            keys.queue.as_str(),
            keys.writer.as_str(),
            keys.channel.as_str(),
        ],
        (client_id, UNLOCK_MESSAGE, publish),
    )
}

/// Whether the client had a place in the line (and left it).
pub(crate) fn parse_left(reply: &Value) -> Result<bool> {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(unexpected("rw_leave", other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_reply_parses() -> Result<()> {
        assert!(parse_left(&Value::Int(1))?);
        assert!(!parse_left(&Value::Int(0))?);
        assert!(parse_left(&Value::Nil).is_err());
        Ok(())
    }
}
