//! An election's keys beside its lock, and the typed calls of
//! `leader_record.lua` and `leader_read.lua`.

use redis::{Cmd, Value};

use super::keys::{prefixed, LockKeys};
use super::Script;
use crate::error::Result;

/// The kind of an election's leader record, `lockcore_leader:{<lock>}`.
pub(crate) const LEADER_KIND: &str = "lockcore_leader";
/// The kind of an election's channel, `lockcore_leader__channel:{<lock>}`.
pub(crate) const LEADER_CHANNEL_KIND: &str = "lockcore_leader__channel";

/// The Redis names of one election: its lock's, plus the record and the
/// channel (in the lock key's slot, by the lock keys' rule).
#[derive(Debug)]
pub(crate) struct ElectionKeys {
    /// The lock the leader holds.
    pub(crate) lock: std::sync::Arc<LockKeys>,
    /// The leader record (a hash: `owner`, `value`, `term`).
    pub(crate) record: String,
    /// Where a new leader's term is published.
    pub(crate) channel: String,
}

impl ElectionKeys {
    pub(crate) fn new(lock: std::sync::Arc<LockKeys>) -> Self {
        ElectionKeys {
            record: prefixed(LEADER_KIND, &lock.lock),
            channel: prefixed(LEADER_CHANNEL_KIND, &lock.lock),
            lock,
        }
    }
}

/// One write of the leader record by the hold `field` (see `leader_record.lua`).
pub(crate) struct RecordCall<'a> {
    pub(crate) field: &'a str,
    pub(crate) value: &'a str,
    pub(crate) term: u64,
    pub(crate) ttl_ms: u64,
    pub(crate) publish: &'static str,
}

impl RecordCall<'_> {
    pub(crate) fn cmd(&self, keys: &ElectionKeys, script: &Script) -> Cmd {
        script.evalsha(
            &[&keys.lock.lock, &keys.record, &keys.channel],
            (self.field, self.value, self.term, self.ttl_ms, self.publish),
        )
    }
}

/// Whether the record was written (false: the hold is not the lock's
/// holder any more).
pub(crate) fn parse_record(reply: &Value) -> Result<bool> {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(super::unexpected("leader record", other)),
    }
}

/// `leader_read.lua`'s call.
pub(crate) fn read_cmd(keys: &ElectionKeys, script: &Script) -> Cmd {
    script.evalsha(&[&keys.lock.lock, &keys.record], &[] as &[&str])
}

/// What `leader_read.lua` found.
#[derive(Debug, PartialEq)]
pub(crate) enum LeaderReply {
    /// Nobody holds the lock.
    Vacant,
    /// The lock's holder and its record. `pttl_ms` is `None` when the lock
    /// has no TTL.
    Recorded {
        pttl_ms: Option<u64>,
        value: String,
        term: u64,
    },
    /// The lock is held by a holder that wrote no record.
    Unrecorded { pttl_ms: Option<u64> },
}

impl LeaderReply {
    pub(crate) fn parse(reply: &Value) -> Result<Self> {
        let bad = || super::unexpected("leader read", reply);
        let Value::Array(items) = reply else {
            return Err(bad());
        };
        let pttl = |v: &Value| match v {
            Value::Int(ms) => Ok(u64::try_from(*ms).ok()),
            _ => Err(bad()),
        };
        match items.as_slice() {
            [Value::Int(0)] => Ok(LeaderReply::Vacant),
            [Value::Int(2), ms] => Ok(LeaderReply::Unrecorded { pttl_ms: pttl(ms)? }),
            [Value::Int(1), ms, value, term] => {
                let value = super::text(value).ok_or_else(bad)?;
                let term = super::text(term)
                    .and_then(|t| t.parse::<u64>().ok())
                    .ok_or_else(bad)?;
                Ok(LeaderReply::Recorded {
                    pttl_ms: pttl(ms)?,
                    value,
                    term,
                })
            }
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn every_answer_of_the_read_parses() {
        assert_eq!(
            LeaderReply::parse(&Value::Array(vec![Value::Int(0)])).expect("vacant"),
            LeaderReply::Vacant
        );
        assert_eq!(
            LeaderReply::parse(&Value::Array(vec![Value::Int(2), Value::Int(-1)])).expect("held"),
            LeaderReply::Unrecorded { pttl_ms: None }
        );
        assert_eq!(
            LeaderReply::parse(&Value::Array(vec![
                Value::Int(1),
                Value::Int(2500),
                bulk("node-a"),
                bulk("17")
            ]))
            .expect("recorded"),
            LeaderReply::Recorded {
                pttl_ms: Some(2500),
                value: "node-a".into(),
                term: 17
            }
        );
        assert!(LeaderReply::parse(&Value::Array(vec![Value::Int(1), Value::Int(5)])).is_err());
        assert!(LeaderReply::parse(&Value::Int(1)).is_err());
    }

    #[test]
    fn the_record_answers_parse() {
        assert!(parse_record(&Value::Int(1)).expect("written"));
        assert!(!parse_record(&Value::Int(0)).expect("refused"));
        assert!(parse_record(&Value::Nil).is_err());
    }

    #[test]
    fn the_record_and_channel_share_the_lock_slot() {
        let lock = std::sync::Arc::new(LockKeys::new("", "jobs", 1000).expect("name"));
        let keys = ElectionKeys::new(lock);
        assert_eq!(keys.record, "lockcore_leader:{jobs}");
        assert_eq!(keys.channel, "lockcore_leader__channel:{jobs}");
        let tagged = std::sync::Arc::new(LockKeys::new("", "jobs:{eu}", 1000).expect("name"));
        assert_eq!(
            ElectionKeys::new(tagged).record,
            "lockcore_leader:jobs:{eu}"
        );
    }
}
