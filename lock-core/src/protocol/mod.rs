//! The wire protocol: the Lua scripts and key names lock-core shares with
//! Redisson, each script's typed call and reply beside its `.lua` file.
//!
//! No caller spells a script's mode string or matches a reply's integer
//! tag: a call is built from an enum ([`acquire::AcquireMode`],
//! [`cancel::CancelMode`], the count a release names), and a reply is
//! parsed into an enum once, here ([`acquire::AcquireReply`],
//! [`release::ReleaseReply`], …), with one wording for a reply that does
//! not fit ([`unexpected`]). Imports the transport (to run a script on a
//! connection) and nothing above it.

pub(crate) mod acquire;
pub(crate) mod cancel;
pub(crate) mod confirm;
pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod fenced;
pub(crate) mod force_unlock;
pub(crate) mod group;
pub(crate) mod handoff;
pub(crate) mod keys;
pub(crate) mod multi_acquire;
pub(crate) mod release;
pub(crate) mod renew;
pub(crate) mod rw_leave;
mod script;
pub(crate) mod sem_keys;
pub(crate) mod semaphore;
#[cfg(test)]
mod test_support;

use redis::Value;

use crate::error::Error;
use keys::Rule;

pub(crate) use script::Script;

/// A reply of `script` that fits none of its documented shapes.
pub(crate) fn unexpected(script: &str, reply: &Value) -> Error {
    unexpected_reply(&format!("the {script} script"), reply)
}

/// A reply of `what` (a command, a script) that is not one it gives: the
/// one wording of a protocol error.
pub(crate) fn unexpected_reply(what: &str, reply: &Value) -> Error {
    Error::Protocol(format!("{what} answered {reply:?}"))
}

/// The `{kind, value}` pair most scripts answer with.
fn pair(reply: &Value) -> Option<(i64, i64)> {
    match reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(kind), Value::Int(value)] => Some((*kind, *value)),
            _ => None,
        },
        _ => None,
    }
}

/// A text reply (a refused PUBLISH's error text).
fn text(reply: &Value) -> Option<String> {
    match reply {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// The scripts of the protocol.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    /// Release that hands the lock to the next local waiter at hold count zero.
    pub(crate) handoff: Script,
    pub(crate) renew: Script,
    pub(crate) force_unlock: Script,
    /// Undoes an acquire or re-entry whose outcome is unknown.
    pub(crate) cancel: Script,
    /// A write of an unchanged count by the holder, for `WAIT` to count
    /// (see `replicas.rs`).
    pub(crate) confirm: Script,
    /// The read-write lock's acquire, release and cancel.
    pub(crate) rw_acquire: Script,
    pub(crate) rw_release: Script,
    pub(crate) rw_cancel: Script,
    /// A client's last waiting writer leaves (line and mark).
    pub(crate) rw_leave: Script,
    /// The semaphores' and the count-down latch's scripts.
    pub(crate) sem_acquire: Script,
    pub(crate) sem_add: Script,
    pub(crate) sem_release: Script,
    pub(crate) sem_cancel: Script,
    pub(crate) sem_leave: Script,
    pub(crate) sem_set: Script,
    pub(crate) latch_count_down: Script,
    /// The ready-made fenced writes (`fenced.lua` around a body of `fenced::bodies`).
    pub(crate) fenced_set: Script,
    pub(crate) fenced_incr_by: Script,
    pub(crate) fenced_hset: Script,
    pub(crate) fenced_del: Script,
    /// An election's leader record and its read.
    pub(crate) leader_record: Script,
    pub(crate) leader_read: Script,
    /// The multi-lock's grant: several locks of one slot, all or nothing.
    pub(crate) multi_acquire: Script,
    /// The fair lock's acquire, release, cancel and force-unlock
    /// (Redisson's `RFairLock` queue).
    pub(crate) fair_acquire: Script,
    pub(crate) fair_release: Script,
    pub(crate) fair_cancel: Script,
    pub(crate) fair_force_unlock: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            acquire: Script::with_group(include_str!("acquire.lua")),
            release: Script::with_group(include_str!("release.lua")),
            handoff: Script::new(include_str!("handoff.lua")),
            renew: Script::new(include_str!("renew.lua")),
            force_unlock: Script::new(include_str!("force_unlock.lua")),
            cancel: Script::new(include_str!("cancel.lua")),
            confirm: Script::new(include_str!("confirm.lua")),
            rw_acquire: Script::new(include_str!("rw_acquire.lua")),
            rw_release: Script::new(include_str!("rw_release.lua")),
            rw_cancel: Script::new(include_str!("rw_cancel.lua")),
            rw_leave: Script::new(include_str!("rw_leave.lua")),
            sem_acquire: Script::new(include_str!("sem_acquire.lua")),
            sem_add: Script::new(include_str!("sem_add.lua")),
            sem_release: Script::new(include_str!("sem_release.lua")),
            sem_cancel: Script::new(include_str!("sem_cancel.lua")),
            sem_leave: Script::new(include_str!("sem_leave.lua")),
            sem_set: Script::new(include_str!("sem_set.lua")),
            latch_count_down: Script::new(include_str!("latch_count_down.lua")),
            fenced_set: fenced::script(fenced::bodies::SET),
            fenced_incr_by: fenced::script(fenced::bodies::INCR_BY),
            fenced_hset: fenced::script(fenced::bodies::HSET),
            fenced_del: fenced::script(fenced::bodies::DEL),
            leader_record: Script::new(include_str!("leader_record.lua")),
            leader_read: Script::new(include_str!("leader_read.lua")),
            multi_acquire: Script::new(include_str!("multi_acquire.lua")),
            fair_acquire: Script::new(include_str!("fair_acquire.lua")),
            fair_release: Script::new(include_str!("fair_release.lua")),
            fair_cancel: Script::new(include_str!("fair_cancel.lua")),
            fair_force_unlock: Script::new(include_str!("fair_force_unlock.lua")),
        }
    }

    /// The scripts whose calls are grouped (see `group.rs`), each with its
    /// grouped form.
    pub(crate) fn grouped(&self) -> [&Script; 2] {
        [&self.acquire, &self.release]
    }

    /// `script`'s place among [`grouped`](Self::grouped), when its calls
    /// are grouped.
    pub(crate) fn group_of(&self, script: &Script) -> Option<usize> {
        script.grouped()?;
        self.grouped().iter().position(|s| std::ptr::eq(*s, script))
    }

    /// The acquire script of the primitive `rule`.
    pub(crate) fn acquire_for(&self, rule: Rule) -> &Script {
        match rule {
            Rule::Exclusive | Rule::Permits => &self.acquire,
            Rule::Read | Rule::Write => &self.rw_acquire,
            Rule::Fair => &self.fair_acquire,
        }
    }

    /// The release script of the primitive `rule`.
    pub(crate) fn release_for(&self, rule: Rule) -> &Script {
        match rule {
            Rule::Exclusive | Rule::Permits => &self.release,
            Rule::Read | Rule::Write => &self.rw_release,
            Rule::Fair => &self.fair_release,
        }
    }

    /// The cancel script of the primitive `rule`.
    pub(crate) fn cancel_for(&self, rule: Rule) -> &Script {
        match rule {
            Rule::Exclusive | Rule::Permits => &self.cancel,
            Rule::Read | Rule::Write => &self.rw_cancel,
            Rule::Fair => &self.fair_cancel,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shas_are_distinct_hex() {
        let s = Scripts::new();
        let shas = [
            &s.acquire.sha,
            &s.release.sha,
            &s.handoff.sha,
            &s.renew.sha,
            &s.force_unlock.sha,
            &s.cancel.sha,
            &s.confirm.sha,
            &s.rw_acquire.sha,
            &s.rw_release.sha,
            &s.rw_cancel.sha,
            &s.sem_acquire.sha,
            &s.sem_add.sha,
            &s.sem_release.sha,
            &s.sem_cancel.sha,
            &s.sem_leave.sha,
            &s.sem_set.sha,
            &s.latch_count_down.sha,
            &s.fenced_set.sha,
            &s.fenced_incr_by.sha,
            &s.fenced_hset.sha,
            &s.fenced_del.sha,
            &s.leader_record.sha,
            &s.leader_read.sha,
            &s.multi_acquire.sha,
            &s.fair_acquire.sha,
            &s.fair_release.sha,
            &s.fair_cancel.sha,
            &s.fair_force_unlock.sha,
            &s.rw_leave.sha,
        ];
        for sha in shas {
            assert_eq!(sha.len(), 40);
            assert!(sha.chars().all(|c| c.is_ascii_hexdigit()));
        }
        let mut sorted: Vec<_> = shas.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 29);
    }

    #[test]
    fn evalsha_counts_keys() {
        let s = Scripts::new();
        let cmd = s.renew.evalsha(&["k"], (100u64, "owner"));
        let args = test_support::args(&cmd);
        assert_eq!(args[0], "EVALSHA");
        assert_eq!(args[2], "1");
        assert_eq!(&args[3..], ["k", "100", "owner"]);
    }
}
