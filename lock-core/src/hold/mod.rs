//! A hold's life: one identity, one deadline, one place.
//!
//! A *hold* is what one fresh acquisition creates (or one hand-off from a
//! local holder); re-entries add counts to it; it ends when its count
//! reaches zero, when it is lost, or when it is handed on.
//!
//! - **Identity.** Every hold has an owner id `"<client-uuid>:<n>"` that no
//!   other hold ever had: it is the hold's field in the lock's Redis hash
//!   (Redisson's layout, unchanged), its entry in the watchdog and in the
//!   local queue. Release, renewal, re-entry and hand-off scripts name that
//!   field, so a stale guard can only ever touch its own, finished hold —
//!   never a newer hold of the same lock context.
//! - **Deadline.** A hold is valid until the send time of the last acquire
//!   or renewal Redis confirmed, plus the lease, minus a drift margin
//!   ([`drift_margin`]). [`Hold::is_valid`] compares that deadline with the
//!   monotonic clock; [`Hold::lost`] is a timer at the deadline. Renewal
//!   replies only ever push the deadline later, and only while it has not
//!   passed: once invalid, a hold stays invalid.
//! - **At most once.** Fresh acquisitions use a new owner id per attempt;
//!   re-entries carry a request id remembered by the script. An attempt
//!   whose reply was lost (or arrived too late) is cancelled by the `cancel`
//!   script, which undoes it if it was applied and makes sure a late copy
//!   is never applied.
//! - **Ended once, by its last count.** The hold counts its guards here
//!   ([`Hold::take_count`]); changes of the count (re-entries, releases)
//!   run one at a time ([`Hold::change`]). A release names the count it
//!   takes off: one of several is applied only when Redis has exactly that
//!   count (a late or repeated copy finds another count and changes
//!   nothing — or, when a re-entry made that count again meanwhile, takes
//!   one more off: Redis' count drifts one short, never to zero), and only
//!   the last one ends the hold in Redis, whatever count Redis has; a
//!   cancelled re-entry never takes the last count either. So no copy of a
//!   release, however late, can free a lock whose guards still exist —
//!   without relying on a latch key outliving the delay.

pub(crate) mod acquire;
pub(crate) mod background;
pub(crate) mod count;
pub(crate) mod engine;
pub(crate) mod eviction;
pub(crate) mod fair;
pub(crate) mod group_commit;
pub(crate) mod ids;
pub(crate) mod multi;
pub(crate) mod permit_registry;
pub(crate) mod permits;
pub(crate) mod queue;
pub(crate) mod release;
pub(crate) mod replicas;
pub(crate) mod run_to_end;
pub(crate) mod shared;
pub(crate) mod shutdown;
pub(crate) mod slot_owners;
pub(crate) mod target;
pub(crate) mod watchdog;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::HeldGauge;
use crate::protocol::keys::LockKeys;

/// The lease of a hold in milliseconds: the fixed one asked for, or the
/// watchdog's; at least 1.
pub(crate) fn lease_ms(lease: Option<Duration>, watchdog_timeout: Duration) -> u64 {
    let ms = lease.unwrap_or(watchdog_timeout).as_millis();
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

/// The part of a lease that is not trusted: clocks of the client and of the
/// Redis server may run at slightly different rates, and timers fire late.
/// 1 % of the lease plus 2 ms (the margin the Redlock analysis uses).
///
/// ```text
/// lease 30 s  -> valid for 29.698 s after the request was sent
/// lease 600 ms -> valid for 592 ms
/// ```
pub(crate) fn drift_margin(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// How long after the send time of a confirmed acquire or renewal a hold
/// with `lease` stays valid.
pub(crate) fn validity(lease: Duration) -> Duration {
    lease.saturating_sub(drift_margin(lease))
}

/// One hold of a lock by this client.
///
/// `repr(C)`: the fields every validity check and renewal reads come first,
/// side by side and next to the reference counts (the watchdog touches
/// 100 000 holds per period: mostly one cache line each, where the compiler's
/// field order spread them over two).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Hold {
    /// Reference point of `valid_until_us`.
    origin: Instant,
    /// End of validity, in µs after `origin`.
    valid_until_us: AtomicU64,
    /// Set (before `lost` is cancelled) once the hold is known lost: read
    /// on every validity check, where the token's own check takes a lock.
    lost_flag: AtomicBool,
    /// The lock it is a hold of (its name and keys, for logs).
    pub(crate) keys: Arc<LockKeys>,
    /// The hold's identity: its field in the lock hash. Never reused.
    pub(crate) owner: Arc<str>,
    /// The fencing token drawn when the hold was created.
    pub(crate) token: u64,
    /// The lock context whose manual acquisitions re-enter this hold
    /// (`None`: only acquisitions nested in its section, if any).
    pub(crate) context: Option<u64>,
    /// Cancelled once the hold is known lost (or its deadline was seen to pass).
    lost: CancellationToken,
    /// Set (before `ended` is cancelled) once the hold ended.
    ended_flag: AtomicBool,
    /// Cancelled once the hold ended normally (released to count zero, or
    /// handed on) or was lost: nobody holds the lock through it any more.
    ended: CancellationToken,
    /// Set by the first `mark_lost`, so the loss is logged once.
    lost_logged: AtomicBool,
    /// Redis confirmed the hold is gone (a renewal, re-entry or release
    /// found its field missing): releasing it there is pointless. A hold
    /// that is only past its deadline may still be in Redis, and is
    /// released there like any other.
    gone: AtomicBool,
    /// Its place in the `lock_core_held_locks` gauge (feature `metrics`).
    gauge: HeldGauge,
    /// Counts of the hold this client has given out (guards), plus a
    /// re-entry in flight: the release that takes the last one ends the
    /// hold in Redis.
    counts: AtomicU32,
    /// Held while the hold's count changes (a re-entry or a release is
    /// sent), so that each request names the count it finds.
    changes: tokio::sync::Mutex<()>,
}

impl Hold {
    /// A hold granted by a request sent at `sent_at` with `lease`; `None`
    /// when its validity has already run out (the reply came too late).
    pub(crate) fn granted(
        keys: Arc<LockKeys>,
        owner: Arc<str>,
        token: u64,
        context: Option<u64>,
        sent_at: Instant,
        lease: Duration,
    ) -> Option<Arc<Hold>> {
        let deadline = sent_at + validity(lease);
        if Instant::now() >= deadline {
            return None;
        }
        Some(Arc::new(Hold {
            keys,
            owner,
            token,
            context,
            origin: sent_at,
            valid_until_us: AtomicU64::new(micros(validity(lease))),
            lost: CancellationToken::new(),
            lost_flag: AtomicBool::new(false),
            ended_flag: AtomicBool::new(false),
            ended: CancellationToken::new(),
            lost_logged: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            gauge: HeldGauge::count(),
            counts: AtomicU32::new(1),
            changes: tokio::sync::Mutex::new(()),
        }))
    }

    /// Waits until no other change of the hold's count (a re-entry or a
    /// release) is in flight; the count stays this caller's until the
    /// returned guard is dropped.
    pub(crate) async fn change(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.changes.lock().await
    }

    /// The counts this client has given out (see `counts`).
    pub(crate) fn counts(&self) -> u32 {
        self.counts.load(Ordering::Acquire)
    }

    /// One more count (a re-entry about to be sent); taken back with
    /// [`take_count`](Self::take_count) if it is not granted.
    pub(crate) fn add_count(&self) {
        self.counts.fetch_add(1, Ordering::AcqRel);
    }

    /// Takes one count off; returns how many there were before (1: this was
    /// the last, the hold ends; 0: it had ended already).
    pub(crate) fn take_count(&self) -> u32 {
        match self
            .counts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some(c.saturating_sub(1))
            }) {
            Ok(before) | Err(before) => before,
        }
    }

    /// When the hold stops being valid, unless renewed before.
    pub(crate) fn deadline(&self) -> Instant {
        self.origin + Duration::from_micros(self.valid_until_us.load(Ordering::Acquire))
    }

    /// Whether the hold is valid now: not known lost, deadline not passed.
    pub(crate) fn is_valid(&self) -> bool {
        !self.is_marked_lost() && Instant::now() < self.deadline()
    }

    /// Time left before the deadline (zero once invalid).
    pub(crate) fn remaining(&self) -> Duration {
        if self.is_marked_lost() {
            return Duration::ZERO;
        }
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// Redis confirmed a request (renewal, re-entry) sent at `sent_at` that
    /// set the lease to at least `lease`: the deadline moves to
    /// `sent_at + validity(lease)` if that is later. Returns false (and
    /// changes nothing) when the hold is no longer valid: a late reply
    /// never revives a hold.
    pub(crate) fn extend(&self, sent_at: Instant, lease: Duration) -> bool {
        let new_end = sent_at + validity(lease);
        let new_us = micros(new_end.saturating_duration_since(self.origin));
        let mut current = self.valid_until_us.load(Ordering::Acquire);
        loop {
            if self.is_marked_lost()
                || Instant::now() >= self.origin + Duration::from_micros(current)
            {
                return false;
            }
            if new_us <= current {
                return true;
            }
            match self.valid_until_us.compare_exchange_weak(
                current,
                new_us,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    /// The hold is known lost (Redis says it is gone, or its deadline
    /// passed): wakes every `lost()` future. Logs and counts once.
    pub(crate) fn mark_lost(&self, why: &str) {
        if !self.lost_logged.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                lock = %self.keys.name,
                key = %self.keys.lock,
                owner = %self.owner,
                reason = why,
                "lock lost"
            );
            crate::metrics::lost();
        }
        self.gauge.uncount();
        self.lost_flag.store(true, Ordering::Release);
        self.lost.cancel();
    }

    /// The hold was marked lost (or given up): one atomic load.
    fn is_marked_lost(&self) -> bool {
        self.lost_flag.load(Ordering::Acquire)
    }

    /// Redis confirmed the hold is gone: marks it lost, and tells its guards
    /// that there is nothing left to release.
    pub(crate) fn mark_gone(&self, why: &str) {
        self.gone.store(true, Ordering::Release);
        self.mark_lost(why);
    }

    /// The hold ended: its last count was released, or it was handed on,
    /// or it is gone. Wakes every `ended()` future.
    pub(crate) fn end(&self) {
        self.gauge.uncount();
        self.ended_flag.store(true, Ordering::Release);
        self.ended.cancel();
    }

    /// Whether the hold ended (see [`end`](Self::end)).
    pub(crate) fn has_ended(&self) -> bool {
        self.ended_flag.load(Ordering::Acquire)
    }

    /// Resolves when the hold is lost or has ended, whichever comes first.
    pub(crate) async fn ended(&self) {
        tokio::select! {
            biased;
            _ = self.ended.cancelled() => {}
            _ = self.lost() => {}
        }
    }

    /// The client shut down and gave the hold up (released it, or stopped
    /// renewing it): lost for its guards, nothing left to release; logged
    /// by the caller, not as a loss.
    pub(crate) fn give_up(&self) {
        self.gone.store(true, Ordering::Release);
        self.lost_logged.store(true, Ordering::Release);
        self.gauge.uncount();
        self.lost_flag.store(true, Ordering::Release);
        self.ended_flag.store(true, Ordering::Release);
        self.lost.cancel();
        self.ended.cancel();
    }

    /// Whether Redis confirmed the hold is gone (see `mark_gone`).
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Resolves at the hold's deadline (following renewals) or when it is
    /// marked lost, whichever comes first. One timer for the caller; no
    /// task, nothing allocated per renewal.
    pub(crate) async fn lost(&self) {
        loop {
            // Checked first: after the runtime was blocked, a timer whose
            // deadline has passed is not always ready at its first poll.
            if !self.is_valid() {
                return;
            }
            let deadline = self.deadline();
            tokio::select! {
                biased;
                _ = self.lost.cancelled() => return,
                _ = tokio::time::sleep_until(deadline) => {
                    if !self.is_valid() {
                        return;
                    }
                }
            }
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Arc<LockKeys> {
        Arc::new(LockKeys::new("", "k", 100).expect("name"))
    }

    fn hold(lease_ms: u64) -> Arc<Hold> {
        Hold::granted(
            keys(),
            Arc::from("c:1"),
            1,
            None,
            Instant::now(),
            Duration::from_millis(lease_ms),
        )
        .expect("fresh grant is valid")
    }

    #[test]
    fn margin_is_one_percent_plus_two_ms() {
        assert_eq!(
            validity(Duration::from_secs(30)),
            Duration::from_millis(29_698)
        );
        assert_eq!(
            validity(Duration::from_millis(600)),
            Duration::from_millis(592)
        );
        assert_eq!(validity(Duration::from_millis(1)), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn validity_ends_at_the_deadline_without_any_reply() {
        let h = hold(1000);
        assert!(h.is_valid());
        tokio::time::sleep(Duration::from_millis(987)).await;
        assert!(h.is_valid());
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(!h.is_valid(), "1000 ms lease: valid for 988 ms");
    }

    #[tokio::test(start_paused = true)]
    async fn lost_fires_at_the_deadline_and_follows_extensions() {
        let h = hold(1000);
        let start = Instant::now();
        let h2 = h.clone();
        let waiter = tokio::spawn(async move {
            h2.lost().await;
            Instant::now()
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(h.extend(Instant::now(), Duration::from_millis(1000)));
        let fired = waiter.await.expect("lost task");
        assert_eq!(fired - start, Duration::from_millis(500 + 988));
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_reply_never_revives_a_hold() {
        let h = hold(100);
        let sent = Instant::now();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(!h.extend(
            sent + Duration::from_millis(100),
            Duration::from_millis(100)
        ));
        assert!(!h.is_valid());
    }

    #[tokio::test(start_paused = true)]
    async fn extensions_only_move_the_deadline_later() {
        let h = hold(1000);
        let before = h.deadline();
        assert!(h.extend(Instant::now(), Duration::from_millis(10)));
        assert_eq!(h.deadline(), before);
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_past_its_validity_is_refused() {
        let sent = Instant::now();
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(Hold::granted(
            keys(),
            Arc::from("c:1"),
            1,
            None,
            sent,
            Duration::from_millis(600)
        )
        .is_none());
    }

    #[test]
    fn counts_start_at_one_and_never_go_below_zero() {
        let h = hold(10_000);
        assert_eq!(h.counts(), 1);
        h.add_count();
        assert_eq!(h.take_count(), 2);
        assert_eq!(h.take_count(), 1, "the last count");
        assert_eq!(h.take_count(), 0, "ended already");
        assert_eq!(h.counts(), 0);
    }

    #[tokio::test]
    async fn marked_lost_stays_lost() {
        let h = hold(10_000);
        h.mark_lost("test");
        assert!(!h.is_valid());
        assert!(!h.extend(Instant::now(), Duration::from_secs(10)));
        h.lost().await; // resolves at once
    }
}
