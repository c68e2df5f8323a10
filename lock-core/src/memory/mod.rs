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
//! | `keyspace.rs` | strings, hashes, lists, sorted sets, deadlines on tokio's clock, `TIME`'s clock, glob matching |
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
//! `HGETALL`, `HKEYS`, `HDEL`, `HEXISTS`, `HINCRBY`, `HLEN`, `RPUSH`,
//! `LPUSH`, `LPOP` and `RPOP` (with or without a count), `LINDEX`,
//! `LRANGE`, `LREM`, `LLEN`, `PEXPIRE` and `EXPIRE` (`NX`, `XX`, `GT`,
//! `LT`), `PTTL`, `TTL`, `ZADD` (`NX`, `XX`, `GT`, `LT`, `CH`),
//! `ZINCRBY`, `ZREM`, `ZRANGE` (by rank, or `BYSCORE` with `LIMIT`;
//! `WITHSCORES`), `ZRANGEBYSCORE` (`WITHSCORES`, `LIMIT`), `ZSCORE`,
//! `ZCARD`, `TIME`, `PUBLISH`, `SPUBLISH`, `PUBSUB NUMSUB|SHARDNUMSUB`,
//! `SCAN` (`MATCH`, `COUNT`, `TYPE`), `DBSIZE`, `CONFIG GET
//! maxmemory-policy` (`noeviction`), `ROLE` (a primary without replicas),
//! `FLUSHALL`, `WAIT`. Anything else — another command, option or
//! subcommand, and hexadecimal numbers as scores or score bounds (which
//! Redis reads with `strtod`) — is refused with an `ERR` that names it
//! and says the in-memory server does not run it: a clear failure, never
//! a silent divergence. Commands that change a connection's state (`MULTI`,
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
//! **Time**: deadlines are whole milliseconds on `tokio::time::Instant`,
//! as Redis counts them, so a paused tokio clock (`tokio::time::pause` /
//! `advance`) drives expiry; `TIME` is the
//! wall-clock time at [`Server::new`] plus the tokio time elapsed since,
//! so virtual time moves it too. A command or a script reads the clock
//! once, when it starts (Redis 7 also freezes time during a script).
//!
//! **Restart**: [`Server::flush_all`] is a restart that lost every key:
//! the keys, the script cache (and the Lua state) and every subscription
//! (a restart closes every connection) are gone. [`Server::restart`] also
//! resets the connections of an [interposed](interpose) network and keeps
//! the server down for a while.
//!
//! **Simulation** (`interpose.rs`): an [`interpose::Interposer`] set on a
//! server decides the fate of each command and message on the way
//! (delays, reorderings, silences, resets, a command run twice), and
//! [`Server::set_clock`] makes the server's clock run fast within a drift,
//! so lock-sim can run many clients through a seeded, replayable network.
//!
//! **Cost** (release build, 2 shared cores; this module's `per_call_cost`
//! test, 100 000 calls each): a plain command (`HGET`) about 0.2 µs; an
//! `EVALSHA` of `return 1` about 2 µs (keys and arguments into Lua, the
//! call, the reply back), plus about 1.2 µs per `redis.call`; an
//! `acquire.lua` (a free lock) plus a `release.lua` about 37 µs the pair,
//! building the commands and parsing the replies included. One Lua state
//! serves every script: a new state costs about 98 µs, which a state per
//! call would add to every script call. During a run the data moves into
//! the state (mlua's app data), so `redis.call` is one function made once.

mod commands;
pub(crate) mod interpose;
mod keyspace;
mod lua;
mod pubsub;
pub(crate) mod registry;
mod reply;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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
    /// The simulated network, when a simulation set one.
    interposer: Mutex<Option<Arc<dyn interpose::Interposer>>>,
    /// Bumped by each [`Server::restart`]: links of an older epoch are
    /// reset (on an interposed network).
    epoch: AtomicU64,
    /// Down until then (after a [`Server::restart`]): connections are
    /// refused.
    down_until: Mutex<Option<Instant>>,
    /// Links opened on an interposed network so far (they are numbered).
    links: AtomicU64,
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
            interposer: Mutex::new(None),
            epoch: AtomicU64::new(0),
            down_until: Mutex::new(None),
            links: AtomicU64::new(0),
        }
    }

    /// The number of the next link opened on an interposed network (from 1).
    pub(crate) fn next_link(&self) -> u64 {
        self.links.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Puts `interposer` between the server and the links opened from now
    /// on (see [`interpose`]).
    pub(crate) fn set_interposer(&self, interposer: Arc<dyn interpose::Interposer>) {
        *self.interposer.lock().unwrap_or_else(|p| p.into_inner()) = Some(interposer);
    }

    /// The simulated network, if any.
    pub(crate) fn interposer(&self) -> Option<Arc<dyn interpose::Interposer>> {
        self.interposer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The restart count (see [`Server::restart`]).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Whether the server is down at `now` (restarting).
    pub(crate) fn is_down(&self, now: Instant) -> bool {
        self.down_until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|until| now < until)
    }

    /// A restart that lost every key ([`Server::flush_all`]), taking
    /// `down` to come back: on an interposed network, every link open now
    /// is reset and new ones are refused until then.
    pub(crate) fn restart(&self, down: Duration) {
        self.flush_all();
        self.epoch.fetch_add(1, Ordering::SeqCst);
        *self.down_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + down);
    }

    /// Makes the server's clock (expiry and `TIME`) run `fast_ppm`
    /// millionths faster than tokio's from now on, and jumps it `jump`
    /// ahead: the clock drift a simulation plays within.
    pub(crate) fn set_clock(&self, fast_ppm: u32, jump: Duration) {
        self.state()
            .db
            .clock
            .set_drift(Instant::now(), fast_ppm, jump);
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
        db.keys.expire_due(db.clock.ms(now));
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

#[cfg(test)]
mod tests {
    //! Each of the library's scripts, run through `Server::call` for every
    //! case its header lists: the commands built by the protocol's typed
    //! calls, the replies parsed by its reply enums (which proves they
    //! have the shapes the library expects). On tokio's paused clock, so
    //! that TTLs read after a script are exact.

    use std::time::Duration;

    use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

    use super::Server;
    use crate::protocol::acquire::{AcquireCall, AcquireMode, AcquireReply, Line};
    use crate::protocol::cancel::{CancelCall, CancelMode, CancelReply};
    use crate::protocol::confirm::{confirm_cmd, ConfirmReply};
    use crate::protocol::force_unlock::{force_unlock_cmd, ForceUnlockReply};
    use crate::protocol::handoff::{HandOffCall, HandOffReply};
    use crate::protocol::keys::LockKeys;
    use crate::protocol::release::{ReleaseCall, ReleaseReply};
    use crate::protocol::renew::parse_renewals;
    use crate::protocol::Scripts;

    const LEASE: u64 = 30_000;
    const RETENTION: u64 = 60_000;
    const LATCH: u64 = 1_000;

    fn args_of(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => b"0".to_vec(),
            })
            .collect()
    }

    fn run(server: &Server, cmd: &Cmd) -> redis::RedisResult<Value> {
        server.call(&args_of(cmd))
    }

    fn ok(server: &Server, cmd: &Cmd) -> Value {
        match run(server, cmd) {
            Ok(v) => v,
            Err(e) => panic!("{:?} failed: {e}", args_of(cmd)),
        }
    }

    fn raw(server: &Server, args: &[&str]) -> Value {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        server
            .call(&args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    fn int(v: Value) -> i64 {
        match v {
            Value::Int(n) => n,
            other => panic!("not an integer: {other:?}"),
        }
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// A server with the scripts loaded (as `Script::run` does on NOSCRIPT).
    fn loaded() -> (Server, Scripts) {
        let server = Server::new();
        let scripts = Scripts::new();
        for script in [
            &scripts.acquire,
            &scripts.release,
            &scripts.handoff,
            &scripts.renew,
            &scripts.force_unlock,
            &scripts.cancel,
            &scripts.confirm,
        ] {
            ok(&server, &script.load_cmd());
        }
        (server, scripts)
    }

    fn keys() -> LockKeys {
        LockKeys::new("", "order:42", 1000).unwrap_or_else(|e| panic!("{e}"))
    }

    fn acquire_call<'a>(
        keys: &'a LockKeys,
        latch: &'a str,
        owner: &'a str,
        mode: AcquireMode,
        client: &'a str,
    ) -> AcquireCall<'a> {
        AcquireCall {
            keys,
            latch,
            owner,
            mode,
            lease_ms: LEASE,
            token_retention_ms: RETENTION,
            latch_ms: LATCH,
            client_id: client,
            publish: "publish",
        }
    }

    fn acquire(
        server: &Server,
        scripts: &Scripts,
        keys: &LockKeys,
        owner: &str,
        mode: AcquireMode,
        client: &str,
    ) -> AcquireReply {
        let latch = keys.latch(&format!("{owner}:{mode:?}"));
        let cmd = acquire_call(keys, &latch, owner, mode, client).cmd(&scripts.acquire);
        AcquireReply::parse(&ok(server, &cmd)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn release(
        server: &Server,
        scripts: &Scripts,
        keys: &LockKeys,
        owner: &str,
        counts: u32,
        client: &str,
        publish: &'static str,
    ) -> ReleaseReply {
        let cmd = ReleaseCall {
            keys,
            owner,
            lease_ms: LEASE,
            client_id: client,
            turn_ms: 20,
            counts,
            publish,
        }
        .cmd(&scripts.release);
        ReleaseReply::parse(&ok(server, &cmd)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Microseconds since the epoch, per the server's TIME.
    fn server_time_us(server: &Server) -> u64 {
        match raw(server, &["TIME"]) {
            Value::Array(parts) => {
                let n: Vec<u64> = parts
                    .iter()
                    .map(|p| match p {
                        Value::BulkString(b) => String::from_utf8_lossy(b).parse().unwrap_or(0),
                        _ => 0,
                    })
                    .collect();
                n[0] * 1_000_000 + n[1]
            }
            other => panic!("TIME answered {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn noscript_until_loaded() {
        let server = Server::new();
        let scripts = Scripts::new();
        let k = keys();
        let cmd = acquire_call(&k, "latch", "o:1", AcquireMode::New(Line::Once), "c")
            .cmd(&scripts.acquire);
        let e = run(&server, &cmd).expect_err("not loaded yet");
        assert_eq!(e.kind(), ErrorKind::Server(ServerErrorKind::NoScript));
        ok(&server, &scripts.acquire.load_cmd());
        assert!(matches!(
            AcquireReply::parse(&ok(&server, &cmd)),
            Ok(AcquireReply::Acquired { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_new_reentry_held_gone_and_cancelled() {
        let (s, scripts) = loaded();
        let k = keys();
        let before = server_time_us(&s);
        // a new hold of a free lock: its token is the server's clock
        let AcquireReply::Acquired { token } =
            acquire(&s, &scripts, &k, "c1:1", AcquireMode::New(Line::Once), "c1")
        else {
            panic!("a free lock is granted")
        };
        assert!(
            token >= before && token <= server_time_us(&s),
            "{before} <= {token}"
        );
        assert_eq!(raw(&s, &["HGET", &k.lock, "c1:1"]), bulk("1"));
        assert_eq!(int(raw(&s, &["PTTL", &k.lock])), LEASE as i64);
        assert_eq!(raw(&s, &["GET", &k.token]), bulk(&token.to_string()));
        assert!(int(raw(&s, &["PTTL", &k.token])) > 0);
        // re-entry: one more count, the latch records it
        assert_eq!(
            acquire(&s, &scripts, &k, "c1:1", AcquireMode::Reentry, "c1"),
            AcquireReply::Reentered
        );
        assert_eq!(raw(&s, &["HGET", &k.lock, "c1:1"]), bulk("2"));
        assert_eq!(raw(&s, &["GET", &k.latch("c1:1:Reentry")]), bulk("1"));
        // the hold of another owner id is gone (never created by a re-entry)
        assert_eq!(
            acquire(&s, &scripts, &k, "c1:9", AcquireMode::Reentry, "c1"),
            AcquireReply::Gone
        );
        // held by another owner: its PTTL; a single attempt does not join the line
        let AcquireReply::Held { pttl_ms } =
            acquire(&s, &scripts, &k, "c2:1", AcquireMode::New(Line::Once), "c2")
        else {
            panic!("held")
        };
        assert_eq!(pttl_ms, LEASE as i64);
        assert_eq!(int(raw(&s, &["ZCARD", &k.queue])), 0);
        // a waiting head joins the line, once
        acquire(&s, &scripts, &k, "c2:2", AcquireMode::New(Line::Head), "c2");
        acquire(&s, &scripts, &k, "c2:3", AcquireMode::New(Line::Head), "c2");
        assert_eq!(
            raw(&s, &["ZRANGE", &k.queue, "0", "-1"]),
            Value::Array(vec![bulk("c2")])
        );
        // a cancelled request (its latch exists) is never applied
        let latch = k.latch("c3:1");
        raw(&s, &["SET", &latch, "x", "PX", "1000"]);
        let cmd = acquire_call(&k, &latch, "c3:1", AcquireMode::New(Line::Once), "c3")
            .cmd(&scripts.acquire);
        assert_eq!(
            AcquireReply::parse(&ok(&s, &cmd)).ok(),
            Some(AcquireReply::Cancelled)
        );
        let cmd =
            acquire_call(&k, &latch, "c1:1", AcquireMode::Reentry, "c1").cmd(&scripts.acquire);
        assert_eq!(
            AcquireReply::parse(&ok(&s, &cmd)).ok(),
            Some(AcquireReply::Cancelled)
        );
        assert_eq!(raw(&s, &["HGET", &k.lock, "c1:1"]), bulk("2"));
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_honours_the_turn_the_line_and_the_last_token() {
        let (s, scripts) = loaded();
        let k = keys();
        // the turn of another client: the lock is not taken, the turn's PTTL comes back
        raw(&s, &["SET", &k.turn, "c9", "PX", "500"]);
        let AcquireReply::Held { pttl_ms } =
            acquire(&s, &scripts, &k, "c1:1", AcquireMode::New(Line::Head), "c1")
        else {
            panic!("reserved for c9")
        };
        assert_eq!(pttl_ms, 500);
        assert_eq!(
            raw(&s, &["ZRANGE", &k.queue, "0", "-1"]),
            Value::Array(vec![bulk("c1")])
        );
        // c9's turn: it takes the lock, the turn goes, and it leaves the line
        raw(&s, &["ZADD", &k.queue, "1", "c9"]);
        assert!(matches!(
            acquire(
                &s,
                &scripts,
                &k,
                "c9:1",
                AcquireMode::New(Line::PlaceKept),
                "c9"
            ),
            AcquireReply::Acquired { .. }
        ));
        assert_eq!(int(raw(&s, &["EXISTS", &k.turn])), 0);
        assert_eq!(
            raw(&s, &["ZRANGE", &k.queue, "0", "-1"]),
            Value::Array(vec![bulk("c1")])
        );
        // a last token ahead of the clock: the next token is one more
        raw(&s, &["DEL", &k.lock]);
        raw(&s, &["SET", &k.token, "99999999999999999"]);
        assert_eq!(
            acquire(&s, &scripts, &k, "c1:2", AcquireMode::New(Line::Once), "c1"),
            AcquireReply::Acquired {
                token: 100_000_000_000_000_000
            }
        );
        assert_eq!(raw(&s, &["GET", &k.token]), bulk("100000000000000000"));
        // tokens grow strictly, also within one clock reading
        raw(&s, &["DEL", &k.lock, &k.token]);
        let mut last = 0;
        for n in 0..5 {
            raw(&s, &["DEL", &k.lock]);
            let AcquireReply::Acquired { token } = acquire(
                &s,
                &scripts,
                &k,
                &format!("c1:t{n}"),
                AcquireMode::New(Line::Once),
                "c1",
            ) else {
                panic!("free")
            };
            assert!(token > last, "{token} > {last}");
            last = token;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_fails_with_the_type_error_before_leaving_a_hold() {
        let (s, scripts) = loaded();
        let k = keys();
        raw(&s, &["HSET", &k.token, "not", "a string"]);
        let latch = k.latch("c1:1");
        let cmd = acquire_call(&k, &latch, "c1:1", AcquireMode::New(Line::Once), "c1")
            .cmd(&scripts.acquire);
        let e = run(&s, &cmd).expect_err("the token key is a hash");
        assert_eq!(e.code(), Some("WRONGTYPE"));
        assert!(e.to_string().contains("script:"), "{e}");
        assert_eq!(int(raw(&s, &["EXISTS", &k.lock])), 0, "no hold left behind");
        // and a lock key of another type answers "held, no expiry"
        raw(&s, &["DEL", &k.token]);
        raw(&s, &["SET", &k.lock, "x"]);
        assert_eq!(
            acquire(&s, &scripts, &k, "c1:2", AcquireMode::New(Line::Once), "c1"),
            AcquireReply::Held { pttl_ms: -1 }
        );
        // a re-entry on it: HEXISTS on a string
        let cmd =
            acquire_call(&k, &latch, "c1:2", AcquireMode::Reentry, "c1").cmd(&scripts.acquire);
        assert_eq!(
            run(&s, &cmd).expect_err("a string").code(),
            Some("WRONGTYPE")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn release_every_reply() {
        let (s, scripts) = loaded();
        let k = keys();
        assert_eq!(
            release(&s, &scripts, &k, "c1:1", 1, "c1", "publish"),
            ReleaseReply::NotHeld
        );
        acquire(&s, &scripts, &k, "c1:1", AcquireMode::New(Line::Once), "c1");
        acquire(&s, &scripts, &k, "c1:1", AcquireMode::Reentry, "c1");
        // one of two counts: taken off; a copy of the same request changes nothing
        assert_eq!(
            release(&s, &scripts, &k, "c1:1", 2, "c1", "publish"),
            ReleaseReply::HoldsRemain
        );
        assert_eq!(raw(&s, &["HGET", &k.lock, "c1:1"]), bulk("1"));
        assert_eq!(
            release(&s, &scripts, &k, "c1:1", 2, "c1", "publish"),
            ReleaseReply::HoldsRemain
        );
        assert_eq!(raw(&s, &["HGET", &k.lock, "c1:1"]), bulk("1"));
        // the last count, nobody listening
        assert_eq!(
            release(&s, &scripts, &k, "c1:1", 1, "c1", "publish"),
            ReleaseReply::Freed { told: 0 }
        );
        assert_eq!(int(raw(&s, &["EXISTS", &k.lock])), 0);
        // the last count, two subscribers: the turn goes to the client that waited longest
        let mut woken = s.subscribe(k.channel.as_bytes());
        let _other = s.subscribe(k.channel.as_bytes());
        acquire(&s, &scripts, &k, "c1:2", AcquireMode::New(Line::Once), "c1");
        raw(&s, &["ZADD", &k.queue, "1", "c1", "2", "c2", "3", "c3"]);
        assert_eq!(
            release(&s, &scripts, &k, "c1:2", 1, "c1", "publish"),
            ReleaseReply::Freed { told: 2 }
        );
        assert_eq!(woken.try_recv().ok(), Some(b"0".to_vec()));
        assert_eq!(raw(&s, &["GET", &k.turn]), bulk("c2"));
        assert!(int(raw(&s, &["PTTL", &k.turn])) <= 20);
        assert_eq!(
            raw(&s, &["ZRANGE", &k.queue, "0", "-1"]),
            Value::Array(vec![bulk("c1"), bulk("c3")])
        );
        // sharded: SPUBLISH reaches sharded subscribers only
        let mut sharded = s.ssubscribe(k.channel.as_bytes());
        acquire(&s, &scripts, &k, "c2:1", AcquireMode::New(Line::Once), "c2");
        assert_eq!(
            release(&s, &scripts, &k, "c2:1", 1, "c2", "spublish"),
            ReleaseReply::Freed { told: 1 }
        );
        assert_eq!(sharded.try_recv().ok(), Some(b"0".to_vec()));
        assert!(woken.try_recv().is_err());
        // a refused publish: the lock is freed all the same, the refusal comes back as text
        // (the last release gave the turn to c1, which waited longest)
        assert_eq!(raw(&s, &["GET", &k.turn]), bulk("c1"));
        assert!(matches!(
            acquire(&s, &scripts, &k, "c3:1", AcquireMode::New(Line::Once), "c3"),
            AcquireReply::Held { .. }
        ));
        acquire(&s, &scripts, &k, "c1:3", AcquireMode::New(Line::Once), "c1");
        let reply = release(&s, &scripts, &k, "c1:3", 1, "c1", "pttl");
        let ReleaseReply::FreedUntold { refusal } = reply else {
            panic!("the publish command is refused: {reply:?}")
        };
        assert!(refusal.starts_with("ERR Wrong number of args"), "{refusal}");
        assert_eq!(int(raw(&s, &["EXISTS", &k.lock])), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn handoff_every_reply() {
        let (s, scripts) = loaded();
        let k = keys();
        let call = |latch: &str, owner: &str, next: &str| -> HandOffReply {
            let latch = latch.to_string();
            let cmd = HandOffCall {
                keys: &k,
                latch: &latch,
                latch_ms: LATCH,
                owner,
                next,
                next_lease_ms: LEASE,
                token_retention_ms: RETENTION,
                publish: "publish",
            }
            .cmd(&scripts.handoff);
            HandOffReply::parse(&ok(&s, &cmd)).unwrap_or_else(|e| panic!("{e}"))
        };
        assert_eq!(call(&k.latch("r0"), "c1:1", "c1:2"), HandOffReply::NotHeld);
        let AcquireReply::Acquired { token: first } =
            acquire(&s, &scripts, &k, "c1:1", AcquireMode::New(Line::Once), "c1")
        else {
            panic!("free")
        };
        let HandOffReply::Given { token } = call(&k.latch("r1"), "c1:1", "c1:2") else {
            panic!("handed off")
        };
        assert!(token > first);
        assert_eq!(
            raw(&s, &["HGETALL", &k.lock]),
            Value::Array(vec![bulk("c1:2"), bulk("1")])
        );
        assert_eq!(int(raw(&s, &["PTTL", &k.lock])), LEASE as i64);
        // a retry reads the first result from its latch
        assert_eq!(
            call(&k.latch("r1"), "c1:1", "c1:2"),
            HandOffReply::Given { token }
        );
        // the next owner's hand-off was cancelled: the lock is freed instead
        raw(&s, &["SET", &k.latch("c1:3"), "x", "PX", "1000"]);
        assert_eq!(call(&k.latch("r2"), "c1:2", "c1:3"), HandOffReply::Freed);
        assert_eq!(int(raw(&s, &["EXISTS", &k.lock])), 0);
        assert_eq!(raw(&s, &["GET", &k.latch("r2")]), bulk("4:0"));
    }

    #[tokio::test(start_paused = true)]
    async fn cancel_every_reply() {
        let (s, scripts) = loaded();
        let k = keys();
        let cancel = |latch: &str, owner: &str, mode: CancelMode| -> CancelReply {
            let cmd = CancelCall {
                keys: &k,
                latch,
                owner,
                mode,
                latch_ms: LATCH,
                publish: "publish",
            }
            .cmd(&scripts.cancel);
            CancelReply::parse(&ok(&s, &cmd)).unwrap_or_else(|e| panic!("{e}"))
        };
        // never applied: nothing undone, and a late copy is refused
        let latch = k.latch("c1:1");
        assert_eq!(
            cancel(&latch, "c1:1", CancelMode::New),
            CancelReply::NothingApplied
        );
        let cmd = acquire_call(&k, &latch, "c1:1", AcquireMode::New(Line::Once), "c1")
            .cmd(&scripts.acquire);
        assert_eq!(
            AcquireReply::parse(&ok(&s, &cmd)).ok(),
            Some(AcquireReply::Cancelled)
        );
        // applied: undone, and the waiters are told
        let mut waiter = s.subscribe(k.channel.as_bytes());
        let latch = k.latch("c1:2");
        let cmd = acquire_call(&k, &latch, "c1:2", AcquireMode::New(Line::Once), "c1")
            .cmd(&scripts.acquire);
        AcquireReply::parse(&ok(&s, &cmd)).ok();
        assert_eq!(cancel(&latch, "c1:2", CancelMode::New), CancelReply::Undone);
        assert_eq!(int(raw(&s, &["EXISTS", &k.lock])), 0);
        assert_eq!(waiter.try_recv().ok(), Some(b"0".to_vec()));
        // a re-entry applied: one count undone
        let cmd = acquire_call(
            &k,
            &k.latch("c1:3"),
            "c1:3",
            AcquireMode::New(Line::Once),
            "c1",
        )
        .cmd(&scripts.acquire);
        ok(&s, &cmd);
        let re = k.latch("re1");
        let cmd = acquire_call(&k, &re, "c1:3", AcquireMode::Reentry, "c1").cmd(&scripts.acquire);
        assert_eq!(
            AcquireReply::parse(&ok(&s, &cmd)).ok(),
            Some(AcquireReply::Reentered)
        );
        assert_eq!(
            cancel(&re, "c1:3", CancelMode::Reentry),
            CancelReply::Undone
        );
        assert_eq!(raw(&s, &["HGET", &k.lock, "c1:3"]), bulk("1"));
        // a re-entry never applied
        assert_eq!(
            cancel(&k.latch("re2"), "c1:3", CancelMode::Reentry),
            CancelReply::NothingApplied
        );
        assert_eq!(raw(&s, &["HGET", &k.lock, "c1:3"]), bulk("1"));
        // a re-entry applied on a count one short (a late release copy took
        // one): undone, but the hold stays (only its last release ends it)
        let re = k.latch("re3");
        let cmd = acquire_call(&k, &re, "c1:3", AcquireMode::Reentry, "c1").cmd(&scripts.acquire);
        ok(&s, &cmd);
        raw(&s, &["HINCRBY", &k.lock, "c1:3", "-1"]);
        assert_eq!(
            cancel(&re, "c1:3", CancelMode::Reentry),
            CancelReply::Undone
        );
        assert_eq!(raw(&s, &["HGET", &k.lock, "c1:3"]), bulk("1"));
    }

    #[tokio::test(start_paused = true)]
    async fn renew_confirm_and_force_unlock() {
        let (s, scripts) = loaded();
        let a = LockKeys::new("", "a", 100).unwrap_or_else(|e| panic!("{e}"));
        let b = LockKeys::new("", "b", 100).unwrap_or_else(|e| panic!("{e}"));
        acquire(&s, &scripts, &a, "c1:1", AcquireMode::New(Line::Once), "c1");
        acquire(&s, &scripts, &b, "c1:2", AcquireMode::New(Line::Once), "c1");
        raw(&s, &["PEXPIRE", &a.lock, "10"]);
        // renew: a renewed, b held by someone else, c gone
        let cmd = scripts.renew.evalsha(
            &[a.lock.as_str(), b.lock.as_str(), "c"],
            (LEASE, "c1:1", "c9:9", "c1:3"),
        );
        let renewed = parse_renewals(&ok(&s, &cmd), 3).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(renewed, [Some(true), Some(false), Some(false)]);
        assert_eq!(int(raw(&s, &["PTTL", &a.lock])), LEASE as i64);
        // a longer lease is never shortened
        let cmd = scripts.renew.evalsha(&[a.lock.as_str()], (100u64, "c1:1"));
        assert_eq!(
            parse_renewals(&ok(&s, &cmd), 1).ok(),
            Some(vec![Some(true)])
        );
        assert_eq!(int(raw(&s, &["PTTL", &a.lock])), LEASE as i64);
        // confirm
        let held = ok(&s, &confirm_cmd(&scripts.confirm, &a, "c1:1"));
        assert_eq!(ConfirmReply::parse(&held).ok(), Some(ConfirmReply::Held));
        let gone = ok(&s, &confirm_cmd(&scripts.confirm, &a, "c1:9"));
        assert_eq!(ConfirmReply::parse(&gone).ok(), Some(ConfirmReply::Gone));
        // force-unlock
        let mut waiter = s.subscribe(a.channel.as_bytes());
        let deleted = ok(&s, &force_unlock_cmd(&scripts.force_unlock, &a, "publish"));
        assert_eq!(
            ForceUnlockReply::parse(&deleted).ok(),
            Some(ForceUnlockReply::Deleted)
        );
        assert_eq!(waiter.try_recv().ok(), Some(b"0".to_vec()));
        let none = ok(&s, &force_unlock_cmd(&scripts.force_unlock, &a, "publish"));
        assert_eq!(
            ForceUnlockReply::parse(&none).ok(),
            Some(ForceUnlockReply::NotFound)
        );
        let refused = ok(&s, &force_unlock_cmd(&scripts.force_unlock, &b, "pttl"));
        assert!(matches!(
            ForceUnlockReply::parse(&refused),
            Ok(ForceUnlockReply::DeletedUntold { refusal }) if refusal.contains("Wrong number of args")
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn leases_expire_on_tokios_clock_and_time_follows_it() {
        let (s, scripts) = loaded();
        let k = keys();
        let latch = k.latch("c1:1");
        let mut call = acquire_call(&k, &latch, "c1:1", AcquireMode::New(Line::Once), "c1");
        call.lease_ms = 100;
        let AcquireReply::Acquired { token: first } =
            AcquireReply::parse(&ok(&s, &call.cmd(&scripts.acquire)))
                .unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("free")
        };
        let t0 = server_time_us(&s);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(int(raw(&s, &["PTTL", &k.lock])), 0, "alive at its deadline");
        assert_eq!(int(raw(&s, &["EXISTS", &k.lock])), 1);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(int(raw(&s, &["EXISTS", &k.lock])), 0, "gone just after it");
        assert_eq!(
            server_time_us(&s) - t0,
            101_000,
            "TIME moved with the paused clock"
        );
        let AcquireReply::Acquired { token } =
            acquire(&s, &scripts, &k, "c2:1", AcquireMode::New(Line::Once), "c2")
        else {
            panic!("expired, so free")
        };
        assert!(token > first);
        // TTL rounds, as Redis' does
        raw(&s, &["SET", "k", "v", "PX", "1499"]);
        assert_eq!(int(raw(&s, &["TTL", "k"])), 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(int(raw(&s, &["TTL", "k"])), -2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_loses_keys_scripts_and_subscriptions() {
        let (s, scripts) = loaded();
        let k = keys();
        acquire(&s, &scripts, &k, "c1:1", AcquireMode::New(Line::Once), "c1");
        let mut sub = s.subscribe(b"ch");
        s.flush_all();
        assert_eq!(int(raw(&s, &["DBSIZE"])), 0);
        let cmd =
            acquire_call(&k, "l", "c1:2", AcquireMode::New(Line::Once), "c1").cmd(&scripts.acquire);
        assert_eq!(
            run(&s, &cmd).expect_err("scripts are gone").kind(),
            ErrorKind::Server(ServerErrorKind::NoScript)
        );
        assert!(matches!(
            sub.try_recv(),
            Err(tokio::sync::mpsc::error::TryRecvError::Disconnected)
        ));
        assert_eq!(int(raw(&s, &["PUBLISH", "ch", "x"])), 0);
    }

    /// The cost of a plain command, of an acquire + release pair of script
    /// calls, and of creating a Lua state (what a state per call would add).
    #[test]
    #[ignore = "a measurement: cargo test --release -p lock-core --features memory --lib per_call_cost -- --ignored --nocapture"]
    fn per_call_cost() {
        use std::time::Instant;
        const N: u32 = 100_000;
        let (s, scripts) = loaded();
        let k = keys();
        raw(&s, &["HSET", &k.lock, "c0:0", "1"]);
        let hget: Vec<Vec<u8>> = ["HGET", &k.lock, "c0:0"]
            .iter()
            .map(|a| a.as_bytes().to_vec())
            .collect();
        let started = Instant::now();
        for _ in 0..N {
            assert!(s.call(&hget).is_ok());
        }
        let command = started.elapsed() / N;
        raw(&s, &["DEL", &k.lock]);
        let started = Instant::now();
        for i in 0..N {
            let owner = format!("c1:{i}");
            let acquired = acquire(&s, &scripts, &k, &owner, AcquireMode::New(Line::Once), "c1");
            assert!(matches!(acquired, AcquireReply::Acquired { .. }));
            assert_eq!(
                release(&s, &scripts, &k, &owner, 1, "c1", "publish"),
                ReleaseReply::Freed { told: 0 }
            );
        }
        let pair = started.elapsed() / N;
        let started = Instant::now();
        for _ in 0..1_000 {
            assert!(super::lua::Engine::new().is_ok());
        }
        let state = started.elapsed() / 1_000;
        let sha = match raw(&s, &["SCRIPT", "LOAD", "return 1"]) {
            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("{other:?}"),
        };
        let empty: Vec<Vec<u8>> = ["EVALSHA", &sha, "0"]
            .iter()
            .map(|a| a.as_bytes().to_vec())
            .collect();
        let started = Instant::now();
        for _ in 0..N {
            assert!(s.call(&empty).is_ok());
        }
        let bare = started.elapsed() / N;
        let sha = match raw(
            &s,
            &[
                "SCRIPT",
                "LOAD",
                "for i = 1, 10 do redis.call('hget', KEYS[1], 'x') end return 1",
            ],
        ) {
            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("{other:?}"),
        };
        let ten: Vec<Vec<u8>> = ["EVALSHA", &sha, "1", "k"]
            .iter()
            .map(|a| a.as_bytes().to_vec())
            .collect();
        let started = Instant::now();
        for _ in 0..N {
            assert!(s.call(&ten).is_ok());
        }
        let calls = started.elapsed() / N;
        println!("EVALSHA of `return 1`: {bare:?}; of ten redis.call('hget'): {calls:?}");
        println!("HGET: {command:?} per call; acquire + release script calls: {pair:?} per pair; a new Lua state: {state:?}");
    }
}
