//! `multi_acquire.lua`: several locks of one Cluster slot taken at once, all
//! or nothing, each as a new hold (see the script's header for every case).

use redis::{Cmd, Value};

use super::keys::LockKeys;
use super::{unexpected, Script};
use crate::error::Result;

/// One lock of a multi-acquire call: its keys, the owner id of the hold it
/// would get, and that request's latch (`LockKeys::latch(owner)`, the key
/// `cancel.lua` names to undo it).
#[derive(Debug)]
pub(crate) struct MultiPart<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) owner: &'a str,
    pub(crate) latch: &'a str,
}

/// One call of the multi-acquire script (every part in one Cluster slot).
#[derive(Debug)]
pub(crate) struct MultiAcquireCall<'a> {
    pub(crate) parts: &'a [MultiPart<'a>],
    pub(crate) lease_ms: u64,
    /// How long the last fencing token of each lock is kept.
    pub(crate) token_retention_ms: u64,
    /// The calling client's id (a free lock whose turn is this client's is
    /// taken, and the turn used up).
    pub(crate) client_id: &'a str,
}

impl MultiAcquireCall<'_> {
    /// The `EVALSHA` command.
    pub(crate) fn cmd(&self, script: &Script) -> Cmd {
        let mut keys: Vec<&str> = Vec::with_capacity(self.parts.len() * 4);
        for part in self.parts {
            keys.extend([
                part.keys.lock.as_str(),
                part.keys.token.as_str(),
                part.latch,
                part.keys.turn.as_str(),
            ]);
        }
        let owners: Vec<&str> = self.parts.iter().map(|p| p.owner).collect();
        script.evalsha(
            &keys,
            (
                self.lease_ms,
                self.token_retention_ms,
                self.client_id,
                owners,
            ),
        )
    }
}

/// What the multi-acquire script answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum MultiAcquireReply {
    /// Every lock taken: their fencing tokens, in the call's order.
    Acquired { tokens: Vec<u64> },
    /// Nothing taken: the part at `index` (0-based) is held by another
    /// owner (or another client's turn) for `pttl_ms` (-1: no expiry).
    Held { pttl_ms: i64, index: usize },
    /// The request had been cancelled: nothing taken.
    Cancelled,
}

impl MultiAcquireReply {
    /// Parses a reply to a call of `parts` locks; anything else is an
    /// `Error::Protocol`.
    pub(crate) fn parse(reply: &Value, parts: usize) -> Result<Self> {
        let bad = || unexpected("multi-acquire", reply);
        let Value::Array(items) = reply else {
            return Err(bad());
        };
        let mut ints = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Value::Int(i) => ints.push(*i),
                _ => return Err(bad()),
            }
        }
        match ints.as_slice() {
            [1, tokens @ ..] if tokens.len() == parts => Ok(MultiAcquireReply::Acquired {
                tokens: tokens
                    .iter()
                    .map(|t| u64::try_from(*t).map_err(|_| bad()))
                    .collect::<Result<_>>()?,
            }),
            [0, pttl_ms, index] if *index >= 1 && (*index as usize) <= parts.max(1) => {
                Ok(MultiAcquireReply::Held {
                    pttl_ms: *pttl_ms,
                    index: (*index - 1) as usize,
                })
            }
            [-2, 0, 0] => Ok(MultiAcquireReply::Cancelled),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::protocol::test_support::args;

    fn ints(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|i| Value::Int(*i)).collect())
    }

    #[test]
    fn every_documented_reply_parses() -> Result<()> {
        assert_eq!(
            MultiAcquireReply::parse(&ints(&[1, 10, 11]), 2)?,
            MultiAcquireReply::Acquired {
                tokens: vec![10, 11]
            }
        );
        assert_eq!(
            MultiAcquireReply::parse(&ints(&[0, 2500, 2]), 2)?,
            MultiAcquireReply::Held {
                pttl_ms: 2500,
                index: 1
            }
        );
        assert_eq!(
            MultiAcquireReply::parse(&ints(&[0, -1, 1]), 2)?,
            MultiAcquireReply::Held {
                pttl_ms: -1,
                index: 0
            }
        );
        assert_eq!(
            MultiAcquireReply::parse(&ints(&[-2, 0, 0]), 2)?,
            MultiAcquireReply::Cancelled
        );
        Ok(())
    }

    #[test]
    fn other_replies_are_protocol_errors() {
        for bad in [
            ints(&[1, 10]),
            ints(&[1, 10, -3]),
            ints(&[0, 100, 0]),
            ints(&[0, 100, 3]),
            ints(&[2, 0, 0]),
            Value::Nil,
            Value::Int(1),
        ] {
            let err = MultiAcquireReply::parse(&bad, 2).expect_err("not a reply of the script");
            assert!(matches!(err, Error::Protocol(_)), "{err:?}");
        }
    }

    #[test]
    fn keys_come_four_per_lock_and_owners_after_the_arguments() -> Result<()> {
        let (a, b) = (LockKeys::new("", "a", 100)?, LockKeys::new("", "b", 100)?);
        let (la, lb) = (a.latch("o:1"), b.latch("o:2"));
        let parts = [
            MultiPart {
                keys: &a,
                owner: "o:1",
                latch: &la,
            },
            MultiPart {
                keys: &b,
                owner: "o:2",
                latch: &lb,
            },
        ];
        let scripts = super::super::Scripts::new();
        let call = MultiAcquireCall {
            parts: &parts,
            lease_ms: 30_000,
            token_retention_ms: 60_000,
            client_id: "c",
        };
        let a = args(&call.cmd(&scripts.multi_acquire));
        assert_eq!(a[2], "8");
        assert_eq!(
            &a[3..11],
            [
                "a",
                "redisson_lock_token:{a}",
                "redisson_unlock_latch:{a}:o:1",
                "lockcore_turn:{a}",
                "b",
                "redisson_lock_token:{b}",
                "redisson_unlock_latch:{b}:o:2",
                "lockcore_turn:{b}",
            ]
        );
        assert_eq!(&a[11..], ["30000", "60000", "c", "o:1", "o:2"]);
        Ok(())
    }
}
