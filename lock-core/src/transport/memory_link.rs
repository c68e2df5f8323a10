//! Connections to an in-memory server of this process (feature `memory`):
//! each command is handed to the server as Redis would receive it, and its
//! reply comes back as redis-rs would have parsed it off the wire, so every
//! layer above sees the same values as with a real Redis.

use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisFuture, Value};

use crate::memory::Server;

/// A connection to an in-memory server: cheap to clone, never broken (the
/// server is in this process).
#[derive(Clone)]
pub(crate) struct MemoryLink {
    server: Arc<Server>,
}

impl MemoryLink {
    /// A connection to `server`.
    pub(crate) fn new(server: Arc<Server>) -> Self {
        MemoryLink { server }
    }
}

/// The arguments of `cmd` as Redis receives them.
fn args_of(cmd: &Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|arg| match arg {
            Arg::Simple(bytes) => bytes.to_vec(),
            // Only redis-rs's scan iterators write a cursor argument (this
            // crate passes cursors as plain arguments): a first scan.
            _ => b"0".to_vec(),
        })
        .collect()
}

impl ConnectionLike for MemoryLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let reply = self.server.call(&args_of(cmd));
        Box::pin(async move { reply })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let commands: Vec<Vec<Vec<u8>>> = pipeline.cmd_iter().map(args_of).collect();
        let out = if pipeline.is_transaction() {
            // MULTI ... EXEC (redis-rs asks for one reply at offset len + 1):
            // every command at once, errors in their places.
            self.server
                .call_all(&commands)
                .into_iter()
                .map(exec_entry)
                .collect::<redis::RedisResult<Vec<Value>>>()
                .map(|entries| vec![Value::Array(entries)])
        } else {
            commands
                .iter()
                .map(|command| self.server.call(command))
                .collect::<redis::RedisResult<Vec<Value>>>()
                .map(|replies| replies.into_iter().skip(offset).take(count).collect())
        };
        Box::pin(async move { out })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// One command's reply inside an `EXEC` array: a server error stays in its
/// place, as Redis answers it.
fn exec_entry(reply: redis::RedisResult<Value>) -> redis::RedisResult<Value> {
    match reply {
        Ok(value) => Ok(value),
        Err(e) => redis::ServerError::try_from(e).map(Value::ServerError),
    }
}
