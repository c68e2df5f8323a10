//! The semaphores' engine: acquiring permits (a place in the line of
//! waiting acquisitions, pub/sub wake-ups bounded by a re-check period),
//! the permit hold (identity, validity deadline, lost signal and watchdog
//! renewal from the lock's engine: a [`Hold`] whose key is the expirable
//! kind's sorted set of ids), and giving permits back exactly once.
//!
//! - **At most once.** Every acquire carries a request latch; an acquire
//!   whose reply was lost (or came after its validity) is cancelled by
//!   `sem_cancel.lua`, which gives back what it took and refuses a late
//!   copy. A plain release carries a latch of its own (a retry after a lost
//!   reply adds nothing) and marks the acquire's latch (a late copy of the
//!   acquire is refused); an expirable release names its ids, each removed
//!   once.
//! - **Turns.** An acquisition that has to wait joins lock-core's line in
//!   Redis (`lockcore_sem_line`), and permits go to the line in order: one
//!   that does not fit blocks those behind it, so asking for n is never
//!   starved by others asking for 1. It stays in the line while it keeps
//!   asking (each attempt renews its place; at least every
//!   [`RECHECK`]), and leaves it when it gives up.
//! - **Never hangs.** Woken by the semaphore's channel, and in any case
//!   every [`RECHECK`] (the plain kind has no expiry to wait for) or at the
//!   nearest permit expiry (expirable kind).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::hold::engine::Engine;
use crate::hold::permit_registry::PermitRecord;
use crate::hold::run_to_end::RunToEnd;
use crate::hold::shared::{duration_ms, Core};
use crate::hold::{ids, lease_ms, Hold};
use crate::options::{AcquireOptions, Wait};
use crate::protocol::sem_keys::{SemKeys, SemKind};
use crate::protocol::semaphore::{
    leave_cmd, parse_cancel, parse_permit_release, PermitReleaseCall, SemAcquireCall,
    SemAcquireReply, SemAddCall, SemAddReply, SemCancelCall,
};

/// The most permits one acquisition may ask for (each is an argument of
/// one script call, and one id in the expirable kind's set).
pub(crate) const MAX_PERMITS: u32 = 10_000;

/// Longest pause of a waiting acquisition between two attempts.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// How long a plain permit hold counts as valid: it has no lease (Redisson's
/// `RSemaphore` keeps no owner); only a shutdown ends it early.
const PLAIN_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long a waiter that gave up waits for leaving the line in Redis
/// before returning (the rest finishes in the background).
const LEAVE_LINE_MARGIN: Duration = Duration::from_millis(50);

/// One semaphore of one client, as the engine sees it.
#[derive(Clone)]
pub(crate) struct SemTarget {
    pub(crate) engine: Arc<Engine>,
    pub(crate) keys: Arc<SemKeys>,
}

impl std::fmt::Debug for SemTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemTarget")
            .field("key", &self.keys.counter)
            .field("kind", &self.keys.kind)
            .finish()
    }
}

/// What one attempt got.
enum Attempt {
    Granted(OwnedPermits),
    Refused {
        nearest_expiry: Option<Duration>,
    },
    /// Granted after the grant's validity: undone; try again.
    Expired,
}

/// Counts an attempt as running until it ends (a shutdown waits for it).
struct Running(Arc<Core>);

impl Running {
    fn new(core: &Arc<Core>) -> Running {
        core.acquiring.fetch_add(1, Ordering::SeqCst);
        Running(core.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.acquiring.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A permit id in Redisson's form: 16 random bytes (stored as they are),
/// shown as 32 hex digits.
fn permit_id() -> ([u8; 16], String) {
    let id = ids::random_u128();
    (id.to_be_bytes(), format!("{id:032x}"))
}

/// The shortest fixed lease of a permit: a lease must leave time to use
/// the permits after the grant's round trip (the validity is the lease less
/// 1 % and 2 ms).
const MIN_LEASE: Duration = Duration::from_millis(10);

impl SemTarget {
    /// Checks an acquisition's arguments.
    fn check(&self, n: u32, options: &AcquireOptions) -> Result<()> {
        options.validate()?;
        if n == 0 || n > MAX_PERMITS {
            return Err(Error::InvalidArgument(format!(
                "permits to acquire must be between 1 and {MAX_PERMITS}, not {n}"
            )));
        }
        if self.keys.kind == SemKind::Plain && options.lease.is_some() {
            return Err(Error::InvalidArgument(
                "the plain semaphore's permits have no lease (Redisson's RSemaphore keeps no \
                 owner); use LockClient::permit_semaphore for leased permits"
                    .into(),
            ));
        }
        if options.lease.is_some_and(|l| l < MIN_LEASE) {
            return Err(Error::InvalidArgument(format!(
                "a permit's lease must be at least {MIN_LEASE:?}"
            )));
        }
        Ok(())
    }

    /// Acquires `n` permits as `options` say (wait bound, lease).
    pub(crate) async fn acquire(&self, n: u32, options: AcquireOptions) -> Result<OwnedPermits> {
        self.check(n, &options)?;
        let core = self.engine.core.clone();
        if core.closed.is_cancelled() {
            return Err(Error::Closed);
        }
        let started = Instant::now();
        let (waits, deadline) = match options.wait {
            Wait::Forever => (true, None),
            Wait::Bounded(d) => (true, Some(started + d)),
            Wait::Never => (false, None),
        };
        // the bound that passed, as a lock reports it
        let timed_out = || Error::WaitTimeout {
            name: self.keys.name.clone(),
            waited: match options.wait {
                Wait::Bounded(bound) => bound,
                Wait::Forever | Wait::Never => started.elapsed(),
            },
        };
        // In the line (maybe) from the first attempt that may join it on:
        // leaving it when not there is harmless.
        let mut place = LinePlace {
            target: self.clone(),
            member: if waits {
                format!("{n}:{}", core.request_id())
            } else {
                String::new()
            },
            joined: waits,
            in_flight: Arc::new(tokio::sync::Mutex::new(())),
        };
        let mut stale_retried = false;
        let mut subscription = None;
        let mut outage: Option<Instant> = None;
        loop {
            let mut limit = core.command_bound();
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    place.leave_now().await;
                    return Err(timed_out());
                }
                limit = limit.min(left);
            }
            let attempt = self.attempt(n, options.lease, &place, waits, limit).await;
            let nearest_expiry = match attempt {
                // Shut down meanwhile: the acquisition ends with `Closed`,
                // and a grant of an attempt that began before is given back
                // (by this drop, or by the shutdown's second pass).
                Ok(Attempt::Granted(permits)) if core.closed.is_cancelled() => {
                    place.joined = false;
                    drop(permits);
                    return Err(Error::Closed);
                }
                Err(Error::Closed) => {
                    place.leave_now().await;
                    return Err(Error::Closed);
                }
                Ok(Attempt::Granted(permits)) => {
                    // the grant took the acquisition out of the line
                    place.joined = false;
                    return Ok(permits);
                }
                // Granted after the grant's validity (and given back): too
                // slow a round trip for this lease now.
                Ok(Attempt::Expired) if !waits => return Err(timed_out()),
                Ok(Attempt::Expired) => Some(Duration::from_millis(10)),
                Ok(Attempt::Refused { nearest_expiry }) => {
                    outage = None;
                    if !waits {
                        return Err(timed_out());
                    }
                    nearest_expiry
                }
                // A connection the server had closed: the attempt was
                // cancelled (given back if it was applied), so one more
                // under a new request id is safe.
                Err(e) if e.is_stale_connection() && !stale_retried => {
                    stale_retried = true;
                    Some(Duration::ZERO)
                }
                Err(e) if e.is_transient() && core.has_reached_redis() => {
                    let began = *outage.get_or_insert_with(Instant::now);
                    let now = Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        place.leave_now().await;
                        return Err(match e {
                            Error::CommandTimeout => timed_out(),
                            other => other,
                        });
                    }
                    if !waits || now >= began + core.command_bound() {
                        return Err(e);
                    }
                    tracing::debug!(semaphore = %self.keys.name, error = %e, "semaphore acquire failed; retrying");
                    Some(Duration::from_millis(100))
                }
                Err(e) => return Err(e),
            };
            // Subscribed before the next attempt, so that a release between
            // that attempt and the wait is not missed.
            let sub = match subscription.as_mut() {
                Some(sub) => sub,
                None => {
                    let mut sub = self.engine.pubsub.subscribe_shared(&self.keys.channel);
                    let mut ready = core.config.command_timeout.min(RECHECK);
                    if let Some(deadline) = deadline {
                        ready = ready.min(deadline.saturating_duration_since(Instant::now()));
                    }
                    sub.ready(ready).await;
                    subscription = Some(sub);
                    continue;
                }
            };
            let mut pause = recheck_pause();
            if let Some(expiry) = nearest_expiry {
                pause = pause.min(expiry + Duration::from_millis(1));
            }
            if let Some(deadline) = deadline {
                pause = pause.min(deadline.saturating_duration_since(Instant::now()));
            }
            tokio::select! {
                biased;
                _ = core.closed.cancelled() => {
                    place.leave_now().await;
                    return Err(Error::Closed);
                }
                _ = sub.woken() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One attempt; runs to its end even when the caller stops waiting (a
    /// grant nobody receives is dropped there, which gives it back).
    async fn attempt(
        &self,
        n: u32,
        lease: Option<Duration>,
        place: &LinePlace,
        join: bool,
        limit: Duration,
    ) -> Result<Attempt> {
        let core = &self.engine.core;
        let this = self.clone();
        let member = place.member.clone();
        let running = Running::new(core);
        // After counting this attempt (a shutdown waits for the attempts it
        // counts, then gives their grants back): an attempt that a shutdown
        // did not count never starts. Without it, a waiter whose loop went
        // round after the shutdown's last pass took the permits it had
        // just given back (`sem_shutdown`, about 1 run in 25).
        if core.closed.is_cancelled() {
            return Err(Error::Closed);
        }
        // Held until the attempt ends, also in the background: leaving the
        // line waits for it, so that no attempt joins after the leave.
        let in_flight = place.in_flight.clone().lock_owned().await;
        RunToEnd::new(
            async move {
                let _running = running;
                let _in_flight = in_flight;
                let out = this.attempt_now(n, lease, &member, join, limit).await;
                // A grant that arrives after a shutdown began is given back
                // here, while the shutdown still counts this attempt: the
                // give-back is spawned before the shutdown closes (and
                // waits for) its background work.
                match out {
                    Ok(Attempt::Granted(permits)) if this.engine.core.closed.is_cancelled() => {
                        drop(permits);
                        Err(Error::Closed)
                    }
                    out => out,
                }
            },
            &core.background,
            &core.runtime,
        )
        .await
    }

    async fn attempt_now(
        &self,
        n: u32,
        lease: Option<Duration>,
        member: &str,
        join: bool,
        limit: Duration,
    ) -> Result<Attempt> {
        let core = &self.engine.core;
        let publish = core.publish_command().await?;
        let request = core.request_id();
        let latch = self.keys.request(&request);
        let (ids, lease_time): (Vec<_>, _) = match self.keys.kind {
            SemKind::Plain => (Vec::new(), PLAIN_VALIDITY),
            SemKind::Expirable => (
                (0..n).map(|_| permit_id()).collect(),
                lease.unwrap_or(core.config.watchdog_timeout),
            ),
        };
        let (raw_ids, ids): (Vec<[u8; 16]>, Vec<String>) = ids.into_iter().unzip();
        let lease_ms = lease_ms(lease, core.config.watchdog_timeout);
        let cmd = SemAcquireCall {
            keys: &self.keys,
            latch: &latch,
            n,
            lease_ms,
            member,
            alive_ms: alive_ms(core),
            join,
            refuse_ms: core.cancel_latch_ms(lease_ms),
            publish,
            request: &request,
            ids: &raw_ids,
        }
        .cmd(&core.scripts.sem_acquire);
        let sent_at = Instant::now();
        let reply = match core
            .run_script_within(&core.scripts.sem_acquire, &cmd, limit)
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                if e.is_transient() {
                    // Applied or not, nobody knows: undone if it was, refused
                    // if it arrives later. Its place in the line goes too (a
                    // late copy arriving before the cancellation may have
                    // put it back after the acquisition ended; one that
                    // keeps waiting joins again at its next attempt).
                    self.spawn_cancel(latch, request, member.to_string(), raw_ids, lease_ms);
                }
                return Err(e);
            }
        };
        match SemAcquireReply::parse(&reply)? {
            SemAcquireReply::Granted { .. } => {
                let owner: Arc<str> = match self.keys.kind {
                    SemKind::Plain => Arc::from(request.as_str()),
                    SemKind::Expirable => Arc::from(ids.concat()),
                };
                let Some(hold) = Hold::granted(
                    self.keys.hold_keys.clone(),
                    owner,
                    0,
                    None,
                    sent_at,
                    lease_time,
                ) else {
                    tracing::debug!(semaphore = %self.keys.name, "permits granted after the grant's validity; giving them back");
                    if let Err(e) = self.cancel(&latch, &request, "", &raw_ids, lease_ms).await {
                        tracing::warn!(semaphore = %self.keys.name, error = %e, "giving back late permits failed; they expire with their lease");
                    }
                    return Ok(Attempt::Expired);
                };
                let record = Arc::new(PermitRecord {
                    keys: self.keys.clone(),
                    hold,
                    n,
                    ids,
                    raw_ids,
                    request,
                    acquisition: latch,
                    lease: match self.keys.kind {
                        SemKind::Plain => None,
                        SemKind::Expirable => lease,
                    },
                });
                Ok(Attempt::Granted(OwnedPermits::new(
                    self.engine.clone(),
                    record,
                )))
            }
            SemAcquireReply::Refused {
                nearest_expiry_ms, ..
            } => Ok(Attempt::Refused {
                nearest_expiry: nearest_expiry_ms.map(Duration::from_millis),
            }),
            SemAcquireReply::Cancelled => Err(Error::Protocol(
                "a new semaphore request was refused as cancelled".into(),
            )),
        }
    }

    /// Undoes the acquisition `latch` (see `sem_cancel.lua`); how many
    /// permits came back.
    async fn cancel(
        &self,
        latch: &str,
        request: &str,
        member: &str,
        ids: &[[u8; 16]],
        lease_ms: u64,
    ) -> Result<u64> {
        let core = &self.engine.core;
        let publish = core.publish_command().await?;
        let cmd = SemCancelCall {
            keys: &self.keys,
            latch,
            request,
            member,
            refuse_ms: core.cancel_latch_ms(lease_ms),
            publish,
            ids,
        }
        .cmd(&core.scripts.sem_cancel);
        let reply = core
            .run_with_retries(&self.keys.hold_keys, &core.scripts.sem_cancel, &cmd, || {})
            .await?;
        parse_cancel(&reply)
    }

    /// [`cancel`](Self::cancel) as background work.
    fn spawn_cancel(
        &self,
        latch: String,
        request: String,
        member: String,
        ids: Vec<[u8; 16]>,
        lease_ms: u64,
    ) {
        let this = self.clone();
        let core = &self.engine.core;
        core.background.spawn_on(
            async move {
                match this.cancel(&latch, &request, &member, &ids, lease_ms).await {
                    Ok(0) => {}
                    Ok(back) => tracing::debug!(semaphore = %this.keys.name, back, "a semaphore acquisition with a lost reply was undone"),
                    Err(e) => {
                        tracing::warn!(semaphore = %this.keys.name, error = %e, "cancelling a semaphore acquisition with a lost reply failed");
                        this.engine.core.report(&e);
                    }
                }
            },
            &core.runtime,
        );
    }

    /// Adds `delta` permits (negative: takes them away, never below zero);
    /// the permits available after. Applied at most once.
    pub(crate) async fn add(&self, delta: i64) -> Result<i64> {
        let core = &self.engine.core;
        let publish = core.publish_command().await?;
        let latch = self.keys.request(&core.request_id());
        let cmd = SemAddCall {
            keys: &self.keys,
            latch: &latch,
            n: delta,
            latch_ms: core.latch_ms(),
            publish,
        }
        .cmd(&core.scripts.sem_add);
        let reply = core
            .run_with_retries(&self.keys.hold_keys, &core.scripts.sem_add, &cmd, || {})
            .await?;
        match SemAddReply::parse(&reply)? {
            SemAddReply::Applied { available } | SemAddReply::AppliedBefore { available } => {
                Ok(available)
            }
            SemAddReply::BelowZero { available } => Err(Error::InvalidArgument(format!(
                "cannot take {} permits from semaphore `{}`: only {available} are available",
                delta.unsigned_abs(),
                self.keys.name
            ))),
        }
    }
}

/// The pause before the next attempt when nothing wakes the waiter:
/// [`RECHECK`] less a random part of up to a fifth (waiters of several
/// clients do not ask in step).
fn recheck_pause() -> Duration {
    let spread = u64::try_from((RECHECK / 5).as_micros()).unwrap_or(1).max(1);
    let off = u64::try_from(ids::random_u128() % u128::from(spread)).unwrap_or(0);
    RECHECK - Duration::from_micros(off)
}

/// How long an acquisition counts as alive in the line without asking
/// again: two re-check periods and a slow round trip (so a waiter of a
/// process that died holds up the line at most that long).
fn alive_ms(core: &Core) -> u64 {
    duration_ms(RECHECK * 2 + core.command_bound())
}

/// An acquisition's place in the line; left (in the background) when the
/// acquisition stops waiting without its permits.
struct LinePlace {
    target: SemTarget,
    member: String,
    joined: bool,
    /// Locked by an attempt while it runs (to its end, also in the
    /// background); leaving takes it first.
    in_flight: Arc<tokio::sync::Mutex<()>>,
}

impl LinePlace {
    /// Leaves the line now (waited for at most [`LEAVE_LINE_MARGIN`], the
    /// rest in the background), so that the next in line goes at once.
    async fn leave_now(&mut self) {
        if !std::mem::take(&mut self.joined) {
            return;
        }
        let core = &self.target.engine.core;
        let leave = RunToEnd::new(
            leave(
                self.target.clone(),
                self.member.clone(),
                self.in_flight.clone(),
            ),
            &core.background,
            &core.runtime,
        );
        let _ = tokio::time::timeout(LEAVE_LINE_MARGIN, leave).await;
    }
}

impl Drop for LinePlace {
    fn drop(&mut self) {
        if std::mem::take(&mut self.joined) {
            let core = &self.target.engine.core;
            core.background.spawn_on(
                leave(
                    self.target.clone(),
                    std::mem::take(&mut self.member),
                    self.in_flight.clone(),
                ),
                &core.runtime,
            );
        }
    }
}

/// Takes `member` out of the line (see `sem_leave.lua`), once no attempt
/// of it is in flight.
async fn leave(target: SemTarget, member: String, in_flight: Arc<tokio::sync::Mutex<()>>) {
    let _no_attempt = in_flight.lock_owned().await;
    let core = &target.engine.core;
    let outcome = async {
        let publish = core.publish_command().await?;
        let cmd = leave_cmd(&target.keys, &member, publish, &core.scripts.sem_leave);
        core.run_script(&core.scripts.sem_leave, &cmd).await
    }
    .await;
    if let Err(e) = outcome {
        tracing::debug!(semaphore = %target.keys.name, error = %e, "leaving the semaphore's line failed; the place lapses");
    }
}

impl Core {
    /// Gives back the permits of `record`: Ok(true) when they were held,
    /// Ok(false) when Redis no longer had them (expired, reclaimed).
    pub(crate) async fn release_permits(&self, record: &PermitRecord) -> Result<bool> {
        let publish = self.publish_command().await?;
        let keys = &record.keys;
        match keys.kind {
            SemKind::Plain => {
                let cmd = SemCancelCall {
                    keys,
                    latch: &record.acquisition,
                    request: &record.request,
                    member: "",
                    refuse_ms: self.cancel_latch_ms(0),
                    publish,
                    ids: &[],
                }
                .cmd(&self.scripts.sem_cancel);
                let retried = std::sync::atomic::AtomicBool::new(false);
                let reply = self
                    .run_with_retries(&keys.hold_keys, &self.scripts.sem_cancel, &cmd, || {
                        retried.store(true, Ordering::Relaxed)
                    })
                    .await?;
                // A retry finds the grant the first attempt gave back gone.
                let back = parse_cancel(&reply)?;
                Ok(back > 0 || retried.load(Ordering::Relaxed))
            }
            SemKind::Expirable => {
                let cmd = PermitReleaseCall {
                    keys,
                    publish,
                    ids: &record.raw_ids,
                }
                .cmd(&self.scripts.sem_release);
                let retried = std::sync::atomic::AtomicBool::new(false);
                let reply = self
                    .run_with_retries(&keys.hold_keys, &self.scripts.sem_release, &cmd, || {
                        retried.store(true, Ordering::Relaxed)
                    })
                    .await?;
                let released = parse_permit_release(&reply)?;
                // A retry finds the ids the first attempt released gone
                // (when it finds some, the first was not applied: those
                // it does not find had expired).
                Ok(released == record.raw_ids.len()
                    || (released == 0 && retried.load(Ordering::Relaxed)))
            }
        }
    }
}

/// One acquisition's permits, given back exactly once: by
/// [`release`](Self::release), or in the background when dropped.
pub(crate) struct OwnedPermits {
    engine: Arc<Engine>,
    record: Option<Arc<PermitRecord>>,
}

impl std::fmt::Debug for OwnedPermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedPermits")
            .field("record", &self.record)
            .finish()
    }
}

impl OwnedPermits {
    fn new(engine: Arc<Engine>, record: Arc<PermitRecord>) -> Self {
        if record.keys.kind == SemKind::Expirable && record.lease.is_none() {
            engine.watchdog.register(record.hold.clone());
        }
        engine.core.permits.insert(&record);
        OwnedPermits {
            engine,
            record: Some(record),
        }
    }

    /// The permits, until released.
    pub(crate) fn record(&self) -> &PermitRecord {
        match &self.record {
            Some(record) => record,
            None => unreachable!("OwnedPermits holds its record until consumed"),
        }
    }

    /// Stops renewal and tracking; None when a shutdown took the permits.
    fn take(&mut self) -> Option<Arc<PermitRecord>> {
        let record = self.record.take()?;
        if record.keys.kind == SemKind::Expirable && record.lease.is_none() {
            self.engine.watchdog.unregister(&record.hold);
        }
        // Whoever takes the record out of the registry gives the permits
        // back: this guard, or a shutdown that took it first.
        self.engine.core.permits.remove(&record).then_some(record)
    }

    /// Gives the permits back now.
    pub(crate) async fn release(mut self) -> Result<()> {
        let Some(name) = self.record.as_ref().map(|r| r.keys.name.clone()) else {
            return Ok(());
        };
        let Some(record) = self.take() else {
            // A shutdown took the record and gave the permits back: lost
            // to this guard, as a lock guard's after a shutdown.
            return Err(Error::Lost { name });
        };
        // (Expirable permits are given back even when known lost: a failed
        // renewal of one id leaves the others held until their lease ends.)
        if record.hold.is_gone() && record.keys.kind == SemKind::Plain {
            return Err(Error::Lost { name });
        }
        let valid_at_release = record.hold.is_valid();
        if !valid_at_release {
            record
                .hold
                .mark_lost("its deadline passed before it was released");
        }
        let core = self.engine.core.clone();
        let (tracker, runtime) = (core.background.clone(), core.runtime.clone());
        let released = RunToEnd::new(
            tracker.track_future(release_record(core, record.clone())),
            &tracker,
            &runtime,
        )
        .await;
        match released {
            Ok(true) if valid_at_release => Ok(()),
            Ok(_) => Err(Error::Lost { name }),
            Err(e) => Err(e),
        }
    }
}

/// Releases `record` and ends (or marks gone) its hold.
async fn release_record(core: Arc<Core>, record: Arc<PermitRecord>) -> Result<bool> {
    let outcome = core.release_permits(&record).await;
    match &outcome {
        Ok(true) => {
            record.hold.end();
            tracing::debug!(semaphore = %record.keys.name, n = record.n, "permits released");
        }
        Ok(false) => record.hold.mark_gone("permits not held at release"),
        Err(e) => {
            tracing::debug!(semaphore = %record.keys.name, error = %e, "permit release failed");
        }
    }
    outcome
}

impl Drop for OwnedPermits {
    fn drop(&mut self) {
        let Some(record) = self.take() else {
            return;
        };
        if record.hold.is_gone() && record.keys.kind == SemKind::Plain {
            return;
        }
        let core = self.engine.core.clone();
        let runtime = core.runtime.clone();
        core.background.clone().spawn_on(
            async move {
                if let Err(e) = release_record(core.clone(), record.clone()).await {
                    tracing::warn!(semaphore = %record.keys.name, error = %e, "background permit release failed; the permits expire with their lease (plain kind: they are lost, as Redisson's)");
                    core.report(&e);
                }
            },
            &runtime,
        );
    }
}
