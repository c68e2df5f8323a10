//! Group commit on the wire: several calls of one script sent as one call
//! of its grouped form (`group.lua` around the script's source), and the
//! grouped reply split back into one reply per call.
//!
//! The grouped form runs the script once per element, in order, inside one
//! script: Redis applies them as it would the same calls sent one after
//! the other with nothing between them, so every element keeps its own
//! outcome, its own latch or count (at most once) and its own errors.

use redis::{Arg, Cmd, RedisError, Value};

use super::Script;
use crate::error::{Error, Result};

/// The grouped form of the script `source` (see `group.lua`).
pub(super) fn grouped_source(source: &str) -> String {
    let mut grouped = String::with_capacity(source.len() + 1200);
    grouped.push_str("local function one(KEYS, ARGV)\n");
    grouped.push_str(source);
    if !source.ends_with('\n') {
        grouped.push('\n');
    }
    grouped.push_str(include_str!("group.lua"));
    grouped
}

/// One element's `EVALSHA` command taken apart: its keys and arguments.
struct Parts<'a> {
    keys: Vec<&'a [u8]>,
    args: Vec<&'a [u8]>,
}

impl<'a> Parts<'a> {
    /// `EVALSHA sha numkeys key... arg...`, as [`Script::evalsha`] builds it.
    fn of(cmd: &'a Cmd) -> Result<Parts<'a>> {
        let mut all = Vec::with_capacity(16);
        for arg in cmd.args_iter() {
            match arg {
                Arg::Simple(bytes) => all.push(bytes),
                _ => return Err(not_a_script_call()),
            }
        }
        let numkeys = all
            .get(2)
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| all.len() >= 3 + n)
            .ok_or_else(not_a_script_call)?;
        if !all
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case(b"EVALSHA"))
        {
            return Err(not_a_script_call());
        }
        let mut rest = all.split_off(3);
        let args = rest.split_off(numkeys);
        Ok(Parts { keys: rest, args })
    }
}

fn not_a_script_call() -> Error {
    Error::Protocol("group commit: an element is not an EVALSHA call".into())
}

/// The one call of `grouped` (the grouped form of a script) that carries
/// `elements`, each an `EVALSHA` call of that script.
pub(crate) fn grouped_cmd<'a>(
    grouped: &Script,
    elements: impl IntoIterator<Item = &'a Cmd>,
) -> Result<Cmd> {
    let parts = elements
        .into_iter()
        .map(Parts::of)
        .collect::<Result<Vec<_>>>()?;
    let numkeys: usize = parts.iter().map(|p| p.keys.len()).sum();
    let numargs: usize = parts.iter().map(|p| p.args.len()).sum();
    let bytes: usize = parts
        .iter()
        .flat_map(|p| p.keys.iter().chain(p.args.iter()))
        .map(|a| a.len())
        .sum();
    let mut cmd = grouped.evalsha_prefix(
        numkeys,
        numkeys + numargs + 1 + 2 * parts.len(),
        bytes + 8 * parts.len(),
    );
    for part in &parts {
        for key in &part.keys {
            cmd.arg(*key);
        }
    }
    cmd.arg(parts.len());
    for part in &parts {
        cmd.arg(part.keys.len()).arg(part.args.len());
    }
    for part in &parts {
        for arg in &part.args {
            cmd.arg(*arg);
        }
    }
    Ok(cmd)
}

/// The grouped reply split into one reply per element (`n` of them): the
/// script's reply, or the error it raised as Redis would have answered it
/// alone (same code and kind).
pub(crate) fn split_reply(
    reply: Value,
    n: usize,
) -> Result<Vec<std::result::Result<Value, RedisError>>> {
    let unexpected = |reply: &Value| super::unexpected("grouped", reply);
    let Value::Array(entries) = reply else {
        return Err(unexpected(&reply));
    };
    if entries.len() != n {
        return Err(unexpected(&Value::Array(entries)));
    }
    let mut replies = Vec::with_capacity(n);
    for entry in entries {
        let Value::Array(mut pair) = entry else {
            return Err(unexpected(&entry));
        };
        let outcome = match pair.first() {
            Some(Value::Int(1)) if pair.len() == 1 => Ok(None),
            Some(Value::Int(1)) if pair.len() == 2 => Ok(pair.pop()),
            Some(Value::Int(0)) if pair.len() == 2 => match pair.pop() {
                Some(Value::BulkString(text)) => Err(server_error(&text)),
                other => return Err(unexpected(&Value::Array(other.into_iter().collect()))),
            },
            _ => return Err(unexpected(&Value::Array(pair))),
        };
        replies.push(match outcome {
            Ok(Some(value)) => value.extract_error(),
            Ok(None) => Ok(Value::Nil),
            Err(e) => Err(e),
        });
    }
    Ok(replies)
}

/// The error reply Redis gives a script that raised `text` (an error
/// reply's text, or a Lua error's, which Redis prefixes with `ERR`).
fn server_error(text: &[u8]) -> RedisError {
    let text: Vec<u8> = text
        .iter()
        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
        .collect();
    // An error code is a first word in capitals ("WRONGTYPE", "NOPERM").
    let code = text.split(|&b| b == b' ').next().unwrap_or_default();
    let has_code = !code.is_empty() && code.iter().all(|b| b.is_ascii_uppercase());
    let mut resp = Vec::with_capacity(text.len() + 8);
    resp.push(b'-');
    if !has_code {
        resp.extend_from_slice(b"ERR ");
    }
    resp.extend_from_slice(&text);
    resp.extend_from_slice(b"\r\n");
    match redis::parse_redis_value(&resp).map(Value::extract_error) {
        Ok(Err(e)) => e,
        Ok(Ok(_)) | Err(_) => RedisError::from((
            redis::ErrorKind::Client,
            "a grouped script call raised",
            String::from_utf8_lossy(&text).into_owned(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn elements_are_laid_out_keys_first_then_counts_then_arguments() {
        let plain = Script::new("return 1");
        let grouped = Script::owned(grouped_source("return 1"));
        let a = plain.evalsha(&["k1", "k2"], ("a1",));
        let b = plain.evalsha(&["k3"], ("b1", "b2", 7));
        let cmd = grouped_cmd(&grouped, [&a, &b]).expect("two calls");
        let args: Vec<String> = cmd
            .args_iter()
            .map(|a| match a {
                Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "cursor".into(),
            })
            .collect();
        assert_eq!(
            args[2..],
            ["3", "k1", "k2", "k3", "2", "2", "1", "1", "3", "a1", "b1", "b2", "7"]
        );
        assert_eq!(args[0], "EVALSHA");
    }

    #[test]
    fn a_command_that_is_not_evalsha_is_refused() {
        let grouped = Script::owned(grouped_source("return 1"));
        let mut get = redis::cmd("GET");
        get.arg("k");
        assert!(matches!(
            grouped_cmd(&grouped, [&get]),
            Err(Error::Protocol(_))
        ));
        let mut short = redis::cmd("EVALSHA");
        short.arg("sha").arg(3).arg("only-one-key");
        assert!(grouped_cmd(&grouped, [&short]).is_err());
    }

    #[test]
    fn replies_split_per_element_with_nil_and_errors_as_alone() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(1),
                Value::Array(vec![Value::Int(1), Value::Int(7)]),
            ]),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![
                Value::Int(0),
                bulk("WRONGTYPE Operation against a key holding the wrong kind of value"),
            ]),
            Value::Array(vec![
                Value::Int(0),
                bulk("user_script:3: attempt to perform arithmetic on a nil value"),
            ]),
            Value::Array(vec![Value::Int(1), bulk("NOPERM refused")]),
        ]);
        let split = split_reply(reply, 5).expect("five entries");
        assert_eq!(
            split[0].as_ref().expect("a reply"),
            &Value::Array(vec![Value::Int(1), Value::Int(7)])
        );
        assert_eq!(split[1].as_ref().expect("nil"), &Value::Nil);
        assert_eq!(
            split[2].as_ref().expect_err("WRONGTYPE").code(),
            Some("WRONGTYPE")
        );
        assert_eq!(
            split[3].as_ref().expect_err("a Lua error").code(),
            Some("ERR")
        );
        // a script's text reply stays a text reply
        assert_eq!(
            split[4].as_ref().expect("a text reply"),
            &bulk("NOPERM refused")
        );
    }

    #[test]
    fn a_reply_of_another_shape_is_a_protocol_error() {
        assert!(split_reply(Value::Int(1), 1).is_err());
        assert!(split_reply(Value::Array(vec![]), 1).is_err());
        let bad = Value::Array(vec![Value::Array(vec![Value::Int(2), Value::Int(1)])]);
        assert!(split_reply(bad, 1).is_err());
    }
}
