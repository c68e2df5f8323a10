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
//! - **Reentrancy** through [`LockContext`]: acquiring a lock that the
//!   current context holds increments its hold count instead of waiting.
//! - **Guards** ([`LockGuard`]) that release on drop (in the background) or
//!   with [`LockGuard::release`], which reports whether the lock was still
//!   held.
//! - **Lost-lock signalling**: [`LockGuard::is_held`] and
//!   [`LockGuard::lost`] tell a critical section that its lock expired or
//!   was taken away.
//! - **Fencing tokens** ([`LockGuard::fencing_token`]): a per-lock counter
//!   that grows with every new holder.
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
//! | thread                        | [`LockContext`] (a task-local owner)        |
//! | `lockWatchdogTimeout`         | [`ClientBuilder::watchdog_timeout`]         |
//!
//! # Ownership in async code
//!
//! Java ties a lock to a thread; tokio tasks move between threads, so a lock
//! belongs to a [`LockContext`]. Outside any context every acquisition is a
//! new owner, so two guards never share a lock by accident. Inside
//! [`in_context`] (or [`LockContext::scope`]) acquisitions of the same lock
//! re-enter it:
//!
//! ```no_run
//! # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
//! let lock = client.lock("account:7")?;
//! lock_core::in_context(async {
//!     let outer = lock.acquire().await?;
//!     let inner = lock.acquire().await?; // same context: re-enters at once
//!     assert_eq!(lock.hold_count().await?, 2);
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
//! # On the wire (compatible with Redisson)
//!
//! A lock is a Redis hash at the lock's key whose field is the owner id
//! `"<client-uuid>:<n>"` and whose value is the hold count; the key's TTL is
//! the lease. Releases publish `0` on `redisson_lock__channel:{<key>}`.
//! Fencing tokens come from `INCR redisson_lock_token:{<key>}`, as
//! Redisson's `RFencedLock`. Every change is one Lua script (EVALSHA), so a
//! Java service using Redisson and a Rust service using this crate exclude
//! each other on the same lock name.
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
//! `tracing` spans `lock.acquire` and `lock.release` and events for waits,
//! renewals that fail, and lost locks (at `warn`).
#![deny(missing_docs)]

mod client;
mod config;
mod connection;
mod context;
mod error;
mod guard;
mod inspect;
mod keys;
mod lock;
mod pubsub;
mod scripts;
mod watchdog;

pub use client::LockClient;
pub use config::{
    ClientBuilder, ClientConfig, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_NAME_LEN, DEFAULT_POOL_SIZE, DEFAULT_WATCHDOG_TIMEOUT, MAX_LEASE,
};
pub use context::{in_context, LockContext};
pub use error::{Error, Result};
pub use guard::LockGuard;
pub use inspect::{LockOwner, LockStatus};
pub use lock::{AcquireOptions, Lock};

/// The README's code, compiled as a doc test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
