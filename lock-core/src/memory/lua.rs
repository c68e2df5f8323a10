//! The scripting commands (`EVAL`, `EVALSHA`, `SCRIPT LOAD|EXISTS|FLUSH`)
//! on one embedded Lua 5.1 state, with the environment Redis 7 gives a
//! script.
//!
//! **Environment.** The base library, `string`, `table` and `math` (Redis'
//! `cjson`, `bit`, `struct` and `cmsgpack` are not there: a script using
//! them fails with "nonexistent global variable"), without `dofile` and
//! `loadfile` (as Redis removes them); `KEYS` and `ARGV` per call; and
//! `redis.call`, `redis.pcall`, `redis.error_reply`,
//! `redis.status_reply`, `redis.sha1hex`. As in Redis 7, globals are
//! read-only: reading a global that does not exist and creating one are
//! errors, with Redis' wording and position. (The library tables
//! themselves are not made read-only as Redis does.)
//!
//! **Conversions**, as Redis 7 makes them over RESP2:
//!
//! | Redis reply → Lua (what `redis.call` returns) | Lua → Redis reply (what a script returns) |
//! |---|---|
//! | integer → number | number → integer (truncated toward zero) |
//! | bulk string → string | string → bulk string |
//! | nil bulk → `false` | `false`, `nil` → nil bulk; `true` → integer 1 |
//! | array → table (nil elements → `false`) | table → array, up to its first `nil` |
//! | status → `{ok = text}` | `{ok = text}` → status |
//! | error → `{err = text}` (`redis.pcall`) or raised (`redis.call`) | `{err = text}` → error |
//!
//! A number passed as a command argument is written as C's `%.17g` (Redis
//! 7.0's rule); anything but a string or a number as an argument is the
//! error "Lua redis lib command arguments must be strings or integers".
//!
//! **Errors.** An error raised in a script (by `redis.call`, `error()` or
//! the Lua runtime) is answered as Redis 7.0 answers it: its text (`ERR `
//! first when it has no code), then ` script: <sha>, on
//! @user_script:<line>.`; a compile error as `ERR Error compiling script
//! (new function): user_script:<line>: <message>`. One difference: Lua's
//! own `pcall` around `redis.call` catches the error as an opaque value
//! (its `tostring` is the error text) where Redis gives the `{err = …}`
//! table; `redis.pcall` gives the table.
//!
//! **A time limit** (5 s, real time) stops a script that runs on: Redis
//! would run it to its end and answer `BUSY` to everyone else until
//! `SCRIPT KILL`, which nobody could send in one process.
//!
//! **One state**, created on first use and kept (per-call set-up is two
//! tables and two scoped functions; see the module doc of `memory` for the
//! measured cost). `SCRIPT FLUSH` and a restart drop it, as Redis starts a
//! new Lua VM then. Scripts are cached by the lower-case hex SHA-1 of their
//! source; `EVAL` caches too, as Redis 7.0 does.

use std::collections::HashMap;
use std::fmt;

use mlua::chunk::ChunkMode;
use mlua::{
    Function, HookTriggers, Lua, LuaOptions, LuaString, MultiValue, StdLib, Table, Value, VmState,
};
use tokio::time::Instant;

use super::commands::{self, Db};
use super::reply::{errors, format_g17, parse_i64, Reply};

/// An error a Rust function of the `redis` table (or of the read-only
/// globals) raises into the script.
#[derive(Debug)]
enum Fault {
    /// An error reply raised by `redis.call`: its text, code first.
    Reply(String),
    /// A Lua error raised at the script's current line (Redis prefixes
    /// these with `user_script:<line>: `).
    Lua(String),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Reply(text) | Fault::Lua(text) => f.write_str(text),
        }
    }
}

impl std::error::Error for Fault {}

/// The chunk name Redis gives every script.
const CHUNK: &str = "@user_script";

/// How long a script may run before the server stops it (real time: a
/// paused tokio clock never moves). Redis would run it to its end,
/// answering `BUSY` to everyone else until `SCRIPT KILL`; in one process
/// nothing could ever send that, so a script that never ends would hold
/// the server for good.
#[cfg(not(test))]
const SCRIPT_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);
#[cfg(test)]
const SCRIPT_TIME_LIMIT: std::time::Duration = std::time::Duration::from_millis(200);

/// The Lua state and the compiled scripts.
pub(crate) struct Engine {
    lua: Lua,
    /// The real globals: libraries, `redis`, `KEYS`, `ARGV`.
    globals: Table,
    /// What scripts see as globals: a read-only view of `globals`.
    env: Table,
    xpcall: Function,
    /// The message handler: turns any error into `{err, source, line}`.
    handler: Function,
    scripts: HashMap<String, Function>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("scripts", &self.scripts.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// A Lua 5.1 state with Redis' script environment.
    pub(crate) fn new() -> mlua::Result<Engine> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        let globals = lua.globals();
        for removed in ["dofile", "loadfile"] {
            globals.raw_set(removed, Value::Nil)?;
        }
        let xpcall: Function = globals.raw_get("xpcall")?;

        let redis = lua.create_table()?;
        redis.raw_set(
            "sha1hex",
            lua.create_function(|_, text: LuaString| Ok(sha1_hex(&text.as_bytes())))?,
        )?;
        redis.raw_set(
            "error_reply",
            lua.create_function(|lua, text: LuaString| {
                let t = lua.create_table()?;
                t.raw_set("err", error_reply_text(&text.to_string_lossy()))?;
                Ok(t)
            })?,
        )?;
        redis.raw_set(
            "status_reply",
            lua.create_function(|lua, text: LuaString| {
                let t = lua.create_table()?;
                t.raw_set("ok", text)?;
                Ok(t)
            })?,
        )?;
        redis.raw_set(
            "call",
            lua.create_function(|lua, args: MultiValue| dispatch_running(lua, args, true))?,
        )?;
        redis.raw_set(
            "pcall",
            lua.create_function(|lua, args: MultiValue| dispatch_running(lua, args, false))?,
        )?;
        globals.raw_set("redis", redis)?;

        // Read-only globals: the view `env` has no fields of its own, reads
        // fall through to `globals`, whose misses are errors.
        let missing = lua.create_function(|_, (_, name): (Value, Value)| -> mlua::Result<()> {
            let name = match &name {
                Value::String(s) => s.to_string_lossy(),
                other => format!("{other:?}"),
            };
            Err(mlua::Error::external(Fault::Lua(format!(
                "Script attempted to access nonexistent global variable '{name}'"
            ))))
        })?;
        let refuse = lua.create_function(|_, _: MultiValue| -> mlua::Result<()> {
            Err(mlua::Error::external(Fault::Lua(
                "Attempt to modify a readonly table".into(),
            )))
        })?;
        let globals_meta = lua.create_table()?;
        globals_meta.raw_set("__index", missing)?;
        globals.set_metatable(Some(globals_meta))?;
        let env = lua.create_table()?;
        let env_meta = lua.create_table()?;
        env_meta.raw_set("__index", globals.clone())?;
        env_meta.raw_set("__newindex", refuse)?;
        env.set_metatable(Some(env_meta))?;
        globals.raw_set("_G", env.clone())?;

        let handler = lua.create_function(error_handler)?;
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(100_000),
            |lua, _| {
                let over = lua
                    .try_app_data_ref::<Running>()
                    .ok()
                    .flatten()
                    .is_some_and(|r| r.started.elapsed() > SCRIPT_TIME_LIMIT);
                if over {
                    return Err(mlua::Error::external(Fault::Reply(format!(
                        "ERR the script ran for more than {SCRIPT_TIME_LIMIT:?}: the in-memory Redis \
                         stopped it (Redis would run it on, answering BUSY to everyone else)"
                    ))));
                }
                Ok(VmState::Continue)
            },
        )?;
        Ok(Engine {
            lua,
            globals,
            env,
            xpcall,
            handler,
            scripts: HashMap::new(),
        })
    }

    /// Compiles `source` (cached by its SHA-1); its SHA-1, or the compile
    /// error reply.
    fn load(&mut self, source: &[u8]) -> Result<String, Reply> {
        let sha = sha1_hex(source);
        if !self.scripts.contains_key(&sha) {
            let function = self
                .lua
                .load(source)
                .set_name(CHUNK)
                .set_mode(ChunkMode::Text)
                .set_environment(self.env.clone())
                .into_function()
                .map_err(|e| {
                    let message = match e {
                        mlua::Error::SyntaxError { message, .. } => message,
                        other => other.to_string(),
                    };
                    Reply::err(format!(
                        "ERR Error compiling script (new function): {message}"
                    ))
                })?;
            self.scripts.insert(sha.clone(), function);
        }
        Ok(sha)
    }

    /// Runs the cached script `sha` with `keys` and `args`.
    fn run(
        &mut self,
        db: &mut Db,
        now: Instant,
        sha: &str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Reply {
        let Some(function) = self.scripts.get(sha) else {
            return noscript();
        };
        match self.run_function(db, now, sha, function, keys, args) {
            Ok(reply) => reply,
            Err(e) => Reply::err(format!(
                "ERR the in-memory Redis could not run the script: {e}"
            )),
        }
    }

    fn run_function(
        &self,
        db: &mut Db,
        now: Instant,
        sha: &str,
        function: &Function,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> mlua::Result<Reply> {
        self.globals.raw_set("KEYS", self.strings(keys)?)?;
        self.globals.raw_set("ARGV", self.strings(args)?)?;
        // The data moves into the Lua state for the run, where `redis.call`
        // finds it, and back after it (also on a panic).
        let placeholder = Db::placeholder(db);
        let data = std::mem::replace(db, placeholder);
        self.lua.set_app_data(Running {
            db: data,
            now,
            started: std::time::Instant::now(),
        });
        let restore = Restore { lua: &self.lua, db };
        let result: MultiValue = self.xpcall.call((function.clone(), self.handler.clone()))?;
        drop(restore);
        let mut result = result.into_iter();
        let ok = matches!(result.next(), Some(Value::Boolean(true)));
        let value = result.next().unwrap_or(Value::Nil);
        Ok(if ok {
            to_reply(&value, 0)
        } else {
            raised_reply(&value, sha)
        })
    }

    /// A Lua array of strings.
    fn strings(&self, items: &[Vec<u8>]) -> mlua::Result<Table> {
        // text goes onto Lua's stack directly (mlua's fast path for `&str`)
        let text: Option<Vec<&str>> = items.iter().map(|b| std::str::from_utf8(b).ok()).collect();
        if let Some(text) = text {
            return self.lua.create_sequence_from(text);
        }
        let table = self.lua.create_table_with_capacity(items.len(), 0)?;
        for (i, item) in items.iter().enumerate() {
            table.raw_set(i + 1, self.lua.create_string(item)?)?;
        }
        Ok(table)
    }
}

fn noscript() -> Reply {
    Reply::err("NOSCRIPT No matching script. Please use EVAL.")
}

/// The lower-case hex SHA-1 of `bytes`.
fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

/// `redis.error_reply`'s text: a leading `-` dropped, `ERR` added when
/// the text has no code (no space), line breaks trimmed at the end.
fn error_reply_text(text: &str) -> String {
    let text = text.strip_prefix('-').unwrap_or(text);
    match text.split_once(' ') {
        Some((code, message)) => format!("{code} {}", message.trim_matches(['\r', '\n'])),
        None => format!("ERR {}", text.trim_matches(['\r', '\n'])),
    }
}

/// The data a script run works on, in the Lua state's app data while it
/// runs.
struct Running {
    db: Db,
    now: Instant,
    /// When the run started, on the real clock (the time limit).
    started: std::time::Instant,
}

/// Moves the data back out of the Lua state when a run ends.
struct Restore<'a> {
    lua: &'a Lua,
    db: &'a mut Db,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        if let Some(running) = self.lua.remove_app_data::<Running>() {
            *self.db = running.db;
        }
    }
}

/// `redis.call` (`raise`) and `redis.pcall` of the running script.
fn dispatch_running(lua: &Lua, args: MultiValue, raise: bool) -> mlua::Result<Value> {
    let mut running = lua
        .try_app_data_mut::<Running>()
        .map_err(mlua::Error::external)?
        .ok_or_else(|| mlua::Error::external(Fault::Reply("ERR no script is running".into())))?;
    let Running { db, now, .. } = &mut *running;
    dispatch(lua, db, *now, args, raise)
}

/// `redis.call` (`raise`) and `redis.pcall`.
fn dispatch(
    lua: &Lua,
    db: &mut Db,
    now: Instant,
    args: MultiValue,
    raise: bool,
) -> mlua::Result<Value> {
    let fail = |text: String| -> mlua::Result<Value> {
        if raise {
            Err(mlua::Error::external(Fault::Reply(text)))
        } else {
            let t = lua.create_table()?;
            t.raw_set("err", text)?;
            Ok(Value::Table(t))
        }
    };
    if args.is_empty() {
        return fail("ERR Please specify at least one argument for this redis lib call".into());
    }
    let mut argv = Vec::with_capacity(args.len());
    for arg in &args {
        match arg {
            Value::String(s) => argv.push(s.as_bytes().to_vec()),
            // Lua 5.1 numbers are doubles, whatever mlua calls them
            Value::Integer(i) => argv.push(format_g17(*i as f64).into_bytes()),
            Value::Number(n) => argv.push(format_g17(*n).into_bytes()),
            _ => {
                return fail(
                    "ERR Lua redis lib command arguments must be strings or integers".into(),
                )
            }
        }
    }
    match commands::run_from_script(db, now, &argv) {
        Reply::Error(text) => fail(text),
        reply => to_lua(lua, &reply),
    }
}

/// A reply as a Lua value (Redis → Lua).
fn to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Int(n) => Value::Number(*n as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(b)?),
        Reply::Nil => Value::Boolean(false),
        Reply::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", s.as_str())?;
            Value::Table(t)
        }
        Reply::Error(s) => {
            let t = lua.create_table()?;
            t.raw_set("err", s.as_str())?;
            Value::Table(t)
        }
    })
}

/// How deep a returned table may nest before the reply is refused.
const MAX_DEPTH: usize = 1000;

/// A script's return value as a reply (Lua → Redis).
fn to_reply(value: &Value, depth: usize) -> Reply {
    match value {
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(i) => Reply::Int(*i),
        // C's (long long) cast: truncation toward zero
        Value::Number(n) => Reply::Int(*n as i64),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(t) => {
            if depth >= MAX_DEPTH {
                return Reply::err("ERR reached lua stack limit");
            }
            if let Ok(Value::String(err)) = t.raw_get::<Value>("err") {
                return Reply::Error(err.to_string_lossy());
            }
            if let Ok(Value::String(ok)) = t.raw_get::<Value>("ok") {
                let status: String = ok
                    .to_string_lossy()
                    .chars()
                    .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
                    .collect();
                return Reply::Status(status);
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(item) => items.push(to_reply(&item, depth + 1)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}

/// The message handler of a script run: whatever was raised becomes
/// `{err = text, source = …, line = …}`, the position being where the
/// script was (Redis' `__redis__err__handler`: level 2, or 3 when level 2
/// is a C function; here levels 1 and 2, the handler being level 0).
fn error_handler(lua: &Lua, raised: Value) -> mlua::Result<Table> {
    let frame = |level| {
        lua.inspect_stack(level, |d| {
            let source = d.source();
            (
                source.what,
                source.source.map(|s| s.into_owned()),
                source.short_src.map(|s| s.into_owned()),
                d.current_line(),
            )
        })
    };
    let (_, source, short_src, line) = match frame(1) {
        Some(("C", ..)) => frame(2),
        other => other,
    }
    .unwrap_or(("C", None, None, None));
    let text = match &raised {
        Value::Table(t) => match t.raw_get::<Value>("err") {
            Ok(Value::String(s)) => s.to_string_lossy(),
            _ => "ERR unknown error".into(),
        },
        Value::String(s) => format!("ERR {}", s.to_string_lossy()),
        Value::Error(e) => match e.downcast_ref::<Fault>() {
            Some(Fault::Reply(text)) => text.clone(),
            Some(Fault::Lua(message)) => format!(
                "ERR {}:{}: {message}",
                short_src.as_deref().unwrap_or("?"),
                line.unwrap_or(0)
            ),
            None => format!("ERR {e}"),
        },
        other => format!("ERR {other:?}"),
    };
    let t = lua.create_table()?;
    t.raw_set("err", text)?;
    if let (Some(source), Some(line)) = (source, line) {
        t.raw_set("source", source)?;
        t.raw_set("line", line)?;
    }
    Ok(t)
}

/// The error reply of a script that raised `value` (the handler's table).
fn raised_reply(value: &Value, sha: &str) -> Reply {
    let Value::Table(t) = value else {
        // the handler itself failed ("error in error handling")
        return Reply::err(format!("ERR {}", to_text(value)));
    };
    let text = match t.raw_get::<Value>("err") {
        Ok(Value::String(s)) => s.to_string_lossy(),
        _ => "ERR unknown error".into(),
    };
    match (t.raw_get::<Value>("source"), t.raw_get::<Value>("line")) {
        (Ok(Value::String(source)), Ok(line @ (Value::Integer(_) | Value::Number(_)))) => {
            Reply::err(format!(
                "{text} script: {sha}, on {}:{}.",
                source.to_string_lossy(),
                to_text(&line)
            ))
        }
        _ => Reply::err(text),
    }
}

fn to_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.to_string_lossy(),
        Value::Integer(i) => i.to_string(),
        Value::Number(n) => format_g17(*n),
        other => format!("{other:?}"),
    }
}

// ---- the commands ----

/// A script call's keys and arguments.
type KeysAndArgs<'a> = (&'a [Vec<u8>], &'a [Vec<u8>]);

/// Splits `EVAL`/`EVALSHA` arguments after the script into keys and args.
fn keys_and_args(args: &[Vec<u8>]) -> Result<KeysAndArgs<'_>, Reply> {
    let numkeys = parse_i64(&args[2]).ok_or_else(errors::not_integer)?;
    let rest = &args[3..];
    if numkeys > i64::try_from(rest.len()).unwrap_or(i64::MAX) {
        return Err(Reply::err(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let Ok(numkeys) = usize::try_from(numkeys) else {
        return Err(Reply::err("ERR Number of keys can't be negative"));
    };
    Ok(rest.split_at(numkeys))
}

/// The engine, created on first use.
fn engine(slot: &mut Option<Engine>) -> Result<&mut Engine, Reply> {
    if slot.is_none() {
        let created = Engine::new()
            .map_err(|e| Reply::err(format!("ERR the in-memory Redis could not start Lua: {e}")))?;
        *slot = Some(created);
    }
    slot.as_mut()
        .ok_or_else(|| Reply::err("ERR the in-memory Redis has no Lua state"))
}

/// `EVAL script numkeys key… arg…`.
pub(crate) fn eval(
    slot: &mut Option<Engine>,
    db: &mut Db,
    now: Instant,
    args: &[Vec<u8>],
) -> Reply {
    let (keys, argv) = match keys_and_args(args) {
        Ok(split) => split,
        Err(e) => return e,
    };
    let engine = match engine(slot) {
        Ok(e) => e,
        Err(e) => return e,
    };
    match engine.load(&args[1]) {
        Ok(sha) => engine.run(db, now, &sha, keys, argv),
        Err(e) => e,
    }
}

/// `EVALSHA sha numkeys key… arg…`.
pub(crate) fn evalsha(
    slot: &mut Option<Engine>,
    db: &mut Db,
    now: Instant,
    args: &[Vec<u8>],
) -> Reply {
    let (keys, argv) = match keys_and_args(args) {
        Ok(split) => split,
        Err(e) => return e,
    };
    let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match slot {
        Some(engine) if sha.len() == 40 => engine.run(db, now, &sha, keys, argv),
        _ => noscript(),
    }
}

/// `SCRIPT LOAD | EXISTS | FLUSH`.
pub(crate) fn script(slot: &mut Option<Engine>, args: &[Vec<u8>]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match sub.as_str() {
        "load" => {
            if args.len() != 3 {
                return errors::arity("script|load");
            }
            match engine(slot).and_then(|e| e.load(&args[2])) {
                Ok(sha) => Reply::bulk(sha),
                Err(e) => e,
            }
        }
        "exists" => {
            if args.len() < 3 {
                return errors::arity("script|exists");
            }
            Reply::Array(
                args[2..]
                    .iter()
                    .map(|sha| {
                        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                        let known = slot.as_ref().is_some_and(|e| e.scripts.contains_key(&sha));
                        Reply::Int(i64::from(known))
                    })
                    .collect(),
            )
        }
        "flush" => {
            match &args[2..] {
                [] => {}
                [mode]
                    if mode.eq_ignore_ascii_case(b"sync")
                        || mode.eq_ignore_ascii_case(b"async") => {}
                [_] => return Reply::err("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
                _ => return errors::arity("script|flush"),
            }
            // a new Lua state, as Redis starts one
            *slot = None;
            Reply::ok()
        }
        _ => errors::unsupported(&format!("SCRIPT {}", sub.to_uppercase())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Server;
    use redis::{ErrorKind, RedisResult, ServerErrorKind, Value};

    fn call(server: &Server, args: &[&str]) -> RedisResult<Value> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        server.call(&args)
    }

    fn eval(server: &Server, script: &str) -> RedisResult<Value> {
        call(server, &["EVAL", script, "0"])
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// The error text of a failed call (code and detail).
    fn error_text(result: RedisResult<Value>) -> String {
        let e = result.expect_err("an error reply");
        format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or(""))
    }

    #[test]
    fn lua_values_become_replies_as_in_redis() {
        let s = Server::new();
        assert_eq!(
            eval(&s, "return {1, nil, 3}").ok(),
            Some(Value::Array(vec![Value::Int(1)]))
        );
        assert_eq!(eval(&s, "return 3.99").ok(), Some(Value::Int(3)));
        assert_eq!(eval(&s, "return -3.99").ok(), Some(Value::Int(-3)));
        assert_eq!(eval(&s, "return true").ok(), Some(Value::Int(1)));
        assert_eq!(eval(&s, "return false").ok(), Some(Value::Nil));
        assert_eq!(eval(&s, "return nil").ok(), Some(Value::Nil));
        assert_eq!(eval(&s, "return 'a', 'b'").ok(), Some(bulk("a")));
        assert_eq!(eval(&s, "return {ok='OK'}").ok(), Some(Value::Okay));
        assert_eq!(
            eval(&s, "return redis.status_reply('FINE')").ok(),
            Some(Value::SimpleString("FINE".into()))
        );
        assert_eq!(
            eval(&s, "return {1, 2, {3, 'x', false}}").ok(),
            Some(Value::Array(vec![
                Value::Int(1),
                Value::Int(2),
                Value::Array(vec![Value::Int(3), bulk("x"), Value::Nil]),
            ]))
        );
        assert_eq!(
            error_text(eval(&s, "return redis.error_reply('my error')")),
            "my error"
        );
        assert_eq!(
            error_text(eval(&s, "return redis.error_reply('oops')")),
            "ERR oops"
        );
        assert_eq!(error_text(eval(&s, "return {err='MINE x'}")), "MINE x");
        assert_eq!(
            eval(&s, "return redis.sha1hex('')").ok(),
            Some(bulk("da39a3ee5e6b4b0d3255bfef95601890afd80709"))
        );
    }

    #[test]
    fn replies_become_lua_values_as_in_redis() {
        let s = Server::new();
        call(&s, &["SET", "s", "1"]).ok();
        call(&s, &["HSET", "h", "f", "1"]).ok();
        // integer → number, bulk → string, nil → false, status → {ok}, array → table
        let script = "local n = redis.call('incr', 's')\n\
                      local b = redis.call('get', 's')\n\
                      local none = redis.call('get', 'nope')\n\
                      local st = redis.call('set', 'x', 'y')\n\
                      local t = redis.call('time')\n\
                      return {type(n), n, type(b), b, tostring(none), st.ok, type(t), #t}";
        assert_eq!(
            eval(&s, script).ok(),
            Some(Value::Array(vec![
                bulk("number"),
                Value::Int(2),
                bulk("string"),
                bulk("2"),
                bulk("false"),
                bulk("OK"),
                bulk("table"),
                Value::Int(2),
            ]))
        );
        // errors: pcall gives the table, call raises
        assert_eq!(
            eval(&s, "return redis.pcall('get', 'h')['err']").ok(),
            Some(bulk(
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            ))
        );
        // numbers as arguments: %.17g
        eval(&s, "return redis.call('set', 'z', 0.1)").ok();
        assert_eq!(
            call(&s, &["GET", "z"]).ok(),
            Some(bulk("0.10000000000000001"))
        );
        eval(&s, "return redis.call('set', 'z', 1e17)").ok();
        assert_eq!(call(&s, &["GET", "z"]).ok(), Some(bulk("1e+17")));
    }

    #[test]
    fn sorted_set_ranges_from_a_script() {
        let s = Server::new();
        // Lua numbers as scores and bounds (%.17g), the reply a table of strings
        let script = "redis.call('zadd', KEYS[1], 'NX', 1700000000123, 'a', 1.5, 'b', 922337203685477, 'c')\n\
                      local r = redis.call('zrangebyscore', KEYS[1], '-inf', 1700000000123, 'WITHSCORES', 'LIMIT', 0, 2)\n\
                      local rest = redis.call('zrangebyscore', KEYS[1], '(' .. r[4], '+inf')\n\
                      return {r[1], r[2], r[3], r[4], #r, rest[1], #rest, tonumber(r[4]) + 1}";
        assert_eq!(
            call(&s, &["EVAL", script, "1", "z"]).ok(),
            Some(Value::Array(vec![
                bulk("b"),
                bulk("1.5"),
                bulk("a"),
                bulk("1700000000123"),
                Value::Int(4),
                bulk("c"),
                Value::Int(1),
                Value::Int(1_700_000_000_124),
            ]))
        );
        let bad_bound = "return redis.call('zrangebyscore', 'z', 'x', 1)";
        assert_eq!(
            error_text(eval(&s, bad_bound)),
            format!(
                "ERR min or max is not a float script: {}, on @user_script:1.",
                sha1_smol::Sha1::from(bad_bound).digest()
            )
        );
    }

    #[test]
    fn errors_are_worded_as_redis_words_them() {
        let s = Server::new();
        call(&s, &["HSET", "h", "f", "1"]).ok();
        let sha = |script: &str| sha1_smol::Sha1::from(script).digest().to_string();
        let script = "return redis.call('get', 'h')";
        let e = eval(&s, script).expect_err("WRONGTYPE");
        assert_eq!(e.code(), Some("WRONGTYPE"));
        assert_eq!(
            error_text(eval(&s, script)),
            format!(
                "WRONGTYPE Operation against a key holding the wrong kind of value script: {}, on @user_script:1.",
                sha(script)
            )
        );
        for (script, text) in [
            (
                "local x = nil; return x + 1",
                "ERR user_script:1: attempt to perform arithmetic on local 'x' (a nil value)",
            ),
            (
                "foo = 1",
                "ERR user_script:1: Attempt to modify a readonly table",
            ),
            (
                "return foo",
                "ERR user_script:1: Script attempted to access nonexistent global variable 'foo'",
            ),
            (
                "return cjson",
                "ERR user_script:1: Script attempted to access nonexistent global variable 'cjson'",
            ),
            (
                "\nreturn redis.call('eval', 'return 1', 0)",
                "ERR This Redis command is not allowed from script",
            ),
            (
                "return redis.call('wait', 0, 0)",
                "ERR This Redis command is not allowed from script",
            ),
            (
                "return redis.call('set', {})",
                "ERR Lua redis lib command arguments must be strings or integers",
            ),
            (
                "return redis.call()",
                "ERR Please specify at least one argument for this redis lib call",
            ),
            (
                "return redis.call('pttl', 'a', 'b')",
                "ERR Wrong number of args calling Redis command from script",
            ),
            ("return error('boom')", "ERR user_script:1: boom"),
            ("return error({err='MINE boom'})", "MINE boom"),
        ] {
            let line = if script.starts_with('\n') { 2 } else { 1 };
            assert_eq!(
                error_text(eval(&s, script)),
                format!("{text} script: {}, on @user_script:{line}.", sha(script)),
                "{script}"
            );
        }
        // a command the in-memory server does not run: named, in a clear error
        let text = error_text(eval(&s, "return redis.call('sadd', 's', 'x')"));
        assert!(
            text.contains("'sadd'") && text.contains("in-memory"),
            "{text}"
        );
        assert_eq!(
            error_text(eval(&s, "retur 1")),
            "ERR Error compiling script (new function): user_script:1: '=' expected near '1'"
        );
        let e = call(&s, &["EVALSHA", "abc", "0"]).expect_err("unknown script");
        assert_eq!(e.kind(), ErrorKind::Server(ServerErrorKind::NoScript));
        assert_eq!(
            error_text(call(&s, &["EVAL", "return 1", "x"])),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            error_text(call(&s, &["EVAL", "return 1", "2", "a"])),
            "ERR Number of keys can't be greater than number of args"
        );
        assert_eq!(
            error_text(call(&s, &["EVAL", "return 1", "-1"])),
            "ERR Number of keys can't be negative"
        );
        // the state is still usable after each error
        assert_eq!(eval(&s, "return 1").ok(), Some(Value::Int(1)));
        // a script that never ends is stopped, its writes kept (as Redis keeps them)
        let text = error_text(eval(&s, "redis.call('set', 'w', '1') while true do end"));
        assert!(
            text.starts_with("ERR the script ran for more than"),
            "{text}"
        );
        assert_eq!(call(&s, &["GET", "w"]).ok(), Some(bulk("1")));
        assert_eq!(eval(&s, "return 2").ok(), Some(Value::Int(2)));
    }

    #[test]
    fn keys_args_and_the_script_cache() {
        let s = Server::new();
        let script = "return {KEYS[1], ARGV[1], #KEYS, #ARGV}";
        let sha = sha1_smol::Sha1::from(script).digest().to_string();
        assert_eq!(
            call(&s, &["SCRIPT", "EXISTS", &sha]).ok(),
            Some(Value::Array(vec![Value::Int(0)]))
        );
        assert_eq!(call(&s, &["SCRIPT", "LOAD", script]).ok(), Some(bulk(&sha)));
        assert_eq!(
            call(&s, &["EVALSHA", &sha.to_uppercase(), "1", "k", "a", "b"]).ok(),
            Some(Value::Array(vec![
                bulk("k"),
                bulk("a"),
                Value::Int(1),
                Value::Int(2)
            ]))
        );
        assert_eq!(call(&s, &["SCRIPT", "FLUSH"]).ok(), Some(Value::Okay));
        assert!(call(&s, &["EVALSHA", &sha, "0"]).is_err());
        // EVAL caches the script too
        call(&s, &["EVAL", script, "0"]).ok();
        assert_eq!(
            call(&s, &["SCRIPT", "EXISTS", &sha, "0000"]).ok(),
            Some(Value::Array(vec![Value::Int(1), Value::Int(0)]))
        );
        s.flush_all();
        assert_eq!(
            call(&s, &["SCRIPT", "EXISTS", &sha]).ok(),
            Some(Value::Array(vec![Value::Int(0)]))
        );
    }
}
