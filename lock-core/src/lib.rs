//! A watchdog-renewed, reentrant distributed lock on Redis for tokio,
//! wire-compatible with Redisson's `RLock`.
//!
//! Several replicas of a service that share one Redis use it so that "only
//! one of us does this at a time" holds: no double-sold stock, no twice-run
//! nightly job, no lost update.
//!
//! # Quick start
//!
//! ```no_run
//! use lock_core::LockClient;
//!
//! #[tokio::main]
//! async fn main() -> lock_core::Result<()> {
//!     let client = LockClient::connect("redis://127.0.0.1:6379").await?;
//!     let lock = client.lock("stock:sku-42")?;
//!
//!     let guard = lock.acquire().await?;          // waits while another process holds it
//!     // ... read stock, check, decrement: nobody else is in here ...
//!     guard.release().await?;                     // or just drop the guard
//!     Ok(())
//! }
//! ```
//!
//! # What you get
//!
//! - **Blocking acquire** ([`Lock::acquire`]), **bounded wait**
//!   ([`Lock::acquire_timeout`]), **one attempt** ([`Lock::try_acquire`]),
//!   **explicit lease** ([`Lock::acquire_with_lease`]) or **watchdog
//!   renewal** (the default: the lock lives as long as its guard).
//! - **Waiting by pub/sub**, never by polling: a waiter sleeps until the
//!   holder's unlock message or the holder's remaining TTL, whichever comes
//!   first. One subscriber connection per client; an unlock wakes one local
//!   waiter.
//! - **Reentrancy** through [`LockContext`]: a call nested in a held
//!   section, or a manual acquisition in a context that holds the lock,
//!   increments the hold count instead of waiting.
//! - **Guards** ([`LockGuard`]) that release on drop (in the background) or
//!   with [`LockGuard::release`], which reports whether the lock was still
//!   held.
//! - **Lost-lock signalling**: [`LockGuard::is_held`] and
//!   [`LockGuard::lost`] tell a critical section that its lock expired or
//!   was taken away; [`HeldLock`] carries them (and the fencing token)
//!   into request handlers, macro bodies and spawned tasks.
//! - **Graceful shutdown** ([`LockClient::shutdown`]): a deploy leaves no
//!   lock behind.
//! - **Fencing tokens** ([`LockGuard::fencing_token`]): per lock, strictly
//!   growing with every new holder, also across a Redis restart.
//! - **A local validity deadline** on every guard: never "held" after the
//!   lease may have run out in Redis.
//! - **A process-wide default client** ([`install_default`],
//!   [`default_client`]) for code that does not pass one around, such as
//!   the `#[distributed_lock]` attribute.
//!
//! # The `#[distributed_lock]` attribute (feature `macros`)
//!
//! With `features = ["macros"]`, `lock_core::distributed_lock` takes a lock
//! around an `async fn`: the key is built from the arguments, the lock is
//! acquired before the body runs and released when it returns, returns
//! early, panics or is cancelled. Nested annotated calls in one task
//! re-enter. Options: `key` (required), `mode` (`"read"` / `"write"`: a
//! side of the [`RwLock`] instead of the exclusive lock), `wait`, `lease`,
//! `client`, `skip_if_locked`, `cancel_on_lost`, `crate`; the attribute's
//! own docs show each of them. Fns without `client = ...` use the client installed
//! with [`install_default`]. The body reaches its hold (fencing token,
//! lost signal) with [`HeldLock::current`], without another Redis call.
//!
//! When the release after the body finds the lock lost, the call returns
//! `Err(Lost)` although the body ran and made its changes: make the body
//! idempotent (or fence its writes) and check `is_lost()` before retrying.
//!
//! ```no_run
//! # #[cfg(feature = "macros")]
//! # mod demo {
//! use lock_core::{distributed_lock, LockClient};
//!
//! #[derive(Debug)]
//! pub enum ShopError {
//!     Lock(lock_core::Error),
//!     OutOfStock,
//! }
//!
//! impl From<lock_core::Error> for ShopError {
//!     fn from(err: lock_core::Error) -> Self {
//!         ShopError::Lock(err) // lock failures arrive as Err(ShopError::Lock(..))
//!     }
//! }
//!
//! #[distributed_lock(key = "stock:{sku}")]
//! async fn buy(sku: &str, qty: u32) -> Result<u32, ShopError> {
//!     if qty > 10 {
//!         return Err(ShopError::OutOfStock);
//!     }
//!     Ok(qty)
//! }
//!
//! // wait at most 5 s, a fixed 30 s lease, an explicit client, a field path
//! #[distributed_lock(key = "order:{order.0}", wait = "5s", lease = "30s", client = client)]
//! async fn pay(client: &LockClient, order: (u64, &str)) -> Result<(), ShopError> {
//!     Ok(())
//! }
//!
//! // readers of one sku share the read-write lock "price:{sku}"; a
//! // `mode = "write"` fn with that key would run alone
//! #[distributed_lock(key = "price:{sku}", mode = "read")]
//! async fn price(sku: &str) -> Result<u64, ShopError> {
//!     Ok(42)
//! }
//!
//! // one replica runs it, the others skip (ShedLock-style)
//! #[distributed_lock(key = "nightly-report", skip_if_locked)]
//! async fn nightly_report() {}
//!
//! // at most 4 exports of one tenant at once: one permit of the expirable
//! // semaphore "exports:{tenant}" of 4 permits (created when absent)
//! #[distributed_lock(key = "exports:{tenant}", permits = 4)]
//! async fn export(tenant: &str) -> Result<usize, ShopError> {
//!     Ok(tenant.len())
//! }
//!
//! #[tokio::main]
//! async fn main() -> lock_core::Result<()> {
//!     lock_core::install_default(LockClient::connect("redis://127.0.0.1:6379").await?)?;
//!     let _ = buy("sku-42", 1).await;
//!     nightly_report().await;
//!     Ok(())
//! }
//! # }
//! # fn main() {}
//! ```
//!
//! # Mapping from Redisson
//!
//! | Redisson `RLock`              | lock-core                                   |
//! |-------------------------------|---------------------------------------------|
//! | `lock()`                      | `lock.acquire().await`                      |
//! | `lock(lease, unit)`           | `lock.acquire_with_lease(lease).await`      |
//! | `tryLock()`                   | `lock.try_acquire().await` (→ `Option`)     |
//! | `tryLock(wait, unit)`         | `lock.acquire_timeout(wait).await`          |
//! | `tryLock(wait, lease, unit)`  | `lock.acquire_with(AcquireOptions::new().wait(w).lease(l))` |
//! | `unlock()`                    | `guard.release().await` (or [`Lock::unlock`] in a context) |
//! | `forceUnlock()`               | `lock.force_unlock().await`                 |
//! | `isLocked()`                  | `lock.is_locked().await`                    |
//! | `getHoldCount()`              | `lock.hold_count().await`                   |
//! | `isHeldByCurrentThread()`     | `lock.is_held_by_current_context().await`   |
//! | `remainTimeToLive()`          | `lock.remaining_ttl().await`                |
//! | `RFencedLock.getToken()`      | `guard.fencing_token()`                     |
//! | thread                        | [`LockContext`] (a task-local re-entry scope) |
//! | `lockWatchdogTimeout`         | [`ClientBuilder::watchdog_timeout`]         |
//! | `checkLockSyncedSlaves`, `slavesSyncTimeout` | [`ClientBuilder::wait_for_replicas`] (off by default; see "Safety") |
//!
//! # Read-write lock
//!
//! [`LockClient::rw_lock`] is Redisson's `RReadWriteLock` on the same keys:
//! readers share ([`RwLock::read`]), a writer has it alone
//! ([`RwLock::write`]). Each side is a [`Lock`] with every power of the
//! lock. An upgrade (write where the same context holds only a read) fails
//! at once with [`Error::UpgradeRefused`]; a downgrade works; waiting
//! writers keep new readers of this library out so that they never starve.
//! The attribute takes a side with `mode = "read"` / `"write"`, lock-tower's
//! `LockLayer::read_write` per request (`GET` reads, a `POST` writes), and
//! `lockctl hold --read` / `--write` from a shell.
//!
//! ```no_run
//! # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
//! use lock_core::LockMode;
//!
//! let prices = client.rw_lock("prices:eu")?;
//! let read = prices.read().acquire().await?;
//! assert_eq!(read.held_lock().mode(), LockMode::Read);
//! read.release().await?;
//! let write = prices.write().acquire().await?;
//! write.release().await?;
//! # Ok(()) }
//! ```
//!
//! In an axum service, lock-tower's layer takes the side per request and
//! the handler sees which one it holds:
//!
//! ```rust,ignore
//! use lock_core::LockMode;
//! use lock_tower::{Held, LockLayer, PathSegment};
//!
//! let app = Router::new()
//!     .route("/prices/{sku}", get(price).put(set_price))
//!     // GET, HEAD, OPTIONS read; every other method writes
//!     .route_layer(LockLayer::read_write(client, PathSegment::after("prices").prefix("price:")));
//!
//! async fn price(Held(lock): Held) -> String {
//!     assert_eq!(lock.mode(), LockMode::Read); // with every other GET of this sku
//!     load_price().await
//! }
//! ```
//!
//! | Redisson `RReadWriteLock`     | lock-core                                   |
//! |-------------------------------|---------------------------------------------|
//! | `getReadWriteLock(name)`      | `client.rw_lock(name)?`                     |
//! | `readLock().lock()`           | `rw.read().acquire().await`                 |
//! | `writeLock().tryLock(w, unit)`| `rw.write().acquire_timeout(w).await`       |
//! | read → write (hangs)          | [`Error::UpgradeRefused`] at once           |
//!
//! # Semaphores and the count-down latch
//!
//! [`LockClient::permit_semaphore`] is Redisson's `RPermitExpirableSemaphore`
//! on the same keys, with permits the watchdog renews (a crashed holder's
//! come back within one lease), a validity deadline and `lost()` per
//! acquisition; [`LockClient::semaphore`] is its plain `RSemaphore` (no
//! owner, no lease). Waiting acquisitions take turns across clients, so
//! asking for several permits is never starved by others asking for one.
//! [`LockClient::latch`] is its `RCountDownLatch`.
//!
//! ```no_run
//! # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
//! let exports = client.permit_semaphore("exports:tenant-7")?;
//! exports.try_set_permits(5).await?;
//! let permit = exports.acquire(1).await?;   // at most 5 at once, everywhere
//! permit.release().await?;
//!
//! let done = client.latch("migrations")?;
//! done.try_set_count(2).await?;
//! done.count_down().await?;
//! # Ok(()) }
//! ```
//!
//! | Redisson                                   | lock-core                                  |
//! |--------------------------------------------|--------------------------------------------|
//! | `getSemaphore(n).acquire(p)`               | `client.semaphore(n)?.acquire(p).await`    |
//! | `getPermitExpirableSemaphore(n).acquire()` | `client.permit_semaphore(n)?.acquire(1).await` (renewed) |
//! | `tryAcquire(wait, lease, unit)`            | `acquire_with(p, AcquireOptions::new().wait(w).lease(l))` |
//! | `release(id)`                              | `permits.release().await` (or drop)        |
//! | `availablePermits()` / `addPermits(d)`     | `available().await` / `add_permits(d).await` |
//! | `getCountDownLatch(n).await(t, unit)`      | `client.latch(n)?.wait_timeout(t).await`   |
//!
//! # Leader election and fenced writes
//!
//! [`LockClient::election`] elects on a lock name: the leader holds the
//! lock (so a Redisson `RLock` holder of the name excludes it), its term is
//! the hold's fencing token, and its [`Leadership`] ends at the hold's
//! validity deadline. [`Election::run_as_leader`] is the service loop in
//! one call. [`Fence`] (from a guard, a [`HeldLock`] or a [`Leadership`])
//! writes to Redis only while the hold is still the lock's holder there,
//! checked in the same script as the write ([`Error::FenceRefused`]
//! otherwise).
//!
//! ```no_run
//! # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
//! let election = client.election("nightly-report")?;
//! election
//!     .run_as_leader("pod-3", |leadership| async move {
//!         // refused by Redis once this replica no longer leads
//!         leadership.fence().set("report:{nightly-report}:state", "running").await
//!     })
//!     .await??;
//! # Ok(()) }
//! ```
//!
//! # Ownership and re-entry in async code
//!
//! Every fresh acquisition creates a *hold* with an owner id of its own,
//! `"<client-uuid>:<n>"`; re-entries add counts to that hold. A guard only
//! ever releases, renews or hands off its own hold, so a stale guard (its
//! hold lost, the lock taken again in the same context) can never touch
//! the newer hold.
//!
//! Java ties re-entry to a thread; tokio tasks move between threads, so
//! here it is tied to a [`LockContext`], in one of two ways:
//!
//! - **Sections** — what `#[distributed_lock]` and lock-tower's layer do: a
//!   hold taken for a section is re-entered only by acquisitions *nested*
//!   in the section (made while its body runs). Sibling futures of one task
//!   (`join!`, `select!`, `join_all`) are not nested in each other, so they
//!   exclude each other.
//! - **Manual acquisitions inside an open context** ([`in_context`],
//!   [`LockContext::scope`]): the context is like a Java thread. A hold it
//!   takes with [`Lock::acquire`] and friends is re-entered by every later
//!   acquisition of that lock in the context — sibling futures joined
//!   inside the context included, so use one context per logical owner.
//!
//! Outside any context every acquisition is a new hold, so two guards never
//! share a lock by accident:
//!
//! ```no_run
//! # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
//! let lock = client.lock("account:7")?;
//! lock_core::in_context(async {
//!     let outer = lock.acquire().await?;
//!     let inner = lock.acquire().await?; // same context: re-enters at once
//!     assert_eq!(lock.hold_count().await?, 2);
//!     assert_eq!(inner.owner_id(), outer.owner_id()); // one hold, two counts
//!     inner.release().await?;
//!     outer.release().await
//! })
//! .await
//! # }
//! ```
//!
//! A spawned task starts without a context, like a new thread; carry one
//! into it with [`LockContext::current`] and [`LockContext::scope`].
//!
//! # How long a guard is valid
//!
//! A guard is valid until a local deadline: the send time of the last
//! acquire or renewal that Redis confirmed, plus the lease, minus a drift
//! margin of 1 % of the lease + 2 ms. [`LockGuard::is_held`] compares the
//! deadline with the monotonic clock and [`LockGuard::lost`] is a timer at
//! it, so a partition, a paused Redis or a blocked runtime can never make a
//! guard say "held" after its lease may have run out in Redis; renewals only
//! push the deadline on. A grant whose reply arrives after its validity is
//! undone and never handed out. An acquisition whose reply was lost is
//! cancelled in the background (undone if Redis applied it, refused if it
//! arrives later), so the hold count in Redis always equals the guards that
//! exist.
//!
//! # Testing without Redis (feature `memory`)
//!
//! With the `memory` feature (usually in `[dev-dependencies]`), clients
//! built with a `MemoryServer`'s URL (`memory://<name>`) share an
//! in-memory server of the process that runs the very same Lua scripts, so
//! tests of code that takes locks — a `LockLayer` router, a
//! `#[distributed_lock]` fn — run with `cargo test` and nothing installed.
//! What differs from Redis is listed on `MemoryServer`; the repository's
//! `examples/tests/in_memory.rs` tests an axum router and an annotated
//! method this way.
//!
//! # Deployments
//!
//! - **One server**: `redis://host:6379` (`rediss://` with the `tls` feature).
//! - **Sentinel**: `redis+sentinel://host1:26379,host2:26379/<service>`
//!   (see [`ClientConfig::url`] for credentials and TLS). Connections go to
//!   the primary the sentinels name; on `+switch-master` (or a `READONLY`
//!   reply) the client moves to the new primary. Holds the new primary
//!   lacks are reported lost by their next renewal.
//! - **Redis Cluster** (Redis 7): `redis+cluster://host1:7000,host2:7000`
//!   (seed nodes). Every key of a lock shares a slot; the watchdog renews
//!   per slot; waiters listen with sharded pub/sub on the slot's primary
//!   when the cluster has it ([`PubSubMode`]), following moved slots.
//!
//! [`LockClient::redis_connection`] gives your own commands (the data a
//! lock protects) a connection to the same deployment.
//!
//! ```no_run
//! # async fn demo() -> lock_core::Result<()> {
//! let client = lock_core::LockClient::connect(
//!     "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/locks",
//! )
//! .await?;
//! # Ok(()) }
//! ```
//!
//! # Safety: what a lock on Redis can and cannot promise
//!
//! One Redis primary that keeps running gives mutual exclusion up to the
//! guard's validity (above): no two guards say "held" at once. Two things
//! can still break "only one of us":
//!
//! - **A pause longer than the lease** (Kleppmann's scenario: a GC pause, a
//!   stopped VM, a blocked runtime). The holder checked `is_held()`, then
//!   stopped; its lease ran out, another client took the lock, and the
//!   first one wakes up and writes. No lock can prevent this, because the
//!   write happens after the check. Only the resource can: pass the
//!   [fencing token](LockGuard::fencing_token) with every write and have
//!   the resource refuse tokens lower than the highest it has seen.
//!   **Fencing is the guarantee; everything else narrows the window.**
//! - **A failover that loses the acquisition.** Replication is
//!   asynchronous: a primary can grant a lock, answer, and die before any
//!   replica has the write. The promoted replica has never heard of the
//!   hold, and grants the lock again (antirez's answer to Kleppmann names
//!   this limit of a single replicated Redis).
//!
//! [`ClientBuilder::wait_for_replicas`] (or
//! [`AcquireOptions::wait_for_replicas`] for one acquisition) narrows the
//! second: after a fresh acquisition (from Redis or handed on by a local
//! holder) the client writes once more to its hold and runs `WAIT n timeout`
//! on a connection of its own, and hands the guard out only when `n`
//! replicas acknowledged everything up to that write. With fewer, the hold
//! is released and the acquire fails with [`Error::NotReplicated`], so
//! nobody works under a hold that a failover would forget. Re-entries of a
//! hold do not wait; renewals and releases are not waited for (a lost
//! renewal makes the hold expire sooner on the new primary, and the next
//! renewal reports it lost).
//!
//! What it does **not** give: `WAIT` is not consensus. A replica that
//! acknowledged can still lose the race to be promoted, Sentinel or Cluster
//! may promote a replica that had not acknowledged, a restart without
//! persistence forgets everything, and clock jumps on the server shorten
//! leases. It makes losing a hold in a failover unlikely, not impossible;
//! keep fencing writes that matter.
//!
//! # On the wire (compatible with Redisson)
//!
//! A lock is a Redis hash at the lock's key whose field is the hold's owner
//! id `"<client-uuid>:<n>"` and whose value is the hold count; the key's TTL
//! is the lease. Releases publish `0` on `redisson_lock__channel:{<key>}`.
//! Helper names follow Redisson's rule: `<kind>:{<key>}`, or `<kind>:<key>`
//! when the key already holds a `{` (its own hash tag), and names that are
//! another lock's helper keys are rejected. So are keys with braces that
//! make no hash tag (`order:{7`, `order:{}x`, `x}y`), on every deployment:
//! on a Redis Cluster their helper keys would hash to other slots than the
//! lock, and every acquire would fail with `CROSSSLOT`. Every change is one Lua script
//! (EVALSHA), so a Java service using Redisson and a Rust service using
//! this crate exclude each other on the same lock name.
//!
//! Fencing tokens are a hybrid logical clock on the server's `TIME`:
//! `max(last token + 1, server time in µs)`, the last token kept at
//! `redisson_lock_token:{<key>}` for the client's
//! [token retention](ClientBuilder::token_retention) (60 s by default).
//! They grow strictly across holders, releases and a restart that lost
//! every key, and names no longer used cost no memory. Redisson's
//! `RFencedLock` increments the same key: its tokens stay above ours while
//! the key lives, but after the key expired a Redisson client restarts at
//! 1, below our clock-based tokens; a fleet that mixes both languages
//! should fence on one side's tokens only.
//!
//! # Waiting, fairly and cheaply
//!
//! Waiters of one client for the same lock queue locally, first come first
//! served, and only the one at the front asks Redis. When a holder releases
//! while others of its client wait, the release hands the lock straight to
//! the next one (one script call: the owner field changes, a new fencing
//! token is drawn, nothing is published), so a contended lock costs one
//! round trip per change of holder. Waiting in Redis is by the unlock
//! message (one pub/sub connection per client, one waiter woken per
//! message) bounded by the holder's PTTL, never a fixed-interval poll.
//!
//! **How clients take turns.** A streak of local hand-offs lasts one round
//! of the waiters queued when the client took the lock, or, when longer,
//! the client's [hand-off window](ClientBuilder::hand_off_window) (2 ms by
//! default) from then (Go's `sync.Mutex` keeps a lock with the running
//! process the same way until a waiter has waited too long); then the lock
//! is released in Redis. Clients waiting in Redis keep one place each
//! in a sorted set, `lockcore_waiters:{<key>}`, by when their first waiter
//! began to wait. A release that frees the lock gives the turn to the
//! client that has waited longest (`lockcore_turn:{<key>}`): for a few round
//! trips (8, between 20 and 500 ms) only that client may take the lock, and
//! it leaves the set; a client that died while waiting loses its place when
//! its turn passes unused. So clients are served in the order they began to
//! wait, each for one streak: a task waits at most about (clients − 1)
//! streaks for its client's turn, whatever the other clients' loops look
//! like. A longer window passes more sections per change of client (more
//! throughput under contention between processes) for longer waits of the
//! other clients (lock-bench W3, BENCHMARKS.md "Fair without paying":
//! worst wait 12–19 ms at 2 ms, 66 ms at 20 ms, 153 ms at 50 ms). Tested: four clients of four tasks behind 20 ms of latency each
//! way wait at most 1.03–1.17 × the fair wait; four processes looping
//! without a pause get 25 % each.
//!
//! A Redisson client does not take part in the set (it only retries on the
//! unlock message and the PTTL): it can take a lock that is free and whose
//! turn nobody holds. For it, a lock-core client whose release reached
//! other clients *steps back*: its next acquisitions wait for another
//! client's unlock message, or for a window (8 round trips, 1–50 ms,
//! doubled each time the others missed it, up to 200 ms). Tested: a waiter
//! speaking Redisson's protocol gets in within two streaks of a process
//! looping with four tasks.
//!
//! # Cancellation
//!
//! Every future here may be dropped at any point. An acquire dropped after
//! its request reached Redis releases whatever it was granted, in the
//! background; a dropped release still completes; a dropped guard is
//! released in the background.
//!
//! # Logging
//!
//! Through [`tracing`](https://docs.rs/tracing), with one vocabulary
//! everywhere: the field `lock` is the lock's name as given to
//! [`LockClient::lock`] (`account:7`), the field `key` its full Redis key,
//! with the client's key prefix (`userapp:account:7`).
//!
//! Every acquire call ([`Lock::acquire`] and friends, the attribute, the
//! tower layer) runs in one `lock.acquire` span, and every release (of a
//! guard, in the background for a dropped guard, by [`Lock::unlock`], or
//! at shutdown) in one `lock.release` span; the tasks they spawn carry the
//! span, so every event of an acquisition or a release sits in a span that
//! names the lock. Events outside those spans (the watchdog's, lost locks,
//! background failures) carry `lock` and `key` themselves.
//!
//! | span / event | level | fields |
//! |---|---|---|
//! | span `lock.acquire` | DEBUG | `lock`, `key` |
//! | span `lock.release` | DEBUG | `lock`, `key` |
//! | `lock busy; waiting` (once per acquisition that finds the lock held) | DEBUG | `behind`: `local-queue`, `local-holder`, `step-back` or `redis` |
//! | `lock acquired` (once per new hold) | DEBUG | `token`, `waited_ms` (since the call), `via`: `redis` or `hand-off` |
//! | `lock re-entered` | DEBUG | `token` |
//! | `lock busy` (a single attempt found it held) | DEBUG | |
//! | `lock wait bound passed` | DEBUG | `waited_ms` |
//! | `lock acquire refused: the client is shut down` | DEBUG | |
//! | `lock acquire failed` (the caller gets the error) | DEBUG | `error` |
//! | `lock handed off` (to a waiter of this client) | DEBUG | `lock`, `key`, `from`, `to` (owner ids), `token` |
//! | `lock released` (the hold's last count) | DEBUG | `handed_off` |
//! | `lock re-entry released; still held` | DEBUG | |
//! | `lock release failed; retrying` | DEBUG | `lock`, `key`, `error` |
//! | `lock lost` (once per hold) | WARN | `lock`, `key`, `owner`, `reason` |
//! | `lock renewal failed; retrying before the lock's deadline` | WARN | `lock`, `key`, `error`; for a batch of several locks `locks` (how many), `error` |
//! | `background lock release failed; the lock expires with its lease` | WARN | `lock`, `key`, `error` |
//! | `lock watchdog pass` | TRACE | `locks`, `lost`, `elapsed_us` |
//! | `lock client shutting down`, `lock client shut down` | INFO | `client`; `released`, `not_held`, `failed`, `finished_in_time` |
//!
//! A release after the hold's deadline logs `lock lost` (the section was
//! not exclusive to the end) and then `lock released`; one that finds the
//! hold gone in Redis logs `lock lost` only. Failures that need an operator
//! (Redis refusing pub/sub or PUBLISH, an evicting `maxmemory-policy`, the
//! pub/sub connection lost, certificate checks off) are WARN events of the
//! client, without a lock.
//!
//! # Metrics
//!
//! With the feature `metrics`, lock-core reports through the
//! [`metrics`](https://docs.rs/metrics) facade (without the feature, or
//! without a recorder installed, nothing is recorded). Install any
//! recorder, such as the Prometheus exporter, once at start-up:
//!
//! ```ignore
//! metrics_exporter_prometheus::PrometheusBuilder::new().install()?; // HTTP on 0.0.0.0:9000
//! ```
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `lock_core_acquisitions_total` | counter | `outcome` | acquire calls, one per call that completes: `acquired` (a new hold, from Redis or handed over by a local holder), `reentered`, `busy` (a single attempt found it held), `timeout` (the wait bound passed), `closed` (the client was shut down), `error` (anything else: Redis unreachable, invalid input, a lost section, ...) |
//! | `lock_core_acquire_duration_seconds` | histogram | `outcome` | wall time of those calls |
//! | `lock_core_wait_duration_seconds` | histogram | | time from the call to the grant, for acquisitions that found the lock held at least once (uncontended ones record nothing) |
//! | `lock_core_held_locks` | gauge | | holds this process has now (a re-entry adds none); a hold leaves it once: released, handed on, lost or given up at shutdown |
//! | `lock_core_renewals_total` | counter | | holds renewed by the watchdog, one per hold renewed |
//! | `lock_core_renewal_failures_total` | counter | `reason` | renewals that failed: `gone` (Redis says the hold is gone), `error` (a Redis error or time-out; retried) |
//! | `lock_core_lost_total` | counter | | holds lost, once per hold (as `lock lost`) |
//! | `lock_core_handoffs_total` | counter | | locks handed straight to a waiter of this client |
//! | `lock_core_releases_total` | counter | `outcome` | releases, explicit or of dropped guards: `released` (freed, handed on, or a count taken off), `not_held` (the hold was gone), `error` (Redis unreachable: the lock expires with its lease); `shutdown` for the holds [`LockClient::shutdown`] released |
//!
//! Seconds are `f64`. No label names a lock: names are unbounded (one per
//! account, order, ...) and would make one time series each. An acquire
//! future dropped before it completes is not counted; a guard whose hold is
//! already known gone releases nothing and is not counted either. Each
//! call looks its metric up in the installed recorder (static keys, no
//! allocation); nothing is cached, so a recorder installed later is used
//! from then on. Descriptions and units are registered with the recorder
//! installed when a client is built.
#![deny(missing_docs)]

mod builder;
mod client;
mod config;
mod context;
mod data;
mod default_client;
mod election;
mod error;
mod fair_lock;
mod fence;
mod guard;
mod held;
mod hold;
mod inspect;
mod latch;
mod lock;
mod macro_leader;
mod macro_multi;
mod macro_permits;
#[cfg(feature = "memory")]
mod memory;
#[cfg(feature = "memory")]
mod memory_server;
mod metrics;
mod multi_lock;
mod options;
mod protocol;
mod redlock;
mod rw_lock;
mod semaphore;
mod shutdown;
mod transport;

pub use builder::ClientBuilder;
pub use client::LockClient;
pub use config::{
    ClientConfig, PemSource, PubSubMode, ReplicaAck, TlsConfig, DEFAULT_COMMAND_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_FAIR_LOCK_WAIT_TIMEOUT, DEFAULT_HAND_OFF_WINDOW,
    DEFAULT_MAX_NAME_LEN, DEFAULT_POOL_SIZE, DEFAULT_TOKEN_RETENTION, DEFAULT_WATCHDOG_TIMEOUT,
    MAX_LEASE,
};
pub use context::{in_context, LockContext};
pub use data::RedisConnection;
pub use default_client::{default_client, install_default};
pub use election::{Election, Leader, LeaderWatch, Leadership};
pub use error::{Error, Result};
pub use fair_lock::FairWaiter;
pub use fence::{Fence, FencedScript};
pub use guard::LockGuard;
pub use held::HeldLock;
pub use inspect::{LockOwner, LockStatus};
pub use latch::CountDownLatch;
pub use lock::Lock;
#[cfg(feature = "memory")]
pub use memory_server::MemoryServer;
pub use multi_lock::{MultiGuard, MultiLock};
pub use options::{AcquireOptions, LockMode};
pub use redlock::{Redlock, RedlockGuard, RedlockLock};
pub use rw_lock::RwLock;
pub use semaphore::{HeldPermit, PermitSemaphore, Permits, Semaphore, SemaphoreStatus};
pub use shutdown::ShutdownReport;
/// The token type of [`HeldLock::cancellation_token`] (tokio-util's).
pub use tokio_util::sync::CancellationToken;

/// Takes a distributed lock around an `async fn` (feature `macros`).
#[cfg(feature = "macros")]
pub use lock_macros::distributed_lock;
/// Runs an `async fn`'s body only while this process leads an election (feature `macros`).
#[cfg(feature = "macros")]
pub use lock_macros::leader_only;

/// Support for the code `#[distributed_lock]` generates; not a public API.
#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

/// The README's code, compiled as a doc test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
