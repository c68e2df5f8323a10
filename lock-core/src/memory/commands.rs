//! The commands the in-memory Redis runs: what lock-core sends and what its
//! scripts call, with Redis 7's arities, options, replies and error texts.
//! Any other command is refused with an error that names it
//! ([`errors::unsupported`]): a clear failure, never a silent divergence.
//!
//! The scripting commands (`EVAL`, `EVALSHA`, `SCRIPT`) are in the table
//! (arity, not allowed from a script) but run in `lua.rs`.

use std::collections::{HashMap, VecDeque};

use tokio::time::Instant;

use super::keyspace::{glob_match, Clock, Data, Hash, Keyspace, Ms, ZSet};
use super::pubsub::{Namespace, PubSub};
use super::reply::{errors, format_g17, is_hex_number, parse_f64, parse_i64, parse_strtod, Reply};

/// The data every command works on.
#[derive(Debug)]
pub(crate) struct Db {
    pub(crate) keys: Keyspace,
    pub(crate) pubsub: PubSub,
    pub(crate) clock: Clock,
    scans: ScanCursors,
}

impl Db {
    pub(crate) fn new() -> Self {
        Db {
            keys: Keyspace::default(),
            pubsub: PubSub::default(),
            clock: Clock::new(),
            scans: ScanCursors::default(),
        }
    }

    /// An empty stand-in for `db` while its data is lent out (same clock).
    pub(crate) fn placeholder(db: &Db) -> Self {
        Db {
            keys: Keyspace::default(),
            pubsub: PubSub::default(),
            clock: db.clock,
            scans: ScanCursors::default(),
        }
    }

    /// Deletes every key (FLUSHALL); open SCAN cursors end with them.
    pub(crate) fn flush_keys(&mut self) {
        self.keys.clear();
        self.scans = ScanCursors::default();
    }
}

/// A command's entry in the table.
#[derive(Debug)]
pub(crate) struct Spec {
    /// The name, lower case, as Redis writes it in error texts.
    pub(crate) name: &'static str,
    /// Redis' arity: `n` exactly n arguments (the name included), `-n` at
    /// least n.
    arity: i32,
    /// Refused inside a script ("not allowed from script").
    pub(crate) noscript: bool,
    /// Runs in the Lua engine (`EVAL`, `EVALSHA`, `SCRIPT`), not here.
    pub(crate) scripting: bool,
    run: fn(&mut Db, Instant, &[Vec<u8>]) -> Reply,
}

impl Spec {
    /// Whether `argc` arguments (the name included) fit the arity.
    pub(crate) fn arity_fits(&self, argc: usize) -> bool {
        let argc = i64::try_from(argc).unwrap_or(i64::MAX);
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }

    /// Runs the command; its arguments are read by position only after
    /// their number fits the arity (callers check it first, for their own
    /// wording; this check keeps the positions safe whatever the caller).
    pub(crate) fn run(&self, db: &mut Db, now: Instant, args: &[Vec<u8>]) -> Reply {
        if !self.arity_fits(args.len()) {
            return errors::arity(self.name);
        }
        (self.run)(db, now, args)
    }
}

const fn spec(
    name: &'static str,
    arity: i32,
    run: fn(&mut Db, Instant, &[Vec<u8>]) -> Reply,
) -> Spec {
    Spec {
        name,
        arity,
        noscript: false,
        scripting: false,
        run,
    }
}

const fn noscript(mut s: Spec) -> Spec {
    s.noscript = true;
    s
}

const fn scripting(mut s: Spec) -> Spec {
    s.noscript = true;
    s.scripting = true;
    s
}

/// Run in `lua.rs`, never through the table.
fn in_lua(_: &mut Db, _: Instant, _: &[Vec<u8>]) -> Reply {
    Reply::err("ERR scripting commands run in the Lua engine")
}

/// Every command the in-memory server runs.
static COMMANDS: &[Spec] = &[
    spec("ping", -1, ping),
    spec("del", -2, del),
    spec("exists", -2, exists),
    spec("type", 2, type_),
    spec("get", 2, get),
    spec("set", -3, set),
    spec("incr", 2, incr),
    spec("decr", 2, decr),
    spec("incrby", 3, incrby),
    spec("decrby", 3, decrby),
    spec("hset", -4, hset),
    spec("hget", 3, hget),
    spec("hgetall", 2, hgetall),
    spec("hkeys", 2, hkeys),
    spec("hdel", -3, hdel),
    spec("hexists", 3, hexists),
    spec("hincrby", 4, hincrby),
    spec("hlen", 2, hlen),
    spec("rpush", -3, rpush),
    spec("lpush", -3, lpush),
    spec("lpop", -2, lpop),
    spec("rpop", -2, rpop),
    spec("lindex", 3, lindex),
    spec("lrange", 4, lrange),
    spec("lrem", 4, lrem),
    spec("llen", 2, llen),
    spec("pexpire", -3, pexpire),
    spec("expire", -3, expire),
    spec("pttl", 2, pttl),
    spec("ttl", 2, ttl),
    spec("zadd", -4, zadd),
    spec("zrem", -3, zrem),
    spec("zrange", -4, zrange),
    spec("zrangebyscore", -4, zrangebyscore),
    spec("zincrby", 4, zincrby),
    spec("zscore", 3, zscore),
    spec("zcard", 2, zcard),
    spec("time", 1, time),
    spec("publish", 3, publish),
    spec("spublish", 3, spublish),
    spec("pubsub", -2, pubsub),
    spec("scan", -2, scan),
    spec("dbsize", 1, dbsize),
    spec("flushall", -1, flushall),
    noscript(spec("config", -2, config)),
    noscript(spec("role", 1, role)),
    noscript(spec("wait", 3, wait)),
    scripting(spec("eval", -3, in_lua)),
    scripting(spec("evalsha", -3, in_lua)),
    scripting(spec("script", -2, in_lua)),
];

/// The entry of the command `name` (any case), if the server runs it.
pub(crate) fn lookup(name: &[u8]) -> Option<&'static Spec> {
    COMMANDS
        .iter()
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}

/// The refusal of a command the server does not run.
pub(crate) fn unsupported_command(name: &[u8]) -> Reply {
    errors::unsupported(&format!("command '{}'", String::from_utf8_lossy(name)))
}

/// A command called by a script (`redis.call`, `redis.pcall`), with the
/// checks and wording Redis 7 applies there.
pub(crate) fn run_from_script(db: &mut Db, now: Instant, args: &[Vec<u8>]) -> Reply {
    let Some(name) = args.first() else {
        return Reply::err("ERR Please specify at least one argument for this redis lib call");
    };
    let Some(spec) = lookup(name) else {
        return unsupported_command(name);
    };
    if !spec.arity_fits(args.len()) {
        return Reply::err("ERR Wrong number of args calling Redis command from script");
    }
    if spec.noscript {
        return Reply::err("ERR This Redis command is not allowed from script");
    }
    spec.run(db, now, args)
}

/// Whether `arg` is the option `name` (options are case-insensitive).
fn is(arg: &[u8], name: &str) -> bool {
    arg.eq_ignore_ascii_case(name.as_bytes())
}

fn text(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).into_owned()
}

fn int_reply(n: usize) -> Reply {
    Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The deadline `ms` milliseconds after `now`, or `None` when it does not
/// fit (Redis: "invalid expire time"); `ms` is positive.
fn after(db: &Db, now: Instant, ms: i64) -> Option<Ms> {
    let ms = u64::try_from(ms).ok()?;
    let deadline = db.clock.ms(now).checked_add(ms)?;
    // Redis keeps deadlines as milliseconds since the epoch in an i64
    (deadline < i64::MAX as u64 / 2).then_some(deadline)
}

/// Milliseconds left until `deadline` (Redis' PTTL).
fn ms_left(db: &Db, now: Instant, deadline: Ms) -> i64 {
    i64::try_from(deadline.saturating_sub(db.clock.ms(now))).unwrap_or(i64::MAX)
}

// ---- connection, keys ----

fn ping(_: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match args {
        [_] => Reply::Status("PONG".into()),
        [_, message] => Reply::Bulk(message.clone()),
        _ => errors::arity("ping"),
    }
}

fn del(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    int_reply(args[1..].iter().filter(|k| db.keys.remove(k)).count())
}

fn exists(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    int_reply(
        args[1..]
            .iter()
            .filter(|k| db.keys.get(k).is_some())
            .count(),
    )
}

fn type_(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let name = db.keys.get(&args[1]).map_or("none", Data::type_name);
    Reply::Status(name.into())
}

fn dbsize(db: &mut Db, _: Instant, _: &[Vec<u8>]) -> Reply {
    int_reply(db.keys.len())
}

fn flushall(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match args {
        [_] => {}
        [_, mode] if is(mode, "sync") || is(mode, "async") => {}
        _ => return errors::syntax(),
    }
    db.flush_keys();
    Reply::ok()
}

// ---- strings ----

fn get(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match db.keys.get(&args[1]) {
        None => Reply::Nil,
        Some(Data::Str(v)) => Reply::Bulk(v.clone()),
        Some(_) => errors::wrong_type(),
    }
}

fn set(db: &mut Db, now: Instant, args: &[Vec<u8>]) -> Reply {
    #[derive(PartialEq)]
    enum Cond {
        Always,
        Nx,
        Xx,
    }
    enum Ttl {
        Clear,
        Keep,
        Ms(i64),
    }
    let (key, value) = (&args[1], &args[2]);
    let mut cond = Cond::Always;
    let mut ttl = Ttl::Clear;
    let mut get_old = false;
    let mut i = 3;
    while i < args.len() {
        let opt = &args[i];
        let next = args.get(i + 1);
        if is(opt, "nx") && cond != Cond::Xx {
            cond = Cond::Nx;
        } else if is(opt, "xx") && cond != Cond::Nx {
            cond = Cond::Xx;
        } else if is(opt, "get") && !get_old {
            get_old = true;
        } else if is(opt, "keepttl") && matches!(ttl, Ttl::Clear) {
            ttl = Ttl::Keep;
        } else if (is(opt, "px") || is(opt, "ex")) && matches!(ttl, Ttl::Clear) && next.is_some() {
            let Some(n) = next.and_then(|n| parse_i64(n)) else {
                return errors::not_integer();
            };
            let ms = if is(opt, "ex") {
                n.checked_mul(1000)
            } else {
                Some(n)
            };
            match ms {
                Some(ms) if ms > 0 => ttl = Ttl::Ms(ms),
                _ => return errors::invalid_expire("set"),
            }
            i += 1;
        } else if (is(opt, "exat") || is(opt, "pxat")) && next.is_some() {
            return errors::unsupported("SET EXAT/PXAT");
        } else {
            return errors::syntax();
        }
        i += 1;
    }
    let old = match db.keys.get(key) {
        None => None,
        Some(Data::Str(v)) => Some(v.clone()),
        Some(_) if get_old => return errors::wrong_type(),
        Some(_) => Some(Vec::new()),
    };
    let exists = db.keys.get(key).is_some();
    let applies = match cond {
        Cond::Always => true,
        Cond::Nx => !exists,
        Cond::Xx => exists,
    };
    if applies {
        let data = Data::Str(value.clone());
        match ttl {
            Ttl::Clear => db.keys.set(key, data, None),
            Ttl::Keep => db.keys.replace(key, data),
            Ttl::Ms(ms) => match after(db, now, ms) {
                Some(deadline) => db.keys.set(key, data, Some(deadline)),
                None => return errors::invalid_expire("set"),
            },
        }
    }
    match (get_old, applies) {
        (true, _) => old.map_or(Reply::Nil, Reply::Bulk),
        (false, true) => Reply::ok(),
        (false, false) => Reply::Nil,
    }
}

/// INCR/DECR/INCRBY/DECRBY: adds `delta`, keeping the key's deadline.
fn add_to(db: &mut Db, key: &[u8], delta: i64) -> Reply {
    let current = match db.keys.get(key) {
        None => 0,
        Some(Data::Str(v)) => match parse_i64(v) {
            Some(n) => n,
            None => return errors::not_integer(),
        },
        Some(_) => return errors::wrong_type(),
    };
    let Some(new) = current.checked_add(delta) else {
        return errors::overflow();
    };
    let digits = new.to_string().into_bytes();
    match db.keys.get_mut(key) {
        Some(data) => *data = Data::Str(digits),
        None => db.keys.set(key, Data::Str(digits), None),
    }
    Reply::Int(new)
}

fn incr(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    add_to(db, &args[1], 1)
}

fn decr(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    add_to(db, &args[1], -1)
}

fn incrby(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match parse_i64(&args[2]) {
        Some(delta) => add_to(db, &args[1], delta),
        None => errors::not_integer(),
    }
}

fn decrby(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match parse_i64(&args[2]) {
        Some(i64::MIN) => Reply::err("ERR decrement would overflow"),
        Some(delta) => add_to(db, &args[1], -delta),
        None => errors::not_integer(),
    }
}

// ---- hashes ----

/// The hash at `key`: `Ok(None)` when there is none, `Err` (WRONGTYPE) when
/// the key holds another type.
fn hash_of<'a>(db: &'a Db, key: &[u8]) -> Result<Option<&'a Hash>, Reply> {
    match db.keys.get(key) {
        None => Ok(None),
        Some(Data::Hash(h)) => Ok(Some(h)),
        Some(_) => Err(errors::wrong_type()),
    }
}

/// The hash at `key`, created empty when there is none.
fn hash_for_write<'a>(db: &'a mut Db, key: &[u8]) -> Result<&'a mut Hash, Reply> {
    match db.keys.get_or_insert(key, || Data::Hash(Hash::default())) {
        Data::Hash(h) => Ok(h),
        _ => Err(errors::wrong_type()),
    }
}

fn hset(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    if args.len() % 2 == 1 {
        return errors::arity("hset");
    }
    let hash = match hash_for_write(db, &args[1]) {
        Ok(h) => h,
        Err(e) => return e,
    };
    let added = args[2..]
        .chunks_exact(2)
        .filter(|pair| hash.set(&pair[0], pair[1].clone()))
        .count();
    int_reply(added)
}

fn hget(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match hash_of(db, &args[1]) {
        Ok(h) => h
            .and_then(|h| h.get(&args[2]))
            .map_or(Reply::Nil, |v| Reply::Bulk(v.to_vec())),
        Err(e) => e,
    }
}

fn hgetall(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match hash_of(db, &args[1]) {
        Ok(h) => Reply::Array(
            h.into_iter()
                .flat_map(Hash::iter)
                .flat_map(|(f, v)| [Reply::Bulk(f.to_vec()), Reply::Bulk(v.to_vec())])
                .collect(),
        ),
        Err(e) => e,
    }
}

fn hkeys(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match hash_of(db, &args[1]) {
        Ok(h) => Reply::Array(
            h.into_iter()
                .flat_map(Hash::iter)
                .map(|(f, _)| Reply::Bulk(f.to_vec()))
                .collect(),
        ),
        Err(e) => e,
    }
}

fn hdel(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let key = &args[1];
    let removed = match db.keys.get_mut(key) {
        None => 0,
        Some(Data::Hash(h)) => args[2..].iter().filter(|f| h.remove(f)).count(),
        Some(_) => return errors::wrong_type(),
    };
    db.keys.drop_if_empty(key);
    int_reply(removed)
}

fn hexists(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match hash_of(db, &args[1]) {
        Ok(h) => Reply::Int(i64::from(h.and_then(|h| h.get(&args[2])).is_some())),
        Err(e) => e,
    }
}

fn hincrby(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let Some(delta) = parse_i64(&args[3]) else {
        return errors::not_integer();
    };
    let hash = match hash_for_write(db, &args[1]) {
        Ok(h) => h,
        Err(e) => return e,
    };
    let current = match hash.get(&args[2]) {
        None => 0,
        Some(v) => match parse_i64(v) {
            Some(n) => n,
            None => return Reply::err("ERR hash value is not an integer"),
        },
    };
    let Some(new) = current.checked_add(delta) else {
        return errors::overflow();
    };
    hash.set(&args[2], new.to_string().into_bytes());
    Reply::Int(new)
}

fn hlen(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match hash_of(db, &args[1]) {
        Ok(h) => int_reply(h.map_or(0, Hash::len)),
        Err(e) => e,
    }
}

// ---- lists ----

/// The list at `key`: `Ok(None)` when there is none, `Err` (WRONGTYPE) when
/// the key holds another type.
fn list_of<'a>(db: &'a Db, key: &[u8]) -> Result<Option<&'a VecDeque<Vec<u8>>>, Reply> {
    match db.keys.get(key) {
        None => Ok(None),
        Some(Data::List(l)) => Ok(Some(l)),
        Some(_) => Err(errors::wrong_type()),
    }
}

/// The list at `key`, to change in place: `Ok(None)` when there is none
/// (a list left empty must go through [`Keyspace::drop_if_empty`]).
fn list_for_change<'a>(
    db: &'a mut Db,
    key: &[u8],
) -> Result<Option<&'a mut VecDeque<Vec<u8>>>, Reply> {
    match db.keys.get_mut(key) {
        None => Ok(None),
        Some(Data::List(l)) => Ok(Some(l)),
        Some(_) => Err(errors::wrong_type()),
    }
}

/// The end of a list a command works at.
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    Head,
    Tail,
}

/// A list index as Redis reads one (negative: from the tail), within
/// `0..len`, or `None` when it is out of range.
fn list_index(len: usize, index: i64) -> Option<usize> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let at = if index < 0 {
        len.checked_add(index)?
    } else {
        index
    };
    if (0..len).contains(&at) {
        usize::try_from(at).ok()
    } else {
        None
    }
}

fn rpush(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    push(db, args, End::Tail)
}

fn lpush(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    push(db, args, End::Head)
}

/// RPUSH / LPUSH: each element in turn at `end` (`LPUSH k a b` leaves
/// `b a`); the new length.
fn push(db: &mut Db, args: &[Vec<u8>], end: End) -> Reply {
    let list = match db
        .keys
        .get_or_insert(&args[1], || Data::List(VecDeque::new()))
    {
        Data::List(l) => l,
        _ => return errors::wrong_type(),
    };
    for element in &args[2..] {
        match end {
            End::Head => list.push_front(element.clone()),
            End::Tail => list.push_back(element.clone()),
        }
    }
    int_reply(list.len())
}

fn lpop(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    pop(db, args, End::Head, "lpop")
}

fn rpop(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    pop(db, args, End::Tail, "rpop")
}

/// `LPOP key [count]` / `RPOP key [count]`, as Redis 7.0's
/// `popGenericCommand`: the count first (0 or more), then the key. Without
/// a count one element or nil; with one, an array of up to `count`
/// elements in the order they were popped (empty for 0), or nil when there
/// is no key.
fn pop(db: &mut Db, args: &[Vec<u8>], end: End, name: &str) -> Reply {
    let count = match args {
        [_, _] => None,
        [_, _, count] => match parse_i64(count) {
            Some(n) if n >= 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            _ => return Reply::err("ERR value is out of range, must be positive"),
        },
        _ => return errors::arity(name),
    };
    let key = &args[1];
    let list = match list_for_change(db, key) {
        Ok(Some(l)) => l,
        Ok(None) => return Reply::Nil,
        Err(e) => return e,
    };
    let mut take = || match end {
        End::Head => list.pop_front(),
        End::Tail => list.pop_back(),
    };
    let reply = match count {
        None => take().map_or(Reply::Nil, Reply::Bulk),
        Some(count) => Reply::Array(
            std::iter::from_fn(take)
                .take(count)
                .map(Reply::Bulk)
                .collect(),
        ),
    };
    db.keys.drop_if_empty(key);
    reply
}

/// `LINDEX key index`: the key first (nil when there is none, whatever the
/// index), then the index.
fn lindex(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let list = match list_of(db, &args[1]) {
        Ok(Some(l)) => l,
        Ok(None) => return Reply::Nil,
        Err(e) => return e,
    };
    let Some(index) = parse_i64(&args[2]) else {
        return errors::not_integer();
    };
    list_index(list.len(), index)
        .and_then(|at| list.get(at))
        .map_or(Reply::Nil, |element| Reply::Bulk(element.clone()))
}

/// `LRANGE key start stop`: the indexes first, then the key; clamped as
/// Redis clamps them (negative from the tail, a start before the head is
/// the head, a stop past the tail is the tail).
fn lrange(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let (Some(start), Some(stop)) = (parse_i64(&args[2]), parse_i64(&args[3])) else {
        return errors::not_integer();
    };
    let list = match list_of(db, &args[1]) {
        Ok(Some(l)) => l,
        Ok(None) => return Reply::Array(Vec::new()),
        Err(e) => return e,
    };
    let len = i64::try_from(list.len()).unwrap_or(i64::MAX);
    let start = if start < 0 {
        len.saturating_add(start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len.saturating_add(stop)
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        return Reply::Array(Vec::new());
    }
    match (usize::try_from(start), usize::try_from(stop)) {
        (Ok(start), Ok(stop)) => Reply::Array(
            list.range(start..=stop)
                .map(|element| Reply::Bulk(element.clone()))
                .collect(),
        ),
        _ => Reply::Array(Vec::new()),
    }
}

/// `LREM key count element`: the count first, then the key; removes the
/// first `count` elements equal to `element` from the head (`count` > 0),
/// from the tail (< 0), or all of them (0); how many it removed.
fn lrem(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let Some(count) = parse_i64(&args[2]) else {
        return errors::not_integer();
    };
    let (key, element) = (&args[1], &args[3]);
    let list = match list_for_change(db, key) {
        Ok(Some(l)) => l,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let limit = match count {
        0 => usize::MAX,
        n => usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX),
    };
    let mut removed = 0;
    if count >= 0 {
        list.retain(|e| {
            let remove = removed < limit && e == element;
            removed += usize::from(remove);
            !remove
        });
    } else {
        let mut at = list.len();
        while at > 0 && removed < limit {
            at -= 1;
            if list[at] == *element {
                list.remove(at);
                removed += 1;
            }
        }
    }
    db.keys.drop_if_empty(key);
    int_reply(removed)
}

fn llen(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match list_of(db, &args[1]) {
        Ok(l) => int_reply(l.map_or(0, VecDeque::len)),
        Err(e) => e,
    }
}

// ---- expiry ----

fn pexpire(db: &mut Db, now: Instant, args: &[Vec<u8>]) -> Reply {
    expire_generic(db, now, args, "pexpire", 1)
}

fn expire(db: &mut Db, now: Instant, args: &[Vec<u8>]) -> Reply {
    expire_generic(db, now, args, "expire", 1000)
}

/// PEXPIRE / EXPIRE with Redis 7's NX, XX, GT and LT.
fn expire_generic(db: &mut Db, now: Instant, args: &[Vec<u8>], name: &str, unit_ms: i64) -> Reply {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &args[3..] {
        if is(opt, "nx") {
            nx = true;
        } else if is(opt, "xx") {
            xx = true;
        } else if is(opt, "gt") {
            gt = true;
        } else if is(opt, "lt") {
            lt = true;
        } else {
            return Reply::err(format!("ERR Unsupported option {}", text(opt)));
        }
    }
    if nx && (xx || gt || lt) {
        return Reply::err("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return Reply::err("ERR GT and LT options at the same time are not compatible");
    }
    let Some(amount) = parse_i64(&args[2]) else {
        return errors::not_integer();
    };
    let Some(ms) = amount.checked_mul(unit_ms) else {
        return errors::invalid_expire(name);
    };
    let key = &args[1];
    let Some(current) = db.keys.deadline(key) else {
        return Reply::Int(0);
    };
    // the new deadline as milliseconds from now, to compare with the current one
    let current_ms = current.map(|d| ms_left(db, now, d));
    let refused = (nx && current.is_some())
        || (xx && current.is_none())
        || (gt && current_ms.is_none_or(|c| ms <= c))
        || (lt && current_ms.is_some_and(|c| ms >= c));
    if refused {
        return Reply::Int(0);
    }
    if ms <= 0 {
        db.keys.remove(key);
        return Reply::Int(1);
    }
    match after(db, now, ms) {
        Some(deadline) => {
            db.keys.set_deadline(key, Some(deadline));
            Reply::Int(1)
        }
        None => errors::invalid_expire(name),
    }
}

/// Redis' PTTL of `key` at `now`: -2 no key, -1 no deadline.
fn pttl_of(db: &Db, now: Instant, key: &[u8]) -> i64 {
    match db.keys.deadline(key) {
        None => -2,
        Some(None) => -1,
        Some(Some(deadline)) => ms_left(db, now, deadline),
    }
}

fn pttl(db: &mut Db, now: Instant, args: &[Vec<u8>]) -> Reply {
    Reply::Int(pttl_of(db, now, &args[1]))
}

fn ttl(db: &mut Db, now: Instant, args: &[Vec<u8>]) -> Reply {
    match pttl_of(db, now, &args[1]) {
        n if n < 0 => Reply::Int(n),
        ms => Reply::Int((ms + 500) / 1000),
    }
}

// ---- sorted sets ----

fn zset_of<'a>(db: &'a Db, key: &[u8]) -> Result<Option<&'a ZSet>, Reply> {
    match db.keys.get(key) {
        None => Ok(None),
        Some(Data::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(errors::wrong_type()),
    }
}

fn zadd(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, false);
    let mut at = 2;
    while let Some(opt) = args.get(at) {
        if is(opt, "nx") {
            nx = true;
        } else if is(opt, "xx") {
            xx = true;
        } else if is(opt, "gt") {
            gt = true;
        } else if is(opt, "lt") {
            lt = true;
        } else if is(opt, "ch") {
            ch = true;
        } else if is(opt, "incr") {
            incr = true;
        } else {
            break;
        }
        at += 1;
    }
    let elements = &args[at..];
    if elements.is_empty() || elements.len() % 2 == 1 {
        return errors::syntax();
    }
    if nx && xx {
        return Reply::err("ERR XX and NX options at the same time are not compatible");
    }
    if u8::from(gt) + u8::from(lt) + u8::from(nx) > 1 {
        return Reply::err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if incr {
        return errors::unsupported("ZADD INCR");
    }
    let mut pairs = Vec::with_capacity(elements.len() / 2);
    for pair in elements.chunks_exact(2) {
        match score_arg(&pair[0]) {
            Ok(score) => pairs.push((score, &pair[1])),
            Err(e) => return e,
        }
    }
    let key = &args[1];
    match db.keys.get(key) {
        None if xx => return Reply::Int(0),
        None | Some(Data::ZSet(_)) => {}
        Some(_) => return errors::wrong_type(),
    }
    let zset = match db.keys.get_or_insert(key, || Data::ZSet(ZSet::default())) {
        Data::ZSet(z) => z,
        _ => return errors::wrong_type(),
    };
    let (mut added, mut changed) = (0usize, 0usize);
    for (score, member) in pairs {
        match zset.score(member) {
            Some(old) => {
                if nx || (gt && score <= old) || (lt && score >= old) {
                    continue;
                }
                if score != old {
                    zset.insert(member, score);
                    changed += 1;
                }
            }
            None => {
                if xx {
                    continue;
                }
                zset.insert(member, score);
                added += 1;
            }
        }
    }
    db.keys.drop_if_empty(key);
    int_reply(if ch { added + changed } else { added })
}

fn zrem(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let key = &args[1];
    let removed = match db.keys.get_mut(key) {
        None => 0,
        Some(Data::ZSet(z)) => args[2..].iter().filter(|m| z.remove(m)).count(),
        Some(_) => return errors::wrong_type(),
    };
    db.keys.drop_if_empty(key);
    int_reply(removed)
}

/// `ZRANGE key start stop [BYSCORE] [LIMIT offset count] [WITHSCORES]`:
/// by rank, or by score with `BYSCORE`; `REV` and `BYLEX` are refused.
fn zrange(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    range_generic(db, args, RangeBy::Rank)
}

/// `ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]`.
fn zrangebyscore(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    range_generic(db, args, RangeBy::Score)
}

/// What a range of a sorted set counts in.
#[derive(Clone, Copy, Debug, PartialEq)]
enum RangeBy {
    Rank,
    Score,
}

/// The options of ZRANGE and ZRANGEBYSCORE after `key min max`.
#[derive(Debug)]
struct RangeOptions {
    by: RangeBy,
    with_scores: bool,
    /// `LIMIT offset count`; 0 and -1 (from the first, all) without it.
    offset: i64,
    count: i64,
}

/// Reads the options as Redis 7.0 does (`zrangeGenericCommand`), in order,
/// each error as it comes. `by` is the command's own: ZRANGEBYSCORE takes
/// no `BYSCORE` (a syntax error there), ZRANGE takes it once.
fn range_options(opts: &[Vec<u8>], by: RangeBy) -> Result<RangeOptions, Reply> {
    let zrange_command = by == RangeBy::Rank;
    let mut options = RangeOptions {
        by,
        with_scores: false,
        offset: 0,
        count: -1,
    };
    let mut i = 0;
    while let Some(opt) = opts.get(i) {
        if is(opt, "withscores") {
            options.with_scores = true;
        } else if is(opt, "limit") && opts.len() > i + 2 {
            let number = |at: usize| opts.get(at).and_then(|n| parse_i64(n));
            let (Some(offset), Some(count)) = (number(i + 1), number(i + 2)) else {
                return Err(errors::not_integer());
            };
            options.offset = offset;
            options.count = count;
            i += 2;
        } else if zrange_command && options.by == RangeBy::Rank && is(opt, "byscore") {
            options.by = RangeBy::Score;
        } else if zrange_command && (is(opt, "rev") || is(opt, "bylex")) {
            return Err(errors::unsupported(&format!(
                "ZRANGE {}",
                text(opt).to_uppercase()
            )));
        } else {
            return Err(errors::syntax());
        }
        i += 1;
    }
    // Redis tells a LIMIT apart by its count: `LIMIT n -1` passes here
    if options.count != -1 && options.by == RangeBy::Rank {
        return Err(Reply::err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    Ok(options)
}

/// The bounds of a score range (Redis' `zrangespec`): `(` excludes one.
#[derive(Clone, Copy, Debug)]
struct ScoreRange {
    min: f64,
    min_excluded: bool,
    max: f64,
    max_excluded: bool,
}

impl ScoreRange {
    /// Reads `min` and `max` as `zslParseRange` does.
    fn parse(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
        let (min, min_excluded) = score_bound(min)?;
        let (max, max_excluded) = score_bound(max)?;
        Ok(ScoreRange {
            min,
            min_excluded,
            max,
            max_excluded,
        })
    }

    fn above_min(&self, score: f64) -> bool {
        if self.min_excluded {
            score > self.min
        } else {
            score >= self.min
        }
    }

    fn below_max(&self, score: f64) -> bool {
        if self.max_excluded {
            score < self.max
        } else {
            score <= self.max
        }
    }
}

/// One bound: its score, and whether it is excluded (`(1.5`).
fn score_bound(arg: &[u8]) -> Result<(f64, bool), Reply> {
    let (excluded, number) = match arg {
        [b'(', rest @ ..] => (true, rest),
        _ => (false, arg),
    };
    if is_hex_number(number) {
        return Err(errors::unsupported("hexadecimal numbers in a score range"));
    }
    match parse_strtod(number) {
        Some(score) => Ok((score, excluded)),
        None => Err(Reply::err("ERR min or max is not a float")),
    }
}

/// The part of a sorted set a range names.
#[derive(Clone, Copy, Debug)]
enum Selection {
    /// From rank `start` to rank `stop`, both included.
    Ranks(i64, i64),
    Scores(ScoreRange),
}

impl Selection {
    /// Reads `min` and `max` as `by` counts them.
    fn parse(by: RangeBy, min: &[u8], max: &[u8]) -> Result<Selection, Reply> {
        match by {
            RangeBy::Rank => match (parse_i64(min), parse_i64(max)) {
                (Some(start), Some(stop)) => Ok(Selection::Ranks(start, stop)),
                _ => Err(errors::not_integer()),
            },
            RangeBy::Score => ScoreRange::parse(min, max).map(Selection::Scores),
        }
    }
}

/// ZRANGE and ZRANGEBYSCORE: the options, then the range, then the key,
/// each refused in that order, as Redis refuses them.
fn range_generic(db: &Db, args: &[Vec<u8>], by: RangeBy) -> Reply {
    let options = match range_options(&args[4..], by) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let selection = match Selection::parse(options.by, &args[2], &args[3]) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let zset = match zset_of(db, &args[1]) {
        Ok(Some(z)) => z,
        Ok(None) => return Reply::Array(Vec::new()),
        Err(e) => return e,
    };
    let members = match selection {
        Selection::Ranks(start, stop) => by_rank(zset, start, stop),
        Selection::Scores(range) => by_score(zset, range, options.offset, options.count),
    };
    members_reply(members, options.with_scores)
}

/// The members from rank `start` to rank `stop` included (negative ranks
/// count from the end), as ZRANGE clamps them.
fn by_rank(zset: &ZSet, start: i64, stop: i64) -> Vec<(&[u8], f64)> {
    let len = i64::try_from(zset.len()).unwrap_or(i64::MAX);
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        return Vec::new();
    }
    match (usize::try_from(start), usize::try_from(stop)) {
        (Ok(start), Ok(stop)) => zset.range(start, stop).collect(),
        _ => Vec::new(),
    }
}

/// The members within `range`, the first `offset` of them skipped, at most
/// `count` (a negative count: all; a negative offset: none, as in Redis).
fn by_score(zset: &ZSet, range: ScoreRange, offset: i64, count: i64) -> Vec<(&[u8], f64)> {
    let Ok(offset) = usize::try_from(offset) else {
        return Vec::new();
    };
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    zset.scores_from(range.min)
        .skip_while(|&(_, score)| !range.above_min(score))
        .take_while(|&(_, score)| range.below_max(score))
        .skip(offset)
        .take(count)
        .collect()
}

/// The members in order, each followed by its score with `WITHSCORES`
/// (written as Redis 7.0 writes a double: `%.17g`).
fn members_reply(members: Vec<(&[u8], f64)>, with_scores: bool) -> Reply {
    let mut out = Vec::with_capacity(members.len() * if with_scores { 2 } else { 1 });
    for (member, score) in members {
        out.push(Reply::Bulk(member.to_vec()));
        if with_scores {
            out.push(Reply::bulk(format_g17(score)));
        }
    }
    Reply::Array(out)
}

/// A score argument (ZADD, ZINCRBY) as Redis reads one: the whole
/// argument a number, NaN refused ([`parse_f64`]). Hexadecimal numbers,
/// which Redis' `strtod` reads too, are refused as unsupported.
fn score_arg(arg: &[u8]) -> Result<f64, Reply> {
    match parse_f64(arg) {
        Some(score) => Ok(score),
        None if is_hex_number(arg) && !arg.first().is_some_and(u8::is_ascii_whitespace) => {
            Err(errors::unsupported("hexadecimal numbers as scores"))
        }
        None => Err(errors::not_float()),
    }
}

/// `ZINCRBY key increment member`: the increment first, then the key; the
/// member (and the key) made when there is none; the new score, written as
/// `ZSCORE` writes one. A sum that is not a number (`inf` plus `-inf`) is
/// refused and changes nothing.
fn zincrby(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let increment = match score_arg(&args[2]) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let (key, member) = (&args[1], &args[3]);
    let zset = match db.keys.get_or_insert(key, || Data::ZSet(ZSet::default())) {
        Data::ZSet(z) => z,
        _ => return errors::wrong_type(),
    };
    // Redis answers a new member's score as given (`-0` too), and stores
    // `-0` as `0`
    let score = match zset.score(member) {
        Some(old) => old + increment,
        None => increment,
    };
    if score.is_nan() {
        return Reply::err("ERR resulting score is not a number (NaN)");
    }
    zset.insert(member, score);
    Reply::bulk(format_g17(score))
}

fn zscore(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match zset_of(db, &args[1]) {
        Ok(z) => z
            .and_then(|z| z.score(&args[2]))
            .map_or(Reply::Nil, |s| Reply::bulk(format_g17(s))),
        Err(e) => e,
    }
}

fn zcard(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match zset_of(db, &args[1]) {
        Ok(z) => int_reply(z.map_or(0, ZSet::len)),
        Err(e) => e,
    }
}

// ---- server ----

fn time(db: &mut Db, now: Instant, _: &[Vec<u8>]) -> Reply {
    let (secs, micros) = db.clock.time(now);
    Reply::Array(vec![
        Reply::bulk(secs.to_string()),
        Reply::bulk(micros.to_string()),
    ])
}

fn config(_: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let sub = &args[1];
    if !is(sub, "get") {
        return errors::unsupported(&format!("CONFIG {}", text(sub).to_uppercase()));
    }
    if args.len() < 3 {
        return errors::arity("config|get");
    }
    let mut out = Vec::new();
    for param in &args[2..] {
        if is(param, "maxmemory-policy") {
            // no eviction: a key goes only when it expires or is deleted
            out.push(Reply::bulk("maxmemory-policy"));
            out.push(Reply::bulk("noeviction"));
        } else {
            return errors::unsupported(&format!("CONFIG GET {}", text(param)));
        }
    }
    Reply::Array(out)
}

fn role(_: &mut Db, _: Instant, _: &[Vec<u8>]) -> Reply {
    // a primary without replicas, at replication offset 0
    Reply::Array(vec![
        Reply::bulk("master"),
        Reply::Int(0),
        Reply::Array(Vec::new()),
    ])
}

/// `WAIT numreplicas timeout`: 0 at once. The server has no replicas, so 0
/// is the true count; Redis would answer the same 0, after the time-out
/// when more than 0 replicas were asked for.
fn wait(_: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    match parse_i64(&args[2]) {
        None => return Reply::err("ERR timeout is not an integer or out of range"),
        Some(t) if t < 0 => return Reply::err("ERR timeout is negative"),
        Some(_) => {}
    }
    match parse_i64(&args[1]) {
        Some(_) => Reply::Int(0),
        None => errors::not_integer(),
    }
}

// ---- pub/sub ----

fn publish(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    Reply::Int(db.pubsub.publish(Namespace::Classic, &args[1], &args[2]))
}

fn spublish(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    Reply::Int(db.pubsub.publish(Namespace::Sharded, &args[1], &args[2]))
}

fn pubsub(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let sub = &args[1];
    let namespace = if is(sub, "numsub") {
        Namespace::Classic
    } else if is(sub, "shardnumsub") {
        Namespace::Sharded
    } else {
        return errors::unsupported(&format!("PUBSUB {}", text(sub).to_uppercase()));
    };
    let mut out = Vec::new();
    for channel in &args[2..] {
        out.push(Reply::Bulk(channel.clone()));
        out.push(Reply::Int(db.pubsub.count(namespace, channel)));
    }
    Reply::Array(out)
}

// ---- SCAN ----

/// How many SCAN cursors the server remembers (the oldest are forgotten).
const OPEN_SCANS: usize = 1024;

/// SCAN cursors: each names the key after which the scan resumes (keys are
/// scanned in sorted order, so a key present for the whole scan is returned
/// exactly once, as Redis guarantees at least once).
#[derive(Debug, Default)]
struct ScanCursors {
    last: u64,
    open: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

impl ScanCursors {
    fn open(&mut self, resume_after: Vec<u8>) -> u64 {
        self.last += 1;
        self.open.insert(self.last, resume_after);
        self.order.push_back(self.last);
        while self.order.len() > OPEN_SCANS {
            if let Some(old) = self.order.pop_front() {
                self.open.remove(&old);
            }
        }
        self.last
    }
}

fn scan(db: &mut Db, _: Instant, args: &[Vec<u8>]) -> Reply {
    let Some(cursor) = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
    else {
        return Reply::err("ERR invalid cursor");
    };
    let mut count: usize = 10;
    let mut pattern: Option<&[u8]> = None;
    let mut type_name: Option<&[u8]> = None;
    let mut i = 2;
    while i < args.len() {
        let Some(value) = args.get(i + 1) else {
            return errors::syntax();
        };
        if is(&args[i], "count") {
            match parse_i64(value) {
                Some(n) if n >= 1 => count = usize::try_from(n).unwrap_or(usize::MAX),
                Some(_) => return errors::syntax(),
                None => return errors::not_integer(),
            }
        } else if is(&args[i], "match") {
            pattern = (value.as_slice() != b"*").then_some(value.as_slice());
        } else if is(&args[i], "type") {
            type_name = Some(value.as_slice());
        } else {
            return errors::syntax();
        }
        i += 2;
    }
    let resume = if cursor == 0 {
        None
    } else {
        match db.scans.open.get(&cursor) {
            Some(key) => Some(key.clone()),
            None => {
                return Reply::err(format!(
                    "ERR invalid cursor {cursor}: the in-memory Redis answers only cursors it gave (the last {OPEN_SCANS})"
                ))
            }
        }
    };
    let mut found = Vec::new();
    let mut last: Option<&[u8]> = None;
    let mut more = false;
    for (scanned, (key, data)) in db.keys.keys_after(resume.as_deref()).enumerate() {
        if scanned == count {
            more = true;
            break;
        }
        last = Some(key);
        let matches = pattern.is_none_or(|p| glob_match(p, key))
            && type_name.is_none_or(|t| t.eq_ignore_ascii_case(data.type_name().as_bytes()));
        if matches {
            found.push(Reply::Bulk(key.to_vec()));
        }
    }
    let next = match (more, last) {
        (true, Some(last)) => {
            let last = last.to_vec();
            db.scans.open(last)
        }
        _ => 0,
    };
    Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(found)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(db: &mut Db, now: Instant, args: &[&str]) -> Reply {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        match lookup(&args[0]) {
            Some(spec) if spec.arity_fits(args.len()) => spec.run(db, now, &args),
            Some(spec) => errors::arity(spec.name),
            None => unsupported_command(&args[0]),
        }
    }

    fn bulk(s: &str) -> Reply {
        Reply::bulk(s)
    }

    #[test]
    fn strings_set_options_and_counters() {
        let mut db = Db::new();
        let now = Instant::now();
        assert_eq!(run(&mut db, now, &["SET", "k", "1"]), Reply::ok());
        assert_eq!(run(&mut db, now, &["set", "k", "2", "NX"]), Reply::Nil);
        assert_eq!(
            run(&mut db, now, &["set", "k", "3", "xx", "get"]),
            bulk("1")
        );
        assert_eq!(run(&mut db, now, &["set", "n", "3", "xx"]), Reply::Nil);
        assert_eq!(
            run(&mut db, now, &["set", "n", "1", "nx", "xx"]),
            errors::syntax()
        );
        assert_eq!(
            run(&mut db, now, &["set", "n", "1", "px", "0"]),
            errors::invalid_expire("set")
        );
        assert_eq!(
            run(&mut db, now, &["set", "n", "1", "px", "x"]),
            errors::not_integer()
        );
        assert_eq!(run(&mut db, now, &["incr", "k"]), Reply::Int(4));
        assert_eq!(run(&mut db, now, &["decrby", "k", "10"]), Reply::Int(-6));
        assert_eq!(run(&mut db, now, &["incrby", "k", "-4"]), Reply::Int(-10));
        assert_eq!(run(&mut db, now, &["decrby", "k", "-3"]), Reply::Int(-7));
        assert_eq!(run(&mut db, now, &["get", "k"]), bulk("-7"));
        for bad in ["1.5", "", " 1", "x"] {
            assert_eq!(
                run(&mut db, now, &["decrby", "k", bad]),
                errors::not_integer()
            );
        }
        assert_eq!(
            run(&mut db, now, &["set", "p", "1", "nx", "px", "5000"]),
            Reply::ok()
        );
        assert_eq!(
            run(&mut db, now, &["set", "p", "2", "nx", "px", "5000"]),
            Reply::Nil
        );
        assert_eq!(run(&mut db, now, &["pttl", "p"]), Reply::Int(5000));
        assert_eq!(
            run(&mut db, now, &["exists", "p", "p", "none"]),
            Reply::Int(2)
        );
        assert_eq!(run(&mut db, now, &["del", "p", "none", "p"]), Reply::Int(1));
        assert_eq!(
            run(&mut db, now, &["set", "big", "9223372036854775807"]),
            Reply::ok()
        );
        assert_eq!(run(&mut db, now, &["incr", "big"]), errors::overflow());
        assert_eq!(run(&mut db, now, &["set", "s", "abc"]), Reply::ok());
        assert_eq!(run(&mut db, now, &["incr", "s"]), errors::not_integer());
        assert_eq!(run(&mut db, now, &["hset", "h", "f", "1"]), Reply::Int(1));
        assert_eq!(run(&mut db, now, &["get", "h"]), errors::wrong_type());
        assert_eq!(
            run(&mut db, now, &["set", "h", "x", "get"]),
            errors::wrong_type()
        );
        assert_eq!(run(&mut db, now, &["set", "h", "x"]), Reply::ok());
        assert_eq!(
            run(&mut db, now, &["type", "h"]),
            Reply::Status("string".into())
        );
        assert_eq!(run(&mut db, now, &["get"]), errors::arity("get"));
    }

    #[test]
    fn hashes_count_and_refuse_non_integers() {
        let mut db = Db::new();
        let now = Instant::now();
        assert_eq!(
            run(&mut db, now, &["hset", "h", "a", "1", "b", "2"]),
            Reply::Int(2)
        );
        assert_eq!(
            run(&mut db, now, &["hset", "h", "a", "1", "b"]),
            errors::arity("hset")
        );
        assert_eq!(
            run(&mut db, now, &["hincrby", "h", "a", "-1"]),
            Reply::Int(0)
        );
        assert_eq!(
            run(&mut db, now, &["hincrby", "h", "a", "x"]),
            errors::not_integer()
        );
        assert_eq!(run(&mut db, now, &["hset", "h", "t", "x"]), Reply::Int(1));
        assert_eq!(
            run(&mut db, now, &["hincrby", "h", "t", "1"]),
            Reply::err("ERR hash value is not an integer")
        );
        assert_eq!(
            run(&mut db, now, &["hgetall", "h"]),
            Reply::Array(["a", "0", "b", "2", "t", "x"].map(bulk).to_vec())
        );
        assert_eq!(
            run(&mut db, now, &["hdel", "h", "a", "b", "t", "zz"]),
            Reply::Int(3)
        );
        assert_eq!(
            run(&mut db, now, &["exists", "h"]),
            Reply::Int(0),
            "an empty hash is deleted"
        );
        assert_eq!(run(&mut db, now, &["hlen", "h"]), Reply::Int(0));
    }

    #[test]
    fn expiry_options_and_ttls() {
        let mut db = Db::new();
        let now = Instant::now();
        run(&mut db, now, &["set", "k", "v"]);
        assert_eq!(run(&mut db, now, &["pttl", "k"]), Reply::Int(-1));
        assert_eq!(run(&mut db, now, &["pttl", "nope"]), Reply::Int(-2));
        assert_eq!(
            run(&mut db, now, &["pexpire", "k", "1500", "xx"]),
            Reply::Int(0)
        );
        assert_eq!(run(&mut db, now, &["pexpire", "k", "1500"]), Reply::Int(1));
        assert_eq!(run(&mut db, now, &["ttl", "k"]), Reply::Int(2));
        assert_eq!(
            run(&mut db, now, &["pexpire", "k", "1000", "gt"]),
            Reply::Int(0)
        );
        assert_eq!(
            run(&mut db, now, &["pexpire", "k", "1000", "lt"]),
            Reply::Int(1)
        );
        assert_eq!(run(&mut db, now, &["pttl", "k"]), Reply::Int(1000));
        assert_eq!(
            run(&mut db, now, &["pexpire", "k", "1", "nx", "xx"]),
            Reply::err("ERR NX and XX, GT or LT options at the same time are not compatible")
        );
        assert_eq!(run(&mut db, now, &["pexpire", "nope", "10"]), Reply::Int(0));
        assert_eq!(run(&mut db, now, &["pexpire", "k", "0"]), Reply::Int(1));
        assert_eq!(run(&mut db, now, &["exists", "k"]), Reply::Int(0));
    }

    #[test]
    fn sorted_sets_and_ranges() {
        let mut db = Db::new();
        let now = Instant::now();
        assert_eq!(
            run(&mut db, now, &["zadd", "z", "NX", "2", "b", "1", "a"]),
            Reply::Int(2)
        );
        assert_eq!(
            run(&mut db, now, &["zadd", "z", "NX", "5", "b"]),
            Reply::Int(0)
        );
        for bad in ["x", "nan", "1e400", "1e-400", " 1"] {
            assert_eq!(
                run(&mut db, now, &["zadd", "z", bad, "b"]),
                errors::not_float(),
                "ZADD {bad:?}"
            );
        }
        assert!(matches!(
            run(&mut db, now, &["zadd", "z", "0x10", "b"]),
            Reply::Error(e) if e.contains("hexadecimal") && e.contains("in-memory")
        ));
        assert_eq!(
            run(&mut db, now, &["zadd", "z", "nx", "1"]),
            errors::syntax()
        );
        assert_eq!(
            run(&mut db, now, &["zadd", "z", "1"]),
            errors::arity("zadd")
        );
        assert_eq!(
            run(&mut db, now, &["zadd", "z", "ch", "3", "b"]),
            Reply::Int(1)
        );
        assert_eq!(
            run(&mut db, now, &["zrange", "z", "0", "-1", "withscores"]),
            Reply::Array(["a", "1", "b", "3"].map(bulk).to_vec())
        );
        assert_eq!(
            run(&mut db, now, &["zrange", "z", "0", "1"]),
            Reply::Array(["a", "b"].map(bulk).to_vec())
        );
        assert_eq!(
            run(&mut db, now, &["zrange", "z", "5", "9"]),
            Reply::Array(vec![])
        );
        assert_eq!(
            run(&mut db, now, &["zrange", "z", "-1", "-1"]),
            Reply::Array(vec![bulk("b")])
        );
        assert_eq!(run(&mut db, now, &["zscore", "z", "a"]), bulk("1"));
        // XX GT: updates only members there, only upwards; adds none
        assert_eq!(
            run(
                &mut db,
                now,
                &["zadd", "z", "xx", "gt", "ch", "0", "a", "7", "b", "1", "new"]
            ),
            Reply::Int(1)
        );
        assert_eq!(run(&mut db, now, &["zscore", "z", "b"]), bulk("7"));
        assert_eq!(run(&mut db, now, &["zscore", "z", "a"]), bulk("1"));
        assert_eq!(run(&mut db, now, &["zscore", "z", "new"]), Reply::Nil);
        assert_eq!(
            run(&mut db, now, &["zadd", "z", "gt", "nx", "1", "a"]),
            Reply::err("ERR GT, LT, and/or NX options at the same time are not compatible")
        );
        assert_eq!(run(&mut db, now, &["zrem", "z", "a", "b"]), Reply::Int(2));
        assert_eq!(run(&mut db, now, &["zcard", "z"]), Reply::Int(0));
        assert_eq!(run(&mut db, now, &["exists", "z"]), Reply::Int(0));
    }

    #[test]
    fn sorted_sets_by_score_with_limits() {
        let mut db = Db::new();
        let now = Instant::now();
        let zadd = [
            "zadd",
            "z",
            "1",
            "a",
            "1.5",
            "b",
            "2",
            "c",
            "922337203685477",
            "big",
            "1700000000123",
            "ms",
            "-inf",
            "low",
            "0",
            "zero",
        ];
        assert_eq!(run(&mut db, now, &zadd), Reply::Int(7));
        let members = |items: &[&str]| Reply::Array(items.iter().map(|m| bulk(m)).collect());
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "z", "-inf", "+inf"]),
            members(&["low", "zero", "a", "b", "c", "ms", "big"])
        );
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "z", "(1", "2"]),
            members(&["b", "c"])
        );
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "z", "1", "(2"]),
            members(&["a", "b"])
        );
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "z", "(-inf", "(1"]),
            members(&["zero"])
        );
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "z", "(1", "(1"]),
            members(&[])
        );
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "z", "3", "1"]),
            members(&[])
        );
        assert_eq!(
            run(
                &mut db,
                now,
                &[
                    "zrangebyscore",
                    "z",
                    "1",
                    "+inf",
                    "WITHSCORES",
                    "LIMIT",
                    "0",
                    "2"
                ]
            ),
            members(&["a", "1", "b", "1.5"])
        );
        assert_eq!(
            run(
                &mut db,
                now,
                &[
                    "zrangebyscore",
                    "z",
                    "(2",
                    "inf",
                    "limit",
                    "0",
                    "-1",
                    "withscores"
                ]
            ),
            members(&["ms", "1700000000123", "big", "922337203685477"])
        );
        assert_eq!(
            run(
                &mut db,
                now,
                &["zrangebyscore", "z", "0", "2", "limit", "2", "5"]
            ),
            members(&["b", "c"])
        );
        for (offset, count) in [("-1", "2"), ("1", "0"), ("99", "1")] {
            assert_eq!(
                run(
                    &mut db,
                    now,
                    &["zrangebyscore", "z", "0", "2", "limit", offset, count]
                ),
                members(&[]),
                "LIMIT {offset} {count}"
            );
        }
        // strtod's reading: an empty bound is 0, leading white space is skipped
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "z", "", "(1"]),
            members(&["zero"])
        );
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "z", " 2", "2"]),
            members(&["c"])
        );
        let not_float = Reply::err("ERR min or max is not a float");
        for (min, max) in [("x", "1"), ("1", "nan"), ("1 ", "2"), ("((1", "2")] {
            assert_eq!(
                run(&mut db, now, &["zrangebyscore", "z", min, max]),
                not_float,
                "{min} {max}"
            );
        }
        assert!(matches!(
            run(&mut db, now, &["zrangebyscore", "z", "0x1", "2"]),
            Reply::Error(e) if e.contains("hexadecimal") && e.contains("in-memory")
        ));
        // options first, then the range, then the key
        assert_eq!(
            run(
                &mut db,
                now,
                &["zrangebyscore", "z", "x", "1", "limit", "0"]
            ),
            errors::syntax()
        );
        assert_eq!(
            run(
                &mut db,
                now,
                &["zrangebyscore", "z", "x", "1", "limit", "y", "1"]
            ),
            errors::not_integer()
        );
        for opt in ["rev", "byscore", "bylex"] {
            assert_eq!(
                run(&mut db, now, &["zrangebyscore", "z", "0", "1", opt]),
                errors::syntax()
            );
        }
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "none", "x", "1"]),
            not_float
        );
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "none", "0", "1"]),
            members(&[])
        );
        run(&mut db, now, &["set", "s", "x"]);
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "s", "0", "1"]),
            errors::wrong_type()
        );
        assert_eq!(
            run(&mut db, now, &["zrangebyscore", "z", "0"]),
            errors::arity("zrangebyscore")
        );
    }

    #[test]
    fn zrange_by_score_and_its_refusals() {
        let mut db = Db::new();
        let now = Instant::now();
        run(&mut db, now, &["zadd", "z", "1", "a", "2", "b", "3", "c"]);
        let members = |items: &[&str]| Reply::Array(items.iter().map(|m| bulk(m)).collect());
        assert_eq!(
            run(
                &mut db,
                now,
                &[
                    "zrange",
                    "z",
                    "(1",
                    "+inf",
                    "byscore",
                    "limit",
                    "1",
                    "1",
                    "withscores"
                ]
            ),
            members(&["c", "3"])
        );
        assert_eq!(
            run(
                &mut db,
                now,
                &["zrange", "z", "0", "1", "byscore", "byscore"]
            ),
            errors::syntax()
        );
        assert_eq!(
            run(&mut db, now, &["zrange", "z", "0", "-1", "limit", "1", "1"]),
            Reply::err(
                "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
            )
        );
        // as in Redis: a LIMIT whose count is -1 is no LIMIT
        assert_eq!(
            run(
                &mut db,
                now,
                &["zrange", "z", "0", "-1", "limit", "5", "-1"]
            ),
            members(&["a", "b", "c"])
        );
        assert_eq!(
            run(&mut db, now, &["zrange", "z", "(1", "2"]),
            errors::not_integer()
        );
        for opt in ["rev", "bylex"] {
            assert!(matches!(
                run(&mut db, now, &["zrange", "z", "0", "-1", opt]),
                Reply::Error(e) if e.contains(&opt.to_uppercase()) && e.contains("in-memory")
            ));
        }
    }

    fn items(items: &[&str]) -> Reply {
        Reply::Array(items.iter().map(|m| bulk(m)).collect())
    }

    #[test]
    fn lists_push_pop_and_index() {
        let mut db = Db::new();
        let now = Instant::now();
        assert_eq!(run(&mut db, now, &["rpush", "l", "a", "b"]), Reply::Int(2));
        assert_eq!(run(&mut db, now, &["lpush", "l", "y", "x"]), Reply::Int(4));
        assert_eq!(
            run(&mut db, now, &["lrange", "l", "0", "-1"]),
            items(&["x", "y", "a", "b"]),
            "LPUSH puts each element at the head in turn"
        );
        assert_eq!(
            run(&mut db, now, &["type", "l"]),
            Reply::Status("list".into())
        );
        assert_eq!(run(&mut db, now, &["llen", "l"]), Reply::Int(4));
        assert_eq!(run(&mut db, now, &["llen", "none"]), Reply::Int(0));
        for (index, expected) in [
            ("0", bulk("x")),
            ("3", bulk("b")),
            ("-1", bulk("b")),
            ("-4", bulk("x")),
            ("4", Reply::Nil),
            ("-5", Reply::Nil),
            ("9223372036854775807", Reply::Nil),
            ("-9223372036854775808", Reply::Nil),
        ] {
            assert_eq!(
                run(&mut db, now, &["lindex", "l", index]),
                expected,
                "LINDEX {index}"
            );
        }
        assert_eq!(
            run(&mut db, now, &["lindex", "l", "x"]),
            errors::not_integer()
        );
        // the key first: no list, nil whatever the index
        assert_eq!(run(&mut db, now, &["lindex", "none", "x"]), Reply::Nil);
        assert_eq!(run(&mut db, now, &["lpop", "l"]), bulk("x"));
        assert_eq!(run(&mut db, now, &["rpop", "l"]), bulk("b"));
        assert_eq!(run(&mut db, now, &["lpop", "l", "0"]), items(&[]));
        assert_eq!(run(&mut db, now, &["rpush", "l", "c"]), Reply::Int(3));
        assert_eq!(run(&mut db, now, &["lpop", "l", "2"]), items(&["y", "a"]));
        assert_eq!(run(&mut db, now, &["rpush", "l", "d", "e"]), Reply::Int(3));
        assert_eq!(
            run(&mut db, now, &["rpop", "l", "9"]),
            items(&["e", "d", "c"]),
            "RPOP with a count: from the tail, in the order popped"
        );
        assert_eq!(
            run(&mut db, now, &["exists", "l"]),
            Reply::Int(0),
            "an emptied list is deleted"
        );
        assert_eq!(run(&mut db, now, &["lpop", "l"]), Reply::Nil);
        assert_eq!(run(&mut db, now, &["rpop", "l", "1"]), Reply::Nil);
        assert_eq!(run(&mut db, now, &["lpop", "l", "0"]), Reply::Nil);
        let out_of_range = Reply::err("ERR value is out of range, must be positive");
        for count in ["-1", "x", "1.5", "", "9223372036854775808"] {
            assert_eq!(
                run(&mut db, now, &["lpop", "l", count]),
                out_of_range,
                "LPOP count {count:?}"
            );
        }
        assert_eq!(
            run(&mut db, now, &["rpop", "l", "1", "2"]),
            errors::arity("rpop")
        );
        assert_eq!(run(&mut db, now, &["rpush", "l"]), errors::arity("rpush"));
        assert_eq!(run(&mut db, now, &["lpush", "l"]), errors::arity("lpush"));
        assert_eq!(run(&mut db, now, &["lindex", "l"]), errors::arity("lindex"));
        assert_eq!(run(&mut db, now, &["exists", "l"]), Reply::Int(0));
    }

    #[test]
    fn list_ranges_clamp_as_redis_clamps_them() {
        let mut db = Db::new();
        let now = Instant::now();
        run(&mut db, now, &["rpush", "l", "a", "b", "c", "d", "e"]);
        let all = items(&["a", "b", "c", "d", "e"]);
        for (start, stop, expected) in [
            ("0", "-1", all.clone()),
            ("1", "2", items(&["b", "c"])),
            ("-2", "-1", items(&["d", "e"])),
            ("-100", "100", all.clone()),
            ("0", "0", items(&["a"])),
            ("4", "4", items(&["e"])),
            ("5", "9", items(&[])),
            ("3", "1", items(&[])),
            ("-1", "-3", items(&[])),
            ("0", "-6", items(&[])),
            ("-9223372036854775808", "9223372036854775807", all.clone()),
            ("-9223372036854775808", "-9223372036854775808", items(&[])),
        ] {
            assert_eq!(
                run(&mut db, now, &["lrange", "l", start, stop]),
                expected,
                "LRANGE {start} {stop}"
            );
        }
        for (start, stop) in [("x", "1"), ("0", "9223372036854775808"), ("0", "1.0")] {
            assert_eq!(
                run(&mut db, now, &["lrange", "l", start, stop]),
                errors::not_integer(),
                "LRANGE {start} {stop}"
            );
        }
        assert_eq!(
            run(&mut db, now, &["lrange", "none", "0", "-1"]),
            items(&[])
        );
        // the indexes first, then the key
        assert_eq!(
            run(&mut db, now, &["lrange", "none", "x", "0"]),
            errors::not_integer()
        );
        assert_eq!(
            run(&mut db, now, &["lrange", "l", "0"]),
            errors::arity("lrange")
        );
    }

    #[test]
    fn lrem_counts_from_either_end() {
        let mut db = Db::new();
        let now = Instant::now();
        run(
            &mut db,
            now,
            &["rpush", "l", "a", "b", "a", "c", "a", "b", "a"],
        );
        assert_eq!(run(&mut db, now, &["lrem", "l", "2", "a"]), Reply::Int(2));
        assert_eq!(
            run(&mut db, now, &["lrange", "l", "0", "-1"]),
            items(&["b", "c", "a", "b", "a"]),
            "a positive count: from the head"
        );
        assert_eq!(run(&mut db, now, &["lrem", "l", "-1", "a"]), Reply::Int(1));
        assert_eq!(
            run(&mut db, now, &["lrange", "l", "0", "-1"]),
            items(&["b", "c", "a", "b"]),
            "a negative count: from the tail"
        );
        assert_eq!(run(&mut db, now, &["lrem", "l", "0", "b"]), Reply::Int(2));
        assert_eq!(
            run(&mut db, now, &["lrange", "l", "0", "-1"]),
            items(&["c", "a"])
        );
        assert_eq!(run(&mut db, now, &["lrem", "l", "0", "zz"]), Reply::Int(0));
        assert_eq!(run(&mut db, now, &["lrem", "l", "5", "a"]), Reply::Int(1));
        assert_eq!(
            run(&mut db, now, &["lrem", "l", "x", "c"]),
            errors::not_integer()
        );
        assert_eq!(
            run(&mut db, now, &["lrem", "none", "1", "a"]),
            Reply::Int(0)
        );
        assert_eq!(
            run(&mut db, now, &["lrem", "none", "x", "a"]),
            errors::not_integer(),
            "the count first, then the key"
        );
        assert_eq!(
            run(&mut db, now, &["lrem", "l", "-9223372036854775808", "c"]),
            Reply::Int(1)
        );
        assert_eq!(
            run(&mut db, now, &["exists", "l"]),
            Reply::Int(0),
            "an emptied list is deleted"
        );
        assert_eq!(
            run(&mut db, now, &["lrem", "l", "0"]),
            errors::arity("lrem")
        );
    }

    #[test]
    fn lists_and_other_types_refuse_each_other() {
        let mut db = Db::new();
        let now = Instant::now();
        run(&mut db, now, &["set", "s", "v"]);
        run(&mut db, now, &["hset", "h", "f", "v"]);
        run(&mut db, now, &["zadd", "z", "1", "m"]);
        for key in ["s", "h", "z"] {
            for command in [
                &["rpush", key, "a"][..],
                &["lpush", key, "a", "b"],
                &["lpop", key],
                &["rpop", key],
                &["lpop", key, "0"],
                &["rpop", key, "2"],
                &["lindex", key, "0"],
                &["lindex", key, "x"],
                &["lrange", key, "0", "-1"],
                &["lrem", key, "0", "a"],
                &["llen", key],
            ] {
                assert_eq!(
                    run(&mut db, now, command),
                    errors::wrong_type(),
                    "{command:?}"
                );
            }
            // arguments read before the key are refused first
            assert_eq!(
                run(&mut db, now, &["lpop", key, "-1"]),
                Reply::err("ERR value is out of range, must be positive")
            );
            assert_eq!(
                run(&mut db, now, &["lrange", key, "x", "0"]),
                errors::not_integer()
            );
            assert_eq!(
                run(&mut db, now, &["lrem", key, "x", "a"]),
                errors::not_integer()
            );
        }
        assert_eq!(run(&mut db, now, &["get", "s"]), bulk("v"), "unchanged");
        assert_eq!(run(&mut db, now, &["hlen", "h"]), Reply::Int(1));
        run(&mut db, now, &["rpush", "l", "a"]);
        for command in [
            &["get", "l"][..],
            &["incr", "l"],
            &["hget", "l", "a"],
            &["hset", "l", "a", "1"],
            &["zscore", "l", "a"],
            &["zadd", "l", "1", "a"],
            &["zincrby", "l", "1", "a"],
        ] {
            assert_eq!(
                run(&mut db, now, command),
                errors::wrong_type(),
                "{command:?}"
            );
        }
        assert_eq!(
            run(&mut db, now, &["scan", "0", "type", "list"]),
            Reply::Array(vec![bulk("0"), items(&["l"])])
        );
        // a list keeps its deadline while it changes, and loses it with its
        // last element
        assert_eq!(run(&mut db, now, &["pexpire", "l", "5000"]), Reply::Int(1));
        assert_eq!(run(&mut db, now, &["rpush", "l", "b"]), Reply::Int(2));
        assert_eq!(run(&mut db, now, &["lrem", "l", "1", "a"]), Reply::Int(1));
        assert_eq!(run(&mut db, now, &["pttl", "l"]), Reply::Int(5000));
        assert_eq!(run(&mut db, now, &["rpop", "l"]), bulk("b"));
        assert_eq!(run(&mut db, now, &["pttl", "l"]), Reply::Int(-2));
        assert_eq!(run(&mut db, now, &["lpush", "l", "c"]), Reply::Int(1));
        assert_eq!(run(&mut db, now, &["pttl", "l"]), Reply::Int(-1));
        // SET replaces a list
        assert_eq!(run(&mut db, now, &["set", "l", "x"]), Reply::ok());
        assert_eq!(run(&mut db, now, &["get", "l"]), bulk("x"));
    }

    #[test]
    fn zincrby_adds_and_answers_as_zscore_writes() {
        let mut db = Db::new();
        let now = Instant::now();
        assert_eq!(
            run(&mut db, now, &["zincrby", "z", "1.5", "a"]),
            bulk("1.5")
        );
        assert_eq!(
            run(&mut db, now, &["type", "z"]),
            Reply::Status("zset".into()),
            "the key is made"
        );
        assert_eq!(run(&mut db, now, &["zincrby", "z", "-0.5", "a"]), bulk("1"));
        assert_eq!(
            run(&mut db, now, &["zincrby", "z", "0.1", "a"]),
            bulk("1.1000000000000001")
        );
        assert_eq!(
            run(&mut db, now, &["zscore", "z", "a"]),
            bulk("1.1000000000000001")
        );
        assert_eq!(
            run(&mut db, now, &["zincrby", "z", "1700000000123", "b"]),
            bulk("1700000000123")
        );
        assert_eq!(
            run(&mut db, now, &["zincrby", "z", "-30000", "b"]),
            bulk("1699999970123")
        );
        // a new member's score is answered as given, and -0 is stored as 0
        assert_eq!(run(&mut db, now, &["zincrby", "z", "-0", "c"]), bulk("-0"));
        assert_eq!(run(&mut db, now, &["zscore", "z", "c"]), bulk("0"));
        assert_eq!(run(&mut db, now, &["zincrby", "z", "-0", "c"]), bulk("0"));
        assert_eq!(
            run(&mut db, now, &["zrange", "z", "0", "-1", "withscores"]),
            items(&["c", "0", "a", "1.1000000000000001", "b", "1699999970123"])
        );
        assert_eq!(
            run(&mut db, now, &["zincrby", "z", "inf", "d"]),
            bulk("inf")
        );
        assert_eq!(run(&mut db, now, &["zincrby", "z", "1", "d"]), bulk("inf"));
        assert_eq!(
            run(&mut db, now, &["zincrby", "z", "-inf", "d"]),
            Reply::err("ERR resulting score is not a number (NaN)")
        );
        assert_eq!(
            run(&mut db, now, &["zscore", "z", "d"]),
            bulk("inf"),
            "a NaN sum changes nothing"
        );
        for bad in ["x", "nan", "", " 1", "1 ", "1,5", "1e400", "-1e-400"] {
            assert_eq!(
                run(&mut db, now, &["zincrby", "z", bad, "a"]),
                errors::not_float(),
                "ZINCRBY {bad:?}"
            );
        }
        assert!(matches!(
            run(&mut db, now, &["zincrby", "z", "0x10", "a"]),
            Reply::Error(e) if e.contains("hexadecimal") && e.contains("in-memory")
        ));
        assert_eq!(
            run(&mut db, now, &["zscore", "z", "a"]),
            bulk("1.1000000000000001")
        );
        // the increment first, then the key
        run(&mut db, now, &["set", "s", "v"]);
        run(&mut db, now, &["hset", "h", "f", "v"]);
        for key in ["s", "h"] {
            assert_eq!(
                run(&mut db, now, &["zincrby", key, "1", "a"]),
                errors::wrong_type()
            );
            assert_eq!(
                run(&mut db, now, &["zincrby", key, "x", "a"]),
                errors::not_float()
            );
        }
        assert_eq!(run(&mut db, now, &["get", "s"]), bulk("v"));
        // the key keeps its deadline
        assert_eq!(run(&mut db, now, &["pexpire", "z", "5000"]), Reply::Int(1));
        assert_eq!(run(&mut db, now, &["zincrby", "z", "1", "e"]), bulk("1"));
        assert_eq!(run(&mut db, now, &["pttl", "z"]), Reply::Int(5000));
        assert_eq!(
            run(&mut db, now, &["zincrby", "z", "1"]),
            errors::arity("zincrby")
        );
        assert_eq!(
            run(&mut db, now, &["zincrby", "z", "1", "a", "b"]),
            errors::arity("zincrby")
        );
    }

    #[test]
    fn lists_and_zincrby_from_a_script() {
        use redis::Value;
        let server = super::super::Server::new();
        let call = |args: &[&str]| {
            let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
            server.call(&args)
        };
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        // a fair lock's queue: RPUSH, LINDEX (false past the end), LRANGE,
        // LPOP, LREM, and ZINCRBY of the waiters behind one that leaves
        let script = "redis.call('rpush', KEYS[1], 'w1', 'w2', 'w3')\n\
                      redis.call('zadd', KEYS[2], 100, 'w1', 200, 'w2', 300, 'w3')\n\
                      local queue = redis.call('lrange', KEYS[1], 0, -1)\n\
                      local i = 1\n\
                      while i <= #queue and queue[i] ~= ARGV[1] do i = i + 1 end\n\
                      i = i + 1\n\
                      while i <= #queue do\n\
                        redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i])\n\
                        i = i + 1\n\
                      end\n\
                      redis.call('zrem', KEYS[2], ARGV[1])\n\
                      local removed = redis.call('lrem', KEYS[1], 0, ARGV[1])\n\
                      return {redis.call('lindex', KEYS[1], 0), redis.call('lindex', KEYS[1], -1),\n\
                              tostring(redis.call('lindex', KEYS[1], 2) == false), removed,\n\
                              redis.call('zscore', KEYS[2], 'w3'), redis.call('llen', KEYS[1]),\n\
                              type(redis.call('zincrby', KEYS[2], 0.5, 'w2'))}";
        assert_eq!(
            call(&["EVAL", script, "2", "q", "t", "w1", "50"]).ok(),
            Some(Value::Array(vec![
                text("w2"),
                text("w3"),
                text("true"),
                Value::Int(1),
                text("250"),
                Value::Int(2),
                text("string"),
            ]))
        );
        assert_eq!(
            call(&["ZRANGE", "t", "0", "-1", "WITHSCORES"]).ok(),
            Some(Value::Array(
                ["w2", "150.5", "w3", "250"].map(text).to_vec()
            ))
        );
        // popping the last elements deletes the key; nil (false) after that
        let script = "local first = redis.call('lpop', KEYS[1])\n\
                      local rest = redis.call('rpop', KEYS[1], 5)\n\
                      return {first, #rest, rest[1], redis.call('exists', KEYS[1]),\n\
                              tostring(redis.call('lpop', KEYS[1])), tostring(redis.call('lpop', KEYS[1], 2))}";
        assert_eq!(
            call(&["EVAL", script, "1", "q"]).ok(),
            Some(Value::Array(vec![
                text("w2"),
                Value::Int(1),
                text("w3"),
                Value::Int(0),
                text("false"),
                text("false"),
            ]))
        );
        let e = call(&["EVAL", "return redis.call('lpush', KEYS[1], 'a')", "1", "t"])
            .expect_err("WRONGTYPE");
        assert_eq!(e.code(), Some("WRONGTYPE"));
        let e = call(&[
            "EVAL",
            "return redis.call('zincrby', KEYS[1], 'x', 'a')",
            "1",
            "t",
        ])
        .expect_err("not a float");
        assert_eq!(
            e.detail()
                .map(|d| d.starts_with("value is not a valid float")),
            Some(true)
        );
    }

    #[test]
    fn scan_resumes_after_its_last_key() {
        let mut db = Db::new();
        let now = Instant::now();
        for i in 0..25 {
            run(&mut db, now, &["hset", &format!("lock:{i:02}"), "o", "1"]);
        }
        run(&mut db, now, &["set", "lock:str", "x"]);
        let mut cursor = "0".to_string();
        let mut seen = Vec::new();
        loop {
            let reply = run(
                &mut db,
                now,
                &[
                    "scan", &cursor, "match", "lock:*", "count", "7", "type", "hash",
                ],
            );
            let Reply::Array(parts) = reply else {
                panic!("{reply:?}")
            };
            let [Reply::Bulk(next), Reply::Array(keys)] = parts.as_slice() else {
                panic!("{parts:?}")
            };
            seen.extend(keys.iter().cloned());
            // a key deleted mid-scan does not break the cursor
            run(&mut db, now, &["del", "lock:05"]);
            cursor = String::from_utf8_lossy(next).into_owned();
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(seen.len(), 25, "each hash once, the string left out");
        assert!(matches!(
            run(&mut db, now, &["scan", "999", "count", "1"]),
            Reply::Error(e) if e.contains("invalid cursor")
        ));
        assert_eq!(
            run(&mut db, now, &["scan", "x"]),
            Reply::err("ERR invalid cursor")
        );
        assert_eq!(run(&mut db, now, &["scan", "0", "count"]), errors::syntax());
    }

    #[test]
    fn server_commands_answer_as_a_lone_primary() {
        let mut db = Db::new();
        let now = Instant::now();
        assert_eq!(run(&mut db, now, &["ping"]), Reply::Status("PONG".into()));
        assert_eq!(
            run(&mut db, now, &["config", "get", "maxmemory-policy"]),
            Reply::Array(vec![bulk("maxmemory-policy"), bulk("noeviction")])
        );
        assert!(
            matches!(run(&mut db, now, &["config", "set", "x", "y"]), Reply::Error(e) if e.contains("CONFIG SET"))
        );
        assert_eq!(run(&mut db, now, &["wait", "1", "100"]), Reply::Int(0));
        assert_eq!(
            run(&mut db, now, &["wait", "1", "-1"]),
            Reply::err("ERR timeout is negative")
        );
        assert_eq!(
            run(&mut db, now, &["role"]),
            Reply::Array(vec![bulk("master"), Reply::Int(0), Reply::Array(vec![])])
        );
        assert_eq!(
            run(&mut db, now, &["pubsub", "shardnumsub"]),
            Reply::Array(vec![])
        );
        assert!(matches!(
            run(&mut db, now, &["object", "encoding", "k"]),
            Reply::Error(e) if e.contains("'object'") && e.contains("in-memory")
        ));
        let Reply::Array(t) = run(&mut db, now, &["time"]) else {
            panic!()
        };
        assert_eq!(t.len(), 2);
    }
}
