//! Group commit: the calls of one grouped script (acquire, release; on a
//! cluster, of one hash slot) that a client has ready while one of them is
//! in flight go to Redis together, as one call of the script's grouped
//! form (`protocol/group.rs`), when that one comes back.
//!
//! No timer and no added latency when idle: a call with nothing in flight
//! before it is sent at once, by its caller, as before. Up to
//! [`MAX_IN_FLIGHT`] calls of a group fly at once; calls that come while
//! that many are in flight queue; when one ends (or its caller stops
//! waiting for it), a task sends everything queued as one call (at most
//! [`MAX_GROUP`]), and goes on while calls keep queueing behind it. So a
//! busy client sends as many operations per call as arrived during a
//! round trip.
//!
//! Off by default (`ClientConfig::group_commit`): measured in lock-bench
//! on one server over loopback, a multiplexed connection already shares
//! the per-call cost among the calls in flight (Redis reads them in one
//! go and answers them in one write), and the grouped form costs the
//! server more per element than calls of their own (BENCHMARKS.md).
//!
//! Every element keeps the contract of a call of its own: its reply or the
//! error it raised (`split_reply`), within its caller's bound (a caller
//! whose bound passes while its element waits or flies gets
//! `CommandTimeout`, as for a lost reply, and cancels as it would then),
//! and a call whose reply is lost is lost for every element in it (each
//! gets the transport's error and does what it does after a lost reply).
//! An element whose caller stopped waiting before it was sent is not sent.
//! A grouped call refused whole by the server (an ACL refusing one of its
//! keys, say) never ran: its elements are sent again, each alone, so one
//! element's refusal is not another's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::hold::shared::Core;
use crate::hold::slot_owners::key_slot;
use crate::protocol::group::{grouped_cmd, split_reply};
use crate::protocol::Script;
use crate::transport::connection::Lane;

/// The most calls one grouped call carries.
pub(crate) const MAX_GROUP: usize = 64;

/// The groups with a call in flight, each with the calls queued behind it.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    in_flight: Mutex<HashMap<GroupKey, Group>>,
}

/// A group's calls in flight, and those queued behind them.
#[derive(Debug, Default)]
struct Group {
    in_flight: usize,
    queue: Vec<Queued>,
}

/// Calls of one group in flight at once before the next ones queue
/// (lock-bench W1, 16 tasks: 30.7 k cycles/s with 1, 41.4 k with 4).
pub(crate) const MAX_IN_FLIGHT: usize = 4;

impl Groups {
    fn locked(&self) -> MutexGuard<'_, HashMap<GroupKey, Group>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Calls of one script to one hash slot (0 off a cluster).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct GroupKey {
    /// The script's place in `Scripts::grouped`.
    script: usize,
    slot: u16,
}

/// A call waiting for the one in flight.
#[derive(Debug)]
struct Queued {
    cmd: Cmd,
    reply: oneshot::Sender<Result<Value>>,
}

/// The call in flight of a group, sent by its caller: when it ends (or
/// its caller stops waiting), what queued behind it is sent.
struct InFlight<'a> {
    core: &'a Core,
    key: GroupKey,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.core.send_queued(self.key);
    }
}

impl Core {
    /// Runs `cmd`, a call of the grouped script `script` (its place in
    /// `Scripts::grouped`), within `limit`: at once when none of its group
    /// is in flight, else with the next grouped call.
    pub(crate) async fn run_grouped(
        &self,
        script: usize,
        cmd: &Cmd,
        limit: Duration,
    ) -> Result<Value> {
        let slot = match (self.cluster, cmd.args_iter().nth(3)) {
            (true, Some(redis::Arg::Simple(key))) => key_slot(key),
            _ => 0,
        };
        let key = GroupKey { script, slot };
        let queued = {
            let mut in_flight = self.groups.locked();
            let group = in_flight.entry(key).or_default();
            match group.in_flight < MAX_IN_FLIGHT {
                true => {
                    group.in_flight += 1;
                    None
                }
                false => {
                    let (reply, rx) = oneshot::channel();
                    group.queue.push(Queued {
                        cmd: cmd.clone(),
                        reply,
                    });
                    Some(rx)
                }
            }
        };
        match queued {
            None => {
                let _in_flight = InFlight { core: self, key };
                let script = self.scripts.grouped()[script];
                self.run_script_alone(script, cmd, limit).await
            }
            // A sender dropped unanswered: the task sending it ended with
            // its runtime, the call's fate unknown.
            Some(rx) => match tokio::time::timeout(limit, rx).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(_)) | Err(_) => Err(Error::CommandTimeout),
            },
        }
    }

    /// The call in flight of group `key` ended: a task sends what queued
    /// behind it, or the group has nothing in flight any more.
    fn send_queued(&self, key: GroupKey) {
        let mut in_flight = self.groups.locked();
        if in_flight.get(&key).is_some_and(|g| !g.queue.is_empty()) {
            if let Some(core) = self.this.upgrade() {
                drop(in_flight);
                self.background
                    .spawn_on(core.send_groups(key), &self.runtime);
                return;
            }
        }
        // Nothing queued (or the client is gone: the queued calls' callers
        // hear `CommandTimeout`, their senders dropped here).
        ended(&mut in_flight, key);
    }

    /// Sends the calls queued in group `key`, as many grouped calls as it
    /// takes, until none is queued.
    async fn send_groups(self: Arc<Self>, key: GroupKey) {
        // The slot in flight this task took over: handed on or given back
        // however the task ends (also when it is dropped mid-call).
        let _in_flight = InFlight { core: &self, key };
        loop {
            let group: Vec<Queued> = {
                let mut in_flight = self.groups.locked();
                let Some(group) = in_flight.get_mut(&key) else {
                    return;
                };
                // Not sent for a caller that stopped waiting.
                group.queue.retain(|q| !q.reply.is_closed());
                if group.queue.is_empty() {
                    return;
                }
                let n = group.queue.len().min(MAX_GROUP);
                group.queue.drain(..n).collect()
            };
            self.send_group(self.scripts.grouped()[key.script], group)
                .await;
        }
    }

    /// Sends `group` (calls of `script`) as one call, and answers each.
    async fn send_group(&self, script: &Script, mut group: Vec<Queued>) {
        let bound = self.command_bound();
        let (Some(grouped), true) = (script.grouped(), group.len() > 1) else {
            for q in group {
                let reply = self.run_script_alone(script, &q.cmd, bound).await;
                let _ = q.reply.send(reply);
            }
            return;
        };
        let cmd = match grouped_cmd(grouped, group.iter().map(|q| &q.cmd)) {
            Ok(cmd) => cmd,
            Err(e) => return answer_all(group, &e),
        };
        let n = group.len();
        let started = tokio::time::Instant::now();
        let split = self
            .on_lane(Lane::Locks, bound, |mut conn| async move {
                let split = split_reply(grouped.run(&mut conn, &cmd).await?, n)?;
                for e in split.iter().filter_map(|r| r.as_ref().err()) {
                    conn.note_failure(e);
                }
                Ok(split)
            })
            .await;
        match split {
            Ok(split) => {
                // An element's transient error (READONLY, LOADING, ...) is
                // an outage as for a call of its own, although the grouped
                // call itself was answered.
                if split.iter().any(|r| {
                    r.as_ref()
                        .is_err_and(|e| Error::Redis(e.clone()).is_transient())
                }) {
                    self.outage_seen(started);
                }
                for (q, reply) in group.drain(..).zip(split) {
                    let _ = q.reply.send(reply.map_err(Error::Redis));
                }
            }
            // Refused whole, so never run: each alone, so that one
            // element's refusal is not another's.
            Err(Error::Redis(e))
                if matches!(e.kind(), redis::ErrorKind::Server(_))
                    && !Error::Redis(e.clone()).is_transient() =>
            {
                let each = group.into_iter().map(|q| async move {
                    let reply = self.run_script_alone(script, &q.cmd, bound).await;
                    let _ = q.reply.send(reply);
                });
                futures_util::future::join_all(each).await;
            }
            Err(e) => answer_all(group, &e),
        }
    }
}

/// One call in flight of group `key` ended with nothing queued behind it.
fn ended(in_flight: &mut HashMap<GroupKey, Group>, key: GroupKey) {
    if let Some(group) = in_flight.get_mut(&key) {
        group.in_flight = group.in_flight.saturating_sub(1);
        if group.in_flight == 0 && group.queue.is_empty() {
            in_flight.remove(&key);
        }
    }
}

/// Answers every call of `group` with (a copy of) `e`.
fn answer_all(group: Vec<Queued>, e: &Error) {
    for q in group {
        let _ = q.reply.send(Err(copy_of(e)));
    }
}

/// A copy of a grouped call's error for each of its elements: the
/// transport's errors keep their kind (so each element does what it does
/// after that error when alone).
fn copy_of(e: &Error) -> Error {
    match e {
        Error::Redis(e) => Error::Redis(e.clone()),
        Error::CommandTimeout => Error::CommandTimeout,
        Error::PoolTimeout => Error::PoolTimeout,
        Error::Protocol(text) => Error::Protocol(text.clone()),
        other => Error::Protocol(format!("a grouped call failed: {other}")),
    }
}
