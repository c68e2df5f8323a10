//! The layer's log events: one per rejection, with the lock and the
//! reason, at the documented level. In the `logs` binary, whose every test
//! runs the library under a subscriber of its own: a capturing subscriber
//! set with `with_default` misses events when other tests of the same
//! binary hit the same call sites concurrently from threads without one.

use std::convert::Infallible;
use std::time::Duration;

use crate::support::layer::lock_error;
use crate::support::{self, cmd, prefixed_client, raw, within, Capture};
use lock_tower::{BoxError, LockLayer};
use tower::{service_fn, ServiceBuilder, ServiceExt};

/// The layer's rejection events among everything captured, as
/// `(level, line)`.
fn rejection_events(capture: &Capture, level: tracing::Level) -> Vec<String> {
    capture
        .at_least(level)
        .into_iter()
        .filter(|line| {
            line.contains(" message=request rejected: ")
                || line.contains(" message=request cancelled: ")
        })
        .collect()
}

#[test]
fn each_rejection_is_one_event_with_its_reason() {
    let capture = Capture::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut server = support::server();
    let reasons = tracing::subscriber::with_default(capture.clone(), || {
        rt.block_on(async {
            let client = prefixed_client(
                &server,
                Duration::from_millis(900),
                Duration::from_millis(500),
            );
            let svc = ServiceBuilder::new()
                .layer(
                    LockLayer::generic(client.clone(), |key: &&'static str| Some(*key))
                        .wait(Duration::from_millis(100))
                        .cancel_on_lost(),
                )
                .service(service_fn(|key: &'static str| async move {
                    if key == "slow" {
                        tokio::time::sleep(Duration::from_secs(10)).await;
                    }
                    Ok::<_, Infallible>(())
                }));
            let mut reasons = Vec::new();
            let mut outcome = |out: Result<(), BoxError>| {
                reasons.push(lock_error(&out.expect_err("rejected")).reason());
            };

            // busy
            let held = client.lock("busy").expect("name").acquire().await;
            let held = held.expect("acquire");
            outcome(svc.clone().oneshot("busy").await);
            held.release().await.expect("release");
            // invalid key
            outcome(svc.clone().oneshot("").await);
            // lost
            let slow = tokio::spawn(svc.clone().oneshot("slow"));
            let mut observer = raw(&server).await;
            let present = support::eventually(Duration::from_secs(5), || {
                let mut observer = observer.clone();
                async move { cmd::<i64, _>(&mut observer, &["EXISTS", "app:slow"]).await == 1 }
            })
            .await;
            assert!(present.is_some(), "the slow request never took its lock");
            let _: i64 = cmd(&mut observer, &["DEL", "app:slow"]).await;
            outcome(
                within(Duration::from_secs(3), "the lost rejection", slow)
                    .await
                    .expect("task"),
            );
            // redis
            server.kill();
            outcome(within(Duration::from_secs(10), "redis down", svc.oneshot("down")).await);
            reasons
        })
    });
    assert_eq!(reasons, ["busy", "invalid_key", "lost", "redis"]);

    let all = rejection_events(&capture, tracing::Level::TRACE);
    assert_eq!(all.len(), 4, "one event per rejection: {all:#?}");
    let expected = [
        ("DEBUG", "\"busy\"", "reason=\"busy\""),
        ("DEBUG", "\"\"", "reason=\"invalid_key\""),
        ("INFO", "\"slow\"", "reason=\"lost\""),
        ("WARN", "\"down\"", "reason=\"redis\""),
    ];
    for (line, (level, lock, reason)) in all.iter().zip(expected) {
        assert!(line.starts_with(&format!("event {level} ")), "{line}");
        assert!(line.contains(&format!("lock={lock}")), "{line}");
        assert!(line.contains(reason), "{line}");
    }
    assert!(all[3].contains("error="), "{}", all[3]);
    // Nothing above DEBUG for contention or bad input.
    let loud = rejection_events(&capture, tracing::Level::INFO);
    assert_eq!(loud.len(), 2, "{loud:#?}");
}
