//! The fair lock's wait loop (Redisson's `RFairLock`): every waiter has its
//! own place in the lock's queue in Redis, under an owner id of its own
//! for all its attempts, and is told on its own channel when its turn
//! comes. No local queue and no local hand-off: the next holder is always
//! the queue's first live waiter, of whichever process.
//!
//! A waiter that stops waiting (its bound passed, its future was dropped,
//! the client shut down, an error) leaves the queue at once, so that those
//! behind it move up; an attempt whose reply was lost is cancelled (undone
//! if it was granted, refused if it arrives later) and the waiter goes on
//! under a new owner id, at the queue's end. Waits are bounded: a lost
//! message costs at most [`FAIR_RECHECK`].

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::hold::acquire::{
    Attempt, Call, FairAttempt, Got, Reentry, Via, Waiting, LEAVE_LINE_MARGIN,
};
use crate::hold::lease_ms;
use crate::hold::release::ReleaseJob;
use crate::hold::run_to_end::RunToEnd;
use crate::hold::target::Target;
use crate::options::{AcquireOptions, Wait};
use crate::protocol::cancel::CancelMode;
use crate::protocol::fair::FAIR_RECHECK;
use crate::transport::pubsub::{Status, Subscription};

/// A fair waiter's place in the queue: while armed, dropping it cancels
/// the owner id (it leaves the queue; a grant is undone). The cancellation
/// waits for the gate, which an attempt holds until its call ends (also in
/// the background, after the caller stopped waiting): a grant that comes
/// back then is released as any dropped guard is, before the cancel runs,
/// and is never undone under a guard's feet.
struct Place {
    target: Target,
    owner: Arc<str>,
    lease_ms: u64,
    armed: bool,
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl Place {
    fn new(target: &Target, lease_ms: u64) -> Place {
        Place {
            owner: target.engine.core.new_owner(),
            target: target.clone(),
            lease_ms,
            armed: true,
            gate: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// What the next attempt carries: the owner id and the gate.
    async fn attempt(&self) -> FairAttempt {
        FairAttempt {
            owner: self.owner.clone(),
            gate: self.gate.clone().lock_owned().await,
        }
    }

    /// Cancels the owner id once no attempt is in flight.
    fn cancel_after_attempts(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let core = self.target.engine.core.clone();
        let job = self.cancel_job();
        let gate = self.gate.clone();
        async move {
            let _gate = gate.lock_owned().await;
            core.run_job(job).await
        }
    }

    /// The job that takes this owner out of the queue (see `fair_cancel.lua`).
    fn cancel_job(&self) -> ReleaseJob {
        ReleaseJob::Cancel {
            keys: self.target.keys.clone(),
            owner: self.owner.clone(),
            mode: CancelMode::New,
            latch: self.target.keys.latch(&self.owner),
            lease_ms: self.lease_ms,
        }
    }

    /// A new owner id, at the queue's end: the last one was cancelled
    /// already (an attempt with a lost reply, or a grant that came too
    /// late).
    fn renew(&mut self) {
        self.owner = self.target.engine.core.new_owner();
        self.armed = true;
    }

    /// The waiter gave up: it leaves the queue before the caller hears it
    /// (at most [`LEAVE_LINE_MARGIN`]; the rest runs in the background),
    /// so that the next waiter moves up at once.
    async fn leave(mut self) {
        self.armed = false;
        let core = self.target.engine.core.clone();
        let (tracker, runtime) = (core.background.clone(), core.runtime.clone());
        let leave = RunToEnd::new(
            tracker.track_future(self.cancel_after_attempts()),
            &tracker,
            &runtime,
        );
        let _ = tokio::time::timeout(LEAVE_LINE_MARGIN, leave).await;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.armed {
            let core = &self.target.engine.core;
            core.background
                .spawn_on(self.cancel_after_attempts(), &core.runtime);
        }
    }
}

impl Target {
    /// A new hold of a fair lock: one attempt that never joins the queue
    /// (`Wait::Never`), or a place in the queue until the turn comes.
    pub(super) async fn acquire_fair(
        &self,
        call: &Call,
        context: Option<u64>,
        options: AcquireOptions,
        deadline: Option<Instant>,
    ) -> Result<Got> {
        if options.wait == Wait::Never {
            return match self
                .attempt(call, context, options.lease, None, None, None)
                .await?
            {
                Attempt::Acquired(guard) => Ok(Got::Fresh {
                    guard,
                    via: Via::Redis,
                    waited: false,
                }),
                Attempt::Held { .. } | Attempt::Expired => Ok(Got::Busy),
            };
        }
        let core = &self.engine.core;
        let place = Place::new(self, lease_ms(options.lease, core.config.watchdog_timeout));
        let out = tokio::select! {
            biased;
            out = self.wait_fair(call, context, options, deadline, place) => out,
            // Shut down: the wait ends (the place is cancelled on drop).
            _ = core.closed.cancelled() => Err(Error::Closed),
        };
        match out {
            Ok((got, Some(place))) => {
                place.leave().await;
                Ok(got)
            }
            Ok((got, None)) => Ok(got),
            Err(e) => Err(e),
        }
    }

    /// Waits in the queue under `place`; gives the place back with a
    /// timed-out outcome (for the caller to leave the queue), and
    /// otherwise ends it (disarmed on a grant, dropped on an error).
    async fn wait_fair(
        &self,
        call: &Call,
        context: Option<u64>,
        options: AcquireOptions,
        deadline: Option<Instant>,
        mut place: Place,
    ) -> Result<(Got, Option<Place>)> {
        let until_deadline = || async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let command_timeout = self.engine.core.config.command_timeout;
        // The waiter's own channel (Redisson's per-waiter channel), for
        // its current owner id.
        let mut subscription: Option<(Arc<str>, Subscription)> = None;
        let mut outage: Option<Instant> = None;
        let mut outage_error: Option<Error> = None;
        let mut waiting = Waiting::default();
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if let Some(e) = outage_error.take() {
                    return Err(e);
                }
                return Ok((Got::TimedOut, Some(place)));
            }
            // A sibling acquisition of the caller's context (`join!`) got
            // the lock meanwhile: re-enter its hold, as the lock's manual
            // acquisitions do, and leave the queue.
            if let Some(hold) =
                context.and_then(|id| self.engine.core.queues.context_hold(&self.keys.local, id))
            {
                if let Reentry::Entered(guard) = self.reenter(call, &hold, options.lease).await? {
                    return Ok((
                        Got::Reentered {
                            guard,
                            waited: waiting.0,
                        },
                        Some(place),
                    ));
                }
            }
            let sent_at = Instant::now();
            let outage_end = outage.map(|began| began + self.engine.core.command_bound());
            let attempt = self
                .attempt(
                    call,
                    context,
                    options.lease,
                    None,
                    outage_end,
                    Some(place.attempt().await),
                )
                .await;
            let wait_ms = match attempt {
                Ok(Attempt::Acquired(guard)) => {
                    place.armed = false;
                    return Ok((
                        Got::Fresh {
                            guard,
                            via: Via::Redis,
                            waited: waiting.0,
                        },
                        None,
                    ));
                }
                Ok(Attempt::Held { pttl_ms }) => {
                    outage = None;
                    outage_error = None;
                    waiting.began("fair-queue");
                    pttl_ms
                }
                Ok(Attempt::Expired) => {
                    // Granted after the grant's validity and undone: that
                    // owner id is cancelled; on under a new one.
                    place.renew();
                    subscription = None;
                    continue;
                }
                Err(Error::CommandTimeout) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    // the attempt (cancelled by `attempt`) used up the
                    // bound; the place leaves under the same owner id
                    return match outage_error.take() {
                        Some(e) => Err(e),
                        None => Ok((Got::TimedOut, Some(place))),
                    };
                }
                Err(e) if self.rides_out(&e, &mut outage, sent_at, deadline) => {
                    // The attempt was cancelled (its reply may have been
                    // lost): on under a new owner id, at the queue's end.
                    tracing::debug!(error = %e, "fair lock acquire failed during an outage; retrying");
                    place.renew();
                    subscription = None;
                    outage_error = Some(e);
                    let pause = Duration::from_millis(20)
                        .max(outage.map_or(Duration::ZERO, |t| t.elapsed() / 4))
                        .min(Duration::from_millis(250));
                    tokio::time::sleep(pause).await;
                    continue;
                }
                Err(e) => {
                    // `attempt` cancelled a request with an unknown outcome;
                    // the place leaves the queue as it drops.
                    return Err(e);
                }
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok((Got::TimedOut, Some(place)));
            }
            let current = match &subscription {
                Some((owner, sub)) if *owner == place.owner => {
                    if let Status::Denied(why) = sub.status() {
                        return Err(crate::hold::acquire::subscribe_denied(&why));
                    }
                    sub
                }
                _ => {
                    // Subscribe first, then ask again: a message after
                    // that attempt wakes this waiter.
                    let channel = self.keys.fair_channel(&place.owner);
                    let mut sub = self.engine.pubsub.subscribe(&channel);
                    // (not longer than a re-check: the liveness mark is
                    // renewed by attempts)
                    let mut ready_bound = command_timeout.min(FAIR_RECHECK);
                    if let Some(d) = deadline {
                        ready_bound = ready_bound.min(d.saturating_duration_since(Instant::now()));
                    }
                    match sub.ready(ready_bound).await {
                        Status::Live | Status::Pending => {}
                        Status::Denied(why) => {
                            return Err(crate::hold::acquire::subscribe_denied(&why))
                        }
                    }
                    subscription = Some((place.owner.clone(), sub));
                    continue;
                }
            };
            // The queue's head: the holder's remaining time; others: the
            // time until the predecessor's deadline (Redisson's answer) —
            // never longer than a re-check. Negative (no expiry, or the
            // predecessor is past its deadline): the message, or the
            // re-check.
            let sleep = match wait_ms {
                ms if ms > 0 => Duration::from_millis(ms as u64).min(FAIR_RECHECK),
                0 => Duration::from_millis(1),
                _ => FAIR_RECHECK,
            };
            tokio::select! {
                biased;
                _ = current.woken() => {}
                _ = tokio::time::sleep(sleep) => {}
                _ = until_deadline() => {}
            }
        }
    }
}
