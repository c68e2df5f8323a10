//! What the layer reports about its rejections: one tracing event and one
//! counter increment each (see the crate docs, "Logging" and "Metrics").

use crate::error::LockError;

/// The counter of rejections, labelled `reason` (feature `metrics`).
#[cfg(feature = "metrics")]
pub(crate) const REJECTIONS: &str = "lock_tower_rejections_total";

/// The counter of a permit layer's rejections, labelled `reason`
/// (feature `metrics`).
#[cfg(feature = "metrics")]
pub(crate) const PERMIT_REJECTIONS: &str = "lock_tower_permit_rejections_total";

/// The target of the layer's events.
const TARGET: &str = "lock_tower";

/// Reports one rejection: an event at the reason's level, and the counter.
pub(crate) fn rejection(err: &LockError) {
    if err.is_permit_limit() {
        return permit_rejection(err);
    }
    let reason = err.reason();
    let lock = err.key();
    if err.is_busy() || err.is_invalid_key() {
        tracing::debug!(target: TARGET, lock, reason, "request rejected: {err}");
    } else if err.is_lost() {
        tracing::info!(target: TARGET, lock, reason, "request cancelled: {err}");
    } else if err.is_closed() {
        tracing::info!(target: TARGET, lock, reason, "request rejected: {err}");
    } else {
        let error = err.lock_error();
        tracing::warn!(target: TARGET, lock, reason, %error, "request rejected: {err}");
    }
    #[cfg(feature = "metrics")]
    metrics::counter!(REJECTIONS, "reason" => reason).increment(1);
}

/// Reports one rejection of a permit layer: as a lock layer's, with the
/// field `limit` (the key) and a counter of its own.
fn permit_rejection(err: &LockError) {
    let reason = err.reason();
    let limit = err.key();
    if err.is_busy() || err.is_invalid_key() {
        tracing::debug!(target: TARGET, limit, reason, "request rejected: {err}");
    } else if err.is_closed() {
        tracing::info!(target: TARGET, limit, reason, "request rejected: {err}");
    } else {
        let error = err.lock_error();
        tracing::warn!(target: TARGET, limit, reason, %error, "request rejected: {err}");
    }
    #[cfg(feature = "metrics")]
    metrics::counter!(PERMIT_REJECTIONS, "reason" => reason).increment(1);
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use std::collections::HashMap;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tower::{service_fn, Layer, ServiceExt};

    use super::*;
    use crate::LockLayer;

    /// `lock_tower_rejections_total` by `reason`, from what `recorder` saw.
    fn counts(snapshot: metrics_util::debugging::Snapshot) -> HashMap<String, u64> {
        snapshot
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == REJECTIONS)
            .map(|(key, _, _, value)| {
                let reason = key
                    .key()
                    .labels()
                    .find(|l| l.key() == "reason")
                    .map(|l| l.value().to_string())
                    .unwrap_or_default();
                let DebugValue::Counter(n) = value else {
                    panic!("{REJECTIONS} is not a counter");
                };
                (reason, n)
            })
            .collect()
    }

    #[test]
    fn each_rejection_counts_once_under_its_reason() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let busy = LockError::new(
            "k",
            lock_core::Error::WaitTimeout {
                name: "k".into(),
                waited: Default::default(),
            },
        );
        let lost = LockError::new("k", lock_core::Error::Lost { name: "k".into() });
        let redis = LockError::new("k", lock_core::Error::PoolTimeout);
        metrics::with_local_recorder(&recorder, || {
            for err in [&busy, &busy, &lost, &redis] {
                rejection(err);
            }
        });
        let seen = counts(snapshotter.snapshot());
        let expected = [("busy", 2), ("lost", 1), ("redis", 1)]
            .map(|(r, n)| (r.to_string(), n))
            .into();
        assert_eq!(seen, expected);
    }

    #[test]
    fn permit_rejections_count_under_their_own_name() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let full = LockError::for_permit(
            "limit:k",
            lock_core::Error::WaitTimeout {
                name: "limit:k".into(),
                waited: Default::default(),
            },
        );
        metrics::with_local_recorder(&recorder, || rejection(&full));
        let names: Vec<String> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, ..)| key.key().name().to_string())
            .collect();
        assert_eq!(names, [PERMIT_REJECTIONS]);
    }

    #[test]
    fn the_layer_counts_the_rejections_it_answers() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let out = metrics::with_local_recorder(&recorder, || {
            rt.block_on(async {
                // An invalid (empty) key is rejected before any Redis call.
                let client = lock_core::LockClient::builder("redis://127.0.0.1:1")
                    .build()
                    .expect("a valid configuration");
                let svc = LockLayer::generic(client, |_: &()| Some(""))
                    .layer(service_fn(|()| async { Ok::<_, std::io::Error>(()) }));
                svc.oneshot(()).await
            })
        });
        let err = out.expect_err("an empty key is rejected");
        assert!(err
            .downcast_ref::<LockError>()
            .is_some_and(LockError::is_invalid_key));
        let expected = [("invalid_key".to_string(), 1)].into();
        assert_eq!(counts(snapshotter.snapshot()), expected);
    }
}
