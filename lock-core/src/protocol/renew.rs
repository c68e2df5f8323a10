//! `renew.lua`: extend the leases of many holds in one call (the watchdog
//! builds the call itself, sized for thousands of holds: see
//! `watchdog.rs`).

use redis::Value;

use super::unexpected;
use crate::error::{Error, Result};

/// Per hold of a call of `holds` holds: `Some(true)` renewed, `Some(false)`
/// the owner no longer holds it, `None` unknown.
pub(crate) fn parse_renewals(reply: &Value, holds: usize) -> Result<Vec<Option<bool>>> {
    let answers: &[u8] = match reply {
        Value::BulkString(bytes) => bytes,
        Value::SimpleString(s) => s.as_bytes(),
        other => return Err(unexpected("renew", other)),
    };
    if answers.len() != holds {
        return Err(Error::Protocol(format!(
            "the renew script answered {} results for {holds} locks",
            answers.len()
        )));
    }
    Ok(answers
        .iter()
        .map(|a| match a {
            b'1' => Some(true),
            b'0' => Some(false),
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_answer_per_hold() -> Result<()> {
        assert_eq!(
            parse_renewals(&Value::BulkString(b"10x".to_vec()), 3)?,
            vec![Some(true), Some(false), None]
        );
        assert!(parse_renewals(&Value::BulkString(b"1".to_vec()), 2).is_err());
        assert!(parse_renewals(&Value::Int(1), 1).is_err());
        Ok(())
    }
}
