//! An in-memory server with Redis semantics for what lock-core uses
//! (feature `memory`): it runs the protocol's very Lua scripts on an
//! embedded Lua 5.1 — the version Redis embeds — over an in-process
//! keyspace, so there is one source of truth for the lock logic, the
//! `.lua` files, and no second implementation of it in Rust.
//!
//! A backend below the transport: it imports nothing from the crate (the
//! transport may connect to it; `tests/tests/engine/layers.rs` checks
//! both). Its conformance with a real redis-server is tested by one table
//! of cases run against both (`tests/tests/engine/conformance.rs`, through
//! the doc-hidden `__private::MemoryServerForTests`).
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | [`Server`]: one lock around the whole state, so every command and every script is atomic, as in Redis |
//! | `keyspace.rs` | strings, hashes, sorted sets, deadlines on tokio's clock, `TIME`'s clock, glob matching |
//! | `commands.rs` | the commands, with Redis 7's arities, options, replies and error texts |
//! | `lua.rs` | `EVAL`, `EVALSHA`, `SCRIPT`: the Lua state, Redis' script environment and conversions |
//! | `pubsub.rs` | classic and sharded channels and their subscribers |
//! | `reply.rs` | a reply as Redis writes it, and as redis-rs reads it |
//!
//! **Replies** are what redis-rs returns from a Redis 7 over RESP2: `+OK`
//! is `Value::Okay`, other statuses `Value::SimpleString`, integers
//! `Value::Int`, bulk strings `Value::BulkString`, the nil bulk
//! `Value::Nil`, arrays `Value::Array`, and an error reply `Err` with the
//! kind redis-rs gives its text (the text is read by redis-rs' own parser:
//! `NOSCRIPT` is `ServerErrorKind::NoScript`, `WRONGTYPE` an extension
//! error with that code, and so on). Error texts are Redis 7.0's.
//!
//! **Commands**: `PING`, `EVAL`, `EVALSHA`, `SCRIPT LOAD|EXISTS|FLUSH`,
//! `DEL`, `EXISTS`, `TYPE`, `GET`, `SET` (`NX`, `XX`, `GET`, `EX`, `PX`,
//! `KEEPTTL`), `INCR`, `DECR`, `INCRBY`, `DECRBY`, `HSET`, `HGET`,
//! `HGETALL`, `HDEL`, `HEXISTS`, `HINCRBY`, `HLEN`, `PEXPIRE` and `EXPIRE`
//! (`NX`, `XX`, `GT`, `LT`), `PTTL`, `TTL`, `ZADD` (`NX`, `XX`, `GT`,
//! `LT`, `CH`), `ZREM`, `ZRANGE` (by rank, `WITHSCORES`), `ZSCORE`,
//! `ZCARD`, `TIME`, `PUBLISH`, `SPUBLISH`, `PUBSUB NUMSUB|SHARDNUMSUB`,
//! `SCAN` (`MATCH`, `COUNT`, `TYPE`), `DBSIZE`, `CONFIG GET
//! maxmemory-policy` (`noeviction`), `ROLE` (a primary without replicas),
//! `FLUSHALL`, `WAIT`. Anything else — another command, option or
//! subcommand — is refused with an `ERR` that names it and says the
//! in-memory server does not run it: a clear failure, never a silent
//! divergence. Commands that change a connection's state (`MULTI`,
//! `SUBSCRIBE`, `HELLO`, `SELECT`, …) belong to a connection, which
//! [`Server::call`] has not: a transport built on it answers them.
//!
//! **`WAIT`** answers 0 at once: the server has no replicas, so no write is
//! ever acknowledged by one, and 0 is the count Redis answers too (after
//! the time-out, when at least one replica was asked for; a caller that
//! wants that delay sleeps it).
//!
//! **Pub/sub**: [`Server::subscribe`] and [`Server::ssubscribe`] return an
//! unbounded receiver of the payloads published on a channel, from then
//! on; dropping it unsubscribes. `PUBLISH` and `SPUBLISH` answer how many
//! subscribers got the message. Classic and sharded channels are apart, as
//! in Redis (one server: sharding decides nothing else).
//!
//! **Time**: deadlines are on `tokio::time::Instant`, so a paused tokio
//! clock (`tokio::time::pause` / `advance`) drives expiry; `TIME` is the
//! wall-clock time at [`Server::new`] plus the tokio time elapsed since,
//! so virtual time moves it too. A command or a script reads the clock
//! once, when it starts (Redis 7 also freezes time during a script).
//!
//! **Restart**: [`Server::flush_all`] is a restart that lost every key:
//! the keys, the script cache (and the Lua state) and every subscription
//! (a restart closes every connection) are gone.
//!

mod commands;
mod keyspace;
mod lua;
mod pubsub;
pub(crate) mod registry;
mod reply;

use std::fmt;
use std::sync::{Mutex, MutexGuard};

use redis::{RedisResult, Value};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use commands::Db;
use pubsub::Namespace;
use reply::Reply;

/// An in-memory Redis: commands and scripts on one keyspace, each atomic.
/// `Send + Sync`: share it behind an `Arc`.
pub(crate) struct Server {
    state: Mutex<State>,
}

struct State {
    db: Db,
    /// The Lua state, made at the first script command.
    engine: Option<lua::Engine>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("Server")
            .field("keys", &state.db.keys.len())
            .field("engine", &state.engine)
            .finish()
    }
}

impl Default for Server {
    fn default() -> Self {
        Server::new()
    }
}

impl Server {
    /// An empty server; `TIME` starts at the wall-clock time now.
    pub(crate) fn new() -> Self {
        Server {
            state: Mutex::new(State {
                db: Db::new(),
                engine: None,
            }),
        }
    }

    /// The state. A panic while it was held (a bug) leaves it usable: each
    /// command changes it in steps that are each complete.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs one command, its arguments as Redis receives them (the name in
    /// any case); the reply as redis-rs returns it from Redis 7 over RESP2
    /// (see the module doc).
    pub(crate) fn call(&self, args: &[Vec<u8>]) -> RedisResult<Value> {
        self.run(args).into_result()
    }

    /// Runs `commands` one after the other with nothing in between, as
    /// `MULTI` ... `EXEC` does: one reply each, an error in its place.
    pub(crate) fn call_all(&self, commands: &[Vec<Vec<u8>>]) -> Vec<RedisResult<Value>> {
        let mut guard = self.state();
        commands
            .iter()
            .map(|args| Self::run_in(&mut guard, args).into_result())
            .collect()
    }

    fn run(&self, args: &[Vec<u8>]) -> Reply {
        let mut guard = self.state();
        Self::run_in(&mut guard, args)
    }

    fn run_in(state: &mut State, args: &[Vec<u8>]) -> Reply {
        let Some(name) = args.first() else {
            return Reply::err("ERR empty command");
        };
        let Some(spec) = commands::lookup(name) else {
            return commands::unsupported_command(name);
        };
        if !spec.arity_fits(args.len()) {
            return reply::errors::arity(spec.name);
        }
        let State { db, engine } = state;
        let now = Instant::now();
        db.keys.expire_due(now);
        match spec.name {
            "eval" => lua::eval(engine, db, now, args),
            "evalsha" => lua::evalsha(engine, db, now, args),
            "script" => lua::script(engine, args),
            _ => spec.run(db, now, args),
        }
    }

    /// A subscriber of the classic channel `channel` (`SUBSCRIBE`): it
    /// receives every payload `PUBLISH`ed there from now on, until it is
    /// dropped or the server restarts ([`Server::flush_all`]).
    pub(crate) fn subscribe(&self, channel: &[u8]) -> UnboundedReceiver<Vec<u8>> {
        self.state()
            .db
            .pubsub
            .subscribe(Namespace::Classic, channel)
    }

    /// A subscriber of the sharded channel `channel` (`SSUBSCRIBE`): it
    /// receives what `SPUBLISH` sends there (never what `PUBLISH` sends).
    pub(crate) fn ssubscribe(&self, channel: &[u8]) -> UnboundedReceiver<Vec<u8>> {
        self.state()
            .db
            .pubsub
            .subscribe(Namespace::Sharded, channel)
    }

    /// A restart that lost every key: keys, the script cache (with the Lua
    /// state) and every subscription are gone.
    pub(crate) fn flush_all(&self) {
        let mut state = self.state();
        state.db.flush_keys();
        state.db.pubsub.close_all();
        state.engine = None;
    }
}
