//! The fenced write: a caller's Lua body behind a check, in the same
//! script, that a hold is still the lock's holder (`fenced.lua`).

use redis::Cmd;

use super::Script;

/// The error code `fenced.lua` answers with when the hold is gone.
const REFUSED: &str = "LOCKCORE_FENCED";

/// Where `fenced.lua` takes the caller's body.
const BODY: &str = "--BODY--";

/// The whole script for a caller's `body`: the check, then the body as a
/// function of its own `KEYS` and `ARGV`.
pub(crate) fn script(body: &str) -> Script {
    let source = include_str!("fenced.lua").replacen(BODY, body, 1);
    Script::owned(source)
}

/// The bodies of the fenced writes lock-core offers ready-made.
pub(crate) mod bodies {
    /// `SET key value`.
    pub(crate) const SET: &str = "return redis.call('set', KEYS[1], ARGV[1])";
    /// `INCRBY key delta`: the value after.
    pub(crate) const INCR_BY: &str = "return redis.call('incrby', KEYS[1], ARGV[1])";
    /// `HSET key field value`.
    pub(crate) const HSET: &str = "return redis.call('hset', KEYS[1], ARGV[1], ARGV[2])";
    /// `DEL key`: 1 when it was there.
    pub(crate) const DEL: &str = "return redis.call('del', KEYS[1])";
}

/// One fenced write: the lock and the hold's field, the call's request
/// latch (`latch_ms` 0: none), then the caller's keys and arguments.
pub(crate) struct FencedCall<'a> {
    pub(crate) lock: &'a str,
    pub(crate) field: &'a str,
    pub(crate) latch: &'a str,
    pub(crate) latch_ms: u64,
    pub(crate) keys: &'a [&'a str],
    pub(crate) args: &'a [&'a str],
}

impl FencedCall<'_> {
    /// The `EVALSHA` of the write: `KEYS` = lock, latch, the caller's;
    /// `ARGV` = field, latch lifetime, the caller's.
    pub(crate) fn cmd(&self, script: &Script) -> Cmd {
        let latch_ms = self.latch_ms.to_string();
        let bytes = self.lock.len()
            + self.field.len()
            + self.latch.len()
            + latch_ms.len()
            + self.keys.iter().map(|k| k.len()).sum::<usize>()
            + self.args.iter().map(|a| a.len()).sum::<usize>();
        let mut cmd = script.evalsha_prefix(
            self.keys.len() + 2,
            self.keys.len() + self.args.len() + 4,
            bytes,
        );
        cmd.arg(self.lock).arg(self.latch);
        for key in self.keys {
            cmd.arg(*key);
        }
        cmd.arg(self.field).arg(latch_ms);
        for arg in self.args {
            cmd.arg(*arg);
        }
        cmd
    }
}

/// Whether `err` is `fenced.lua`'s refusal (the hold is gone).
pub(crate) fn is_refusal(err: &redis::RedisError) -> bool {
    err.code() == Some(REFUSED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_latch_and_field_come_first() {
        let script = script("return 7");
        let call = FencedCall {
            lock: "lock",
            field: "owner:1",
            latch: "latch",
            latch_ms: 0,
            keys: &["k"],
            args: &["a", "b"],
        };
        let args = super::super::test_support::args(&call.cmd(&script));
        assert_eq!(args[0], "EVALSHA");
        assert_eq!(
            &args[2..],
            ["3", "lock", "latch", "k", "owner:1", "0", "a", "b"]
        );
    }

    #[test]
    fn the_body_goes_inside_the_check() {
        let source = include_str!("fenced.lua").replacen(BODY, "return 7", 1);
        let check = source.find("hexists").expect("check");
        let body = source.find("return 7").expect("body");
        assert!(check < body);
        assert!(!source.contains(BODY));
    }
}
