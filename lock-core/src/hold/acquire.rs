//! The acquire engine: one acquisition from the caller's options to a
//! count of a hold (or "busy", "timed out", an error). A re-entry adds a
//! count to the hold the caller's context or section has; otherwise the
//! caller joins the lock's local queue and, at its head, asks Redis
//! (`protocol/acquire.rs`), waiting between attempts for the first of an
//! unlock message, the holder's remaining time and its own bound — or
//! takes the hold straight from a local holder (a hand-off). Every call
//! runs to its end even when the caller stops waiting, and an attempt
//! whose reply was lost is cancelled, so no grant is left behind.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::config::ReplicaAck;
use crate::error::{Error, Result};
use crate::hold::count::OwnedCount;
use crate::hold::lease_ms;
use crate::hold::queue::{Holding, Turn, Waiter};
use crate::hold::release::ReleaseJob;
use crate::hold::replicas::Confirmed;
use crate::hold::run_to_end::RunToEnd;
use crate::hold::shared::Core;
use crate::hold::target::Target;
use crate::hold::Hold;
use crate::metrics::{self, AcquireOutcome};
use crate::options::{AcquireOptions, Wait};
use crate::protocol::acquire::{AcquireCall, AcquireMode, AcquireReply, Line};
use crate::protocol::cancel::CancelMode;
use crate::protocol::keys::Rule;
use crate::transport::pubsub::{Status, Subscription};

/// A fair waiter's attempt: its owner id (its place in the queue) and its
/// place's gate, held until the attempt's call ends — also when it ends
/// in the background after the caller stopped waiting — so that the
/// place's cancellation runs after it (see `hold/fair.rs`).
#[derive(Debug)]
pub(super) struct FairAttempt {
    pub(super) owner: Arc<str>,
    pub(super) gate: tokio::sync::OwnedMutexGuard<()>,
}

/// What the caller's context holds that an acquisition may re-enter.
#[derive(Debug, Default)]
pub(crate) struct Reentrancy {
    /// The caller's lock context (its manual holds are re-entered).
    pub(crate) context: Option<u64>,
    /// The hold of the innermost section of this lock the caller runs in.
    pub(crate) section: Option<Arc<Hold>>,
}

/// The outcome of one acquire script call.
#[derive(Debug)]
pub(super) enum Attempt {
    Acquired(OwnedCount),
    /// Held by another owner, who still has `pttl_ms` (-1: no expiry).
    Held {
        pttl_ms: i64,
    },
    /// Granted, but the reply came after the grant's validity ran out: it
    /// was undone, nobody holds it.
    Expired,
}

/// One acquire call: when it began, and its `lock.acquire` span, which
/// the tasks it spawns carry too.
#[derive(Debug)]
pub(super) struct Call {
    pub(super) started: Instant,
    pub(super) span: tracing::Span,
    /// The caller's bound: no Redis call of this acquisition runs past it,
    /// and no retry starts after it. `started + wait` for a bounded wait,
    /// `started + connect_timeout + command_timeout` for a single attempt,
    /// none for an unbounded wait (see `Target::rides_out`).
    until: Option<Instant>,
}

impl Call {
    /// How long the next Redis call may take: the usual bound, or what is
    /// left of the caller's (also of `outage_end`, the end of an outage
    /// ridden out); `None` when nothing is left (no call may start).
    fn limit(&self, core: &Core, outage_end: Option<Instant>) -> Option<Duration> {
        limit_until(core.command_bound(), [self.until, outage_end])
    }
}

/// `bound`, or less when one of `ends` comes sooner; `None` when one of
/// them has passed.
pub(crate) fn limit_until(bound: Duration, ends: [Option<Instant>; 2]) -> Option<Duration> {
    let now = Instant::now();
    let limit = ends.into_iter().flatten().fold(bound, |limit, end| {
        limit.min(end.saturating_duration_since(now))
    });
    (!limit.is_zero()).then_some(limit)
}

/// How an acquisition that did not fail ended.
#[derive(Debug)]
pub(super) enum Got {
    /// A new hold. `waited`: the acquisition found the lock held (by a
    /// local holder or waiter, or in Redis) at least once.
    Fresh {
        guard: OwnedCount,
        via: Via,
        waited: bool,
    },
    /// One more count of a hold of the caller's context or section.
    Reentered { guard: OwnedCount, waited: bool },
    /// A single attempt found the lock held.
    Busy,
    /// The wait bound passed.
    TimedOut,
}

/// Where a new hold came from (the `via` field of "lock acquired").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Via {
    Redis,
    HandOff,
}

impl Via {
    fn as_str(self) -> &'static str {
        match self {
            Via::Redis => "redis",
            Via::HandOff => "hand-off",
        }
    }
}

/// Whether an acquisition has waited; the "waiting" event is logged once.
#[derive(Debug, Default)]
pub(super) struct Waiting(pub(super) bool);

impl Waiting {
    /// The acquisition found the lock held, `behind` whom.
    pub(super) fn began(&mut self, behind: &'static str) {
        if !self.0 {
            self.0 = true;
            tracing::debug!(behind, "lock busy; waiting");
        }
    }
}

/// The outcome of one re-entry script call.
#[derive(Debug)]
pub(super) enum Reentry {
    Entered(OwnedCount),
    /// The hold is gone (lost, or it ran out before the reply came).
    Gone,
}

impl Target {
    /// The one way in of every acquire call: its span, its outcome event
    /// and its metrics. `reentrancy`: what the caller's context holds.
    pub(crate) async fn acquire(
        &self,
        options: AcquireOptions,
        reentrancy: Reentrancy,
    ) -> Result<Option<OwnedCount>> {
        let started = Instant::now();
        let core = &self.engine.core;
        let call = Call {
            started,
            span: tracing::debug_span!(
                "lock.acquire",
                lock = %self.keys.name,
                key = %self.keys.lock
            ),
            until: match options.wait {
                Wait::Bounded(w) => Some(started + w),
                Wait::Never => Some(started + core.command_bound()),
                Wait::Forever => None,
            },
        };
        let span = call.span.clone();
        async move {
            let got = self.acquire_checked(options, reentrancy, &call).await;
            conclude(got, call.started)
        }
        .instrument(span)
        .await
    }

    async fn acquire_checked(
        &self,
        options: AcquireOptions,
        reentrancy: Reentrancy,
        call: &Call,
    ) -> Result<Got> {
        options.validate()?;
        let core = &self.engine.core;
        let _running = Running::new(core);
        if core.closed.is_cancelled() {
            return Err(Error::Closed);
        }
        let got = self.acquire_in_context(reentrancy, options, call).await?;
        match (got, options.replica_ack(core.config.wait_for_replicas)) {
            (Got::Fresh { guard, via, waited }, Some(ack)) => {
                let guard = self.confirm_on_replicas(guard, ack).await?;
                Ok(Got::Fresh { guard, via, waited })
            }
            (got, _) => Ok(got),
        }
    }

    /// Hands out a fresh hold only once `ack.replicas` replicas have it
    /// (see `replicas.rs`); otherwise releases it and fails with
    /// [`Error::NotReplicated`] (or [`Error::Lost`] when it was gone
    /// already). A caller that stops waiting drops the guard: released as
    /// any dropped guard.
    pub(crate) async fn confirm_on_replicas(
        &self,
        guard: OwnedCount,
        ack: ReplicaAck,
    ) -> Result<OwnedCount> {
        let core = &self.engine.core;
        let started = Instant::now();
        let acknowledged = match core
            .confirm_on_replicas(&self.keys, guard.owner_id(), ack)
            .await
        {
            Ok(Confirmed::Acknowledged(n)) if n >= ack.replicas() => {
                tracing::debug!(
                    replicas = n,
                    waited_ms = started.elapsed().as_millis() as u64,
                    "lock acknowledged by replicas"
                );
                return Ok(guard);
            }
            Ok(Confirmed::Acknowledged(n)) => n,
            Ok(Confirmed::Gone) => {
                guard
                    .hold()
                    .mark_gone("the hold was gone when replicas were asked to confirm it");
                // Known gone: no Redis call, the local queue forgets it.
                return Err(guard.release().await.err().unwrap_or(Error::Lost {
                    name: self.keys.name.clone(),
                }));
            }
            Err(e) => {
                // Dropped: released in the background, as any dropped guard.
                drop(guard);
                return Err(e);
            }
        };
        tracing::warn!(
            lock = %self.keys.name,
            wanted = ack.replicas(),
            acknowledged,
            "too few replicas acknowledged a new hold; releasing it"
        );
        if let Err(e) = guard.release().await {
            tracing::warn!(error = %e, "releasing an unacknowledged hold failed; it expires with its lease");
        }
        Err(Error::NotReplicated {
            name: self.keys.name.clone(),
            wanted: ack.replicas(),
            acknowledged,
            waited: ack.timeout(),
        })
    }

    async fn acquire_in_context(
        &self,
        reentrancy: Reentrancy,
        options: AcquireOptions,
        call: &Call,
    ) -> Result<Got> {
        if let Some((hold, from_section)) = self.reentrant_hold(&reentrancy) {
            match self.reenter(call, &hold, options.lease).await? {
                Reentry::Entered(guard) => {
                    return Ok(Got::Reentered {
                        guard,
                        waited: false,
                    })
                }
                // Nested in a section whose hold is gone: the section is
                // no longer exclusive, and must hear it.
                Reentry::Gone if from_section => {
                    return Err(Error::Lost {
                        name: self.keys.name.clone(),
                    })
                }
                // The context's hold is gone: take a new one.
                Reentry::Gone => {}
            }
        }
        let context = match (reentrancy.context, options.section) {
            (Some(id), false) => Some(id),
            _ => None,
        };
        self.acquire_fresh(context, options, call).await
    }

    /// The hold an acquisition made now re-enters: the innermost section of
    /// this lock the caller is nested in (`true`), else the hold the
    /// caller's context took through the manual API (`false`).
    pub(crate) fn reentrant_hold(&self, reentrancy: &Reentrancy) -> Option<(Arc<Hold>, bool)> {
        if let Some(hold) = &reentrancy.section {
            return Some((hold.clone(), true));
        }
        self.engine
            .core
            .queues
            .context_hold(&self.keys.local, reentrancy.context?)
            .map(|hold| (hold, false))
    }

    /// A new hold: one attempt, or a place in the local queue.
    async fn acquire_fresh(
        &self,
        context: Option<u64>,
        options: AcquireOptions,
        call: &Call,
    ) -> Result<Got> {
        let deadline = match options.wait {
            Wait::Bounded(w) => Some(call.started + w),
            _ => None,
        };
        if self.keys.rule == Rule::Fair {
            // every waiter has its own place in the lock's queue in Redis
            return self.acquire_fair(call, context, options, deadline).await;
        }
        if options.wait == Wait::Never {
            // Always asked of Redis: a local holding may be mid-release.
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
        let queues = &self.engine.core.queues;
        let waiter = queues.join(&self.keys.local, options.lease, context);
        let ticket = Ticket {
            target: self.clone(),
            waiter,
        };
        let closed = &self.engine.core.closed;
        let out = tokio::select! {
            biased;
            out = self.wait_in_line(call, &ticket, context, options, deadline) => out,
            // Shut down: the wait ends (cancel-safe, like a dropped acquire).
            _ = closed.cancelled() => Err(Error::Closed),
        };
        if matches!(out, Ok(Got::TimedOut)) {
            ticket.give_up().await;
        }
        out
    }

    /// Waits for the ticket's turn: a hand-off from a local holder, or, at
    /// the head of the local queue, the lock in Redis (subscribe, retry,
    /// then wait for the first of an unlock message, the holder's PTTL and
    /// the deadline).
    async fn wait_in_line(
        &self,
        call: &Call,
        ticket: &Ticket,
        context: Option<u64>,
        options: AcquireOptions,
        deadline: Option<Instant>,
    ) -> Result<Got> {
        let queues = &self.engine.core.queues;
        let config = &self.engine.core.config;
        let waiter = &ticket.waiter;
        let until_deadline = || async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let mut subscription: Option<Arc<Subscription>> = None;
        // When Redis stopped answering during this wait (see `rides_out`).
        let mut outage: Option<Instant> = None;
        let mut outage_error: Option<Error> = None;
        let mut waiting = Waiting::default();
        loop {
            let turn = queues.turn(&self.keys.local, waiter);
            if let Turn::Granted(hold) = turn {
                if hold.is_valid() {
                    return Ok(Got::Fresh {
                        guard: OwnedCount::new(self.clone(), hold, options.lease),
                        via: Via::HandOff,
                        waited: true,
                    });
                }
                // Picked up after its validity: never handed out as held.
                // The hand-off took the waiter out of the line: back to its
                // front, to wait (or contend) again.
                self.engine.core.spawn_job(ReleaseJob::Release {
                    keys: self.keys.clone(),
                    hold,
                    lease_ms: lease_ms(options.lease, config.watchdog_timeout),
                });
                queues.requeue_front(&self.keys.local, waiter);
                continue;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                // Redis stopped answering and did not come back in time:
                // that is the failure, not a busy lock.
                if let Some(e) = outage_error.take() {
                    return Err(e);
                }
                return Ok(Got::TimedOut);
            }
            match turn {
                Turn::Granted(_) => unreachable!("handled above"),
                Turn::Wait => {
                    waiting.began("local-queue");
                    tokio::select! {
                        biased;
                        _ = waiter.notify.notified() => {}
                        _ = until_deadline() => {}
                    }
                }
                // Manual acquisitions of one context re-enter its hold, even
                // when they were waiting before it was taken (`join!`) —
                // unless it is being ended with no guard (a hand-off its
                // waiter abandoned): then it is waited out like any other.
                Turn::HeldLocally { hold }
                    if context.is_some() && hold.context == context && hold.counts() > 0 =>
                {
                    match self.reenter(call, &hold, options.lease).await? {
                        Reentry::Entered(guard) => {
                            return Ok(Got::Reentered {
                                guard,
                                waited: waiting.0,
                            })
                        }
                        Reentry::Gone => {}
                    }
                }
                Turn::HeldLocally { hold } => {
                    waiting.began("local-holder");
                    tokio::select! {
                        biased;
                        _ = waiter.notify.notified() => {}
                        _ = hold.lost() => {}
                        _ = until_deadline() => {}
                    }
                }
                Turn::StepBack {
                    until,
                    subscription: shared,
                } => {
                    waiting.began("step-back");
                    // Listen while stepping back: another client's unlock
                    // (it took its turn) ends the step-back early.
                    let sub = match subscription.clone().or(shared) {
                        Some(sub) => sub,
                        None => {
                            let sub = Arc::new(self.subscribe());
                            queues.share_subscription(&self.keys.local, sub.clone());
                            subscription = Some(sub.clone());
                            sub
                        }
                    };
                    tokio::select! {
                        biased;
                        _ = sub.woken() => queues.unlock_heard_in_step_back(&self.keys.local),
                        _ = waiter.notify.notified() => {}
                        _ = tokio::time::sleep_until(until) => queues.step_back_ran_out(&self.keys.local),
                        _ = until_deadline() => {}
                    }
                }
                Turn::Contend {
                    subscription: shared,
                } => {
                    let sent_at = Instant::now();
                    let outage_end = outage.map(|began| began + self.engine.core.command_bound());
                    let attempt = match self
                        .attempt(
                            call,
                            context,
                            options.lease,
                            Some(waiter.id),
                            outage_end,
                            None,
                        )
                        .await
                    {
                        Ok(attempt) => {
                            outage = None;
                            outage_error = None;
                            attempt
                        }
                        // The wait bound passed while the attempt was in
                        // flight (its time was cut to what was left of the
                        // bound): the wait timed out, unless Redis had
                        // already stopped answering.
                        Err(Error::CommandTimeout)
                            if deadline.is_some_and(|d| Instant::now() >= d) =>
                        {
                            return match outage_error.take() {
                                Some(e) => Err(e),
                                None => Ok(Got::TimedOut),
                            };
                        }
                        Err(e) if self.rides_out(&e, &mut outage, sent_at, deadline) => {
                            tracing::debug!(error = %e, "lock acquire failed during an outage; retrying");
                            outage_error = Some(e);
                            let pause = Duration::from_millis(20)
                                .max(outage.map_or(Duration::ZERO, |t| t.elapsed() / 4))
                                .min(Duration::from_millis(250));
                            tokio::time::sleep(pause).await;
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    let pttl_ms = match attempt {
                        Attempt::Acquired(guard) => {
                            return Ok(Got::Fresh {
                                guard,
                                via: Via::Redis,
                                waited: waiting.0,
                            });
                        }
                        Attempt::Held { pttl_ms } => {
                            waiting.began("redis");
                            // (a reader never joins the line of clients
                            // waiting in Redis: its giving up must not
                            // take its client's writer out of it)
                            if self.keys.rule != Rule::Read {
                                queues.held_elsewhere(&self.keys.local);
                            }
                            pttl_ms
                        }
                        Attempt::Expired => {
                            // A reply held up in the network: try again
                            // after a short pause.
                            tokio::time::sleep(self.engine.core.race_jitter()).await;
                            continue;
                        }
                    };
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(Got::TimedOut);
                    }
                    let sub = match subscription.clone().or(shared) {
                        Some(sub) => {
                            if let Status::Denied(why) = sub.status() {
                                return Err(subscribe_denied(&why));
                            }
                            sub
                        }
                        None => {
                            // Subscribe first, then retry: an unlock after
                            // the retry wakes us.
                            let mut sub = self.subscribe();
                            // Do not wait for the subscription longer than
                            // the holder has left.
                            let mut ready_bound = config.command_timeout;
                            if pttl_ms >= 0 {
                                ready_bound =
                                    ready_bound.min(Duration::from_millis(pttl_ms as u64));
                            }
                            if let Some(d) = deadline {
                                ready_bound =
                                    ready_bound.min(d.saturating_duration_since(Instant::now()));
                            }
                            match sub.ready(ready_bound).await {
                                Status::Live => {}
                                Status::Pending => tracing::debug!(
                                    "lock pub/sub not ready; relying on TTL-bounded retries"
                                ),
                                Status::Denied(why) => return Err(subscribe_denied(&why)),
                            }
                            let sub = Arc::new(sub);
                            queues.share_subscription(&self.keys.local, sub.clone());
                            subscription = Some(sub);
                            continue;
                        }
                    };
                    let sleep = match pttl_ms {
                        ms if ms > 0 => Duration::from_millis(ms as u64),
                        // No expiry on the key (set by another tool): wait for
                        // the unlock message, re-checking now and then.
                        -1 => config.watchdog_timeout,
                        // About to expire or just gone: retry at once.
                        _ => Duration::from_millis(1),
                    };
                    tokio::select! {
                        biased;
                        // Every waiting client was told at once; no need to
                        // draw lots: the release gave the turn to the client
                        // that has waited longest (see `release.lua`), and
                        // the others' attempts are refused meanwhile.
                        _ = sub.woken() => {}
                        _ = waiter.notify.notified() => {}
                        _ = tokio::time::sleep(sleep) => {}
                        _ = until_deadline() => {}
                    }
                }
            }
        }
    }

    /// A subscription to the lock's channel: on a read-write lock's,
    /// every message wakes every waiter (readers proceed together).
    fn subscribe(&self) -> Subscription {
        match self.keys.rule {
            Rule::Exclusive | Rule::Permits | Rule::Fair => {
                self.engine.pubsub.subscribe(&self.keys.channel)
            }
            Rule::Read | Rule::Write => self.engine.pubsub.subscribe_shared(&self.keys.channel),
        }
    }

    /// Whether a waiting acquisition keeps waiting through `err`: a
    /// connection failure of a client that has reached Redis before (a
    /// restart, a failover). The outage begins when the first failed call
    /// of the client was sent (this attempt's `sent_at` at the latest: a
    /// waiter queued behind another rides out the same outage, not a new
    /// one); it is ridden out for at most
    /// `connect_timeout + command_timeout` from then (attempts meanwhile
    /// are bounded by what is left of it, see `Call::limit`), and never
    /// past the caller's deadline. So an unbounded wait whose Redis stops
    /// answering ends with the error at most that long after its first
    /// attempt that found Redis gone. A client that never reached Redis
    /// (wrong address, password, database) fails at once.
    pub(super) fn rides_out(
        &self,
        err: &Error,
        outage: &mut Option<Instant>,
        sent_at: Instant,
        deadline: Option<Instant>,
    ) -> bool {
        let core = &self.engine.core;
        if !err.is_transient() || !core.has_reached_redis() {
            return false;
        }
        let began = *outage.get_or_insert(core.outage_began().unwrap_or(sent_at).min(sent_at));
        let now = Instant::now();
        now < began + core.command_bound() && deadline.is_none_or(|d| now < d)
    }

    /// Runs the acquire script once for a new hold. The call runs to its
    /// end even when the caller stops waiting (see `run_to_end.rs`): a
    /// grant that arrives after the caller gave up is dropped there, and
    /// dropping a guard releases it, so nothing stays locked until expiry.
    ///
    /// Bounded by the caller's bound and `outage_end` (see `Call::limit`):
    /// fails with `Error::CommandTimeout` when nothing is left of them, and
    /// makes its one retry only while something is.
    ///
    /// `fair`: a fair lock's waiter, asking under its own owner id (its
    /// place in the queue); no retry then (the cancellation before it
    /// would refuse that id): the waiter goes on under a new one.
    pub(super) async fn attempt(
        &self,
        call: &Call,
        context: Option<u64>,
        lease: Option<Duration>,
        waiter_id: Option<u64>,
        outage_end: Option<Instant>,
        fair: Option<FairAttempt>,
    ) -> Result<Attempt> {
        let fair_owner = fair.as_ref().map(|f| f.owner.clone());
        let gate = fair.map(|f| f.gate);
        let lock = self.clone();
        let core = &self.engine.core;
        let Some(limit) = call.limit(core, outage_end) else {
            return Err(Error::CommandTimeout);
        };
        let (bound, until) = (core.command_bound(), call.until);
        let retry_limit = move || limit_until(bound, [until, outage_end]);
        // The one retry must start by then, so the cancellation before it
        // is awaited no longer (past it, it finishes in the background).
        let retry_by = [until, outage_end].into_iter().flatten().min();
        // Counted as running until the call ends, even when the caller
        // stopped waiting for it (shutdown waits for it, then gives back
        // what it was granted).
        let running = Running::new(core);
        RunToEnd::new(
            async move {
                let _running = running;
                let _gate = gate;
                let fair = fair_owner.is_some();
                match lock.attempt_now(context, lease, waiter_id, Some(retry_by), limit, fair_owner).await {
                    // A connection the server had closed: the attempt was
                    // cancelled (undone or refused), so one more attempt, under
                    // a new owner id, on a fresh connection is safe.
                    Err(e) if e.is_stale_connection() && !fair => match retry_limit() {
                        Some(limit) => {
                            tracing::debug!(error = %e, "lock acquire met a closed connection; retrying once");
                            lock.attempt_now(context, lease, waiter_id, None, limit, None).await
                        }
                        None => Err(e),
                    },
                    other => other,
                }
            }
            // Its events belong to the acquisition's span, also when it
            // finishes in the background.
            .instrument(call.span.clone()),
            &core.background,
            &core.runtime,
        )
        .await
    }

    /// `first_try` (`Some(retry_by)`): a closed connection is then
    /// cancelled before returning, so that the caller's one retry does not
    /// find this attempt's hold — awaited until `retry_by` at most (the
    /// caller's bound, or the end of the outage it rides out): when no
    /// retry can follow, the cancellation finishes in the background and
    /// the caller hears the error by its bound.
    async fn attempt_now(
        &self,
        context: Option<u64>,
        lease: Option<Duration>,
        waiter_id: Option<u64>,
        first_try: Option<Option<Instant>>,
        limit: Duration,
        fair_owner: Option<Arc<str>>,
    ) -> Result<Attempt> {
        let core = &self.engine.core;
        let lease_time = lease.unwrap_or(core.config.watchdog_timeout);
        let lease_ms = lease_ms(lease, core.config.watchdog_timeout);
        // A new owner id per attempt: the hold's identity, and the request
        // id that a cancellation refers to (a fair waiter's is its own,
        // for every attempt: its place in the queue).
        let line = match (&fair_owner, waiter_id) {
            (Some(_), _) => Line::Head,
            (None, Some(_)) => core.queues.line_mode(&self.keys.local),
            (None, None) => Line::Once,
        };
        let owner = fair_owner.unwrap_or_else(|| core.new_owner());
        let latch = self.keys.latch(&owner);
        // Only a fair acquisition publishes (it tells the queue's head),
        // with the command known so far: no probe here, so the attempt
        // keeps its bound (a wake-up lost to a cluster's sharded channels
        // before the first probe costs the head one re-check).
        let publish = if self.keys.rule == Rule::Fair {
            core.publish_command_known()
        } else {
            "publish"
        };
        let sent_at = Instant::now();
        let cmd = self.acquire_cmd(&latch, &owner, AcquireMode::New(line), lease_ms, publish);
        let reply = match core
            .run_script_within(core.scripts.acquire_for(self.keys.rule), &cmd, limit)
            .await
        {
            Ok(reply) => {
                core.record_round_trip(sent_at.elapsed());
                reply
            }
            Err(e) => {
                if let (Some(retry_by), true) = (first_try, e.is_stale_connection()) {
                    // Cancelled now, on a fresh connection: the retry that
                    // follows must not find this attempt's hold.
                    let undo = self.cancel_before_retry(
                        &owner,
                        CancelMode::New,
                        latch,
                        lease_ms,
                        retry_by,
                    );
                    if let Err(undo) = undo.await {
                        tracing::warn!(error = %undo, "cancelling an acquire with a lost reply failed; it expires with its lease");
                        return Err(undo);
                    }
                    return Err(e);
                } else if e.is_transient() {
                    // The script may have run and its reply been lost (or
                    // the request may still arrive): cancel it, so that it
                    // is undone or never applied.
                    self.engine.core.spawn_job(ReleaseJob::Cancel {
                        keys: self.keys.clone(),
                        owner,
                        mode: CancelMode::New,
                        latch,
                        lease_ms,
                    });
                }
                return Err(e);
            }
        };
        match AcquireReply::parse(&reply)? {
            AcquireReply::Held { pttl_ms } => Ok(Attempt::Held { pttl_ms }),
            AcquireReply::Acquired { token } => {
                let Some(hold) = Hold::granted(
                    self.keys.clone(),
                    owner.clone(),
                    token,
                    context,
                    sent_at,
                    lease_time,
                ) else {
                    tracing::debug!(
                        rtt_ms = sent_at.elapsed().as_millis() as u64,
                        "lock granted after the grant's validity; undoing it"
                    );
                    if let Err(e) = core
                        .cancel(&self.keys, &owner, CancelMode::New, &latch, lease_ms)
                        .await
                    {
                        tracing::warn!(error = %e, "undoing a late grant failed; it expires with its lease");
                    }
                    return Ok(Attempt::Expired);
                };
                if self.keys.rule == Rule::Fair {
                    core.queues
                        .held_fairly(&self.keys.local, Holding::new(hold.clone()));
                } else {
                    core.queues
                        .acquired(&self.keys.local, Holding::new(hold.clone()), waiter_id);
                }
                Ok(Attempt::Acquired(OwnedCount::new(
                    self.clone(),
                    hold,
                    lease,
                )))
            }
            other => Err(other.unexpected_here()),
        }
    }

    /// The acquire script call for the hold `owner` (see `acquire.lua`).
    fn acquire_cmd(
        &self,
        latch: &str,
        owner: &str,
        mode: AcquireMode,
        lease_ms: u64,
        publish: &'static str,
    ) -> redis::Cmd {
        let core = &self.engine.core;
        AcquireCall {
            keys: &self.keys,
            latch,
            owner,
            mode,
            lease_ms,
            token_retention_ms: core.token_retention_ms(),
            latch_ms: core.latch_ms(),
            client_id: &core.client_id,
            publish,
        }
        .cmd(core.scripts.acquire_for(self.keys.rule))
    }

    /// Cancels the attempt `owner` / `latch` (its connection was closed)
    /// before the caller's one retry, awaited until `retry_by` at most:
    /// past it no retry follows, and the cancellation finishes in the
    /// background. An error: the cancellation failed.
    async fn cancel_before_retry(
        &self,
        owner: &Arc<str>,
        mode: CancelMode,
        latch: String,
        lease_ms: u64,
        retry_by: Option<Instant>,
    ) -> Result<()> {
        let core = &self.engine.core;
        let undo = core.cancel(&self.keys, owner, mode, &latch, lease_ms);
        let undone = match retry_by {
            Some(by) => tokio::time::timeout_at(by, undo).await.ok(),
            None => Some(undo.await),
        };
        match undone {
            Some(result) => result.map(|_| ()),
            None => {
                core.spawn_job(ReleaseJob::Cancel {
                    keys: self.keys.clone(),
                    owner: owner.clone(),
                    mode,
                    latch,
                    lease_ms,
                });
                Ok(())
            }
        }
    }

    /// Re-enters `hold` (one more count); runs to its end like [`Target::attempt`].
    pub(super) async fn reenter(
        &self,
        call: &Call,
        hold: &Arc<Hold>,
        lease: Option<Duration>,
    ) -> Result<Reentry> {
        if !hold.is_valid() {
            return Ok(Reentry::Gone);
        }
        let lock = self.clone();
        let hold = hold.clone();
        let core = &self.engine.core;
        let (bound, until) = (core.command_bound(), call.until);
        RunToEnd::new(
            async move { lock.reenter_now(hold, lease, bound, until).await }
                .instrument(call.span.clone()),
            &core.background,
            &core.runtime,
        )
        .await
    }

    /// Each request within `bound` and the caller's bound `until`.
    async fn reenter_now(
        &self,
        hold: Arc<Hold>,
        lease: Option<Duration>,
        bound: Duration,
        until: Option<Instant>,
    ) -> Result<Reentry> {
        // One change of the hold's count at a time, the new count counted
        // before it is sent: a release running after this one knows it is
        // not the last (see `Hold::change`).
        let _change = match until {
            // Waiting for another change (a release and its retries) is
            // waiting too: not past the caller's bound.
            Some(until) => match tokio::time::timeout_at(until, hold.change()).await {
                Ok(change) => change,
                Err(_) => return Err(Error::CommandTimeout),
            },
            None => hold.change().await,
        };
        if hold.counts() == 0 || hold.has_ended() {
            return Ok(Reentry::Gone);
        }
        let Some(limit) = limit_until(bound, [until, None]) else {
            return Err(Error::CommandTimeout);
        };
        hold.add_count();
        let outcome = match self.reenter_once(&hold, lease, Some(until), limit).await {
            // A connection the server had closed: the attempt was cancelled
            // (undone or refused), so one more, under a new request id, on a
            // fresh connection is safe (as for fresh acquisitions).
            Err(e) if e.is_stale_connection() => match limit_until(bound, [until, None]) {
                Some(limit) => {
                    tracing::debug!(error = %e, "lock re-entry met a closed connection; retrying once");
                    self.reenter_once(&hold, lease, None, limit).await
                }
                None => Err(e),
            },
            other => other,
        };
        if !matches!(outcome, Ok(Reentry::Entered(_))) {
            hold.take_count();
        }
        outcome
    }

    /// One re-entry request. `first_try` (`Some(retry_by)`): a closed
    /// connection is then cancelled before returning, so that the caller's
    /// one retry cannot be applied on top of this one — awaited until the
    /// caller's bound at most (past it no retry follows: the cancellation
    /// finishes in the background).
    async fn reenter_once(
        &self,
        hold: &Arc<Hold>,
        lease: Option<Duration>,
        first_try: Option<Option<Instant>>,
        limit: Duration,
    ) -> Result<Reentry> {
        let core = &self.engine.core;
        let lease_time = lease.unwrap_or(core.config.watchdog_timeout);
        let lease_ms = lease_ms(lease, core.config.watchdog_timeout);
        let latch = self.keys.latch(&core.request_id());
        let sent_at = Instant::now();
        // (a re-entry never publishes)
        let cmd = self.acquire_cmd(
            &latch,
            &hold.owner,
            AcquireMode::Reentry,
            lease_ms,
            "publish",
        );
        let cancel = |latch: String| ReleaseJob::Cancel {
            keys: self.keys.clone(),
            owner: hold.owner.clone(),
            mode: CancelMode::Reentry,
            latch,
            lease_ms,
        };
        let reply = match core
            .run_script_within(core.scripts.acquire_for(self.keys.rule), &cmd, limit)
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                if let (Some(retry_by), true) = (first_try, e.is_stale_connection()) {
                    let undo = self.cancel_before_retry(
                        &hold.owner,
                        CancelMode::Reentry,
                        latch,
                        lease_ms,
                        retry_by,
                    );
                    if let Err(undo) = undo.await {
                        tracing::warn!(error = %undo, "cancelling a re-entry with a lost reply failed; the hold keeps the count until it ends");
                        return Err(undo);
                    }
                    return Err(e);
                } else if e.is_transient() {
                    self.engine.core.spawn_job(cancel(latch));
                }
                return Err(e);
            }
        };
        match AcquireReply::parse(&reply)? {
            AcquireReply::Reentered => {
                if !hold.extend(sent_at, lease_time) {
                    // Confirmed after the hold's deadline: not handed out.
                    self.engine.core.spawn_job(cancel(latch));
                    return Ok(Reentry::Gone);
                }
                Ok(Reentry::Entered(OwnedCount::new(
                    self.clone(),
                    hold.clone(),
                    lease,
                )))
            }
            AcquireReply::Gone => {
                hold.mark_gone("the hold was gone when it was re-entered");
                core.queues.ended(&self.keys.local, &hold.owner);
                Ok(Reentry::Gone)
            }
            other => Err(other.unexpected_here()),
        }
    }
}

/// A place in the lock's local queue; leaving it (on success, give-up or
/// drop) takes the waiter out, and releases a hand-off that arrived after
/// the waiter stopped waiting.
struct Ticket {
    target: Target,
    waiter: Arc<Waiter>,
}

/// How long a waiter that gave up waits for its client to leave the
/// waiting set in Redis (one `ZREM`) before returning; the rest finishes in
/// the background.
pub(super) const LEAVE_LINE_MARGIN: Duration = Duration::from_millis(50);

impl Ticket {
    /// The waiter gave up (its wait bound passed): it leaves the local line
    /// now and, when it was this client's last waiter, the waiting set in
    /// Redis before the caller hears "timed out" (at most
    /// [`LEAVE_LINE_MARGIN`]), so that the turn goes to the next client at
    /// once, also when the process exits right after (`lockctl run
    /// --wait`).
    async fn give_up(&self) {
        if !self.leave() {
            return;
        }
        let core = self.target.engine.core.clone();
        let keys = self.target.keys.clone();
        let (tracker, runtime) = (core.background.clone(), core.runtime.clone());
        let zrem = RunToEnd::new(
            tracker.track_future(async move {
                if let Err(e) = core.stop_waiting(&keys).await {
                    tracing::warn!(lock = %keys.name, key = %keys.lock, error = %e, "leaving the line of clients waiting for a lock failed; the place lapses when its turn passes unused");
                }
            }),
            &tracker,
            &runtime,
        );
        let _ = tokio::time::timeout(LEAVE_LINE_MARGIN, zrem).await;
    }

    /// Leaves the local line (releasing a hand-off that came too late);
    /// true when this was the client's last waiter, which must leave the
    /// waiting set in Redis.
    fn leave(&self) -> bool {
        let core = &self.target.engine.core;
        let (grant, gave_up_last) = core.queues.leave(&self.target.keys.local, self.waiter.id);
        if let Some(hold) = grant {
            tracing::debug!(
                lock = %self.target.keys.name,
                key = %self.target.keys.lock,
                "releasing a lock hand-off nobody waits for"
            );
            self.target.engine.core.spawn_job(ReleaseJob::Release {
                keys: self.target.keys.clone(),
                hold,
                lease_ms: lease_ms(self.waiter.lease, core.config.watchdog_timeout),
            });
        }
        gave_up_last
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.leave() {
            // Nobody of this client waits any more: leave the waiting set.
            self.target.engine.core.spawn_job(ReleaseJob::StopWaiting {
                keys: self.target.keys.clone(),
            });
        }
    }
}

/// Counts one running acquisition (see `LockClient::shutdown`).
pub(crate) struct Running(Arc<Core>);

impl Running {
    pub(crate) fn new(core: &Arc<Core>) -> Running {
        core.acquiring.fetch_add(1, Ordering::SeqCst);
        Running(core.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.acquiring.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Ends an acquire call (inside its span): one event for its outcome, and
/// its metrics.
fn conclude(got: Result<Got>, started: Instant) -> Result<Option<OwnedCount>> {
    let waited_ms = || started.elapsed().as_millis() as u64;
    let (outcome, out) = match got {
        Ok(Got::Fresh { guard, via, waited }) => {
            tracing::debug!(
                token = guard.fencing_token(),
                waited_ms = waited_ms(),
                via = via.as_str(),
                "lock acquired"
            );
            if waited {
                metrics::waited(started);
            }
            (AcquireOutcome::Acquired, Ok(Some(guard)))
        }
        Ok(Got::Reentered { guard, waited }) => {
            tracing::debug!(token = guard.fencing_token(), "lock re-entered");
            if waited {
                metrics::waited(started);
            }
            (AcquireOutcome::Reentered, Ok(Some(guard)))
        }
        Ok(Got::Busy) => {
            tracing::debug!("lock busy");
            (AcquireOutcome::Busy, Ok(None))
        }
        Ok(Got::TimedOut) => {
            tracing::debug!(waited_ms = waited_ms(), "lock wait bound passed");
            (AcquireOutcome::Timeout, Ok(None))
        }
        Err(Error::Closed) => {
            tracing::debug!("lock acquire refused: the client is shut down");
            (AcquireOutcome::Closed, Err(Error::Closed))
        }
        Err(e) => {
            tracing::debug!(error = %e, "lock acquire failed");
            (AcquireOutcome::Error, Err(e))
        }
    };
    metrics::acquisition(outcome, started);
    out
}

/// The error of a wait that cannot hear unlock messages: Redis refused the
/// subscription to the lock's channel (ACL). Waiting by polling instead
/// would hide it.
pub(crate) fn subscribe_denied(why: &str) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
        "cannot subscribe to the lock's unlock channel",
        why.to_string(),
    )))
}
