//! The shared pub/sub connection stays up while the server is healthy: a
//! 10 s wait (three health checks) keeps the same connection, on RESP2 and
//! on RESP3, and logs no warning. Judged by the server's own `CLIENT LIST`
//! and by a subscriber of this suite that records every event.

use std::time::Duration;

use crate::support::{self, cmd, raw, within, Capture};
use lock_core::LockClient;

/// Ids of the connections that are subscribed to at least one channel.
async fn subscribed_ids(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let list: String = cmd(conn, &["CLIENT", "LIST"]).await;
    list.lines()
        .filter(|line| {
            line.split(' ')
                .any(|f| f.starts_with("sub=") && f != "sub=0")
        })
        .filter_map(|line| {
            line.split(' ')
                .find_map(|f| f.strip_prefix("id="))
                .map(str::to_string)
        })
        .collect()
}

fn long_wait_keeps_one_connection(protocol: &str) {
    let warnings = Capture::default();
    let server = support::server();
    tracing::subscriber::with_default(warnings.clone(), || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let url = format!("{}?protocol={protocol}", server.url());
            let waiter = LockClient::builder(url)
                .command_timeout(Duration::from_secs(2))
                .build()
                .expect("client");
            let holder = support::client_for(&server, 30_000);
            let mut conn = raw(&server).await;
            let guard = holder
                .lock("long")
                .expect("name")
                .acquire()
                .await
                .expect("hold");

            let lock = waiter.lock("long").expect("name");
            let wait =
                tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(12)).await });
            tokio::time::sleep(Duration::from_millis(500)).await;
            let before = subscribed_ids(&mut conn).await;
            assert_eq!(
                before.len(),
                1,
                "{protocol}: one subscribed connection: {before:?}"
            );
            // A 10 s wait: three health checks (every 3 s) happen meanwhile.
            tokio::time::sleep(Duration::from_millis(9_500)).await;
            let after = subscribed_ids(&mut conn).await;
            assert_eq!(
                after, before,
                "{protocol}: the pub/sub connection was replaced"
            );
            // ...and it still delivers: the release wakes the waiter at once.
            let released = tokio::time::Instant::now();
            guard.release().await.expect("release");
            let got = within(Duration::from_secs(2), "woken waiter", wait)
                .await
                .expect("task")
                .expect("acquired");
            assert!(released.elapsed() < Duration::from_secs(1));
            got.release().await.expect("release");
        });
    });
    let warned = warnings.at_least(tracing::Level::WARN);
    assert!(warned.is_empty(), "{protocol}: warnings logged: {warned:?}");
}

#[test]
fn a_long_wait_keeps_its_pubsub_connection_on_resp2() {
    long_wait_keeps_one_connection("resp2");
}

#[test]
fn a_long_wait_keeps_its_pubsub_connection_on_resp3() {
    long_wait_keeps_one_connection("resp3");
}
