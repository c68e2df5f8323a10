//! The client: its connections (in lanes), scripts, watchdog and pub/sub
//! hub; the release, hand-off and cancel engine; background jobs (releases
//! of dropped guards, cancels of acquisitions whose reply was lost), each
//! spawned as a task of its own and tracked, so that a shutdown waits for
//! them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::builder::ClientBuilder;
use crate::config::{ClientConfig, ErrorHook};
use crate::error::{Error, Result};
use crate::hold::queue::LocalQueues;
use crate::hold::watchdog::Watchdog;
use crate::hold::Hold;
use crate::lock::Lock;
use crate::metrics;
use crate::protocol::cancel::{CancelCall, CancelMode, CancelReply};
use crate::protocol::handoff::{HandOffCall, HandOffReply};
use crate::protocol::keys::LockKeys;
use crate::protocol::release::{ReleaseCall, ReleaseReply};
use crate::protocol::{Script, Scripts};
use crate::transport::connection::{build_pool, Conn, Lane, Manager, Pool};
use crate::transport::pubsub::sharding::Sharding;
use crate::transport::pubsub::PubSub;

/// A boxed future of this crate's commands (see `Core::run_script_within`).
pub(crate) type BoxFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// How long a release keeps retrying after connection failures before it
/// gives up (the lock then expires with its lease).
const RELEASE_RETRY_WINDOW_FACTOR: u32 = 3;

/// Bounds of the step-back window (see `Core::step_back_window`).
const STEP_BACK_MIN: Duration = Duration::from_millis(1);
const STEP_BACK_MAX: Duration = Duration::from_millis(50);

/// Bounds of the turn window (see `Core::turn_window`).
const TURN_WINDOW_MIN: Duration = Duration::from_millis(20);
const TURN_WINDOW_MAX: Duration = Duration::from_millis(500);

/// What background tasks need; holds no reference to the client itself, so
/// the tasks end when the last client handle and guard are gone.
pub(crate) struct Core {
    pub(crate) config: ClientConfig,
    /// The random id of the client: every hold's owner id starts with it.
    pub(crate) client_id: Arc<str>,
    pub(crate) pool: Pool,
    /// What the server's eviction policy was last seen as (see `eviction.rs`).
    pub(crate) eviction: crate::hold::eviction::EvictionCheck,
    pub(crate) scripts: Scripts,
    /// Waiters of this client, per lock, and its current holdings.
    pub(crate) queues: LocalQueues,
    /// Moving average of the acquire round trip, in microseconds.
    rtt_us: AtomicU64,
    /// State of the random draw in `race_jitter`.
    jitter_state: AtomicU64,
    /// Request ids (releases, re-entries): this random prefix and a
    /// sequence number.
    request_id_prefix: String,
    request_seq: AtomicU64,
    error_hook: Option<ErrorHook>,
    /// A refused PUBLISH was reported already.
    publish_denial_reported: std::sync::atomic::AtomicBool,
    /// Redis answered at least once (see `has_reached_redis`).
    reached_redis: std::sync::atomic::AtomicBool,
    /// Since when Redis has not answered (the start of the first failed
    /// call since the last answer), see `outage_began`.
    outage: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Set while `outage` is: answers clear it without taking the lock.
    in_outage: std::sync::atomic::AtomicBool,
    /// Cancelled by `LockClient::shutdown`: no new locks; waiting
    /// acquisitions end with `Error::Closed`.
    pub(crate) closed: CancellationToken,
    /// Acquisitions running now (see `shutdown`).
    pub(crate) acquiring: AtomicUsize,
    /// Background work nobody awaits: releases of dropped guards,
    /// cancellations of acquisitions whose reply was lost.
    pub(crate) background: TaskTracker,
    /// The runtime the client was built in: background work runs there.
    pub(crate) runtime: tokio::runtime::Handle,
    /// Classic or sharded pub/sub for the lock channels (see `sharding.rs`).
    pub(crate) sharding: Arc<Sharding>,
    /// The endpoint is a Redis Cluster: multi-key calls stay in one slot.
    pub(crate) cluster: bool,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Core {
    /// Hands a background error to the error hook.
    pub(crate) fn report(&self, err: &Error) {
        if let Some(hook) = &self.error_hook {
            hook(err);
        }
    }

    /// Runs one script invocation on the lock lane, bounded by the connect
    /// and command time-outs (opening a connection included).
    pub(crate) async fn run_script(&self, script: &Script, cmd: &Cmd) -> Result<Value> {
        self.run_script_within(script, cmd, self.command_bound())
            .await
    }

    /// [`run_script`](Self::run_script) within `limit` (what is left of a
    /// caller's wait bound, when less than the usual bound).
    ///
    /// Boxed: every lock operation runs through here, and its future type
    /// stays out of every caller's (deeply nested types hit the compiler's
    /// recursion limit in callers' crates).
    pub(crate) fn run_script_within<'a>(
        &'a self,
        script: &'a Script,
        cmd: &'a Cmd,
        limit: Duration,
    ) -> BoxFuture<'a, Result<Value>> {
        Box::pin(
            self.on_lane(Lane::Locks, limit, move |mut conn| async move {
                Ok(script.run(&mut conn, cmd).await?)
            }),
        )
    }

    /// The usual bound of one command: opening a connection, then the reply.
    pub(crate) fn command_bound(&self) -> Duration {
        self.config.connect_timeout + self.config.command_timeout
    }

    /// Runs `f` on a connection of `lane`, within `limit` (opening a
    /// connection included). A caller that gives up waiting marks the
    /// connection suspect, so the next command opens a new one: a stalled
    /// (half-open) connection is replaced by the first deadline that passes
    /// on it, whoever set it.
    pub(crate) async fn on_lane<T, F, Fut>(&self, lane: Lane, limit: Duration, f: F) -> Result<T>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let started = tokio::time::Instant::now();
        let deadline = started + limit;
        let result = match tokio::time::timeout_at(deadline, self.pool.checkout(lane)).await {
            Err(_) => Err(Error::CommandTimeout),
            Ok(Err(e)) => Err(Error::Redis(e)),
            Ok(Ok(conn)) => {
                let suspect = conn.suspect();
                match tokio::time::timeout_at(deadline, f(conn)).await {
                    Ok(r) => r,
                    Err(_) => {
                        suspect.mark();
                        Err(Error::CommandTimeout)
                    }
                }
            }
        };
        match &result {
            Ok(_) => {
                if !self.reached_redis.load(Ordering::Relaxed) {
                    self.reached_redis.store(true, Ordering::Relaxed);
                }
                if self.in_outage.load(Ordering::Relaxed) {
                    *self.lock_outage() = None;
                    self.in_outage.store(false, Ordering::Relaxed);
                }
            }
            Err(e) if e.is_transient() => {
                self.lock_outage().get_or_insert(started);
                self.in_outage.store(true, Ordering::Relaxed);
            }
            Err(_) => {}
        }
        result
    }

    /// When Redis stopped answering this client (the start of the first
    /// call that failed at the connection level since the last answer, on
    /// any lane), or `None` while it answers. Every waiter rides out the
    /// same outage (see `Lock::rides_out`), so waiters queued behind one
    /// another do not each start a new one.
    pub(crate) fn outage_began(&self) -> Option<tokio::time::Instant> {
        if !self.in_outage.load(Ordering::Relaxed) {
            return None;
        }
        *self.lock_outage()
    }

    fn lock_outage(&self) -> std::sync::MutexGuard<'_, Option<tokio::time::Instant>> {
        self.outage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The command the scripts publish unlock messages with: `publish`,
    /// or `spublish` with sharded pub/sub (probed once on a cluster).
    pub(crate) async fn publish_command(&self) -> Result<&'static str> {
        if let Some(sharded) = self.sharding.known() {
            return Ok(Sharding::publish_command(sharded));
        }
        // Boxed: the probe runs once per client, and its future type stays
        // out of every caller's (deeply nested types hit the compiler's
        // recursion limit in callers' crates).
        let probe: std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool>> + Send + '_>> =
            Box::pin(self.probe_sharded());
        Ok(Sharding::publish_command(probe.await?))
    }

    async fn probe_sharded(&self) -> Result<bool> {
        Ok(self
            .sharding
            .sharded(|| async {
                self.run_cmd(&crate::transport::pubsub::sharding::probe_cmd())
                    .await
                    .map_err(|e| match e {
                        Error::Redis(e) => e,
                        other => redis::RedisError::from((
                            redis::ErrorKind::Io,
                            "sharded pub/sub probe failed",
                            other.to_string(),
                        )),
                    })
            })
            .await?)
    }

    /// Runs one plain command (reads, PING) on the lock lane; a connection
    /// the server had closed is replaced and the command sent once more.
    pub(crate) async fn run_cmd(&self, cmd: &Cmd) -> Result<Value> {
        self.run_cmd_on(Lane::Locks, cmd).await
    }

    /// [`run_cmd`](Self::run_cmd) on `lane` (boxed, as
    /// [`run_script_within`](Self::run_script_within)).
    pub(crate) fn run_cmd_on<'a>(
        &'a self,
        lane: Lane,
        cmd: &'a Cmd,
    ) -> BoxFuture<'a, Result<Value>> {
        let query = move |mut conn: Conn| async move { Ok(conn.query(cmd).await?) };
        Box::pin(async move {
            match self.on_lane(lane, self.command_bound(), query).await {
                Err(e) if e.is_stale_connection() => {
                    self.on_lane(lane, self.command_bound(), query).await
                }
                other => other,
            }
        })
    }

    /// Whether Redis ever answered this client: a later connection failure
    /// is then an outage (a restart, a failover) that waiters ride out,
    /// rather than a misconfiguration that fails at once.
    pub(crate) fn has_reached_redis(&self) -> bool {
        self.reached_redis.load(Ordering::Relaxed)
    }

    /// An owner id no hold ever had: `"<client-id>:<n>"`.
    pub(crate) fn new_owner(&self) -> Arc<str> {
        Arc::from(format!(
            "{}:{}",
            self.client_id,
            crate::context::fresh_owner_number()
        ))
    }

    /// A request id no other request of any client has.
    pub(crate) fn request_id(&self) -> String {
        // Unique across clients (random prefix) and requests (sequence),
        // without a call into the OS's random source per request.
        let seq = self.request_seq.fetch_add(1, Ordering::Relaxed);
        format!("{}:{seq}", self.request_id_prefix)
    }

    /// How long fencing-token keys live after the last token drawn.
    pub(crate) fn token_retention_ms(&self) -> u64 {
        duration_ms(self.config.token_retention)
    }

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
    fn cancel_latch_ms(&self, lease_ms: u64) -> u64 {
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
                self.queues.ended(&keys.lock, &hold.owner);
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
            let Some(next) = self.queues.offer(&keys.lock, &owner) else {
                let outcome = self
                    .release(keys, &owner, lease_ms, 1, || {
                        self.queues.release_stalled(&keys.lock, &owner)
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
                        let others_wait = told > usize::from(self.queues.is_subscribed(&keys.lock));
                        let step_back = others_wait.then(|| self.step_back_window());
                        self.queues
                            .ended_stepping_back(&keys.lock, &owner, step_back);
                        Ok(Released::Freed)
                    }
                    Ok(ReleaseOutcome::NotHeld) => {
                        self.queues.ended(&keys.lock, &owner);
                        Ok(Released::NotHeld)
                    }
                    Err(e) => {
                        self.queues.ended(&keys.lock, &owner);
                        Err(e)
                    }
                };
                return first.unwrap_or(result);
            };
            let next_lease = next.lease.unwrap_or(self.config.watchdog_timeout);
            let next_lease_ms = crate::lock::lease_ms(next.lease, self.config.watchdog_timeout);
            let next_owner = self.new_owner();
            let sent_at = tokio::time::Instant::now();
            match self
                .hand_off(keys, &owner, &next_owner, next_lease_ms)
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
                        self.queues.withdraw(&keys.lock, &next);
                        self.queues.ended(&keys.lock, &owner);
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
                    let abandoned = self.queues.handed_off(&keys.lock, &next, hold);
                    let done = first.get_or_insert(Ok(Released::HandedOff));
                    if !abandoned {
                        return std::mem::replace(done, Ok(Released::HandedOff));
                    }
                    // The waiter is gone: release its new hold (or pass it on).
                    owner = next_owner;
                    lease_ms = next_lease_ms;
                }
                Ok(HandOffReply::NotHeld) => {
                    self.queues.withdraw(&keys.lock, &next);
                    self.queues.ended(&keys.lock, &owner);
                    return first.unwrap_or(Ok(Released::NotHeld));
                }
                Ok(HandOffReply::Freed) => {
                    self.queues.withdraw(&keys.lock, &next);
                    self.queues.ended(&keys.lock, &owner);
                    return first.unwrap_or(Ok(Released::Freed));
                }
                Err(e) => {
                    // Applied or not, nobody knows: cancel the hand-off to
                    // the new owner id (undone if applied; a late copy frees
                    // the lock instead, see handoff.lua).
                    self.cancel_hand_off(keys, &next_owner, next_lease_ms, "cancelling a lock hand-off with an unknown outcome failed; it expires with its lease")
                        .await;
                    self.queues.withdraw(&keys.lock, &next);
                    self.queues.ended(&keys.lock, &owner);
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
        self.queues.ended(&keys.lock, owner);
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
        .cmd(&self.scripts.cancel);
        let reply = self
            .run_with_retries(keys, &self.scripts.cancel, &cmd, || {})
            .await?;
        let undone = CancelReply::parse(&reply)? == CancelReply::Undone;
        if undone {
            tracing::debug!(
                lock = %keys.name,
                key = %keys.lock,
                owner,
                "a lock acquisition with a lost reply was undone"
            );
            self.queues.ended(&keys.lock, owner);
        }
        Ok(undone)
    }

    /// Redis refused to PUBLISH an unlock message (ACL): the lock was freed,
    /// but waiters of other clients only notice by their PTTL-bounded
    /// retries. Reported once (tracing and the error hook).
    pub(crate) fn publish_denied(&self, keys: &LockKeys, refusal: &str) {
        if self.publish_denial_reported.swap(true, Ordering::AcqRel) {
            return;
        }
        let text = refusal.to_string();
        tracing::warn!(lock = %keys.name, key = %keys.lock, error = %text, "Redis refused to publish the lock's unlock message (ACL): locks are released, but other clients' waiters only notice when they retry");
        self.report(&Error::Redis(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "unlock message refused",
            text,
        ))));
    }

    /// Records the round-trip time of one acquire call (moving average).
    pub(crate) fn record_round_trip(&self, rtt: Duration) {
        let old = self.rtt_us.load(Ordering::Relaxed);
        // One reply held up in the network must not make every later pause
        // (jitter, step-back) long: a sample counts for at most 4x the
        // average (at least 1 ms), so a real change still shows quickly.
        let sample = u64::try_from(rtt.as_micros())
            .unwrap_or(u64::MAX)
            .min(old.saturating_mul(4).max(1000));
        self.rtt_us.store(
            (old.saturating_mul(7).saturating_add(sample)) / 8,
            Ordering::Relaxed,
        );
    }

    /// How long a client's head steps back after its client released a lock
    /// that other clients wait for: long enough for one of them to take it
    /// (a few round trips), short enough that a lock nobody takes is not
    /// left idle for long.
    fn step_back_window(&self) -> Duration {
        let rtt = Duration::from_micros(self.rtt_us.load(Ordering::Relaxed));
        (rtt * 8).clamp(STEP_BACK_MIN, STEP_BACK_MAX)
    }

    /// How long the next waiting client's turn is kept for it after a
    /// release: long enough for its unlock message, its pause and its
    /// request (a few round trips), short enough that a client that died
    /// while waiting costs little.
    fn turn_window(&self) -> Duration {
        let rtt = Duration::from_micros(self.rtt_us.load(Ordering::Relaxed));
        (rtt * 8).clamp(TURN_WINDOW_MIN, TURN_WINDOW_MAX)
    }

    /// This client no longer waits for the lock: it leaves the set of
    /// waiting clients (its place would otherwise be given a turn nobody
    /// takes).
    pub(crate) async fn stop_waiting(&self, keys: &LockKeys) -> Result<bool> {
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(keys.queue.as_str()).arg(&*self.client_id);
        self.run_cmd(&cmd).await.map(|v| v == Value::Int(1))
    }

    /// A random pause between zero and two acquire round trips.
    pub(crate) fn race_jitter(&self) -> Duration {
        let rtt_us = self.rtt_us.load(Ordering::Relaxed);
        // xorshift64: cheap, and random enough to break ties.
        let mut x = self.jitter_state.load(Ordering::Relaxed) | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter_state.store(x, Ordering::Relaxed);
        let random = x;
        Duration::from_micros(random % rtt_us.saturating_mul(2).max(1))
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
        .cmd(&self.scripts.release);
        let retried = std::sync::atomic::AtomicBool::new(false);
        let reply = self
            .run_with_retries(keys, &self.scripts.release, &cmd, || {
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
            ReleaseReply::Freed { told } => ReleaseOutcome::Freed { told },
        })
    }

    /// Ends the hold `owner` (its last count): the lock goes to `next` with
    /// a new fencing token.
    async fn hand_off(
        &self,
        keys: &LockKeys,
        owner: &str,
        next: &str,
        next_lease_ms: u64,
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
            .run_with_retries(keys, &self.scripts.handoff, &cmd, || {})
            .await?;
        HandOffReply::parse(&reply)
    }

    /// Runs a release-type script, retrying transient failures with the
    /// same request (each script makes a repeated request harmless: the
    /// count it names, its latch, or the owner id that is gone).
    async fn run_with_retries(
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

pub(crate) struct ClientInner {
    pub(crate) core: Arc<Core>,
    pub(crate) watchdog: Watchdog,
    pub(crate) pubsub: PubSub,
    /// Stops the watchdog and the pub/sub task.
    pub(crate) stop_tasks: CancellationToken,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        // The last handle is gone (guards hold one, so every guard is gone
        // too): stop the watchdog and the pub/sub task, and let the
        // releases of dropped guards finish where the runtime allows it.
        self.stop_tasks.cancel();
        crate::shutdown::flush_on_drop(&self.core);
    }
}

/// A handle to a Redis server for distributed locks. Cheap to clone (an
/// `Arc` inside), `Send + Sync`; build one per process and share it.
///
/// The client owns its connections (in lanes: lock commands, renewals,
/// inspection, `WAIT`), one pub/sub connection shared by every waiter, one
/// watchdog that renews every lock held with the default lease, and
/// releases guards dropped without [`release`](crate::LockGuard::release)
/// in background tasks of their own (tracked: a shutdown waits for them).
///
/// ```no_run
/// use lock_core::LockClient;
///
/// # #[tokio::main]
/// # async fn main() -> lock_core::Result<()> {
/// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.lock("nightly-report")?;
/// let guard = lock.acquire().await?;
/// // ... only one process at a time runs this ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<ClientInner>,
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("client_id", &self.inner.core.client_id)
            .field("config", &self.inner.core.config)
            .finish_non_exhaustive()
    }
}

impl LockClient {
    /// A builder for a client of the Redis at `url`.
    ///
    /// ```no_run
    /// # async fn demo() -> lock_core::Result<()> {
    /// let client = lock_core::LockClient::builder("redis://127.0.0.1:6379")
    ///     .key_prefix("shop:")
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// Builds a client with default settings and checks that Redis answers
    /// (see [`ping`](Self::ping), which also checks the eviction policy).
    ///
    /// ```no_run
    /// # async fn demo() -> lock_core::Result<()> {
    /// let client = lock_core::LockClient::connect("redis://127.0.0.1:6379").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: impl Into<String>) -> Result<Self> {
        let client = Self::builder(url).build()?;
        client.ping().await?;
        Ok(client)
    }

    pub(crate) fn from_parts(config: ClientConfig, error_hook: Option<ErrorHook>) -> Result<Self> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::InvalidArgument(
                "a LockClient must be built inside a tokio runtime (it starts background tasks)"
                    .into(),
            ));
        }
        let manager = Manager::new(&config)?;
        let endpoint = manager.endpoint().clone();
        let stop_tasks = CancellationToken::new();
        endpoint.watch_switches(stop_tasks.clone());
        let pool = build_pool(manager, config.pool_size);
        let core = Arc::new(Core {
            client_id: Arc::from(uuid::Uuid::new_v4().to_string()),
            pool,
            eviction: crate::hold::eviction::EvictionCheck::default(),
            scripts: Scripts::new(),
            queues: LocalQueues::default(),
            rtt_us: AtomicU64::new(1000),
            jitter_state: AtomicU64::new(uuid::Uuid::new_v4().as_u128() as u64),
            request_id_prefix: uuid::Uuid::new_v4().simple().to_string(),
            request_seq: AtomicU64::new(1),
            error_hook,
            publish_denial_reported: std::sync::atomic::AtomicBool::new(false),
            reached_redis: std::sync::atomic::AtomicBool::new(false),
            outage: std::sync::Mutex::new(None),
            in_outage: std::sync::atomic::AtomicBool::new(false),
            closed: CancellationToken::new(),
            acquiring: AtomicUsize::new(0),
            background: TaskTracker::new(),
            runtime: tokio::runtime::Handle::current(),
            sharding: Arc::new(Sharding::new(config.pubsub_mode, endpoint.is_cluster())),
            cluster: endpoint.is_cluster(),
            config,
        });
        crate::metrics::describe();
        let watchdog = Watchdog::start(core.clone(), stop_tasks.clone());
        let reporter = core.clone();
        let pubsub = PubSub::start(
            endpoint,
            core.sharding.clone(),
            core.config.connect_timeout,
            core.config.command_timeout,
            stop_tasks.clone(),
            Box::new(move |e| reporter.report(&Error::Redis(e.clone()))),
        );
        Ok(LockClient {
            inner: Arc::new(ClientInner {
                core,
                watchdog,
                pubsub,
                stop_tasks,
            }),
        })
    }

    /// A handle to the lock called `name` (the Redis key is the client's key
    /// prefix followed by `name`). Checks the name; makes no Redis call.
    /// Takes any string: `&str`, `String`, `format!(..)`.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let lock = client.lock("order:42")?;
    /// let id = 7;
    /// let account = client.lock(format!("account:{id}"))?;
    /// assert!(client.lock("").unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<str>) -> Result<Lock> {
        let name = name.as_ref();
        let keys = LockKeys::new(
            &self.inner.core.config.key_prefix,
            name,
            self.inner.core.config.max_name_len,
        )?;
        Ok(Lock::new(self.clone(), Arc::new(keys)))
    }

    /// Sends PING: checks that Redis is reachable with this configuration.
    /// Then reads the server's `maxmemory-policy` (when the user may run
    /// `CONFIG GET`) and reports a policy that can evict lock keys through
    /// tracing and the error hook (see
    /// [`ClientBuilder::error_hook`](crate::ClientBuilder::error_hook));
    /// that report does not fail the ping.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// client.ping().await?;
    /// # Ok(()) }
    /// ```
    pub async fn ping(&self) -> Result<()> {
        self.inner.core.run_cmd(&redis::cmd("PING")).await?;
        crate::hold::eviction::check(&self.inner.core).await;
        Ok(())
    }

    /// The random id of this client: every owner id it uses is
    /// `"<client_id>:<n>"`, like Redisson's `"<uuid>:<threadId>"`.
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) {
    /// assert_eq!(client.client_id().len(), 36);
    /// # }
    /// ```
    pub fn client_id(&self) -> &str {
        &self.inner.core.client_id
    }

    /// The configuration this client was built with.
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) {
    /// println!("watchdog timeout: {:?}", client.config().watchdog_timeout);
    /// # }
    /// ```
    pub fn config(&self) -> &ClientConfig {
        &self.inner.core.config
    }

    /// Number of locks the watchdog is renewing right now.
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) {
    /// assert_eq!(client.renewing_count(), 0);
    /// # }
    /// ```
    pub fn renewing_count(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// Hands a release to the background (from `Drop`, without awaiting).
    /// It runs on the client's runtime, whatever thread drops the guard.
    pub(crate) fn release_in_background(&self, job: ReleaseJob) {
        self.inner.core.spawn_job(job);
    }
}

impl Core {
    /// Runs `job` as background work of this client (see `background`).
    pub(crate) fn spawn_job(self: &Arc<Self>, job: ReleaseJob) {
        let core = self.clone();
        let span = match &job {
            ReleaseJob::Release { keys, .. } => {
                tracing::debug_span!("lock.release", lock = %keys.name, key = %keys.lock)
            }
            _ => tracing::Span::none(),
        };
        self.background.spawn_on(
            tracing::Instrument::instrument(core.run_job(job), span),
            &self.runtime,
        );
    }

    /// Does one background job, and logs how it went (nobody awaits it).
    async fn run_job(self: Arc<Self>, job: ReleaseJob) {
        let (keys, outcome, failed) = match &job {
            ReleaseJob::Release {
                keys,
                hold,
                lease_ms,
            } => (
                keys,
                self.release_hold(keys, hold, *lease_ms)
                    .await
                    .map(|released| {
                        if released == Released::NotHeld {
                            hold.mark_gone("not held at release");
                        }
                        released.log();
                    }),
                "background lock release failed; the lock expires with its lease",
            ),
            ReleaseJob::Cancel {
                keys,
                owner,
                mode,
                latch,
                lease_ms,
            } => (
                keys,
                self.cancel(keys, owner, *mode, latch, *lease_ms)
                    .await
                    .map(|_| ()),
                "cancelling a lock acquisition with a lost reply failed; it expires with its lease",
            ),
            ReleaseJob::StopWaiting { keys } => (
                keys,
                self.stop_waiting(keys).await.map(|_| ()),
                "leaving the line of clients waiting for a lock failed; the place lapses when its turn passes unused",
            ),
        };
        if let Err(error) = outcome {
            tracing::warn!(lock = %keys.name, key = %keys.lock, error = %error, "{failed}");
            self.report(&error);
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
