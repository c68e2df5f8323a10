//! The state every part of the engine shares (one per client): the
//! configuration, the connections in lanes, the scripts, the local queues,
//! the background-task tracker, the round-trip average that paces waiting
//! and stepping back; and the calls on the connections that every part
//! makes (a script or a command on a lane, within a bound, with the
//! client-wide outage clock).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{ClientConfig, ErrorHook};
use crate::error::{Error, Result};
use crate::hold::permit_registry::PermitRegistry;
use crate::hold::queue::LocalQueues;
use crate::protocol::keys::LockKeys;
use crate::protocol::{Script, Scripts};
use crate::transport::connection::{Conn, Lane, Pool};
use crate::transport::pubsub::sharding::Sharding;

/// A boxed future of this crate's commands (see `Core::run_script_within`).
pub(crate) type BoxFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

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
    pub(crate) scripts: Scripts,
    /// Waiters of this client, per lock, and its current holdings.
    pub(crate) queues: LocalQueues,
    /// The semaphore permits this client holds.
    pub(crate) permits: PermitRegistry,
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
    /// Group commit: the script calls waiting for one in flight.
    pub(crate) groups: super::group_commit::Groups,
    /// This shared state itself, for the tasks that send grouped calls.
    pub(crate) this: std::sync::Weak<Core>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Core {
    /// The shared state of a new client: no connection is opened yet.
    pub(crate) fn new(
        config: ClientConfig,
        error_hook: Option<ErrorHook>,
        pool: Pool,
        cluster: bool,
        this: std::sync::Weak<Core>,
    ) -> Core {
        Core {
            groups: Default::default(),
            this,
            client_id: Arc::from(super::ids::uuid_v4().to_string()),
            pool,
            scripts: Scripts::new(),
            queues: LocalQueues::with_hand_off_window(config.hand_off_window),
            permits: PermitRegistry::default(),
            rtt_us: AtomicU64::new(1000),
            jitter_state: AtomicU64::new(super::ids::random_u128() as u64),
            request_id_prefix: super::ids::uuid_v4().simple().to_string(),
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
            sharding: Arc::new(Sharding::new(config.pubsub_mode, cluster)),
            cluster,
            config,
        }
    }

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
    ///
    /// With group commit on, the calls of a grouped script (acquire,
    /// release) that come while one of theirs is in flight wait for it and
    /// go together (see `group_commit.rs`).
    pub(crate) fn run_script_within<'a>(
        &'a self,
        script: &'a Script,
        cmd: &'a Cmd,
        limit: Duration,
    ) -> BoxFuture<'a, Result<Value>> {
        if self.config.group_commit {
            if let Some(group) = self.scripts.group_of(script) {
                return Box::pin(self.run_grouped(group, cmd, limit));
            }
        }
        self.run_script_alone(script, cmd, limit)
    }

    /// [`run_script_within`](Self::run_script_within), never grouped.
    pub(crate) fn run_script_alone<'a>(
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
            Err(e) if e.is_transient() => self.outage_seen(started),
            Err(_) => {}
        }
        result
    }

    /// A call that began at `started` met a transient failure: the outage
    /// began then, unless it had already.
    pub(crate) fn outage_seen(&self, started: tokio::time::Instant) {
        self.lock_outage().get_or_insert(started);
        self.in_outage.store(true, Ordering::Relaxed);
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

    /// `publish_command` when already known, else `publish` without
    /// probing (for a message whose loss costs only a re-check: the call
    /// that carries it stays within its own bound).
    pub(crate) fn publish_command_known(&self) -> &'static str {
        Sharding::publish_command(self.sharding.known().unwrap_or(false))
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
        Arc::from(format!("{}:{}", self.client_id, fresh_owner_number()))
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
    pub(crate) fn step_back_window(&self) -> Duration {
        let rtt = Duration::from_micros(self.rtt_us.load(Ordering::Relaxed));
        (rtt * 8).clamp(STEP_BACK_MIN, STEP_BACK_MAX)
    }

    /// How long the next waiting client's turn is kept for it after a
    /// release: long enough for its unlock message, its pause and its
    /// request (a few round trips), short enough that a client that died
    /// while waiting costs little.
    pub(crate) fn turn_window(&self) -> Duration {
        let rtt = Duration::from_micros(self.rtt_us.load(Ordering::Relaxed));
        (rtt * 8).clamp(TURN_WINDOW_MIN, TURN_WINDOW_MAX)
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
}

pub(crate) use super::ids::fresh_owner_number;

/// `d` in whole milliseconds, at least 1.
pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_owner_numbers_differ() {
        assert_ne!(fresh_owner_number(), fresh_owner_number());
    }
}
