//! The fair lock on a Redis Cluster (the harness's cluster of loopback
//! `redis-server`s): its queue, deadlines and liveness marks share the
//! lock's slot (Redisson's `{name}` naming), waiters on two clients are
//! served in arrival order, and each is woken on its own channel by
//! sharded pub/sub. Judged with the test's own cluster connection.

use std::time::Duration;

use crate::support::{cluster, cmd};
use lock_core::LockClient;
use redis::cluster_routing::Slot;

fn client(url: &str) -> LockClient {
    LockClient::builder(url)
        .watchdog_timeout(Duration::from_secs(10))
        .command_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(3))
        .fair_lock_wait_timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_on_a_cluster_serves_its_queue_in_order() {
    let c = cluster(3, 0);
    let a = client(&c.url());
    let b = client(&c.url());
    let mut conn = redis::cluster::ClusterClient::new(c.urls())
        .unwrap_or_else(|e| panic!("{e}"))
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("observer: {e}"));
    let name = "fair:cluster";
    let queue = format!("redisson_lock_queue:{{{name}}}");
    for key in [
        queue.clone(),
        format!("redisson_lock_timeout:{{{name}}}"),
        format!("lockcore_fair_alive:{{{name}}}"),
        format!("redisson_lock__channel:{{{name}}}:x:1"),
    ] {
        assert_eq!(Slot::for_key(&key), Slot::for_key(name), "{key}");
    }
    let first = a
        .fair_lock(name)
        .expect("lock")
        .acquire()
        .await
        .expect("first");
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6usize {
        let lock = if i % 2 == 0 { &a } else { &b }
            .fair_lock(name)
            .expect("lock");
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock
                .acquire_timeout(Duration::from_secs(20))
                .await
                .expect("turn");
            order.lock().expect("order").push(i);
            tokio::time::sleep(Duration::from_millis(10)).await;
            guard.release().await.expect("release");
        }));
        let mut queued = 0;
        for _ in 0..400 {
            let q: Vec<String> = cmd(&mut conn, &["LRANGE", &queue, "0", "-1"]).await;
            queued = q.len();
            if queued > i {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(queued, i + 1, "waiter {i} queued");
    }
    let released_at = std::time::Instant::now();
    first.release().await.expect("release");
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("in time")
            .expect("waiter");
    }
    assert_eq!(*order.lock().expect("order"), vec![0, 1, 2, 3, 4, 5]);
    // six hand-overs by message (a re-check each would take 6 s)
    assert!(
        released_at.elapsed() < Duration::from_secs(4),
        "woken by sharded pub/sub: {:?}",
        released_at.elapsed()
    );
    let left: Vec<String> = cmd(&mut conn, &["LRANGE", &queue, "0", "-1"]).await;
    assert!(left.is_empty());
}
