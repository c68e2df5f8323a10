//! How the client uses its connections, seen from the server (`CLIENT
//! LIST` on a private redis-server, where every connection but the
//! observer's is the client's): commands of many tasks share one
//! multiplexed connection by default, `pool_size(n)` spreads them over n,
//! and a broken connection is replaced by the next command. The client's
//! pub/sub connection (opened when the client is built, before any
//! command) is told apart by its id and left out.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::{self, cmd};
use lock_core::LockClient;
use lock_tests::RedisServer;

/// The connections in `CLIENT LIST` other than the observer's own: their
/// ids and the last command each ran.
async fn client_connections(
    observer: &mut redis::aio::MultiplexedConnection,
) -> Vec<(u64, String)> {
    let me: u64 = cmd(observer, &["CLIENT", "ID"]).await;
    let text: String = cmd(observer, &["CLIENT", "LIST"]).await;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|line| {
            let fields: HashMap<&str, &str> = line
                .split_whitespace()
                .filter_map(|f| f.split_once('='))
                .collect();
            let id = fields.get("id")?.parse::<u64>().ok()?;
            let last = fields.get("cmd").copied().unwrap_or_default().to_owned();
            (id != me).then_some((id, last))
        })
        .collect()
}

/// A client, and the id of its pub/sub connection (the only connection it
/// opens before its first command).
async fn client(
    server: &RedisServer,
    observer: &mut redis::aio::MultiplexedConnection,
    pool_size: Option<u32>,
) -> (LockClient, u64) {
    let mut builder = LockClient::builder(server.url())
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2));
    if let Some(n) = pool_size {
        builder = builder.pool_size(n);
    }
    let client = builder.build().unwrap_or_else(|e| panic!("client: {e}"));
    let mut pubsub = None;
    for _ in 0..200 {
        if let [(id, _)] = client_connections(observer).await.as_slice() {
            pubsub = Some(*id);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pubsub = pubsub.unwrap_or_else(|| panic!("the pub/sub connection never showed"));
    (client, pubsub)
}

/// The client's command connections: all but its pub/sub connection.
async fn command_connections(
    observer: &mut redis::aio::MultiplexedConnection,
    pubsub: u64,
) -> Vec<(u64, String)> {
    let mut conns = client_connections(observer).await;
    conns.retain(|(id, _)| *id != pubsub);
    conns
}

/// 64 tasks, each taking and releasing its own lock 5 times at once.
async fn burst(client: &LockClient) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..64 {
        let lock = client
            .lock(format!("conn:{i}"))
            .unwrap_or_else(|e| panic!("{e}"));
        tasks.spawn(async move {
            for _ in 0..5 {
                let guard = lock
                    .try_acquire()
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
                    .unwrap_or_else(|| panic!("an own key is free"));
                guard.release().await.unwrap_or_else(|e| panic!("{e}"));
            }
        });
    }
    support::within(Duration::from_secs(20), "the burst", async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap_or_else(|e| panic!("task: {e}"));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_of_many_tasks_share_one_connection_by_default() {
    let server = support::server();
    let mut observer = support::raw(&server).await;
    let (client, pubsub) = client(&server, &mut observer, None).await;
    assert_eq!(client.config().pool_size, 1);
    burst(&client).await;
    let conns = command_connections(&mut observer, pubsub).await;
    assert_eq!(
        conns.len(),
        1,
        "64 concurrent tasks, one connection of the client: {conns:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pool_size_spreads_commands_over_that_many_connections() {
    let server = support::server();
    let mut observer = support::raw(&server).await;
    let (client, pubsub) = client(&server, &mut observer, Some(3)).await;
    burst(&client).await;
    let conns = command_connections(&mut observer, pubsub).await;
    assert_eq!(conns.len(), 3, "{conns:?}");
    // Round-robin: every one of them ran the lock's scripts.
    assert!(
        conns.iter().all(|(_, last)| last == "evalsha"),
        "every connection carried lock commands: {conns:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_connection_is_replaced_by_the_next_command() {
    let server = support::server();
    let mut observer = support::raw(&server).await;
    let (client, pubsub) = client(&server, &mut observer, None).await;
    burst(&client).await;
    let before = command_connections(&mut observer, pubsub).await;
    let [(id, _)] = before.as_slice() else {
        panic!("one connection first: {before:?}");
    };
    let killed: i64 = cmd(&mut observer, &["CLIENT", "KILL", "ID", &id.to_string()]).await;
    assert_eq!(killed, 1);
    // The first command after the kill may meet the closed socket (and is
    // retried or fails as a Redis error); within a few, the client is back
    // on a new connection.
    let lock = client.lock("conn:after").unwrap_or_else(|e| panic!("{e}"));
    let mut worked = false;
    for _ in 0..5 {
        if let Ok(Some(guard)) = lock.try_acquire().await {
            guard.release().await.unwrap_or_else(|e| panic!("{e}"));
            worked = true;
            break;
        }
    }
    assert!(
        worked,
        "the client came back after its connection was killed"
    );
    let after = command_connections(&mut observer, pubsub).await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after[0].0, *id, "a new connection");
}
