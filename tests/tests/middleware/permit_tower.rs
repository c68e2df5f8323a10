//! lock-tower's `PermitLayer` at the tower level (the generic flavour),
//! with private redis-servers.

use std::convert::Infallible;
use std::time::Duration;

use crate::support::layer::{client, lock_error};
use crate::support::{cmd, eventually, raw, server};
use lock_tower::{BoxError, PermitLayer};
use tower::{service_fn, ServiceBuilder, ServiceExt};

/// Jobs `(tenant, fail)`: keyed `limit:tenant:<tenant>`, tenant 0 has no key.
fn key(job: &(u32, bool)) -> Option<String> {
    (job.0 != 0).then(|| format!("limit:tenant:{}", job.0))
}

#[tokio::test]
async fn busy_and_inner_errors_in_the_generic_flavour() {
    let redis_server = server();
    let lock_client = client(&redis_server);
    let obs = raw(&redis_server).await;
    let worker = ServiceBuilder::new()
        .layer(PermitLayer::generic(lock_client.clone(), key, 1).wait(Duration::from_millis(100)))
        .service(service_fn(|(tenant, fail): (u32, bool)| async move {
            if fail {
                Err::<u32, BoxError>("the job failed".into())
            } else {
                Ok(tenant)
            }
        }));
    assert_eq!(worker.clone().oneshot((7, false)).await.expect("runs"), 7);
    // An inner error gives the permit back too.
    let err = worker.clone().oneshot((7, true)).await.expect_err("fails");
    assert_eq!(err.to_string(), "the job failed");
    let back = eventually(Duration::from_secs(3), || {
        let mut obs = obs.clone();
        async move { cmd::<Option<i64>, _>(&mut obs, &["GET", "limit:tenant:7"]).await == Some(1) }
    })
    .await;
    assert!(back.is_some(), "the failed job's permit did not come back");

    let held = lock_client
        .permit_semaphore("limit:tenant:7")
        .expect("name")
        .acquire(1)
        .await
        .expect("the only permit");
    let started = std::time::Instant::now();
    let err = worker.clone().oneshot((7, false)).await.expect_err("full");
    let took = started.elapsed();
    println!("a full limit answered after {took:?} (wait 100 ms)");
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(2),
        "{took:?}"
    );
    let err = lock_error(&err);
    assert!(err.is_busy() && err.is_permit_limit(), "{err:?}");
    assert_eq!(err.key(), "limit:tenant:7");
    assert_eq!(
        err.to_string(),
        "concurrency limit `limit:tenant:7` reached"
    );
    // Other keys, and requests without a key, are not limited by it.
    assert_eq!(worker.clone().oneshot((8, false)).await.expect("runs"), 8);
    assert_eq!(worker.clone().oneshot((0, false)).await.expect("runs"), 0);
    held.release().await.expect("release");
    assert_eq!(worker.oneshot((7, false)).await.expect("runs"), 7);
}

#[tokio::test]
async fn a_cancelled_request_gives_its_permit_or_its_turn_back() {
    let redis_server = server();
    let lock_client = client(&redis_server);
    let mut obs = raw(&redis_server).await;
    let slow = ServiceBuilder::new()
        .layer(PermitLayer::generic(lock_client, key, 1).wait(Duration::from_secs(10)))
        .service(service_fn(|(_, _): (u32, bool)| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, Infallible>(())
        }));
    // Running: dropped after 300 ms.
    let first =
        tokio::time::timeout(Duration::from_millis(300), slow.clone().oneshot((5, false))).await;
    assert!(first.is_err(), "still running");
    let back = eventually(Duration::from_secs(3), || {
        let mut obs = obs.clone();
        async move { cmd::<Option<i64>, _>(&mut obs, &["GET", "limit:tenant:5"]).await == Some(1) }
    })
    .await;
    assert!(
        back.is_some(),
        "the cancelled request's permit did not come back"
    );
    let held: i64 = cmd(&mut obs, &["ZCARD", "{limit:tenant:5}:timeout"]).await;
    assert_eq!(held, 0);

    // Waiting (someone else holds the permit): dropped after 300 ms, it
    // leaves lock-core's line in Redis and takes nothing later.
    let other = client(&redis_server)
        .permit_semaphore("limit:tenant:5")
        .expect("name")
        .acquire(1)
        .await
        .expect("the only permit");
    let waiting = tokio::time::timeout(Duration::from_millis(300), slow.oneshot((5, false))).await;
    assert!(waiting.is_err(), "still waiting");
    let left = eventually(Duration::from_secs(3), || {
        let mut obs = obs.clone();
        async move {
            cmd::<i64, _>(&mut obs, &["ZCARD", "lockcore_sem_line:{limit:tenant:5}"]).await == 0
        }
    })
    .await;
    assert!(left.is_some(), "the abandoned waiter stayed in the line");
    other.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let free: Option<i64> = cmd(&mut obs, &["GET", "limit:tenant:5"]).await;
    assert_eq!(free, Some(1), "the abandoned waiter took the permit");
}
