//! lock-core's metrics (feature `metrics`): every counter, gauge and
//! histogram the crate docs list, with exact counts, on a real Redis.
//!
//! Each test installs its own `DebuggingRecorder` with
//! `metrics::with_local_recorder` around a current-thread runtime: the
//! library's tasks (attempts, the watchdog, background releases) all run on
//! the test's thread, so they record into that test's recorder only, and
//! the tests of this file can run in parallel.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{self, cmd, raw, within};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// Everything recorded so far, summed over snapshots (a snapshot of the
/// debugging recorder resets counters and gauges and drains histograms).
#[derive(Clone)]
struct Probe {
    snapshotter: Snapshotter,
    seen: Arc<Mutex<Seen>>,
}

#[derive(Default)]
struct Seen {
    counters: HashMap<String, u64>,
    gauges: HashMap<String, f64>,
    histograms: HashMap<String, Vec<f64>>,
}

impl Probe {
    fn take(&self) -> std::sync::MutexGuard<'_, Seen> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let name = if labels.is_empty() {
                key.name().to_string()
            } else {
                format!("{}{{{}}}", key.name(), labels.join(","))
            };
            match value {
                DebugValue::Counter(n) => *seen.counters.entry(name).or_default() += n,
                DebugValue::Gauge(v) => *seen.gauges.entry(name).or_default() += v.into_inner(),
                DebugValue::Histogram(vs) => seen
                    .histograms
                    .entry(name)
                    .or_default()
                    .extend(vs.into_iter().map(|v| v.into_inner())),
            }
        }
        seen
    }

    /// A counter (`name{label=value}`), 0 when never incremented.
    fn counter(&self, name: &str) -> u64 {
        self.take().counters.get(name).copied().unwrap_or(0)
    }

    /// The held-locks gauge.
    fn held(&self) -> f64 {
        self.take()
            .gauges
            .get("lock_core_held_locks")
            .copied()
            .unwrap_or(0.0)
    }

    /// The samples of a histogram.
    fn samples(&self, name: &str) -> Vec<f64> {
        self.take()
            .histograms
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    /// Every counter that is not zero, for failure messages.
    fn counters(&self) -> Vec<(String, u64)> {
        let mut all: Vec<(String, u64)> = self
            .take()
            .counters
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        all.sort();
        all
    }
}

/// Runs `test` on a current-thread runtime with a recorder of its own; the
/// runtime is dropped inside, so that holds dropped with it count too.
fn recorded<F, Fut>(test: F) -> Probe
where
    F: FnOnce(Probe) -> Fut,
    Fut: Future<Output = ()>,
{
    let recorder = DebuggingRecorder::new();
    let probe = Probe {
        snapshotter: recorder.snapshotter(),
        seen: Arc::default(),
    };
    let inner = probe.clone();
    metrics::with_local_recorder(&recorder, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(test(inner));
        drop(runtime);
    });
    probe
}

const ACQUIRED: &str = "lock_core_acquisitions_total{outcome=acquired}";
const REENTERED: &str = "lock_core_acquisitions_total{outcome=reentered}";
const BUSY: &str = "lock_core_acquisitions_total{outcome=busy}";
const TIMEOUT: &str = "lock_core_acquisitions_total{outcome=timeout}";
const CLOSED: &str = "lock_core_acquisitions_total{outcome=closed}";
const ERROR: &str = "lock_core_acquisitions_total{outcome=error}";
const RELEASED: &str = "lock_core_releases_total{outcome=released}";
const NOT_HELD: &str = "lock_core_releases_total{outcome=not_held}";
const SHUTDOWN: &str = "lock_core_releases_total{outcome=shutdown}";
const WAIT: &str = "lock_core_wait_duration_seconds";

#[test]
fn uncontended_acquisitions_count_once_each_and_the_gauge_returns_to_zero() {
    let probe = recorded(|probe| async move {
        let env = support::env(30_000);
        let lock = env.client.lock("m:plain").expect("name");
        for _ in 0..3 {
            let guard = lock.acquire().await.expect("acquire");
            assert_eq!(probe.held(), 1.0, "one hold while the guard lives");
            guard.release().await.expect("release");
            assert_eq!(probe.held(), 0.0, "no hold after its release");
        }
    });
    assert_eq!(probe.counter(ACQUIRED), 3, "{:?}", probe.counters());
    assert_eq!(probe.counter(RELEASED), 3, "{:?}", probe.counters());
    assert_eq!(probe.counter(ERROR), 0);
    assert_eq!(probe.held(), 0.0);
    let durations = probe.samples("lock_core_acquire_duration_seconds{outcome=acquired}");
    assert_eq!(durations.len(), 3, "one duration per call");
    assert!(
        durations.iter().all(|s| *s >= 0.0 && *s < 5.0),
        "{durations:?}"
    );
    assert!(
        probe.samples(WAIT).is_empty(),
        "uncontended acquisitions record no wait"
    );
    assert_eq!(probe.counter("lock_core_handoffs_total"), 0);
}

#[test]
fn a_re_entry_counts_as_reentered_and_both_releases_count() {
    let probe = recorded(|probe| async move {
        let env = support::env(30_000);
        let lock = env.client.lock("m:reentry").expect("name");
        lock_core::in_context(async {
            let outer = lock.acquire().await.expect("outer");
            let inner = lock.acquire().await.expect("inner");
            assert_eq!(probe.held(), 1.0, "one hold, two counts");
            inner.release().await.expect("inner release");
            assert_eq!(probe.held(), 1.0, "still held after the re-entry's release");
            outer.release().await.expect("outer release");
        })
        .await;
    });
    assert_eq!(probe.counter(ACQUIRED), 1, "{:?}", probe.counters());
    assert_eq!(probe.counter(REENTERED), 1, "{:?}", probe.counters());
    assert_eq!(probe.counter(RELEASED), 2, "{:?}", probe.counters());
    assert_eq!(probe.held(), 0.0);
}

#[test]
fn try_acquire_on_a_lock_held_by_another_client_counts_busy() {
    let probe = recorded(|_| async move {
        let env = support::env(30_000);
        let other = support::client_for(&env.server, 30_000);
        let guard = env
            .client
            .lock("m:busy")
            .expect("name")
            .acquire()
            .await
            .expect("hold");
        let none = other
            .lock("m:busy")
            .expect("name")
            .try_acquire()
            .await
            .expect("try");
        assert!(none.is_none(), "held by the other client");
        guard.release().await.expect("release");
    });
    assert_eq!(probe.counter(BUSY), 1, "{:?}", probe.counters());
    assert_eq!(probe.counter(ACQUIRED), 1, "{:?}", probe.counters());
    assert_eq!(probe.counter(TIMEOUT), 0);
    assert_eq!(
        probe
            .samples("lock_core_acquire_duration_seconds{outcome=busy}")
            .len(),
        1
    );
}

#[test]
fn a_wait_that_times_out_counts_timeout() {
    let probe = recorded(|_| async move {
        let env = support::env(30_000);
        let other = support::client_for(&env.server, 30_000);
        let guard = env
            .client
            .lock("m:timeout")
            .expect("name")
            .acquire()
            .await
            .expect("hold");
        let err = other
            .lock("m:timeout")
            .expect("name")
            .acquire_timeout(Duration::from_millis(200))
            .await
            .expect_err("times out");
        assert!(err.is_wait_timeout(), "{err}");
        guard.release().await.expect("release");
    });
    assert_eq!(probe.counter(TIMEOUT), 1, "{:?}", probe.counters());
    assert_eq!(probe.counter(BUSY), 0);
    assert_eq!(probe.counter(ERROR), 0);
    let took = probe.samples("lock_core_acquire_duration_seconds{outcome=timeout}");
    assert_eq!(took.len(), 1);
    assert!(took[0] >= 0.2, "the call took its wait bound: {took:?}");
    assert!(
        probe.samples(WAIT).is_empty(),
        "a wait that did not get the lock records no wait duration"
    );
}

#[test]
fn a_contended_acquisition_counts_a_hand_off_and_its_wait() {
    let probe = recorded(|probe| async move {
        let env = support::env(30_000);
        let lock = env.client.lock("m:contended").expect("name");
        let first = lock.acquire().await.expect("first");
        // Two tasks queue behind the local holder; the first of them takes
        // the lock from Redis with the second queued, so its release hands
        // the lock straight to the second.
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let lock = lock.clone();
            tasks.push(tokio::spawn(async move {
                let guard = lock.acquire().await.expect("queued acquire");
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.release().await.expect("queued release");
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        first.release().await.expect("first release");
        for task in tasks {
            within(Duration::from_secs(5), "queued task", task)
                .await
                .expect("task");
        }
        assert_eq!(probe.held(), 0.0);
    });
    assert_eq!(probe.counter(ACQUIRED), 3, "{:?}", probe.counters());
    assert_eq!(
        probe.counter("lock_core_handoffs_total"),
        1,
        "{:?}",
        probe.counters()
    );
    assert_eq!(probe.counter(RELEASED), 3, "{:?}", probe.counters());
    let waits = probe.samples(WAIT);
    assert_eq!(waits.len(), 2, "both queued tasks waited: {waits:?}");
    assert!(waits.iter().all(|w| *w >= 0.1), "{waits:?}");
    assert_eq!(probe.held(), 0.0);
}

#[test]
fn a_hold_deleted_behind_the_client_counts_one_loss() {
    let probe = recorded(|probe| async move {
        let env = support::env(900);
        let mut conn = raw(&env.server).await;
        let guard = env
            .client
            .lock("m:lost")
            .expect("name")
            .acquire()
            .await
            .expect("acquire");
        // Two renewals (every 300 ms) go through first.
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(guard.is_held());
        let renewed = probe.counter("lock_core_renewals_total");
        assert!(renewed >= 1, "renewals counted: {:?}", probe.counters());
        let _: i64 = cmd(&mut conn, &["DEL", "m:lost"]).await;
        within(Duration::from_secs(3), "loss noticed", guard.lost()).await;
        // Past a few more watchdog periods: nothing more is counted.
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(probe.held(), 0.0, "a lost hold is not held");
        let err = guard.release().await.expect_err("lost");
        assert!(err.is_lost(), "{err}");
    });
    assert_eq!(
        probe.counter("lock_core_lost_total"),
        1,
        "{:?}",
        probe.counters()
    );
    assert_eq!(
        probe.counter("lock_core_renewal_failures_total{reason=gone}"),
        1,
        "{:?}",
        probe.counters()
    );
    assert_eq!(
        probe.counter("lock_core_renewal_failures_total{reason=error}"),
        0
    );
    assert_eq!(probe.held(), 0.0);
    assert_eq!(
        probe.counter(RELEASED) + probe.counter(NOT_HELD),
        0,
        "a hold known gone is not released again: {:?}",
        probe.counters()
    );
}

#[test]
fn shutdown_counts_the_holds_it_releases() {
    let probe = recorded(|probe| async move {
        let env = support::env(30_000);
        let guard = env
            .client
            .lock("m:shutdown")
            .expect("name")
            .acquire()
            .await
            .expect("acquire");
        let report = env.client.shutdown(Duration::from_secs(5)).await;
        assert_eq!(report.released, 1, "{report:?}");
        assert_eq!(probe.held(), 0.0, "given up at shutdown");
        drop(guard);
    });
    assert_eq!(probe.counter(SHUTDOWN), 1, "{:?}", probe.counters());
    assert_eq!(probe.counter(RELEASED), 0, "{:?}", probe.counters());
    assert_eq!(probe.counter("lock_core_lost_total"), 0);
    assert_eq!(probe.held(), 0.0);
}

#[test]
fn an_acquire_on_a_shut_down_client_counts_closed() {
    let probe = recorded(|_| async move {
        let env = support::env(30_000);
        env.client.shutdown(Duration::from_secs(5)).await;
        let err = env
            .client
            .lock("m:closed")
            .expect("name")
            .acquire()
            .await
            .expect_err("closed");
        assert!(err.is_closed(), "{err}");
    });
    assert_eq!(probe.counter(CLOSED), 1, "{:?}", probe.counters());
    assert_eq!(probe.counter(ERROR), 0, "{:?}", probe.counters());
}

#[test]
fn invalid_input_counts_as_an_error() {
    let probe = recorded(|_| async move {
        let env = support::env(30_000);
        let err = env
            .client
            .lock("m:invalid")
            .expect("name")
            .acquire_with_lease(Duration::ZERO)
            .await
            .expect_err("invalid lease");
        assert!(err.is_invalid_input(), "{err}");
    });
    assert_eq!(probe.counter(ERROR), 1, "{:?}", probe.counters());
    assert_eq!(probe.counter(ACQUIRED), 0);
}
