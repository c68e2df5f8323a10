//! Redlock: one lock over N independent Redis servers, held while a
//! majority of them hold it.
//!
//! A thin face over the plain lock: each server has its own [`LockClient`]
//! and each per-server hold is that client's normal hold (Redisson's lock
//! hash, its watchdog, its validity deadline, its fencing token). This file
//! only counts them.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::ids::random_u128;
use crate::hold::{lease_ms, validity};
use crate::lock::Lock;
use crate::options::{AcquireOptions, Wait};

/// The default pause bound between two attempts (a random pause of half
/// to all of it).
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);

/// A lock over N independent Redis servers (the Redlock algorithm): an
/// acquisition succeeds when a majority (N/2 + 1) of the servers granted
/// it within its validity time, and the guard is held while a majority of
/// its per-server holds are valid.
///
/// Each server is reached through its own [`LockClient`]; each per-server
/// hold is that client's normal lock hold (the Redisson lock hash, so a
/// Java `RLock` on one server excludes it there; renewed by that client's
/// watchdog; its own validity deadline and fencing token).
///
/// **Acquiring** ([`RedlockLock::acquire`]): every server is asked at once
/// with one attempt that does not wait, bounded by a short
/// [per-server time-out](Redlock::per_server_timeout). With a majority
/// granted and validity left — `lease − elapsed − drift`, the drift being
/// 1 % of the lease + 2 ms — the guard is returned. Otherwise every hold
/// taken is released and, while the wait bound allows, the attempt is
/// repeated after a random pause (half to all of the
/// [retry delay](Redlock::retry_delay)). An attempt in which fewer than a
/// majority of the servers answered at all (down, partitioned, slower than
/// the per-server time-out) ends the acquisition with
/// [`Error::NoQuorum`]: waiting cannot help until servers come back.
///
/// **Holding** ([`RedlockGuard`]): each client's watchdog renews its own
/// hold. The guard's deadline is the majority-th latest of its per-server
/// deadlines (each the send time of the last confirmed acquire or renewal,
/// plus the lease, minus the drift): it moves on while a majority is renewed, and
/// [`is_held`](RedlockGuard::is_held) turns false and
/// [`lost`](RedlockGuard::lost) resolves once fewer than a majority are
/// valid — by that deadline at the latest, even when no server can be
/// reached.
///
/// **What it guarantees, and what not.** Two guards of one name are never
/// held at once *under timing assumptions*: every server's lease runs
/// out no earlier than this client thinks (clock rates within the 1 %
/// drift margin, no server clock jumps, no server losing a held key —
/// run the servers with `appendfsync always`, or keep a restarted server
/// out for a lease), and the process holding the guard checks
/// [`is_held`](RedlockGuard::is_held) before each step of its work. A
/// process paused (GC, SIGSTOP, swapped out) after its last check, or
/// a network delaying its writes to a protected resource, can still act
/// after its validity ran out, when another holder exists — exactly as
/// with a single server, and as Martin Kleppmann's critique of Redlock
/// points out. No client-side check can close that gap; only the protected
/// resource can, by refusing stale writers: see
/// [`RedlockGuard::fencing_tokens`] for the per-server tokens and the
/// order they give. Redlock is for availability (the lock survives the
/// loss of a minority of its servers, with no replication between them);
/// for correctness where a stale writer does harm, fence.
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::Redlock;
/// let redlock = Redlock::from_urls([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])?;
/// let guard = redlock.lock("payments:batch")?.acquire().await?;
/// assert!(guard.is_held());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    clients: Arc<[LockClient]>,
    per_server_timeout: Option<Duration>,
    retry_delay: Duration,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let servers: Vec<&LockClient> = self.clients.iter().collect();
        f.debug_struct("Redlock")
            .field("servers", &servers)
            .field("quorum", &self.quorum())
            .field("per_server_timeout", &self.per_server_timeout)
            .field("retry_delay", &self.retry_delay)
            .finish()
    }
}

impl Redlock {
    /// A Redlock over the servers of `clients`, one client per server
    /// (configure each as any [`LockClient`]: time-outs, watchdog, TLS, key
    /// prefix). Fails with [`Error::InvalidArgument`] when there is no
    /// client or two clients have the same URL (one server counted twice
    /// would make a false majority).
    ///
    /// ```no_run
    /// # fn demo() -> lock_core::Result<()> {
    /// use lock_core::{LockClient, Redlock};
    /// use std::time::Duration;
    /// let clients = ["redis://a:6379", "redis://b:6379", "redis://c:6379"]
    ///     .into_iter()
    ///     .map(|url| LockClient::builder(url).command_timeout(Duration::from_millis(500)).build())
    ///     .collect::<lock_core::Result<Vec<_>>>()?;
    /// let redlock = Redlock::new(clients)?;
    /// assert_eq!(redlock.quorum(), 2);
    /// # Ok(()) }
    /// ```
    pub fn new(clients: impl IntoIterator<Item = LockClient>) -> Result<Redlock> {
        let clients: Vec<LockClient> = clients.into_iter().collect();
        if clients.is_empty() {
            return Err(Error::InvalidArgument(
                "a Redlock needs at least one server".into(),
            ));
        }
        for (i, a) in clients.iter().enumerate() {
            if clients[..i]
                .iter()
                .any(|b| b.config().url == a.config().url)
            {
                return Err(Error::InvalidArgument(format!(
                    "a Redlock's servers must be distinct: server {i} repeats an earlier URL"
                )));
            }
        }
        Ok(Redlock {
            clients: clients.into(),
            per_server_timeout: None,
            retry_delay: DEFAULT_RETRY_DELAY,
        })
    }

    /// A Redlock over `urls`, each server with a client of the default
    /// configuration (see [`LockClient::builder`]); call it inside a tokio
    /// runtime, as building a client. Connections open lazily: no server
    /// is contacted here.
    ///
    /// ```no_run
    /// # fn demo() -> lock_core::Result<()> {
    /// let redlock = lock_core::Redlock::from_urls(["redis://a", "redis://b", "redis://c"])?;
    /// assert_eq!(redlock.servers(), 3);
    /// # Ok(()) }
    /// ```
    pub fn from_urls<I, S>(urls: I) -> Result<Redlock>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let clients = urls
            .into_iter()
            .map(|url| LockClient::builder(url).build())
            .collect::<Result<Vec<_>>>()?;
        Redlock::new(clients)
    }

    /// Bounds each server's attempt (connection included). A server slower
    /// than this counts as not granting; an attempt cut off here is
    /// cancelled by its client in the background (a late grant is
    /// released). Default: a twentieth of the lease, between 50 ms and 1 s
    /// (1 s for the default 30 s watchdog lease). Keep it well below the
    /// lease: the time spent here is taken off the validity.
    ///
    /// ```no_run
    /// # fn demo(redlock: lock_core::Redlock) {
    /// let redlock = redlock.per_server_timeout(std::time::Duration::from_millis(100));
    /// # }
    /// ```
    #[must_use]
    pub fn per_server_timeout(mut self, timeout: Duration) -> Self {
        self.per_server_timeout = Some(timeout.max(Duration::from_millis(1)));
        self
    }

    /// The bound of the random pause between two attempts (each pause is
    /// half to all of it, so that competing clients fall out of step).
    /// Default 200 ms.
    ///
    /// ```no_run
    /// # fn demo(redlock: lock_core::Redlock) {
    /// let redlock = redlock.retry_delay(std::time::Duration::from_millis(50));
    /// # }
    /// ```
    #[must_use]
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay.max(Duration::from_millis(2));
        self
    }

    /// The number of servers, N.
    ///
    /// ```no_run
    /// # fn demo(redlock: lock_core::Redlock) {
    /// assert!(redlock.servers() >= 1);
    /// # }
    /// ```
    pub fn servers(&self) -> usize {
        self.clients.len()
    }

    /// The majority a guard needs: N/2 + 1.
    ///
    /// ```no_run
    /// # fn demo() -> lock_core::Result<()> {
    /// let redlock = lock_core::Redlock::from_urls(["redis://a", "redis://b", "redis://c", "redis://d", "redis://e"])?;
    /// assert_eq!(redlock.quorum(), 3);
    /// # Ok(()) }
    /// ```
    pub fn quorum(&self) -> usize {
        self.clients.len() / 2 + 1
    }

    /// The clients, one per server, in the order given.
    ///
    /// ```no_run
    /// # fn demo(redlock: lock_core::Redlock) {
    /// for client in redlock.clients() {
    ///     println!("{}", client.client_id());
    /// }
    /// # }
    /// ```
    pub fn clients(&self) -> &[LockClient] {
        &self.clients
    }

    /// A handle to the lock called `name` on every server. Checks the name
    /// with each client; makes no Redis call.
    ///
    /// ```no_run
    /// # fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// let lock = redlock.lock("report:daily")?;
    /// assert_eq!(lock.name(), "report:daily");
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<str>) -> Result<RedlockLock> {
        let name = name.as_ref();
        let locks = self
            .clients
            .iter()
            .map(|client| client.lock(name))
            .collect::<Result<Vec<_>>>()?;
        Ok(RedlockLock {
            redlock: self.clone(),
            name: name.into(),
            locks: locks.into(),
        })
    }

    /// The per-server bound for an attempt with this lease.
    fn attempt_bound(&self, lease: Duration) -> Duration {
        self.per_server_timeout.unwrap_or_else(|| {
            (lease / 20).clamp(Duration::from_millis(50), Duration::from_secs(1))
        })
    }

    /// A random pause of half to all of the retry delay.
    fn pause(&self) -> Duration {
        let half = u64::try_from(self.retry_delay.as_micros() / 2).unwrap_or(u64::MAX / 2);
        let extra = (random_u128() % u128::from(half.max(1))) as u64;
        Duration::from_micros(half.saturating_add(extra))
    }
}

/// One named lock over the servers of a [`Redlock`]. Cheap to clone.
///
/// ```no_run
/// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
/// let lock = redlock.lock("nightly-export")?;
/// if let Some(guard) = lock.try_acquire().await? {
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedlockLock {
    redlock: Redlock,
    name: Arc<str>,
    locks: Arc<[Lock]>,
}

impl std::fmt::Debug for RedlockLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockLock")
            .field("name", &self.name)
            .field("servers", &self.locks.len())
            .finish()
    }
}

/// What one server answered to one attempt.
enum Answer {
    Granted(LockGuard),
    Busy,
    Failed(String),
}

/// What one attempt over all the servers came to.
enum Attempt {
    Held(RedlockGuard),
    /// A majority answered, but fewer than a majority granted (or the
    /// validity was spent): worth another attempt.
    Contended,
    /// Fewer than a majority answered at all.
    Unreachable {
        answered: usize,
        causes: Vec<String>,
    },
}

impl RedlockLock {
    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// assert_eq!(redlock.lock("a")?.name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Acquires the lock on a majority of the servers, trying again after
    /// random pauses for as long as it takes; each server's watchdog keeps
    /// its hold. Fails with [`Error::NoQuorum`] when fewer than a majority
    /// of the servers answer an attempt.
    ///
    /// Cancel-safe: holds taken by an attempt that is dropped are released
    /// in the background.
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// let guard = redlock.lock("a")?.acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<RedlockGuard> {
        self.acquire_with(AcquireOptions::new()).await
    }

    /// Acquires the lock, trying for at most `wait` (no attempt starts or
    /// runs past it); [`Error::WaitTimeout`] after that. A zero `wait` is
    /// one attempt.
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// match redlock.lock("a")?.acquire_timeout(std::time::Duration::from_secs(2)).await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(e) if e.is_wait_timeout() => println!("busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<RedlockGuard> {
        self.acquire_with(AcquireOptions::new().wait(wait)).await
    }

    /// One attempt on every server: `Ok(None)` when fewer than a majority
    /// granted (another owner holds it, or the validity was spent);
    /// [`Error::NoQuorum`] when fewer than a majority answered.
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// if let Some(guard) = redlock.lock("a")?.try_acquire().await? {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<RedlockGuard>> {
        self.acquire_inner(AcquireOptions::new().no_wait()).await
    }

    /// Acquires with explicit options: the wait bound, and a fixed lease
    /// (each server's key expires after it, never renewed; the guard is
    /// valid for at most `lease − elapsed − drift`). Replica
    /// acknowledgement, if asked for, applies to each server.
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// use lock_core::AcquireOptions;
    /// use std::time::Duration;
    /// let guard = redlock
    ///     .lock("a")?
    ///     .acquire_with(AcquireOptions::new().wait(Duration::from_secs(1)).lease(Duration::from_secs(10)))
    ///     .await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub async fn acquire_with(&self, options: AcquireOptions) -> Result<RedlockGuard> {
        match self.acquire_inner(options).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::WaitTimeout {
                name: self.name.to_string(),
                waited: match options.wait {
                    Wait::Bounded(w) => w,
                    _ => Duration::ZERO,
                },
            }),
        }
    }

    async fn acquire_inner(&self, options: AcquireOptions) -> Result<Option<RedlockGuard>> {
        if options.lease.is_some_and(|l| l.is_zero()) {
            return Err(Error::InvalidArgument("lease must be > 0".into()));
        }
        let started = Instant::now();
        let give_up_at = match options.wait {
            Wait::Bounded(w) => Some(started + w),
            Wait::Never => Some(started),
            Wait::Forever => None,
        };
        loop {
            let now = Instant::now();
            let left = give_up_at.map(|at| at.saturating_duration_since(now));
            let bound = match (options.wait, left) {
                // a single attempt gets its per-server bound in full
                (Wait::Never, _) => None,
                (_, left) => left,
            };
            match self.attempt(options, bound).await {
                Attempt::Held(guard) => return Ok(Some(guard)),
                Attempt::Unreachable { answered, causes } => {
                    return Err(Error::NoQuorum {
                        name: self.name.to_string(),
                        servers: self.locks.len(),
                        quorum: self.redlock.quorum(),
                        answered,
                        causes: causes.join("; "),
                    })
                }
                Attempt::Contended => {}
            }
            let pause = self.redlock.pause();
            match give_up_at {
                Some(at) if Instant::now() + pause >= at => return Ok(None),
                _ => tokio::time::sleep(pause).await,
            }
        }
    }

    /// One attempt on every server at once; `limit` (what is left of the
    /// wait bound) caps each server's bound.
    async fn attempt(&self, options: AcquireOptions, limit: Option<Duration>) -> Attempt {
        let quorum = self.redlock.quorum();
        // The shortest lease among the servers' clients: the validity's base.
        let lease = self
            .locks
            .iter()
            .map(|l| {
                Duration::from_millis(lease_ms(
                    options.lease,
                    l.client.inner.core.config.watchdog_timeout,
                ))
            })
            .min()
            .unwrap_or(Duration::from_millis(1));
        let mut bound = self.redlock.attempt_bound(lease);
        if let Some(limit) = limit {
            bound = bound.min(limit);
        }
        let per_server = options.no_wait();
        let started = Instant::now();
        let answers = join_all(self.locks.iter().map(|lock| async move {
            match tokio::time::timeout(bound, lock.acquire_unshared(per_server)).await {
                Ok(Ok(Some(guard))) => Answer::Granted(guard),
                Ok(Ok(None)) => Answer::Busy,
                Ok(Err(e)) if e.is_wait_timeout() => Answer::Busy,
                Ok(Err(e)) => Answer::Failed(e.to_string()),
                Err(_) => Answer::Failed(format!("no answer within {bound:?}")),
            }
        }))
        .await;
        let validity_left = validity(lease).saturating_sub(started.elapsed());
        let mut holds: Vec<Option<LockGuard>> = Vec::with_capacity(answers.len());
        let mut answered = 0;
        let mut causes = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            match answer {
                Answer::Granted(guard) => {
                    answered += 1;
                    holds.push(Some(guard));
                }
                Answer::Busy => {
                    answered += 1;
                    holds.push(None);
                }
                Answer::Failed(cause) => {
                    causes.push(format!("server {i}: {cause}"));
                    holds.push(None);
                }
            }
        }
        let granted = holds.iter().flatten().filter(|g| g.is_held()).count();
        if granted >= quorum && !validity_left.is_zero() {
            let guard = RedlockGuard {
                name: self.name.clone(),
                quorum,
                tokens: holds
                    .iter()
                    .map(|h| h.as_ref().map(LockGuard::fencing_token))
                    .collect(),
                holds,
            };
            tracing::debug!(
                lock = %self.name,
                granted,
                servers = self.locks.len(),
                validity_ms = validity_left.as_millis() as u64,
                "redlock acquired"
            );
            return Attempt::Held(guard);
        }
        // Not enough: give back what was taken, each release bounded as an
        // attempt is (one cut off goes on in the background, as releases
        // do; at worst the key expires with its lease).
        let taken: Vec<LockGuard> = holds.into_iter().flatten().collect();
        if !taken.is_empty() {
            join_all(taken.into_iter().map(|guard| async move {
                let _ = tokio::time::timeout(bound, guard.release()).await;
            }))
            .await;
        }
        tracing::debug!(
            lock = %self.name,
            granted,
            answered,
            quorum,
            "redlock attempt failed"
        );
        if answered < quorum {
            Attempt::Unreachable { answered, causes }
        } else {
            Attempt::Contended
        }
    }
}

/// Proof of holding a [`RedlockLock`] on a majority of its servers.
/// Release it with [`release`](RedlockGuard::release) (on every server); a
/// dropped guard releases each hold in the background.
///
/// Held while a majority of its per-server holds are valid (see
/// [`Redlock`] for the deadline and for what "held" does and does not
/// guarantee).
///
/// ```no_run
/// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
/// let guard = redlock.lock("a")?.acquire().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("fewer than a majority hold it: stop"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct RedlockGuard {
    name: Arc<str>,
    quorum: usize,
    /// One slot per server, in the Redlock's order: the hold there, if any.
    holds: Vec<Option<LockGuard>>,
    tokens: Vec<Option<u64>>,
}

impl std::fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("lock", &self.name)
            .field("quorum", &self.quorum)
            .field("fencing_tokens", &self.tokens)
            .field("valid_holds", &self.valid_holds())
            .field("held", &self.is_held())
            .finish()
    }
}

impl RedlockGuard {
    /// The lock's name.
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// let guard = redlock.lock("a")?.acquire().await?;
    /// assert_eq!(guard.name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    fn valid(&self) -> impl Iterator<Item = &LockGuard> {
        self.holds.iter().flatten().filter(|g| g.is_held())
    }

    /// How many of the per-server holds are valid now.
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// let guard = redlock.lock("a")?.acquire().await?;
    /// assert!(guard.valid_holds() >= redlock.quorum());
    /// # Ok(()) }
    /// ```
    pub fn valid_holds(&self) -> usize {
        self.valid().count()
    }

    /// Whether a majority of the servers still hold the lock for this
    /// guard: false from the guard's deadline on (the majority-th latest
    /// per-server deadline), or once renewals found holds gone. Never true
    /// again after that.
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// let guard = redlock.lock("a")?.acquire().await?;
    /// assert!(guard.is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.valid_holds() >= self.quorum
    }

    /// `Err(Error::Lost)` once the guard is no longer held.
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// let guard = redlock.lock("a")?.acquire().await?;
    /// guard.ensure_held()?;
    /// # Ok(()) }
    /// ```
    pub fn ensure_held(&self) -> Result<()> {
        if self.is_held() {
            Ok(())
        } else {
            Err(Error::Lost {
                name: self.name.to_string(),
            })
        }
    }

    /// Time left before the guard's deadline, as renewals stand now: the
    /// majority-th latest deadline of the valid per-server holds; zero
    /// once not held.
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// let guard = redlock.lock("a")?.acquire().await?;
    /// println!("valid for {:?} unless renewed", guard.remaining());
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> Duration {
        let mut left: Vec<Duration> = self
            .holds
            .iter()
            .flatten()
            .map(|g| g.held_lock().hold().remaining())
            .filter(|d| !d.is_zero())
            .collect();
        if left.len() < self.quorum {
            return Duration::ZERO;
        }
        left.sort_unstable_by(|a, b| b.cmp(a));
        left[self.quorum - 1]
    }

    /// Resolves when fewer than a majority of the per-server holds are
    /// valid: at the guard's deadline at the latest (timers, so it fires
    /// even when no server can be reached), or as soon as renewals found
    /// enough holds gone. Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// let guard = redlock.lock("a")?.acquire().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => return Err(lock_core::Error::Lost { name: guard.name().into() }),
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        loop {
            let valid: Vec<&LockGuard> = self.valid().collect();
            if valid.len() < self.quorum {
                return;
            }
            // one more hold lost: count again
            select_all(valid.into_iter().map(|g| Box::pin(g.lost()))).await;
        }
    }

    /// The fencing token of each server's hold, in the Redlock's server
    /// order (`None` where this guard holds nothing).
    ///
    /// Each is that server's token (see [`LockGuard::fencing_token`]): it
    /// grows with every fresh hold of the lock on that server. Any two
    /// majorities share a server, and on a shared server a later holder's
    /// token is the larger. So a resource can refuse a stale holder by
    /// keeping the last accepted vector and accepting a new one only when
    /// [`Redlock`]'s rule [`supersedes`](RedlockGuard::supersedes) holds
    /// (no shared server where the new token is lower) — this assumes no
    /// server forgets a held lock's token (see the token retention and
    /// persistence).
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// let guard = redlock.lock("a")?.acquire().await?;
    /// let held = guard.fencing_tokens().iter().flatten().count();
    /// assert!(held >= redlock.quorum());
    /// # Ok(()) }
    /// ```
    pub fn fencing_tokens(&self) -> &[Option<u64>] {
        &self.tokens
    }

    /// The largest of the per-server [`fencing_tokens`](Self::fencing_tokens).
    ///
    /// A convenience with a weaker promise than a single server's token:
    /// tokens are a hybrid clock on each server's `TIME`, so the largest
    /// orders two successive holders only when the servers' clocks agree
    /// to within the time between the two holds (normally microseconds to
    /// milliseconds of skew against holds of milliseconds or more). For a
    /// guarantee that does not depend on clocks, compare the vectors
    /// ([`supersedes`](Self::supersedes)).
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// let guard = redlock.lock("a")?.acquire().await?;
    /// println!("token {}", guard.fencing_token());
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.tokens.iter().flatten().copied().max().unwrap_or(0)
    }

    /// Whether the token vector `newer` comes after `older` (both from
    /// [`fencing_tokens`](Self::fencing_tokens) of one Redlock lock): they
    /// share at least one server and `newer` is larger on every server
    /// they share. Two successive majorities' vectors always do; a stale
    /// holder's vector, presented after its successor's was accepted,
    /// never does.
    ///
    /// ```
    /// use lock_core::RedlockGuard;
    /// let a = [Some(10), Some(20), Some(30), None, None];
    /// let b = [None, None, Some(31), Some(5), Some(7)];
    /// assert!(RedlockGuard::supersedes(&b, &a));
    /// assert!(!RedlockGuard::supersedes(&a, &b));
    /// ```
    pub fn supersedes(newer: &[Option<u64>], older: &[Option<u64>]) -> bool {
        let mut shared = 0;
        for (n, o) in newer.iter().zip(older) {
            if let (Some(n), Some(o)) = (n, o) {
                if n <= o {
                    return false;
                }
                shared += 1;
            }
        }
        shared > 0
    }

    /// Releases the lock on every server (concurrently). `Ok(())` when a
    /// majority of the holds were still held until released; [`Error::Lost`]
    /// when not (the section was not exclusive to the end); a Redis error
    /// when fewer than a majority could be released for that reason (those
    /// holds expire with their lease).
    ///
    /// Cancel-safe: each server's release completes in the background if
    /// this future is dropped.
    ///
    /// ```no_run
    /// # async fn demo(redlock: lock_core::Redlock) -> lock_core::Result<()> {
    /// let guard = redlock.lock("a")?.acquire().await?;
    /// match guard.release().await {
    ///     Ok(()) => {}
    ///     Err(e) if e.is_lost() => eprintln!("a majority expired before the end"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<()> {
        let RedlockGuard {
            name,
            quorum,
            holds,
            ..
        } = self;
        let results = join_all(holds.into_iter().flatten().map(LockGuard::release)).await;
        let released = results.iter().filter(|r| r.is_ok()).count();
        if released >= quorum {
            return Ok(());
        }
        let lost = results
            .iter()
            .filter(|r| matches!(r, Err(e) if e.is_lost()))
            .count();
        // a majority that cannot have been released as held
        if lost > 0 || results.len() < quorum {
            return Err(Error::Lost {
                name: name.to_string(),
            });
        }
        match results.into_iter().find_map(|r| r.err()) {
            Some(e) => Err(e),
            None => Err(Error::Lost {
                name: name.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(url: &str) -> LockClient {
        // connections open lazily: no server is needed
        LockClient::builder(url)
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn needs_distinct_servers_and_counts_the_majority() {
        let none: Vec<LockClient> = Vec::new();
        assert!(Redlock::new(none).is_err_and(|e| e.is_invalid_input()));
        let twice = Redlock::new([client("redis://127.0.0.1:1"), client("redis://127.0.0.1:1")]);
        assert!(twice.is_err_and(|e| e.is_invalid_input()));
        for (n, quorum) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
            let urls: Vec<String> = (0..n)
                .map(|i| format!("redis://127.0.0.1:{}", i + 1))
                .collect();
            let redlock = Redlock::from_urls(urls).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!((redlock.servers(), redlock.quorum()), (n, quorum));
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn per_server_bound_and_pause() {
        let redlock = Redlock::from_urls(["redis://127.0.0.1:1"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            redlock.attempt_bound(Duration::from_secs(30)),
            Duration::from_secs(1)
        );
        assert_eq!(
            redlock.attempt_bound(Duration::from_secs(2)),
            Duration::from_millis(100)
        );
        assert_eq!(
            redlock.attempt_bound(Duration::from_millis(200)),
            Duration::from_millis(50)
        );
        let redlock = redlock
            .per_server_timeout(Duration::from_millis(7))
            .retry_delay(Duration::from_millis(100));
        assert_eq!(
            redlock.attempt_bound(Duration::from_secs(30)),
            Duration::from_millis(7)
        );
        for _ in 0..100 {
            let pause = redlock.pause();
            assert!(pause >= Duration::from_millis(50) && pause < Duration::from_millis(100));
        }
    }

    #[test]
    fn token_vectors_order_successive_majorities() {
        let a = [Some(10), Some(20), Some(30), None, None];
        let b = [None, None, Some(31), Some(5), Some(7)];
        assert!(RedlockGuard::supersedes(&b, &a));
        assert!(!RedlockGuard::supersedes(&a, &b));
        // the same vector again (one holder writing twice) is not newer
        assert!(!RedlockGuard::supersedes(&a, &a));
        // no shared server: no order
        let c = [None, None, None, Some(1), Some(1)];
        assert!(!RedlockGuard::supersedes(&c, &a));
        // lower on one shared server: stale
        let d = [Some(11), Some(19), None, None, None];
        assert!(!RedlockGuard::supersedes(&d, &a));
    }
}
