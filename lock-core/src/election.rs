//! Leader election on a lock: the leader is the lock's holder, its term
//! the hold's fencing token, and leadership ends where the hold's
//! validity does.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::guard::LockGuard;
use crate::held::HeldLock;
use crate::hold::ids;
use crate::hold::permits::RECHECK;
use crate::lock::Lock;
use crate::options::{AcquireOptions, Wait};
use crate::protocol::election::{parse_record, read_cmd, ElectionKeys, LeaderReply, RecordCall};
use crate::transport::pubsub::Subscription;

/// The first pause of [`Election::run_as_leader`] after a loss or a failed
/// campaign; it doubles up to [`BACKOFF_MAX`] while they repeat.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest pause of [`Election::run_as_leader`] between campaigns.
const BACKOFF_MAX: Duration = Duration::from_secs(5);

impl LockClient {
    /// The election `name`: its leader is whoever holds the lock `name`
    /// (a plain [`Lock`], so a Java service that "elects" with Redisson's
    /// `RLock.lock()` on the same name excludes us, and we it).
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let election = client.election("outbox-relay")?;
    /// let leadership = election.campaign("pod-7").await?; // waits for its turn
    /// println!("leading, term {}", leadership.term());
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl AsRef<str>) -> Result<Election> {
        let lock = self.lock(name)?;
        let keys = Arc::new(ElectionKeys::new(lock.keys.clone()));
        Ok(Election { lock, keys })
    }
}

/// A leader election on one lock name (see [`LockClient::election`]).
/// Cheap to clone.
///
/// - [`campaign`](Self::campaign) waits until this caller leads and
///   returns its [`Leadership`]: the term (the hold's fencing token,
///   strictly increasing from leader to leader), a lost signal, and
///   [fenced writes](Leadership::fence);
/// - [`leader`](Self::leader) reads who leads now, [`observe`](Self::observe)
///   follows the changes;
/// - [`run_as_leader`](Self::run_as_leader) is the service loop in one
///   call: campaign, run, stop the work on loss, campaign again.
///
/// **Never two leaders.** A leadership ends at its hold's validity
/// deadline, before the lock can expire in Redis and be granted to
/// anyone else: [`Leadership::is_leader`] turns false and
/// [`Leadership::lost`] resolves on a timer, also when Redis cannot be
/// reached. A leader paused past that point (a GC pause, a stopped VM)
/// cannot know it stopped leading; its [fenced writes](Leadership::fence)
/// are then refused by Redis.
///
/// A campaign never re-enters a hold: each leadership is a fresh hold of
/// its own, also inside a lock context or a `#[distributed_lock]` section
/// that holds the lock `name` (there, a campaign waits for that hold like
/// any other campaigner).
#[derive(Clone)]
pub struct Election {
    lock: Lock,
    keys: Arc<ElectionKeys>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("lock", &self.keys.lock.lock)
            .finish()
    }
}

impl Election {
    /// The election's (and its lock's) name.
    ///
    /// ```no_run
    /// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// assert_eq!(client.election("scheduler")?.name(), "scheduler");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Waits until this caller leads (the lock is acquired, renewed by the
    /// watchdog), then records `value` beside the hold for
    /// [`leader`](Self::leader) to read.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let leadership = client.election("scheduler")?.campaign("node-a").await?;
    /// assert!(leadership.is_leader());
    /// # Ok(()) }
    /// ```
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let value = value.into();
        let guard = self.acquire(AcquireOptions::new()).await?;
        self.lead(guard, value).await
    }

    /// [`campaign`](Self::campaign), waiting at most `wait`:
    /// [`Error::WaitTimeout`] when someone else still leads then.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// match client.election("scheduler")?.campaign_timeout("node-a", Duration::from_secs(5)).await {
    ///     Ok(leadership) => leadership.resign().await?,
    ///     Err(e) if e.is_wait_timeout() => println!("someone else leads"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn campaign_timeout(
        &self,
        value: impl Into<String>,
        wait: Duration,
    ) -> Result<Leadership> {
        let value = value.into();
        let guard = self.acquire(AcquireOptions::new().wait(wait)).await?;
        self.lead(guard, value).await
    }

    /// One attempt: the leadership when nobody led, `None` when someone
    /// does.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// if let Some(leadership) = client.election("scheduler")?.try_campaign("node-a").await? {
    ///     leadership.resign().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_campaign(&self, value: impl Into<String>) -> Result<Option<Leadership>> {
        let value = value.into();
        match self
            .lock
            .acquire_unshared(AcquireOptions::new().no_wait())
            .await?
        {
            Some(guard) => self.lead(guard, value).await.map(Some),
            None => Ok(None),
        }
    }

    /// Who leads now, as Redis says: `None` when nobody holds the lock.
    /// A holder that wrote no record (a Redisson client holding the lock,
    /// or a leader in the round trip between its grant and its record)
    /// has no value and no term.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// match client.election("scheduler")?.leader().await? {
    ///     Some(leader) => println!("{:?} leads (term {:?})", leader.value(), leader.term()),
    ///     None => println!("no leader"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let core = &self.engine().core;
        let script = &core.scripts.leader_read;
        let reply = core
            .run_script(script, &read_cmd(&self.keys, script))
            .await?;
        let ms = |pttl: Option<u64>| pttl.map(Duration::from_millis);
        Ok(match LeaderReply::parse(&reply)? {
            LeaderReply::Vacant => None,
            LeaderReply::Unrecorded { pttl_ms } => Some(Leader {
                value: None,
                term: None,
                expires_in: ms(pttl_ms),
            }),
            LeaderReply::Recorded {
                pttl_ms,
                value,
                term,
            } => Some(Leader {
                value: Some(value),
                term: Some(term),
                expires_in: ms(pttl_ms),
            }),
        })
    }

    /// Follows the leader: [`LeaderWatch::changed`] returns the current
    /// leader first, then each change (another term or value, or no
    /// leader). Woken by the election's and the lock's channels, and
    /// reading again at least every second, so a lost message only delays
    /// a change by up to that.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let mut watch = client.election("scheduler")?.observe();
    /// for _ in 0..3 {
    ///     match watch.changed().await? {
    ///         Some(leader) => println!("leader: {:?}", leader.value()),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> LeaderWatch {
        let pubsub = &self.engine().pubsub;
        LeaderWatch {
            lock_channel: pubsub.subscribe_shared(&self.keys.lock.channel),
            leader_channel: pubsub.subscribe_shared(&self.keys.channel),
            election: self.clone(),
            subscribed: false,
            last: None,
        }
    }

    /// The usual service loop in one call: campaign with `value`, run
    /// `work` with the leadership, and
    /// - when the leadership is lost, drop (cancel) `work`'s future, pause
    ///   (from 100 ms, doubling up to 5 s while losses repeat) and
    ///   campaign again;
    /// - when `work` ends while still leading, resign and return its
    ///   output; when it ends after its leadership was lost (a fenced write
    ///   refused, for one), its output is dropped and it campaigns again,
    ///   as on any loss.
    ///
    /// Campaigns that fail on a transient error (Redis or a cluster's
    /// quorum away for a moment), on replicas not caught up
    /// ([`Error::NotReplicated`]) or on a leadership lost at once are
    /// retried after the same pause; other errors (the client shut down, a
    /// refused name, missing ACL rights) end the loop. Work that spawns
    /// tasks should stop them on [`Leadership::cancellation_token`].
    ///
    /// A leader's work must not wait for the election's own lock (a nested
    /// `#[leader_only]` call on the same election, or `client.lock(name)`):
    /// it would wait behind its own leadership.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let election = client.election("outbox-relay")?;
    /// election
    ///     .run_as_leader("pod-7", |leadership| async move {
    ///         loop {
    ///             // relay a batch, fenced so that a deposed leader writes nothing
    ///             if leadership.fence().incr_by("relay:{outbox-relay}:batches", 1).await.is_err() {
    ///                 return;
    ///             }
    ///             tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_as_leader<F, Fut, T>(&self, value: impl Into<String>, mut work: F) -> Result<T>
    where
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = T>,
    {
        let value = value.into();
        let mut backoff = BACKOFF_MIN;
        // Bounded by the client: a shut-down client fails the campaign
        // with `Error::Closed`, which ends the loop.
        loop {
            let leadership = match self.campaign(value.clone()).await {
                Ok(leadership) => leadership,
                Err(e) if campaign_again(&e) => {
                    tracing::warn!(election = %self.name(), error = %e, "campaign failed; trying again");
                    backoff = pause(backoff).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let began = Instant::now();
            let running = work(leadership.clone());
            tokio::select! {
                biased;
                _ = leadership.lost() => {
                    tracing::warn!(
                        election = %self.name(),
                        term = leadership.term(),
                        "leadership lost; the leader's work was stopped"
                    );
                }
                output = running => {
                    // The work ended because its leadership went (a fenced
                    // write refused, say) rather than by itself: a loss.
                    if leadership.was_deposed() {
                        tracing::warn!(
                            election = %self.name(),
                            term = leadership.term(),
                            "the leader's work ended after its leadership was lost; campaigning again"
                        );
                    } else {
                        if let Err(e) = leadership.resign().await {
                            tracing::warn!(election = %self.name(), error = %e, "resigning after the work ended failed");
                        }
                        return Ok(output);
                    }
                }
            }
            drop(leadership);
            // A leadership that lasted a while starts the pauses afresh.
            if began.elapsed() > BACKOFF_MAX * 2 {
                backoff = BACKOFF_MIN;
            }
            backoff = pause(backoff).await;
        }
    }

    /// A fresh hold of the lock, never a re-entry of one the current lock
    /// context or section holds: each leadership is a hold of its own.
    async fn acquire(&self, options: AcquireOptions) -> Result<LockGuard> {
        match self.lock.acquire_unshared(options).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::WaitTimeout {
                name: self.name().to_owned(),
                waited: match options.wait {
                    Wait::Bounded(w) => w,
                    _ => Duration::ZERO,
                },
            }),
        }
    }

    fn engine(&self) -> &Arc<crate::hold::engine::Engine> {
        &self.lock.client.inner
    }

    /// Records `value` beside a fresh hold, and makes it a leadership.
    async fn lead(&self, guard: LockGuard, value: String) -> Result<Leadership> {
        let held = guard.held_lock();
        let record = Record {
            keys: self.keys.clone(),
            held: held.clone(),
            value,
        };
        match record.write_with_retries().await {
            Ok(true) => {}
            Ok(false) => {
                held.hold()
                    .mark_gone("the hold was gone before its leader record was written");
                drop(guard);
                return Err(Error::Lost {
                    name: self.name().to_owned(),
                });
            }
            Err(e) => {
                let _ = guard.release().await;
                return Err(e);
            }
        }
        let stop = CancellationToken::new();
        tokio::spawn(record.clone().refresh(stop.clone()));
        Ok(Leadership {
            inner: Arc::new(LeadershipInner {
                guard: Mutex::new(Some(guard)),
                held,
                value: record.value,
                stop,
            }),
        })
    }
}

/// Whether `run_as_leader` campaigns again after a campaign failed with
/// `e`: Redis away for a moment (also a cluster without a quorum for a
/// moment), replicas not caught up yet, or a leadership gone before its
/// record was written.
fn campaign_again(e: &Error) -> bool {
    e.is_transient()
        || e.is_lost()
        || e.is_not_replicated()
        || matches!(
            e,
            Error::Redis(r) if r.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown)
        )
}

/// Sleeps `backoff` plus up to half of it again (so that the losers of
/// one election do not all come back at once), and returns the next pause.
async fn pause(backoff: Duration) -> Duration {
    let half = u64::try_from(backoff.as_millis() / 2).unwrap_or(0).max(1);
    let jitter = Duration::from_millis((ids::random_u128() % u128::from(half)) as u64);
    tokio::time::sleep(backoff + jitter).await;
    (backoff * 2).min(BACKOFF_MAX)
}

/// The leader record of one leadership: written once granted, refreshed
/// while leading.
#[derive(Clone)]
struct Record {
    keys: Arc<ElectionKeys>,
    held: HeldLock,
    value: String,
}

impl Record {
    /// Writes the record; `false` when the hold is not the lock's holder
    /// any more. Transient errors are retried within the usual bound of
    /// one command.
    async fn write_with_retries(&self) -> Result<bool> {
        let core = &self.held.engine().core;
        let began = Instant::now();
        // Bounded: at most `command_bound` of retries, 50 ms apart.
        loop {
            match self.write().await {
                Err(e) if e.is_transient() && began.elapsed() < core.command_bound() => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => return other,
            }
        }
    }

    async fn write(&self) -> Result<bool> {
        let core = &self.held.engine().core;
        let publish = core.publish_command().await?;
        let field = self.keys.lock.field(&self.held.hold().owner);
        let call = RecordCall {
            field: &field,
            value: &self.value,
            term: self.held.fencing_token(),
            ttl_ms: crate::hold::shared::duration_ms(core.config.watchdog_timeout * 3),
            publish,
        };
        let script = &core.scripts.leader_record;
        parse_record(
            &core
                .run_script(script, &call.cmd(&self.keys, script))
                .await?,
        )
    }

    /// Keeps the record's TTL ahead while the leadership lasts (every
    /// third of the watchdog timeout; the TTL is three of them).
    async fn refresh(self, stop: CancellationToken) {
        let period = self.held.engine().core.config.watchdog_timeout / 3;
        // Bounded by the hold: it ends (or `stop` fires) and the loop with it.
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = self.held.ended() => return,
                _ = tokio::time::sleep(period) => {}
            }
            match self.write().await {
                Ok(true) => {}
                Ok(false) => {
                    // Not a loss when the leadership ended meanwhile (a
                    // resign raced this refresh).
                    if !stop.is_cancelled() && !self.held.hold().has_ended() {
                        self.held
                            .hold()
                            .mark_gone("the leader record's refresh found the hold gone");
                    }
                    return;
                }
                // Redis away for a moment: the next period tries again,
                // and the TTL has two more in hand.
                Err(e) => {
                    tracing::debug!(lock = %self.keys.lock.name, error = %e, "leader record refresh failed")
                }
            }
        }
    }
}

/// A won election (see [`Election::campaign`]). Cheap to clone: every
/// clone is the same leadership. The lock is released by
/// [`resign`](Self::resign), or in the background once the last clone is
/// dropped.
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
/// let leadership = client.election("cache-warmer")?.campaign("pod-2").await?;
/// let stop = leadership.cancellation_token();
/// let worker = tokio::spawn(async move {
///     tokio::select! {
///         _ = stop.cancelled() => "no longer leader: stopped",
///         _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => "warmed",
///     }
/// });
/// let _ = worker.await;
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Leadership {
    inner: Arc<LeadershipInner>,
}

struct LeadershipInner {
    /// The hold; taken by the first `resign`.
    guard: Mutex<Option<LockGuard>>,
    held: HeldLock,
    value: String,
    /// Stops the record's refresh.
    stop: CancellationToken,
}

impl Drop for LeadershipInner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name())
            .field("term", &self.term())
            .field("value", &self.inner.value)
            .field("leader", &self.is_leader())
            .finish()
    }
}

impl Leadership {
    /// The election's name.
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let leadership = election.campaign("a").await?;
    /// assert_eq!(leadership.name(), election.name());
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.held.name()
    }

    /// The term: the hold's fencing token, above every earlier leader's
    /// (also across a Redis that lost its data, as fencing tokens are).
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let first = election.campaign("a").await?;
    /// let term = first.term();
    /// first.resign().await?;
    /// assert!(election.campaign("a").await?.term() > term);
    /// # Ok(()) }
    /// ```
    pub fn term(&self) -> u64 {
        self.inner.held.fencing_token()
    }

    /// The value this leader campaigned with.
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// assert_eq!(election.campaign("node-a").await?.value(), "node-a");
    /// # Ok(()) }
    /// ```
    pub fn value(&self) -> &str {
        &self.inner.value
    }

    /// Whether this is still the leader: false from the hold's validity
    /// deadline, its loss, or [`resign`](Self::resign) on, for good.
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let leadership = election.campaign("a").await?;
    /// if leadership.is_leader() { /* do the leader's work */ }
    /// # Ok(()) }
    /// ```
    pub fn is_leader(&self) -> bool {
        self.inner.held.is_held()
    }

    /// `Ok` while leading, else [`Error::Lost`].
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let leadership = election.campaign("a").await?;
    /// leadership.ensure_leader()?;
    /// # Ok(()) }
    /// ```
    pub fn ensure_leader(&self) -> Result<()> {
        self.inner.held.ensure_held()
    }

    /// Resolves when the leadership is lost (its deadline passed, or Redis
    /// was found without the hold); not on [`resign`](Self::resign).
    /// Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let leadership = election.campaign("a").await?;
    /// tokio::select! {
    ///     _ = leadership.lost() => println!("deposed"),
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.inner.held.lost().await
    }

    /// Resolves once the leadership ended: lost or resigned. Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let leadership = election.campaign("a").await?;
    /// let watcher = leadership.clone();
    /// tokio::spawn(async move { watcher.ended().await });
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub async fn ended(&self) {
        self.inner.held.ended().await
    }

    /// A token cancelled once the leadership ends (lost or resigned), for
    /// the leader's spawned work. Each call returns a new token, watched by
    /// a small task until the leadership ends: call it once per piece of
    /// work, inside a tokio runtime.
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let leadership = election.campaign("a").await?;
    /// let stop = leadership.cancellation_token();
    /// tokio::spawn(async move { stop.cancelled().await; /* stop the work */ });
    /// # Ok(()) }
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        self.inner.held.cancellation_token()
    }

    /// The hold under the leadership, as code running under a lock sees it.
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let leadership = election.campaign("a").await?;
    /// assert_eq!(leadership.held_lock().fencing_token(), leadership.term());
    /// # Ok(()) }
    /// ```
    pub fn held_lock(&self) -> HeldLock {
        self.inner.held.clone()
    }

    /// Fenced writes through the leadership: Redis applies them only
    /// while this is still the leader there (see [`Fence`]).
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let leadership = election.campaign("a").await?;
    /// leadership.fence().set("jobs:{scheduler}:last-run", "2026-11-26").await?;
    /// # Ok(()) }
    /// ```
    pub fn fence(&self) -> Fence {
        self.inner.held.fence()
    }

    /// Lost without a resign: not leading, and the hold not given back.
    fn was_deposed(&self) -> bool {
        let resigned = match self.inner.guard.lock() {
            Ok(slot) => slot.is_none(),
            Err(poisoned) => poisoned.into_inner().is_none(),
        };
        !resigned && !self.is_leader()
    }

    /// Steps down: the lock is released (its waiters and observers are
    /// woken). Every clone then says it is not the leader. Resigning a
    /// second time does nothing; resigning a lost leadership fails with
    /// [`Error::Lost`].
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// election.campaign("a").await?.resign().await?;
    /// # Ok(()) }
    /// ```
    pub async fn resign(self) -> Result<()> {
        self.inner.stop.cancel();
        let guard = match self.inner.guard.lock() {
            Ok(mut slot) => slot.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        match guard {
            Some(guard) => guard.release().await,
            None => Ok(()),
        }
    }
}

/// Who leads an election, as Redis said (see [`Election::leader`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    value: Option<String>,
    term: Option<u64>,
    expires_in: Option<Duration>,
}

impl Leader {
    /// The leader's value; `None` when the holder wrote no record (a
    /// Redisson client holding the lock, or a leader between its grant and
    /// its record).
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// if let Some(leader) = election.leader().await? {
    ///     println!("{}", leader.value().unwrap_or("(unknown)"));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// The leader's term (its hold's fencing token); `None` with the value.
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let term = election.leader().await?.and_then(|l| l.term());
    /// # let _ = term;
    /// # Ok(()) }
    /// ```
    pub fn term(&self) -> Option<u64> {
        self.term
    }

    /// The lock's time to live in Redis when read (`None`: no TTL).
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let ttl = election.leader().await?.and_then(|l| l.expires_in());
    /// # let _ = ttl;
    /// # Ok(()) }
    /// ```
    pub fn expires_in(&self) -> Option<Duration> {
        self.expires_in
    }

    /// What makes two readings the same leader: its value and term.
    fn identity(&self) -> (Option<String>, Option<u64>) {
        (self.value.clone(), self.term)
    }
}

/// Follows an election's leader (see [`Election::observe`]).
pub struct LeaderWatch {
    election: Election,
    lock_channel: Subscription,
    leader_channel: Subscription,
    /// Whether the subscriptions were waited for once.
    subscribed: bool,
    /// The identity last returned (`None`: nothing returned yet).
    last: Option<Option<(Option<String>, Option<u64>)>>,
}

impl std::fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("election", &self.election.name())
            .finish()
    }
}

impl LeaderWatch {
    /// The current leader on the first call; afterwards, waits for a
    /// different one (another value or term, or none) and returns it.
    /// Fails when Redis stays unreachable past the usual bound of a
    /// command, or with [`Error::Closed`] once the client shut down.
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// let mut watch = election.observe();
    /// let now = watch.changed().await?;
    /// let next = watch.changed().await?; // the next change
    /// # let _ = (now, next);
    /// # Ok(()) }
    /// ```
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        let core = self.election.engine().core.clone();
        if !self.subscribed {
            // Subscribed before the first read, so that a change between
            // the read and the wait wakes it.
            let bound = core.config.command_timeout.min(RECHECK);
            self.lock_channel.ready(bound).await;
            self.leader_channel.ready(bound).await;
            self.subscribed = true;
        }
        let mut outage: Option<Instant> = None;
        // Each round reads once and sleeps at most a second: bounded by
        // the changes it waits for, and by the outage bound below.
        loop {
            let mut pause = RECHECK;
            match self.election.leader().await {
                Ok(now) => {
                    outage = None;
                    let identity = now.as_ref().map(Leader::identity);
                    if self.last.as_ref() != Some(&identity) {
                        self.last = Some(identity);
                        return Ok(now);
                    }
                    // The lock expiring without a message: read again then.
                    if let Some(ttl) = now.and_then(|l| l.expires_in) {
                        pause = pause.min(ttl + Duration::from_millis(1));
                    }
                }
                Err(e) if e.is_transient() && core.has_reached_redis() => {
                    let began = *outage.get_or_insert_with(Instant::now);
                    if began.elapsed() >= core.command_bound() {
                        return Err(e);
                    }
                    pause = Duration::from_millis(100);
                }
                Err(e) => return Err(e),
            }
            tokio::select! {
                biased;
                _ = core.closed.cancelled() => return Err(Error::Closed),
                _ = self.lock_channel.woken() => {}
                _ = self.leader_channel.woken() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// The changes as a [`Stream`](futures_util::Stream) (the same as
    /// calling [`changed`](Self::changed) in a loop); it ends after its
    /// first error (the client shut down, Redis unreachable past the
    /// usual bound of a command): observe again to go on.
    ///
    /// ```no_run
    /// # async fn demo(election: lock_core::Election) -> lock_core::Result<()> {
    /// use futures_util::StreamExt;
    /// let mut changes = std::pin::pin!(election.observe().into_stream());
    /// while let Some(change) = changes.next().await {
    ///     println!("{:?}", change?.and_then(|l| l.value().map(str::to_owned)));
    /// #   break;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Result<Option<Leader>>> + Send {
        futures_util::stream::unfold(Some(self), |watch| async move {
            let mut watch = watch?;
            let change = watch.changed().await;
            // An error `changed` would only give again (the client shut
            // down, Redis away past the bound) is the stream's last item.
            let next = match &change {
                Err(_) => None,
                Ok(_) => Some(watch),
            };
            Some((change, next))
        })
    }
}
