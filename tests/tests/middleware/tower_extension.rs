//! The request's lock with the generic flavour (`HeldLock::current()` in
//! the inner service) and `cancel_on_lost` at the tower level; private
//! redis-servers. The layer's log events: `tower_extension_logging` (in
//! the `logs` binary).

use std::convert::Infallible;
use std::time::Duration;

use crate::support::layer::lock_error;
use crate::support::{self, cmd, prefixed_client, raw, within};
use lock_core::HeldLock;
use lock_tower::LockLayer;
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[tokio::test]
async fn held_lock_current_in_a_generic_service_is_the_request_lock() {
    let server = support::server();
    let client = prefixed_client(&server, Duration::from_secs(5), Duration::from_millis(500));
    let observer = raw(&server).await;
    let svc = ServiceBuilder::new()
        .layer(LockLayer::generic(client, |tenant: &u32| {
            Some(format!("tenant:{tenant}"))
        }))
        .service(service_fn(move |_tenant: u32| {
            let mut observer = observer.clone();
            async move {
                let held = HeldLock::current().expect("the request's lock");
                let token_key = format!("redisson_lock_token:{{{}}}", held.key());
                let redis_token: Option<u64> = cmd(&mut observer, &["GET", &token_key]).await;
                Ok::<_, Infallible>((held, redis_token))
            }
        }));
    assert!(HeldLock::current().is_none(), "no lock outside the service");
    let mut last = 0;
    for _ in 0..3 {
        let (held, redis_token) = within(Duration::from_secs(10), "a job", svc.clone().oneshot(7))
            .await
            .expect("the job ran");
        assert_eq!(held.name(), "tenant:7");
        assert_eq!(held.key(), "app:tenant:7");
        assert_eq!(redis_token, Some(held.fencing_token()));
        assert!(held.fencing_token() > last, "tokens must grow");
        last = held.fencing_token();
        // The request is over: its lock was released.
        assert!(
            support::eventually(Duration::from_secs(5), || async { !held.is_held() })
                .await
                .is_some(),
            "the lock outlived its request"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_cancel_on_lost_fails_with_a_lost_lock_error_and_stops_the_service() {
    let server = support::server();
    let client = prefixed_client(
        &server,
        Duration::from_millis(900),
        Duration::from_millis(500),
    );
    let observer = raw(&server).await;
    let work = Duration::from_secs(5);
    let (entered_tx, mut entered_rx) = tokio::sync::mpsc::unbounded_channel();
    let svc = ServiceBuilder::new()
        .layer(LockLayer::generic(client, |_: &()| Some("job")).cancel_on_lost())
        .service(service_fn(move |()| {
            let (mut observer, entered) = (observer.clone(), entered_tx.clone());
            async move {
                let _ = entered.send(Instant::now());
                tokio::time::sleep(work).await;
                let _: i64 = cmd(&mut observer, &["INCR", "after"]).await;
                Ok::<_, Infallible>(())
            }
        }));
    let job = tokio::spawn(svc.oneshot(()));
    let entered = within(Duration::from_secs(5), "the job starts", entered_rx.recv())
        .await
        .expect("an entry");
    let mut observer = raw(&server).await;
    let removed: i64 = cmd(&mut observer, &["DEL", "app:job"]).await;
    assert_eq!(removed, 1, "the lock was not in Redis");
    let err = within(Duration::from_secs(3), "the lost error after the DEL", job)
        .await
        .expect("job task")
        .expect_err("the job was cancelled");
    let err = lock_error(&err);
    assert!(err.is_lost() && !err.is_redis(), "{err}");
    assert_eq!((err.key(), err.reason()), ("job", "lost"));
    tokio::time::sleep_until(entered + work + Duration::from_millis(700)).await;
    let after: Option<i64> = cmd(&mut observer, &["GET", "after"]).await;
    assert_eq!(after, None, "the cancelled service ran on after its sleep");
}
