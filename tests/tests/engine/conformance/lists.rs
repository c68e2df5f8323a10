//! The conformance table's cases of lists (`RPUSH`, `LPUSH`, `LPOP`,
//! `RPOP`, `LINDEX`, `LRANGE`, `LREM`, `LLEN`) and `ZINCRBY`: what a
//! Redisson fair lock's scripts call on its queue (a list of waiters) and
//! its timeouts (a sorted set of each waiter's deadline), as raw commands
//! (negative indexes, out of range, each argument refused in Redis' order,
//! `WRONGTYPE` against a hash and a string, an emptied list deleted) and
//! from scripts (nil as `false`, Lua numbers as increments).

use super::{cmd, eval, ruled, Rule, Step};

pub(super) fn cases(name: &mut dyn FnMut() -> String) -> Vec<(&'static str, Vec<Step>)> {
    let mut table: Vec<(&'static str, Vec<Step>)> = Vec::new();

    let n = name();
    let (l, s, h, none) = (
        format!("{n}:l"),
        format!("{n}:s"),
        format!("{n}:h"),
        format!("{n}:none"),
    );
    table.push((
        "lists: RPUSH, LPUSH, LLEN, LINDEX (negative, out of range), LRANGE (Redis' clamping), argument errors",
        vec![
            cmd(&["RPUSH", &l, "a", "b"]),
            cmd(&["LPUSH", &l, "y", "x"]),
            cmd(&["RPUSH", &l, "c"]),
            cmd(&["LLEN", &l]),
            cmd(&["LLEN", &none]),
            cmd(&["TYPE", &l]),
            cmd(&["LINDEX", &l, "0"]),
            cmd(&["LINDEX", &l, "4"]),
            cmd(&["LINDEX", &l, "-1"]),
            cmd(&["LINDEX", &l, "-5"]),
            cmd(&["LINDEX", &l, "5"]),
            cmd(&["LINDEX", &l, "-6"]),
            cmd(&["LINDEX", &l, "9223372036854775807"]),
            cmd(&["LINDEX", &l, "-9223372036854775808"]),
            cmd(&["LINDEX", &l, "x"]),
            cmd(&["LINDEX", &l, "1.0"]),
            cmd(&["LINDEX", &none, "0"]),
            cmd(&["LINDEX", &none, "x"]),
            cmd(&["LRANGE", &l, "0", "-1"]),
            cmd(&["LRANGE", &l, "1", "2"]),
            cmd(&["LRANGE", &l, "-2", "-1"]),
            cmd(&["LRANGE", &l, "-100", "100"]),
            cmd(&["LRANGE", &l, "4", "4"]),
            cmd(&["LRANGE", &l, "5", "9"]),
            cmd(&["LRANGE", &l, "3", "1"]),
            cmd(&["LRANGE", &l, "-1", "-3"]),
            cmd(&["LRANGE", &l, "0", "-6"]),
            cmd(&["LRANGE", &l, "-9223372036854775808", "9223372036854775807"]),
            cmd(&["LRANGE", &l, "-9223372036854775808", "-9223372036854775808"]),
            cmd(&["LRANGE", &l, "0", "9223372036854775808"]),
            cmd(&["LRANGE", &l, "x", "1"]),
            cmd(&["LRANGE", &none, "0", "-1"]),
            cmd(&["LRANGE", &none, "x", "0"]),
            cmd(&["LRANGE", &l, "0"]),
            cmd(&["LINDEX", &l]),
            cmd(&["LLEN", &l, "x"]),
            cmd(&["RPUSH", &l]),
            cmd(&["LPUSH", &l]),
            Step::ScanAll(vec!["TYPE".into(), "list".into()]),
            ruled(Rule::Ttl, &["PTTL", &l]),
        ],
    ));
    table.push((
        "lists: LPOP and RPOP with and without a count (0, fewer, more than there are), nil on a missing key, the count's errors first, the emptied key deleted",
        vec![
            cmd(&["RPUSH", &l, "a", "b", "c", "d", "e", "f"]),
            cmd(&["LPOP", &l]),
            cmd(&["RPOP", &l]),
            cmd(&["LPOP", &l, "0"]),
            cmd(&["RPOP", &l, "0"]),
            cmd(&["LPOP", &l, "2"]),
            cmd(&["RPOP", &l, "1"]),
            cmd(&["LRANGE", &l, "0", "-1"]),
            cmd(&["LPOP", &l, "-1"]),
            cmd(&["RPOP", &l, "x"]),
            cmd(&["LPOP", &l, "1.5"]),
            cmd(&["LPOP", &l, ""]),
            cmd(&["LPOP", &l, "9223372036854775808"]),
            cmd(&["LPOP", &l, "1", "2"]),
            cmd(&["RPOP"]),
            cmd(&["PEXPIRE", &l, "30000"]),
            cmd(&["RPUSH", &l, "g", "h"]),
            ruled(Rule::Ttl, &["PTTL", &l]),
            cmd(&["RPOP", &l, "9"]),
            cmd(&["EXISTS", &l]),
            ruled(Rule::Ttl, &["PTTL", &l]),
            cmd(&["LPOP", &l]),
            cmd(&["RPOP", &l]),
            cmd(&["LPOP", &l, "1"]),
            cmd(&["RPOP", &l, "0"]),
            cmd(&["LPOP", &none, "x"]),
            cmd(&["LPUSH", &l, "z"]),
            cmd(&["LPOP", &l]),
            cmd(&["EXISTS", &l]),
            cmd(&["LLEN", &l]),
        ],
    ));
    table.push((
        "lists: LREM from the head, from the tail, all; WRONGTYPE against a string and a hash for every list command, the arguments Redis reads first refused first; other commands against a list",
        vec![
            cmd(&["RPUSH", &l, "a", "b", "a", "c", "a", "b", "a"]),
            cmd(&["LREM", &l, "2", "a"]),
            cmd(&["LRANGE", &l, "0", "-1"]),
            cmd(&["LREM", &l, "-1", "a"]),
            cmd(&["LRANGE", &l, "0", "-1"]),
            cmd(&["LREM", &l, "0", "b"]),
            cmd(&["LREM", &l, "0", "zz"]),
            cmd(&["LREM", &l, "x", "a"]),
            cmd(&["LREM", &none, "1", "a"]),
            cmd(&["LREM", &none, "x", "a"]),
            cmd(&["LREM", &l, "1"]),
            cmd(&["LRANGE", &l, "0", "-1"]),
            cmd(&["LREM", &l, "-9223372036854775808", "c"]),
            cmd(&["LREM", &l, "5", "a"]),
            cmd(&["EXISTS", &l]),
            cmd(&["SET", &s, "v"]),
            cmd(&["HSET", &h, "f", "v"]),
            cmd(&["RPUSH", &s, "a"]),
            cmd(&["LPUSH", &h, "a", "b"]),
            cmd(&["LPOP", &s]),
            cmd(&["RPOP", &h, "2"]),
            cmd(&["LPOP", &h, "0"]),
            cmd(&["LPOP", &s, "-1"]),
            cmd(&["LINDEX", &s, "0"]),
            cmd(&["LINDEX", &h, "x"]),
            cmd(&["LRANGE", &h, "0", "-1"]),
            cmd(&["LRANGE", &s, "x", "0"]),
            cmd(&["LREM", &h, "0", "a"]),
            cmd(&["LREM", &s, "x", "a"]),
            cmd(&["LLEN", &s]),
            cmd(&["LLEN", &h]),
            cmd(&["RPUSH", &l, "a"]),
            cmd(&["GET", &l]),
            cmd(&["HGET", &l, "a"]),
            cmd(&["HSET", &l, "a", "1"]),
            cmd(&["INCR", &l]),
            cmd(&["ZSCORE", &l, "a"]),
            cmd(&["ZINCRBY", &l, "1", "a"]),
            cmd(&["SET", &h, "w"]),
            cmd(&["RPUSH", &h, "now a list"]),
        ],
    ));

    let n = name();
    let (z, s, h, l) = (
        format!("{n}:z"),
        format!("{n}:s"),
        format!("{n}:h"),
        format!("{n}:l"),
    );
    table.push((
        "ZINCRBY: made when missing, the new score as ZSCORE writes it (%.17g, -0 of a new member, inf), a NaN sum refused, bad increments (also out of a double's range) refused before the key, WRONGTYPE, the deadline kept; ZADD's out-of-range scores",
        vec![
            cmd(&["ZINCRBY", &z, "1.5", "a"]),
            cmd(&["TYPE", &z]),
            cmd(&["ZINCRBY", &z, "-0.5", "a"]),
            cmd(&["ZINCRBY", &z, "0.1", "a"]),
            cmd(&["ZSCORE", &z, "a"]),
            cmd(&["ZINCRBY", &z, "1700000000123", "b"]),
            cmd(&["ZINCRBY", &z, "-30000", "b"]),
            cmd(&["ZINCRBY", &z, "-0", "c"]),
            cmd(&["ZSCORE", &z, "c"]),
            cmd(&["ZINCRBY", &z, "-0", "c"]),
            cmd(&["ZINCRBY", &z, "+inf", "d"]),
            cmd(&["ZINCRBY", &z, "1", "d"]),
            cmd(&["ZINCRBY", &z, "-inf", "d"]),
            cmd(&["ZSCORE", &z, "d"]),
            cmd(&["ZINCRBY", &z, "-Infinity", "e"]),
            cmd(&["ZINCRBY", &z, "1e-3", "f"]),
            cmd(&["ZINCRBY", &z, "4e-320", "g"]),
            cmd(&["ZINCRBY", &z, "1.7976931348623157e308", "h"]),
            cmd(&["ZINCRBY", &z, "1.7976931348623157e308", "h"]),
            cmd(&["ZINCRBY", &z, "x", "a"]),
            cmd(&["ZINCRBY", &z, "nan", "a"]),
            cmd(&["ZINCRBY", &z, "", "a"]),
            cmd(&["ZINCRBY", &z, " 1", "a"]),
            cmd(&["ZINCRBY", &z, "1 ", "a"]),
            cmd(&["ZINCRBY", &z, "1e400", "a"]),
            cmd(&["ZINCRBY", &z, "-1e-400", "a"]),
            cmd(&["ZINCRBY", &z, "1"]),
            cmd(&["ZINCRBY", &z, "1", "a", "b"]),
            cmd(&["ZRANGE", &z, "0", "-1", "WITHSCORES"]),
            cmd(&["PEXPIRE", &z, "30000"]),
            cmd(&["ZINCRBY", &z, "2", "new"]),
            ruled(Rule::Ttl, &["PTTL", &z]),
            cmd(&["SET", &s, "v"]),
            cmd(&["HSET", &h, "f", "v"]),
            cmd(&["RPUSH", &l, "a"]),
            cmd(&["ZINCRBY", &s, "1", "a"]),
            cmd(&["ZINCRBY", &h, "1", "a"]),
            cmd(&["ZINCRBY", &l, "1", "a"]),
            cmd(&["ZINCRBY", &s, "x", "a"]),
            cmd(&["ZADD", &z, "1e400", "a"]),
            cmd(&["ZADD", &z, "1e-400", "a"]),
            cmd(&["ZADD", &z, "0e500", "zero", "2.5e-324", "tiny"]),
            cmd(&["ZADD", &z, "2e-324", "a"]),
            cmd(&["ZSCORE", &z, "tiny"]),
        ],
    ));

    // a fair lock's queue and timeouts, as Redisson's scripts keep them:
    // waiters in arrival order, each with the deadline of its turn
    let n = name();
    let (queue, timeouts) = (format!("{n}:queue"), format!("{n}:timeouts"));
    let (keys, h) = ([queue.as_str(), timeouts.as_str()], format!("{n}:h"));
    let join = "local first = redis.call('lindex', KEYS[1], 0)\n\
                local last = redis.call('lindex', KEYS[1], -1)\n\
                local deadline = tonumber(ARGV[2])\n\
                if last ~= false then deadline = tonumber(redis.call('zscore', KEYS[2], last)) + tonumber(ARGV[3]) end\n\
                redis.call('zadd', KEYS[2], deadline, ARGV[1])\n\
                return {tostring(first), redis.call('rpush', KEYS[1], ARGV[1]), deadline}";
    // the waiters whose turn passed, from the head, until one that is alive
    let prune = "local pruned = {}\n\
                 for _ = 1, 100 do\n\
                   local head = redis.call('lindex', KEYS[1], 0)\n\
                   if head == false then break end\n\
                   if tonumber(redis.call('zscore', KEYS[2], head)) > tonumber(ARGV[1]) then break end\n\
                   redis.call('zrem', KEYS[2], head)\n\
                   pruned[#pruned + 1] = redis.call('lpop', KEYS[1])\n\
                 end\n\
                 return {#pruned, pruned[1] or false, redis.call('llen', KEYS[1]), redis.call('exists', KEYS[1])}";
    // a waiter that gives up: those behind it move up by the wait it held
    let leave = "local queue = redis.call('lrange', KEYS[1], 0, -1)\n\
                 local at = 0\n\
                 for i = 1, #queue do if queue[i] == ARGV[1] then at = i end end\n\
                 local moved = {}\n\
                 if at > 0 then\n\
                   for i = at + 1, #queue do\n\
                     moved[#moved + 1] = redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i])\n\
                   end\n\
                 end\n\
                 redis.call('zrem', KEYS[2], ARGV[1])\n\
                 return {redis.call('lrem', KEYS[1], 0, ARGV[1]), unpack(moved)}";
    table.push((
        "a fair lock's queue from scripts: RPUSH and LINDEX (false when empty or past the end), ZINCRBY by a Lua number, LRANGE, LREM, LPOP until the queue is gone; nil and errors as Lua sees them",
        vec![
            eval(join, &keys, &["w1", "1700000005000", "5000"]),
            eval(join, &keys, &["w2", "1700000005000", "5000"]),
            eval(join, &keys, &["w3", "1700000005000", "5000"]),
            eval(join, &keys, &["w4", "1700000005000", "5000"]),
            cmd(&["LRANGE", &queue, "0", "-1"]),
            eval(leave, &keys, &["w2", "5000"]),
            eval(leave, &keys, &["nobody", "5000"]),
            cmd(&["ZRANGE", &timeouts, "0", "-1", "WITHSCORES"]),
            eval(prune, &keys, &["1700000004999"]),
            eval(prune, &keys, &["1700000010000"]),
            eval(prune, &keys, &["1700000099999"]),
            cmd(&["EXISTS", &queue, &timeouts]),
            eval(
                "return {tostring(redis.call('lindex', KEYS[1], 0)), tostring(redis.call('lpop', KEYS[1])), \
                 tostring(redis.call('rpop', KEYS[1], 2)), #redis.call('lrange', KEYS[1], 0, -1), \
                 redis.call('lrem', KEYS[1], 0, 'x'), redis.call('llen', KEYS[1])}",
                &[&queue],
                &[],
            ),
            eval(
                "redis.call('lpush', KEYS[1], 'a', 'b', 'c')\n\
                 local popped = redis.call('rpop', KEYS[1], 2)\n\
                 return {popped[1], popped[2], #redis.call('lpop', KEYS[1], 0), redis.call('lpop', KEYS[1]), \
                 redis.call('exists', KEYS[1])}",
                &[&queue],
                &[],
            ),
            eval(
                "return {redis.call('zincrby', KEYS[1], 0.1, 'm'), redis.call('zincrby', KEYS[1], 1e17, 'm'), \
                 type(redis.call('zincrby', KEYS[1], -1, 'n'))}",
                &[&timeouts],
                &[],
            ),
            cmd(&["HSET", &h, "f", "v"]),
            eval(
                "return redis.pcall('lindex', KEYS[1], 0)['err']",
                &[&h],
                &[],
            ),
            eval("return redis.call('rpush', KEYS[1], 'x')", &[&h], &[]),
            eval(
                "return redis.pcall('zincrby', KEYS[1], 'x', 'm')",
                &[&timeouts],
                &[],
            ),
            eval(
                "return redis.pcall('zincrby', KEYS[1], '-inf', 'm')['err']",
                &[&timeouts],
                &[],
            ),
            eval(
                "redis.call('zincrby', KEYS[1], 'inf', 'm') return redis.call('zincrby', KEYS[1], '-inf', 'm')",
                &[&timeouts],
                &[],
            ),
            eval("return redis.call('lpop', KEYS[1], -1)", &[&queue], &[]),
            eval(
                "return redis.call('lrange', KEYS[1], 0)",
                &[&queue],
                &[],
            ),
        ],
    ));
    table
}
