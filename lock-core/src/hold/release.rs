//! Ending holds: the release of one count (the last one ends the hold,
//! handing the lock to the next local waiter when the streak allows it),
//! the release of a whole hold at shutdown, the cancellation of an
//! acquisition whose reply was lost, and the retries after lost replies
//! that make each of them apply at most once (latch keys, counts named in
//! the call). See `protocol/release.rs`, `handoff.rs` and `cancel.rs` for
//! the scripts' replies.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};

use crate::error::{Error, Result};
use crate::hold::shared::{duration_ms, Core};
use crate::hold::Hold;
use crate::metrics;
use crate::protocol::cancel::{CancelCall, CancelMode, CancelReply};
use crate::protocol::handoff::{HandOffCall, HandOffReply};
use crate::protocol::keys::{LockKeys, Rule};
use crate::protocol::release::{ReleaseCall, ReleaseReply};
use crate::protocol::rw_leave::{parse_left, rw_leave_cmd};
use crate::protocol::Script;

/// How long a release keeps retrying after connection failures before it
/// gives up (the lock then expires with its lease).
const RELEASE_RETRY_WINDOW_FACTOR: u32 = 3;

impl Core {
    /// How long a request's latch must live: past the last retry or
    /// cancellation that can reach Redis.
    pub(crate) fn latch_ms(&self) -> u64 {
        let window = self.config.command_timeout * RELEASE_RETRY_WINDOW_FACTOR;
        duration_ms(window + self.config.connect_timeout + self.config.command_timeout * 2)
            .max(1000)
    }

    /// How long a cancelled acquisition's latch refuses a late copy of it:
    /// a request held up in the network may arrive long after it was given
    /// up, so at least twice the longest lease it could have asked for.
    pub(crate) fn cancel_latch_ms(&self, lease_ms: u64) -> u64 {
        self.latch_ms()
            .max(lease_ms.saturating_mul(2))
            .max(duration_ms(self.config.watchdog_timeout) * 2)
    }

    /// Releases one count of `hold`: when it is the last, ends the hold,
    /// handing the lock to the next local waiter when there is one and the
    /// streak allows it; counts the release (`lock_core_releases_total`).
    ///
    /// Call it from a task of its own: it must run to the end, or a waiter
    /// picked for a hand-off would wait for a decision that never comes.
    pub(crate) async fn release_hold(
        &self,
        keys: &Arc<LockKeys>,
        hold: &Arc<Hold>,
        lease_ms: u64,
    ) -> Result<Released> {
        let result = self.release_count(keys, hold, lease_ms).await;
        crate::metrics::release(match result {
            Ok(Released::NotHeld) => metrics::ReleaseOutcome::NotHeld,
            Ok(_) => metrics::ReleaseOutcome::Released,
            Err(_) => metrics::ReleaseOutcome::Error,
        });
        result
    }

    /// [`release_hold`](Self::release_hold) without the count.
    async fn release_count(
        &self,
        keys: &Arc<LockKeys>,
        hold: &Arc<Hold>,
        lease_ms: u64,
    ) -> Result<Released> {
        let _change = hold.change().await;
        let before = hold.take_count();
        if before <= 1 {
            return self.release_last(keys, &hold.owner, lease_ms).await;
        }
        // One of several counts: never the end of the hold, never a
        // hand-off. Failed or not, the other counts keep the hold, here and
        // in Redis (which then has this count or one more; the last release
        // ends the hold whatever count Redis has).
        match self
            .release(keys, &hold.owner, lease_ms, before, || {})
            .await?
        {
            ReleaseOutcome::HoldsRemain => Ok(Released::HoldsRemain),
            ReleaseOutcome::NotHeld => {
                self.queues.ended(&keys.local, &hold.owner);
                Ok(Released::NotHeld)
            }
            ReleaseOutcome::Freed { .. } => Err(Error::Protocol(
                "the release of one of several counts freed the lock".into(),
            )),
        }
    }

    /// Ends the hold `owner` (its last count, as this client counts them):
    /// hands the lock on to a local waiter, or frees it.
    async fn release_last(
        &self,
        keys: &Arc<LockKeys>,
        owner: &Arc<str>,
        lease_ms: u64,
    ) -> Result<Released> {
        // The outcome for the caller: that of the first hold released (the
        // loop goes on only to pass on a hand-off its waiter abandoned).
        let mut first: Option<Result<Released>> = None;
        let (mut owner, mut lease_ms) = (owner.clone(), lease_ms);
        loop {
            // (No hand-off between holds of a read-write lock: its hash
            // holds several.)
            let offered = match keys.rule.hands_off() {
                true => self.queues.offer(&keys.local, &owner),
                false => None,
            };
            let Some(next) = offered else {
                let outcome = self
                    .release(keys, &owner, lease_ms, 1, || {
                        self.queues.release_stalled(&keys.local, &owner)
                    })
                    .await;
                let result = match outcome {
                    Ok(ReleaseOutcome::HoldsRemain) => Err(Error::Protocol(
                        "the release of a hold's last count left it in place".into(),
                    )),
                    Ok(ReleaseOutcome::Freed { told }) => {
                        // Other clients wait too (the unlock message reached
                        // more clients than this one): this client's head
                        // steps back for a moment so that one of them gets
                        // the lock, instead of this client keeping it.
                        let others_wait =
                            told > usize::from(self.queues.is_subscribed(&keys.local));
                        // (a reader's local queue is its own: nobody of this
                        // client steps back on it, and it is not kept; a
                        // fair lock's waiters are in its queue in Redis)
                        let step_back = (others_wait
                            && !matches!(keys.rule, Rule::Read | Rule::Fair))
                        .then(|| self.step_back_window());
                        self.queues
                            .ended_stepping_back(&keys.local, &owner, step_back);
                        Ok(Released::Freed)
                    }
                    Ok(ReleaseOutcome::NotHeld) => {
                        self.queues.ended(&keys.local, &owner);
                        Ok(Released::NotHeld)
                    }
                    Err(e) => {
                        self.queues.ended(&keys.local, &owner);
                        Err(e)
                    }
                };
                return first.unwrap_or(result);
            };
            let next_lease = next.lease.unwrap_or(self.config.watchdog_timeout);
            let next_lease_ms = crate::hold::lease_ms(next.lease, self.config.watchdog_timeout);
            let next_owner = self.new_owner();
            let sent_at = tokio::time::Instant::now();
            match self
                .hand_off(keys, &owner, &next_owner, next_lease_ms, || {
                    self.queues.hand_off_stalled(&keys.local, &next, &owner)
                })
                .await
            {
                Ok(HandOffReply::Given { token }) => {
                    let Some(hold) = Hold::granted(
                        keys.clone(),
                        next_owner.clone(),
                        token,
                        next.context,
                        sent_at,
                        next_lease,
                    ) else {
                        // The hand-off's reply came after the new hold's
                        // validity: nobody may use it. Free the lock.
                        tracing::debug!(
                            lock = %keys.name,
                            key = %keys.lock,
                            "lock hand-off confirmed too late; freeing the lock"
                        );
                        self.queues.withdraw(&keys.local, &next);
                        self.queues.ended(&keys.local, &owner);
                        self.cancel_hand_off(
                            keys,
                            &next_owner,
                            next_lease_ms,
                            "freeing a late lock hand-off failed; the lock expires with its lease",
                        )
                        .await;
                        return first.unwrap_or(Ok(Released::Freed));
                    };
                    crate::metrics::handed_off();
                    tracing::debug!(
                        lock = %keys.name,
                        key = %keys.lock,
                        from = %owner,
                        to = %next_owner,
                        token,
                        "lock handed off"
                    );
                    let abandoned = self.queues.handed_off(&keys.local, &next, hold);
                    if self.queues.take_unused_place(&keys.local) {
                        if let Some(core) = self.this.upgrade() {
                            core.spawn_job(ReleaseJob::StopWaiting { keys: keys.clone() });
                        }
                    }
                    let done = first.get_or_insert(Ok(Released::HandedOff));
                    if !abandoned {
                        return std::mem::replace(done, Ok(Released::HandedOff));
                    }
                    // The waiter is gone: release its new hold (or pass it on).
                    owner = next_owner;
                    lease_ms = next_lease_ms;
                }
                Ok(HandOffReply::NotHeld) => {
                    self.queues.withdraw(&keys.local, &next);
                    self.queues.ended(&keys.local, &owner);
                    return first.unwrap_or(Ok(Released::NotHeld));
                }
                Ok(HandOffReply::Freed) => {
                    self.queues.withdraw(&keys.local, &next);
                    self.queues.ended(&keys.local, &owner);
                    return first.unwrap_or(Ok(Released::Freed));
                }
                Err(e) => {
                    // Applied or not, nobody knows: cancel the hand-off to
                    // the new owner id (undone if applied; a late copy frees
                    // the lock instead, see handoff.lua).
                    self.cancel_hand_off(keys, &next_owner, next_lease_ms, "cancelling a lock hand-off with an unknown outcome failed; it expires with its lease")
                        .await;
                    self.queues.withdraw(&keys.local, &next);
                    self.queues.ended(&keys.local, &owner);
                    return first.unwrap_or(Err(e));
                }
            }
        }
    }

    /// Releases every count of the hold `owner` (shutdown): Ok(true) when
    /// it existed, Ok(false) when it did not. No hand-off.
    pub(crate) async fn release_all(&self, keys: &LockKeys, owner: &Arc<str>) -> Result<bool> {
        let lease_ms = duration_ms(self.config.watchdog_timeout);
        // Named as the last count: the hold ends whatever count it has.
        let outcome = self.release(keys, owner, lease_ms, 1, || {}).await;
        self.queues.ended(&keys.local, owner);
        outcome.map(|o| o != ReleaseOutcome::NotHeld)
    }

    /// Cancels the hand-off to `next_owner` (undone if applied; a late copy
    /// frees the lock instead, see handoff.lua); a failure is logged with
    /// `failed`.
    async fn cancel_hand_off(
        &self,
        keys: &LockKeys,
        next_owner: &str,
        next_lease_ms: u64,
        failed: &'static str,
    ) {
        let latch = keys.latch(next_owner);
        let undone = self
            .cancel(keys, next_owner, CancelMode::New, &latch, next_lease_ms)
            .await;
        if let Err(e) = undone {
            tracing::warn!(lock = %keys.name, key = %keys.lock, error = %e, "{failed}");
        }
    }

    /// Cancels an acquisition whose outcome is unknown (see `cancel.lua`):
    /// undone if Redis applied it, refused if it arrives later. `latch` is
    /// the request's latch key. Returns whether something was undone.
    pub(crate) async fn cancel(
        &self,
        keys: &LockKeys,
        owner: &str,
        mode: CancelMode,
        latch: &str,
        lease_ms: u64,
    ) -> Result<bool> {
        let publish = self.publish_command().await?;
        let cmd = CancelCall {
            keys,
            latch,
            owner,
            mode,
            latch_ms: self.cancel_latch_ms(lease_ms),
            publish,
        }
        .cmd(self.scripts.cancel_for(keys.rule));
        let reply = self
            .run_with_retries(keys, self.scripts.cancel_for(keys.rule), &cmd, || {})
            .await?;
        let undone = CancelReply::parse(&reply)? == CancelReply::Undone;
        if undone {
            tracing::debug!(
                lock = %keys.name,
                key = %keys.lock,
                owner,
                "a lock acquisition with a lost reply was undone"
            );
            // An undone new hold is over; an undone re-entry took one count
            // off a hold its other guards still have (lock-sim, seed
            // 406929: it ended that hold here, its guards read "lost" and a
            // shutdown forgot to release it).
            if mode == CancelMode::New {
                self.queues.ended(&keys.local, owner);
            }
        }
        Ok(undone)
    }

    /// This client no longer waits for the lock: it leaves the set of
    /// waiting clients (its place would otherwise be given a turn nobody
    /// takes).
    /// A writer's client also takes its mark away (see `rw_leave.lua`).
    pub(crate) async fn stop_waiting(&self, keys: &LockKeys) -> Result<bool> {
        if keys.rule == Rule::Write {
            let publish = self.publish_command().await?;
            let script = &self.scripts.rw_leave;
            let cmd = rw_leave_cmd(script, keys, &self.client_id, publish);
            let reply = self.run_script(script, &cmd).await?;
            return parse_left(&reply);
        }
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(keys.queue.as_str()).arg(&*self.client_id);
        self.run_cmd(&cmd).await.map(|v| v == Value::Int(1))
    }

    /// The latch key and lifetime of one new hand-off request.
    fn latch(&self, keys: &LockKeys) -> (String, u64) {
        (keys.latch(&self.request_id()), self.latch_ms())
    }

    /// Releases one count of the hold `owner` (no hand-off), which has
    /// `counts` counts before it as this client knows them: 1 ends the hold
    /// whatever count Redis has; more takes one off only when Redis has
    /// exactly that many (see release.lua). Retried after lost replies: a
    /// retry finds the count already taken, or the hold gone.
    async fn release(
        &self,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
        counts: u32,
        on_retry: impl Fn(),
    ) -> Result<ReleaseOutcome> {
        let publish = self.publish_command().await?;
        let turn_ms = duration_ms(self.turn_window());
        let cmd = ReleaseCall {
            keys,
            owner,
            lease_ms,
            client_id: &self.client_id,
            turn_ms,
            counts,
            publish,
        }
        .cmd(self.scripts.release_for(keys.rule));
        let retried = std::sync::atomic::AtomicBool::new(false);
        let reply = self
            .run_with_retries(keys, self.scripts.release_for(keys.rule), &cmd, || {
                retried.store(true, Ordering::Relaxed);
                on_retry()
            })
            .await?;
        Ok(match ReleaseReply::parse(&reply)? {
            // A retry of a release that took the last count: the first
            // attempt was applied and its reply lost (the hold's owner id
            // is its own, so nothing else can have removed it but its
            // expiry, which frees the lock just the same).
            ReleaseReply::NotHeld if retried.load(Ordering::Relaxed) && counts <= 1 => {
                ReleaseOutcome::Freed { told: 0 }
            }
            ReleaseReply::NotHeld => ReleaseOutcome::NotHeld,
            ReleaseReply::FreedUntold { refusal } => {
                self.publish_denied(keys, &refusal);
                ReleaseOutcome::Freed { told: 0 }
            }
            ReleaseReply::HoldsRemain => ReleaseOutcome::HoldsRemain,
            // The hold ended; the lock stays held by others (readers): for
            // this hold, as if freed, with nobody told.
            ReleaseReply::EndedSharing => ReleaseOutcome::Freed { told: 0 },
            ReleaseReply::Freed { told } => ReleaseOutcome::Freed { told },
        })
    }

    /// Ends the hold `owner` (its last count): the lock goes to `next` with
    /// a new fencing token. `on_retry`: before each retry after a failure.
    async fn hand_off(
        &self,
        keys: &LockKeys,
        owner: &str,
        next: &str,
        next_lease_ms: u64,
        on_retry: impl Fn(),
    ) -> Result<HandOffReply> {
        let publish = self.publish_command().await?;
        let (latch, latch_ms) = self.latch(keys);
        let cmd = HandOffCall {
            keys,
            latch: &latch,
            latch_ms,
            owner,
            next,
            next_lease_ms,
            token_retention_ms: self.token_retention_ms(),
            publish,
        }
        .cmd(&self.scripts.handoff);
        let reply = self
            .run_with_retries(keys, &self.scripts.handoff, &cmd, on_retry)
            .await?;
        HandOffReply::parse(&reply)
    }

    /// Runs a release-type script, retrying transient failures with the
    /// same request (each script makes a repeated request harmless: the
    /// count it names, its latch, or the owner id that is gone).
    pub(crate) async fn run_with_retries(
        &self,
        keys: &LockKeys,
        script: &Script,
        cmd: &Cmd,
        on_retry: impl Fn(),
    ) -> Result<Value> {
        let deadline =
            tokio::time::Instant::now() + self.config.command_timeout * RELEASE_RETRY_WINDOW_FACTOR;
        let mut backoff = Duration::from_millis(10);
        loop {
            match self.run_script(script, cmd).await {
                Ok(reply) => return Ok(reply),
                Err(e) if e.is_transient() && tokio::time::Instant::now() + backoff < deadline => {
                    tracing::debug!(
                        lock = %keys.name,
                        key = %keys.lock,
                        error = %e,
                        "lock release failed; retrying"
                    );
                    on_retry();
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// What a plain release did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReleaseOutcome {
    NotHeld,
    HoldsRemain,
    /// Freed; the unlock message reached `told` clients.
    Freed {
        told: usize,
    },
}

/// What the release of one count of a hold did (see `Core::release_hold`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// The hold's last count: the lock was freed in Redis.
    Freed,
    /// The hold's last count: the lock went straight to a waiter of this
    /// client.
    HandedOff,
    /// Counts of the hold remain (a re-entry was released).
    HoldsRemain,
    /// Redis no longer had the hold.
    NotHeld,
}

impl Released {
    /// Logs the release; always inside the release's `lock.release` span,
    /// which names the lock.
    pub(crate) fn log(self) {
        match self {
            Released::Freed | Released::HandedOff => {
                tracing::debug!(handed_off = self == Released::HandedOff, "lock released")
            }
            Released::HoldsRemain => tracing::debug!("lock re-entry released; still held"),
            // The hold is marked gone by the caller: "lock lost" says it.
            Released::NotHeld => {}
        }
    }
}

/// Work that no caller awaits: a dropped guard's release, the cancellation
/// of an acquisition whose reply was lost.
#[derive(Debug)]
pub(crate) enum ReleaseJob {
    /// Release one count of `hold`.
    Release {
        keys: Arc<LockKeys>,
        hold: Arc<Hold>,
        lease_ms: u64,
    },
    /// Leave the set of clients waiting for the lock.
    StopWaiting { keys: Arc<LockKeys> },
    /// Cancel an acquisition of the hold `owner` whose outcome is unknown.
    Cancel {
        keys: Arc<LockKeys>,
        owner: Arc<str>,
        mode: CancelMode,
        /// The request's latch key.
        latch: String,
        lease_ms: u64,
    },
}
