//! What this version does with deployments it does not support yet (the
//! README's "Deployments" paragraph): a client pointed at one node of a
//! Redis Cluster locks names of that node's slots, and a name whose slot
//! lives on another node fails with the node's `MOVED` error, with nothing
//! written anywhere (observer: the nodes' own key counts).

use std::time::Duration;

use lock_core::LockClient;
use lock_tests::RedisCluster;

fn dbsize(cluster: &RedisCluster, node: usize) -> i64 {
    cluster.nodes()[node]
        .command(&["DBSIZE"])
        .unwrap_or_else(|e| panic!("{e}"))
        .as_i64()
        .unwrap_or_else(|| panic!("DBSIZE"))
}

/// A lock name whose key lands on primary `node`.
fn name_on(cluster: &RedisCluster, node: usize) -> String {
    (0..10_000)
        .map(|i| format!("deploy:{i}"))
        .find(|name| {
            let slot = cluster.key_slot(name).unwrap_or_else(|e| panic!("{e}"));
            cluster
                .primary_for_slot(slot)
                .unwrap_or_else(|e| panic!("{e}"))
                == node
        })
        .unwrap_or_else(|| panic!("no name lands on node {node}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_locks_its_own_slots_and_refuses_the_others_with_moved() {
    let cluster = RedisCluster::start(3, 0).unwrap_or_else(|e| panic!("cluster: {e}"));
    let client = LockClient::builder(cluster.nodes()[0].url())
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"));

    let here = name_on(&cluster, 0);
    let guard = client
        .lock(&here)
        .unwrap_or_else(|e| panic!("{e}"))
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("a slot of the node the client talks to: {e}"))
        .unwrap_or_else(|| panic!("free"));
    let held = cluster.nodes()[0]
        .command(&["HEXISTS", &here, guard.owner_id()])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(held.as_i64(), Some(1), "the hold is on node 0");
    guard.release().await.unwrap_or_else(|e| panic!("{e}"));

    let before: Vec<i64> = (0..3).map(|n| dbsize(&cluster, n)).collect();
    let elsewhere = name_on(&cluster, 1);
    let err = client
        .lock(&elsewhere)
        .unwrap_or_else(|e| panic!("{e}"))
        .try_acquire()
        .await
        .map(|g| g.is_some())
        .expect_err("a slot of another node");
    assert!(err.is_redis(), "{err:?}");
    assert!(err.to_string().to_lowercase().contains("moved"), "{err}");
    let after: Vec<i64> = (0..3).map(|n| dbsize(&cluster, n)).collect();
    assert_eq!(before, after, "nothing written on any node");
}
