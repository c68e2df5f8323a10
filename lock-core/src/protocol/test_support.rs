//! Helpers of the protocol's unit tests.

use redis::{Cmd, Value};

/// A command's arguments as text.
pub(crate) fn args(cmd: &Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        })
        .collect()
}

/// A `{kind, value}` reply.
pub(crate) fn reply(kind: i64, value: i64) -> Value {
    Value::Array(vec![Value::Int(kind), Value::Int(value)])
}
