//! Counters, gauges and histograms through the `metrics` facade (feature
//! `metrics`; the crate docs, "Metrics", list them).
//!
//! Every function here is a no-op without the feature: the bodies are
//! compiled only with it, and the types are empty. With it, each call looks
//! the metric up in the installed recorder under a static key (literal name
//! and labels: nothing is allocated per call). No label names a lock: the
//! label sets are fixed and small.

use tokio::time::Instant;

/// How an acquire call ended (label `outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireOutcome {
    /// A new hold: from Redis, or handed over by a local holder.
    Acquired,
    /// One more count of a hold the caller's context or section has.
    Reentered,
    /// A single attempt (`try_acquire`, `no_wait`) found the lock held.
    Busy,
    /// The wait bound passed.
    Timeout,
    /// The client was shut down.
    Closed,
    /// Anything else: Redis unreachable, invalid input, a lost section, ...
    Error,
}

/// How a release ended (label `outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseOutcome {
    /// Freed, handed on, or one count taken off in Redis.
    Released,
    /// Redis no longer had the hold.
    NotHeld,
    /// Redis could not be reached (the hold expires with its lease).
    Error,
    /// Released by `LockClient::shutdown`.
    Shutdown,
}

/// Why a renewal failed (label `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenewalFailure {
    /// Redis answered that the hold is gone.
    Gone,
    /// Redis did not answer (an error or a time-out).
    Error,
}

/// Registers the descriptions and units of every metric with the recorder
/// installed now (called once per client built).
#[inline]
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    {
        use ::metrics::Unit;
        ::metrics::describe_counter!("lock_core_acquisitions_total", "Acquire calls, by outcome");
        ::metrics::describe_histogram!(
            "lock_core_acquire_duration_seconds",
            Unit::Seconds,
            "Wall time of acquire calls, by outcome"
        );
        ::metrics::describe_histogram!(
            "lock_core_wait_duration_seconds",
            Unit::Seconds,
            "Time from the call to the grant of acquisitions that found the lock held"
        );
        ::metrics::describe_gauge!("lock_core_held_locks", "Holds this process has now");
        ::metrics::describe_counter!(
            "lock_core_renewals_total",
            "Successful watchdog renewals, one per hold renewed"
        );
        ::metrics::describe_counter!(
            "lock_core_renewal_failures_total",
            "Failed watchdog renewals, by reason"
        );
        ::metrics::describe_counter!("lock_core_lost_total", "Holds lost");
        ::metrics::describe_counter!(
            "lock_core_handoffs_total",
            "Locks handed straight to a waiter of this client"
        );
        ::metrics::describe_counter!("lock_core_releases_total", "Releases, by outcome");
    }
}

/// One acquire call, begun at `started`, ended with `outcome`.
#[inline]
pub(crate) fn acquisition(outcome: AcquireOutcome, started: Instant) {
    #[cfg(feature = "metrics")]
    {
        use AcquireOutcome::*;
        let secs = started.elapsed().as_secs_f64();
        // Literal labels: static keys, nothing allocated.
        let (counter, histogram) = match outcome {
            Acquired => (
                ::metrics::counter!("lock_core_acquisitions_total", "outcome" => "acquired"),
                ::metrics::histogram!("lock_core_acquire_duration_seconds", "outcome" => "acquired"),
            ),
            Reentered => (
                ::metrics::counter!("lock_core_acquisitions_total", "outcome" => "reentered"),
                ::metrics::histogram!("lock_core_acquire_duration_seconds", "outcome" => "reentered"),
            ),
            Busy => (
                ::metrics::counter!("lock_core_acquisitions_total", "outcome" => "busy"),
                ::metrics::histogram!("lock_core_acquire_duration_seconds", "outcome" => "busy"),
            ),
            Timeout => (
                ::metrics::counter!("lock_core_acquisitions_total", "outcome" => "timeout"),
                ::metrics::histogram!("lock_core_acquire_duration_seconds", "outcome" => "timeout"),
            ),
            Closed => (
                ::metrics::counter!("lock_core_acquisitions_total", "outcome" => "closed"),
                ::metrics::histogram!("lock_core_acquire_duration_seconds", "outcome" => "closed"),
            ),
            Error => (
                ::metrics::counter!("lock_core_acquisitions_total", "outcome" => "error"),
                ::metrics::histogram!("lock_core_acquire_duration_seconds", "outcome" => "error"),
            ),
        };
        counter.increment(1);
        histogram.record(secs);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (outcome, started);
}

/// An acquisition begun at `started` that found the lock held got it now.
#[inline]
pub(crate) fn waited(started: Instant) {
    #[cfg(feature = "metrics")]
    ::metrics::histogram!("lock_core_wait_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = started;
}

/// `n` holds renewed by one watchdog pass.
#[inline]
pub(crate) fn renewed_many(n: usize) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!("lock_core_renewals_total").increment(n as u64);
    #[cfg(not(feature = "metrics"))]
    let _ = n;
}

/// One hold's renewal failed.
#[inline]
pub(crate) fn renewal_failed(reason: RenewalFailure) {
    #[cfg(feature = "metrics")]
    match reason {
        RenewalFailure::Gone => {
            ::metrics::counter!("lock_core_renewal_failures_total", "reason" => "gone").increment(1)
        }
        RenewalFailure::Error => {
            ::metrics::counter!("lock_core_renewal_failures_total", "reason" => "error")
                .increment(1)
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// One hold lost (called once per hold).
#[inline]
pub(crate) fn lost() {
    #[cfg(feature = "metrics")]
    ::metrics::counter!("lock_core_lost_total").increment(1);
}

/// One local hand-off done.
#[inline]
pub(crate) fn handed_off() {
    #[cfg(feature = "metrics")]
    ::metrics::counter!("lock_core_handoffs_total").increment(1);
}

/// One release ended with `outcome`.
#[inline]
pub(crate) fn release(outcome: ReleaseOutcome) {
    #[cfg(feature = "metrics")]
    {
        let counter = match outcome {
            ReleaseOutcome::Released => {
                ::metrics::counter!("lock_core_releases_total", "outcome" => "released")
            }
            ReleaseOutcome::NotHeld => {
                ::metrics::counter!("lock_core_releases_total", "outcome" => "not_held")
            }
            ReleaseOutcome::Error => {
                ::metrics::counter!("lock_core_releases_total", "outcome" => "error")
            }
            ReleaseOutcome::Shutdown => {
                ::metrics::counter!("lock_core_releases_total", "outcome" => "shutdown")
            }
        };
        counter.increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = outcome;
}

/// A hold's place in `lock_core_held_locks`: counted when the hold is
/// created, uncounted once, when it ends, is lost or given up, or at the
/// latest when the hold itself is dropped. Empty without the feature.
#[derive(Debug)]
pub(crate) struct HeldGauge {
    #[cfg(feature = "metrics")]
    counted: std::sync::atomic::AtomicBool,
}

impl HeldGauge {
    /// Counts one more hold.
    #[inline]
    pub(crate) fn count() -> Self {
        #[cfg(feature = "metrics")]
        ::metrics::gauge!("lock_core_held_locks").increment(1.0);
        HeldGauge {
            #[cfg(feature = "metrics")]
            counted: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// The hold is no longer held; only the first call counts.
    #[inline]
    pub(crate) fn uncount(&self) {
        #[cfg(feature = "metrics")]
        if self
            .counted
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            ::metrics::gauge!("lock_core_held_locks").decrement(1.0);
        }
    }
}

impl Drop for HeldGauge {
    fn drop(&mut self) {
        self.uncount();
    }
}
