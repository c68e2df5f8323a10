//! Replica acknowledgement of fresh acquisitions (`wait_for_replicas`):
//! after a new hold, the holder writes to it once more (`confirm.lua`) and
//! runs `WAIT n timeout` on the same connection, which it has to itself
//! (a `WAIT` blocks its connection, and counts only that connection's
//! writes). Replication is one ordered stream, so the replicas that have
//! the confirming write have the acquisition, and a local hand-off before
//! it, too.

use redis::Value;

use crate::config::ReplicaAck;
use crate::error::{Error, Result};
use crate::hold::shared::Core;
use crate::protocol::confirm::{confirm_cmd, ConfirmReply};
use crate::protocol::keys::LockKeys;
use crate::protocol::unexpected_reply;

/// What the confirmation of a fresh hold found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Confirmed {
    /// The owner holds the lock; this many replicas acknowledged it.
    Acknowledged(u32),
    /// The owner no longer holds the lock (it ran out, or was taken away).
    Gone,
}

impl Core {
    /// Confirms the hold of `owner` on a connection of the wait lane (its
    /// own for this `WAIT`: never waits for another) and waits for
    /// `ack.replicas` replicas to acknowledge it (at most `ack.timeout`).
    ///
    /// Boxed (see `Core::run_script_within`): it runs inside every acquire.
    pub(crate) fn confirm_on_replicas<'a>(
        &'a self,
        keys: &'a LockKeys,
        owner: &'a str,
        ack: ReplicaAck,
    ) -> crate::hold::shared::BoxFuture<'a, Result<Confirmed>> {
        Box::pin(self.confirm_now(keys, owner, ack))
    }

    async fn confirm_now(
        &self,
        keys: &LockKeys,
        owner: &str,
        ack: ReplicaAck,
    ) -> Result<Confirmed> {
        let limit = self.config.connect_timeout + 2 * self.config.command_timeout + ack.timeout();
        let deadline = tokio::time::Instant::now() + limit;
        let mut lent = match tokio::time::timeout_at(deadline, self.pool.wait_lane()).await {
            Ok(lent) => lent?,
            Err(_) => return Err(Error::CommandTimeout),
        };
        let Some(conn) = lent.conn() else {
            return Err(Error::Protocol("the wait lane lent no connection".into()));
        };
        let suspect = conn.suspect();
        let confirm = async {
            let cmd = confirm_cmd(&self.scripts.confirm, keys, owner);
            let reply = self.scripts.confirm.run(conn, &cmd).await?;
            if ConfirmReply::parse(&reply)? == ConfirmReply::Gone {
                return Ok(Confirmed::Gone);
            }
            let mut wait = redis::cmd("WAIT");
            wait.arg(ack.replicas()).arg(ack.timeout_ms());
            // The reply comes after up to `ack.timeout` by design.
            match conn
                .query_within(
                    &wait,
                    self.config.command_timeout + ack.timeout(),
                    &keys.lock,
                )
                .await?
            {
                Value::Int(n) => Ok(Confirmed::Acknowledged(u32::try_from(n).unwrap_or(0))),
                other => Err(unexpected_reply("WAIT", &other)),
            }
        };
        let result = match tokio::time::timeout_at(deadline, confirm).await {
            Ok(result) => result,
            Err(_) => {
                suspect.mark();
                Err(Error::CommandTimeout)
            }
        };
        if result.is_ok() {
            lent.finished();
        }
        result
    }
}
