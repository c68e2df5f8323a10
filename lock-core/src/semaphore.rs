//! Semaphores, wire-compatible with Redisson: [`Semaphore`] (`RSemaphore`:
//! a counter of permits, no owner, no lease) and [`PermitSemaphore`]
//! (`RPermitExpirableSemaphore`: every permit an id with a lease, renewed
//! by the watchdog, so a crashed holder's permits come back). Both hand out
//! [`Permits`], a guard that gives back exactly what it took, exactly once.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::hold::permits::{OwnedPermits, SemTarget};
use crate::options::AcquireOptions;
use crate::protocol::sem_keys::{SemKeys, SemKind};
use crate::protocol::semaphore::set_cmd;

impl LockClient {
    /// A handle on the semaphore `name` (Redisson's `RSemaphore` on the same
    /// name: Java services and this client share its permits). Permits have
    /// no owner and no lease: permits of a process that dies while holding
    /// them are gone until someone adds them back (as with Redisson) —
    /// prefer [`permit_semaphore`](Self::permit_semaphore) when that
    /// matters.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let exports = client.semaphore("exports:tenant-7")?;
    /// exports.try_set_permits(5).await?;
    /// let permit = exports.acquire(1).await?;
    /// // at most 5 of these run at once, across every replica
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl AsRef<str>) -> Result<Semaphore> {
        Ok(Semaphore {
            inner: Handle::new(self, name.as_ref(), SemKind::Plain)?,
        })
    }

    /// A handle on the expirable semaphore `name` (Redisson's
    /// `RPermitExpirableSemaphore` on the same name). Each permit is an id
    /// with a lease: the watchdog renews the permits of a live guard, and
    /// the permits of a process that died come back within one lease.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let upstream = client.permit_semaphore("calls:payments")?;
    /// upstream.try_set_permits(20).await?;
    /// let permit = upstream.acquire(1).await?;
    /// assert!(permit.is_held());
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn permit_semaphore(&self, name: impl AsRef<str>) -> Result<PermitSemaphore> {
        Ok(PermitSemaphore {
            inner: Handle::new(self, name.as_ref(), SemKind::Expirable)?,
        })
    }
}

/// What both kinds share.
#[derive(Clone, Debug)]
struct Handle {
    target: SemTarget,
}

impl Handle {
    fn new(client: &LockClient, name: &str, kind: SemKind) -> Result<Self> {
        let config = &client.inner.core.config;
        let keys = SemKeys::new(&config.key_prefix, name, config.max_name_len, kind)?;
        Ok(Handle {
            target: SemTarget {
                engine: client.inner.clone(),
                keys: Arc::new(keys),
            },
        })
    }

    fn keys(&self) -> &SemKeys {
        &self.target.keys
    }

    async fn try_set_permits(&self, permits: u64) -> Result<bool> {
        if i64::try_from(permits).is_err() {
            return Err(Error::InvalidArgument(format!(
                "{permits} permits do not fit Redis' 64-bit signed counter"
            )));
        }
        let core = &self.target.engine.core;
        let keys = self.keys();
        let publish = core.publish_command().await?;
        let cmd = set_cmd(
            &keys.counter,
            &keys.channel,
            permits,
            permits,
            publish,
            &core.scripts.sem_set,
        );
        match core.run_script(&core.scripts.sem_set, &cmd).await? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(crate::protocol::unexpected("semaphore set", &other)),
        }
    }

    async fn add_permits(&self, delta: i64) -> Result<u64> {
        let available = self.target.add(delta).await?;
        Ok(u64::try_from(available).unwrap_or(0))
    }

    async fn available(&self) -> Result<u64> {
        match self.keys().kind {
            // expired permits come back first
            SemKind::Expirable => self.add_permits(0).await,
            SemKind::Plain => {
                let core = &self.target.engine.core;
                let mut cmd = redis::cmd("GET");
                cmd.arg(&self.keys().counter);
                match core.run_cmd(&cmd).await? {
                    Value::Nil => Ok(0),
                    Value::BulkString(b) => std::str::from_utf8(&b)
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                        .map(|v| u64::try_from(v).unwrap_or(0))
                        .ok_or_else(|| {
                            Error::Protocol(format!(
                                "the semaphore counter `{}` is not an integer",
                                self.keys().counter
                            ))
                        }),
                    other => Err(crate::protocol::unexpected_reply("GET", &other)),
                }
            }
        }
    }

    async fn acquire(&self, n: u32, options: AcquireOptions) -> Result<Permits> {
        let span = tracing::debug_span!("semaphore.acquire", semaphore = %self.keys().name, n);
        let inner = tracing::Instrument::instrument(self.target.acquire(n, options), span).await?;
        Ok(Permits { inner })
    }

    async fn try_acquire(&self, n: u32) -> Result<Option<Permits>> {
        match self.acquire(n, AcquireOptions::new().no_wait()).await {
            Ok(permits) => Ok(Some(permits)),
            Err(Error::WaitTimeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Redisson's `RSemaphore` on one name: a counter of available permits
/// (see [`LockClient::semaphore`]). Cheap to clone.
///
/// Waiting acquisitions take turns across clients: permits go to them in
/// the order they began to wait, and one asking for more than are free
/// blocks those behind it, so asking for 3 is never starved by a stream of
/// others asking for 1 (Redisson's own clients do not take part in the
/// turns: they take what is there).
#[derive(Clone, Debug)]
pub struct Semaphore {
    inner: Handle,
}

/// Redisson's `RPermitExpirableSemaphore` on one name (see
/// [`LockClient::permit_semaphore`]). Cheap to clone.
///
/// Permits are leased: by default the client's watchdog renews them while
/// their guard lives (Redisson has no renewal), and
/// [`acquire_with`](Self::acquire_with) takes a fixed lease. The permits of
/// a process that dies come back within one lease. The same turns as
/// [`Semaphore`].
///
/// Expiries are the Redis server's clock; Redisson's clients score theirs
/// by their own clocks, so keep the clocks of Java hosts sharing a
/// semaphore in sync (a Java client whose clock runs ahead reclaims
/// permits early by that much). Neither kind waits for replicas
/// ([`ClientBuilder::wait_for_replicas`](crate::ClientBuilder::wait_for_replicas)
/// applies to locks): after a failover that lost a grant, its permits
/// count as free again.
#[derive(Clone, Debug)]
pub struct PermitSemaphore {
    inner: Handle,
}

macro_rules! shared_methods {
    ($ty:ident, $ctor:literal) => {
        impl $ty {
            /// The name given when the handle was made.
            ///
            /// ```no_run
            /// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
            #[doc = concat!("assert_eq!(client.", $ctor, "(\"s\")?.name(), \"s\");")]
            /// # Ok(()) }
            /// ```
            pub fn name(&self) -> &str {
                &self.inner.keys().name
            }

            /// The Redis key of the counter (key prefix + name).
            ///
            /// ```no_run
            /// # fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
            #[doc = concat!("assert!(client.", $ctor, "(\"s\")?.key().ends_with(\"s\"));")]
            /// # Ok(()) }
            /// ```
            pub fn key(&self) -> &str {
                &self.inner.keys().counter
            }

            /// Sets the number of permits when the semaphore has none yet
            /// (Redisson's `trySetPermits`): true when set, false when it
            /// existed (its count is left alone).
            ///
            /// ```no_run
            /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
            #[doc = concat!("let s = client.", $ctor, "(\"jobs\")?;")]
            /// if s.try_set_permits(4).await? {
            ///     println!("created with 4 permits");
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn try_set_permits(&self, permits: u64) -> Result<bool> {
                self.inner.try_set_permits(permits).await
            }

            /// Adds `delta` permits (negative: takes them away) and
            /// returns the permits available after. Never takes the count
            /// below zero: asking to take more than are available fails
            /// with [`Error::InvalidArgument`] and changes nothing. Applied
            /// at most once, also when a reply is lost and the call is
            /// retried.
            ///
            /// ```no_run
            /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
            #[doc = concat!("let s = client.", $ctor, "(\"jobs\")?;")]
            /// let now = s.add_permits(2).await?;
            /// assert!(s.add_permits(-(now as i64) - 1).await.is_err());
            /// # Ok(()) }
            /// ```
            pub async fn add_permits(&self, delta: i64) -> Result<u64> {
                self.inner.add_permits(delta).await
            }

            /// The permits available now (0 when the semaphore does not
            /// exist).
            ///
            /// ```no_run
            /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
            #[doc = concat!("let free = client.", $ctor, "(\"jobs\")?.available().await?;")]
            /// # let _ = free;
            /// # Ok(()) }
            /// ```
            pub async fn available(&self) -> Result<u64> {
                self.inner.available().await
            }

            /// Acquires `n` permits (1 to 10 000), waiting as long as it
            /// takes.
            ///
            /// Cancel-safe: when this future is dropped after the request
            /// reached Redis, permits it took are given back in the
            /// background, and its place in the line is left.
            ///
            /// ```no_run
            /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
            #[doc = concat!("let permits = client.", $ctor, "(\"jobs\")?.acquire(2).await?;")]
            /// assert_eq!(permits.count(), 2);
            /// # Ok(()) }
            /// ```
            pub async fn acquire(&self, n: u32) -> Result<Permits> {
                self.inner.acquire(n, AcquireOptions::new()).await
            }

            /// Acquires `n` permits, waiting at most `wait`
            /// ([`Error::WaitTimeout`] after it).
            ///
            /// ```no_run
            /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
            /// use std::time::Duration;
            #[doc = concat!("let s = client.", $ctor, "(\"jobs\")?;")]
            /// match s.acquire_timeout(1, Duration::from_secs(2)).await {
            ///     Ok(permit) => permit.release().await?,
            ///     Err(e) if e.is_wait_timeout() => println!("busy"),
            ///     Err(e) => return Err(e),
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn acquire_timeout(&self, n: u32, wait: Duration) -> Result<Permits> {
                self.inner
                    .acquire(n, AcquireOptions::new().wait(wait))
                    .await
            }

            /// One attempt: `Some(permits)`, or `None` when not enough are
            /// free (or others wait ahead in line).
            ///
            /// ```no_run
            /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
            #[doc = concat!("if let Some(p) = client.", $ctor, "(\"jobs\")?.try_acquire(1).await? {")]
            ///     p.release().await?;
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn try_acquire(&self, n: u32) -> Result<Option<Permits>> {
                self.inner.try_acquire(n).await
            }
        }
    };
}

shared_methods!(Semaphore, "semaphore");
shared_methods!(PermitSemaphore, "permit_semaphore");

impl Semaphore {
    /// Acquires `n` permits with `options`' wait bound. The plain kind has
    /// no lease: a lease in `options` fails with [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// use lock_core::AcquireOptions;
    /// let opts = AcquireOptions::new().wait(std::time::Duration::from_millis(500));
    /// let permit = client.semaphore("jobs")?.acquire_with(1, opts).await?;
    /// # drop(permit); Ok(()) }
    /// ```
    pub async fn acquire_with(&self, n: u32, options: AcquireOptions) -> Result<Permits> {
        self.inner.acquire(n, options).await
    }
}

impl PermitSemaphore {
    /// Acquires `n` permits with `options`: its wait bound, and its lease
    /// (fixed, never renewed: the permits expire then) or, without one,
    /// the watchdog's renewal.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// use lock_core::AcquireOptions;
    /// use std::time::Duration;
    /// let opts = AcquireOptions::new().lease(Duration::from_secs(30));
    /// let permit = client.permit_semaphore("jobs")?.acquire_with(1, opts).await?;
    /// assert_eq!(permit.lease(), Some(Duration::from_secs(30)));
    /// # Ok(()) }
    /// ```
    pub async fn acquire_with(&self, n: u32, options: AcquireOptions) -> Result<Permits> {
        self.inner.acquire(n, options).await
    }

    /// The permits available and every permit held now, with the time
    /// left on its lease (expired permits are given back first). Reads at
    /// most `limit` held permits, soonest to expire first.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let status = client.permit_semaphore("jobs")?.status(100).await?;
    /// for permit in &status.held {
    ///     println!("{} expires in {:?}", permit.id, permit.expires_in);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn status(&self, limit: usize) -> Result<SemaphoreStatus> {
        let available = self.available().await?;
        let core = &self.inner.target.engine.core;
        let keys = self.inner.keys();
        let time = core.run_cmd(&redis::cmd("TIME")).await?;
        let now_ms = server_ms(&time)?;
        let mut range = redis::cmd("ZRANGE");
        let last = i64::try_from(limit.saturating_sub(1)).unwrap_or(i64::MAX);
        range.arg(&keys.timeout).arg(0).arg(last).arg("WITHSCORES");
        let reply = if limit == 0 {
            Value::Array(Vec::new())
        } else {
            core.run_cmd(&range).await?
        };
        let held = held_permits(&reply, now_ms)?;
        let mut count = redis::cmd("ZCARD");
        count.arg(&keys.timeout);
        let held_total = match core.run_cmd(&count).await? {
            Value::Int(n) => u64::try_from(n).unwrap_or(0),
            other => return Err(crate::protocol::unexpected_reply("ZCARD", &other)),
        };
        Ok(SemaphoreStatus {
            available,
            held_total,
            held,
        })
    }
}

/// Redisson's "no lease" expiry (`Long.MAX_VALUE / 10_000` ms).
const NO_LEASE: f64 = 922_337_203_685_477.0;

fn server_ms(time: &Value) -> Result<u64> {
    let parts: Option<Vec<u64>> = match time {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
                _ => None,
            })
            .collect(),
        _ => None,
    };
    match parts.as_deref() {
        Some([secs, micros]) => Ok(secs * 1000 + micros / 1000),
        _ => Err(crate::protocol::unexpected_reply("TIME", time)),
    }
}

fn held_permits(reply: &Value, now_ms: u64) -> Result<Vec<HeldPermit>> {
    let Value::Array(items) = reply else {
        return Err(crate::protocol::unexpected_reply("ZRANGE", reply));
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Double(d) => Some(d.to_string()),
        _ => None,
    };
    // ids are 16 bytes in the set, shown as 32 hex digits (as Redisson
    // shows them); anything else as text
    let id_of = |v: &Value| match v {
        Value::BulkString(b) if b.len() == 16 => {
            Some(b.iter().map(|byte| format!("{byte:02x}")).collect())
        }
        other => text(other),
    };
    items
        .chunks(2)
        .map(|pair| match pair {
            [id, score] => {
                let id =
                    id_of(id).ok_or_else(|| crate::protocol::unexpected_reply("ZRANGE", reply))?;
                let expiry: f64 = text(score)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| crate::protocol::unexpected_reply("ZRANGE", reply))?;
                let expires_in = (expiry < NO_LEASE)
                    .then(|| Duration::from_millis((expiry as u64).saturating_sub(now_ms)));
                Ok(HeldPermit { id, expires_in })
            }
            _ => Err(crate::protocol::unexpected_reply("ZRANGE", reply)),
        })
        .collect()
}

/// What [`PermitSemaphore::status`] read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreStatus {
    /// Permits available now.
    pub available: u64,
    /// How many permits are held (by any client, Redisson's included).
    pub held_total: u64,
    /// The held permits read (up to the limit asked for).
    pub held: Vec<HeldPermit>,
}

/// One held permit of an expirable semaphore.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldPermit {
    /// Its id (32 hex digits, as Redisson shows it).
    pub id: String,
    /// Time left on its lease; `None`: no lease (a Redisson client's
    /// permit acquired without one).
    pub expires_in: Option<Duration>,
}

/// Permits of one acquisition (see [`Semaphore::acquire`],
/// [`PermitSemaphore::acquire`]): given back exactly once, by
/// [`release`](Self::release) or, when dropped, in the background.
///
/// Permits of a [`PermitSemaphore`] are held like a lock: a validity
/// deadline (the lease from the last confirmed renewal, less a margin),
/// [`lost`](Self::lost) when it passes or Redis says they are gone.
/// Permits of a plain [`Semaphore`] have no lease: they stay valid until
/// released or until the client shuts down.
#[must_use = "dropping the permits gives them back at once"]
#[derive(Debug)]
pub struct Permits {
    inner: OwnedPermits,
}

impl Permits {
    /// The semaphore's name.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let p = client.semaphore("jobs")?.acquire(1).await?;
    /// assert_eq!(p.name(), "jobs");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.record().keys.name
    }

    /// How many permits this acquisition holds.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// assert_eq!(client.semaphore("jobs")?.acquire(3).await?.count(), 3);
    /// # Ok(()) }
    /// ```
    pub fn count(&self) -> u32 {
        self.inner.record().n
    }

    /// The permit ids (expirable kind: 32 hex digits each, as Redisson
    /// shows them in the semaphore's `{name}:timeout` set; empty for the
    /// plain kind).
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let p = client.permit_semaphore("jobs")?.acquire(2).await?;
    /// assert_eq!(p.ids().len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn ids(&self) -> &[String] {
        &self.inner.record().ids
    }

    /// The fixed lease asked for; `None`: renewed by the watchdog (or the
    /// plain kind, which has no lease).
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// assert_eq!(client.permit_semaphore("jobs")?.acquire(1).await?.lease(), None);
    /// # Ok(()) }
    /// ```
    pub fn lease(&self) -> Option<Duration> {
        self.inner.record().lease
    }

    /// Whether the permits are still held: not known lost, validity
    /// deadline not passed. A local check, no Redis call.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let p = client.permit_semaphore("jobs")?.acquire(1).await?;
    /// assert!(p.is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.inner.record().hold.is_valid()
    }

    /// `Ok(())` while held, else [`Error::Lost`]: call it before a step
    /// that must run within the limit.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let p = client.permit_semaphore("jobs")?.acquire(1).await?;
    /// p.ensure_held()?;
    /// # Ok(()) }
    /// ```
    pub fn ensure_held(&self) -> Result<()> {
        if self.is_held() {
            Ok(())
        } else {
            Err(Error::Lost {
                name: self.name().to_string(),
            })
        }
    }

    /// Time left before the validity deadline (zero once lost).
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let p = client.permit_semaphore("jobs")?.acquire(1).await?;
    /// assert!(p.remaining() > std::time::Duration::ZERO);
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.inner.record().hold.remaining()
    }

    /// Resolves when the permits are lost: their validity deadline passed
    /// (renewals failed), Redis says they are gone, or the client shut
    /// down. Use it to stop work that must not outlive them.
    ///
    /// ```no_run
    /// # async fn work() {}
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let p = client.permit_semaphore("jobs")?.acquire(1).await?;
    /// tokio::select! {
    ///     _ = work() => {}
    ///     _ = p.lost() => eprintln!("permit lost; stopped"),
    /// }
    /// p.release().await.ok();
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.inner.record().hold.lost().await
    }

    /// Gives the permits back now. [`Error::Lost`] when they were lost
    /// before (expired and reclaimed, the validity deadline passed, or the
    /// client's shutdown gave them back): nothing else is given back then.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// let p = client.semaphore("jobs")?.acquire(1).await?;
    /// p.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<()> {
        self.inner.release().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_permits_read_redisson_scores() -> Result<()> {
        let reply = Value::Array(vec![
            Value::BulkString(vec![0xab; 16]),
            Value::BulkString(b"1500".to_vec()),
            Value::BulkString(b"bb".to_vec()),
            Value::BulkString(b"922337203685477".to_vec()),
        ]);
        let held = held_permits(&reply, 1000)?;
        assert_eq!(held[0].expires_in, Some(Duration::from_millis(500)));
        assert_eq!(held[0].id, "ab".repeat(16));
        assert_eq!(held[1].expires_in, None);
        assert!(held_permits(&Value::Nil, 0).is_err());
        Ok(())
    }
}
