//! Fenced writes and the election on a Redis Cluster (the harness's
//! cluster of loopback `redis-server`s): keys with the lock's `{tag}`
//! live in the lock's slot and are written; a key of another slot is
//! refused before any call; a stale holder's write is refused by Redis
//! while the new holder's go through; an election's record shares the
//! lock's slot, `leader()` and `observe()` agree with it, and a resign
//! wakes the next campaign by sharded pub/sub. Judged with the test's own
//! cluster connection and the nodes' `INFO commandstats`.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::{cluster, cmd};
use lock_core::{Error, FencedScript, LockClient};
use lock_tests::RedisCluster;
use redis::cluster_async::ClusterConnection;

fn client(url: &str) -> LockClient {
    LockClient::builder(url)
        .watchdog_timeout(Duration::from_secs(30))
        .command_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

async fn observer(c: &RedisCluster) -> ClusterConnection {
    redis::cluster::ClusterClient::new(c.urls())
        .unwrap_or_else(|e| panic!("{e}"))
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("observer: {e}"))
}

/// Script calls and writes every node has run so far (summed).
fn calls(c: &RedisCluster) -> u64 {
    c.nodes()
        .iter()
        .map(|n| {
            let stats: HashMap<String, u64> = n.info_commandstats().expect("INFO commandstats");
            ["evalsha", "eval", "set", "incrby", "hset", "del"]
                .iter()
                .map(|k| stats.get(*k).copied().unwrap_or(0))
                .sum::<u64>()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_with_the_locks_tag_succeed_and_other_slots_are_refused_before_any_call() {
    let c = cluster(3, 0);
    let cl = client(&c.url());
    let mut obs = observer(&c).await;
    let (name, stock) = ("stock:{sku-42}", "flash-sale:stock:{sku-42}");
    let slot = c.key_slot(name).expect("slot");
    assert_eq!(c.key_slot(stock).expect("slot"), slot);
    let other = "flash-sale:stock:sku-43";
    assert_ne!(c.key_slot(other).expect("slot"), slot, "another slot");

    let l = cl
        .election(name)
        .expect("name")
        .campaign("seller-1")
        .await
        .expect("campaign");
    let fence = l.fence();
    fence.set(stock, "100").await.expect("set");
    assert_eq!(fence.incr_by(stock, -1).await.expect("incr"), 99);
    fence
        .hset("flash-sale:orders:{sku-42}", "o-1", "paid")
        .await
        .expect("hset");
    let take = FencedScript::new(
        "local left = tonumber(redis.call('get', KEYS[1]) or '0') \
         if left <= 0 then return -1 end \
         redis.call('rpush', KEYS[2], ARGV[1]) \
         return redis.call('decr', KEYS[1])",
    );
    let left: i64 = fence
        .eval(&take, &[stock, "flash-sale:buyers:{sku-42}"], &["buyer-7"])
        .await
        .expect("eval");
    assert_eq!(left, 98);
    assert_eq!(
        cmd::<Option<i64>, _>(&mut obs, &["GET", stock]).await,
        Some(98)
    );
    assert_eq!(
        cmd::<Vec<String>, _>(
            &mut obs,
            &["LRANGE", "flash-sale:buyers:{sku-42}", "0", "-1"]
        )
        .await,
        vec!["buyer-7".to_string()]
    );
    // On a cluster each fenced write leaves its request latch in the lock's
    // slot (a copy re-sent by the cluster connection is then refused).
    let node = c.nodes().iter().find(|n| {
        matches!(
            n.command(&["KEYS", "redisson_unlock_latch:stock:{sku-42}:*"]),
            Ok(lock_tests::RespValue::Array(Some(keys))) if !keys.is_empty()
        )
    });
    assert!(
        node.is_some(),
        "a fenced write's request latch in the lock's slot"
    );

    // a key of another slot: refused before any call
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = calls(&c);
    let refusals = [
        fence.set(other, "1").await.map(drop),
        fence.incr_by(other, 1).await.map(drop),
        fence.hset(other, "f", "v").await.map(drop),
        fence.del(other).await.map(drop),
        fence
            .eval::<i64>(&take, &[stock, other], &["buyer-8"])
            .await
            .map(drop),
    ];
    let after = calls(&c);
    for r in &refusals {
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "another slot: {r:?}"
        );
    }
    assert_eq!(after, before, "no call reached a node");
    assert_eq!(cmd::<i64, _>(&mut obs, &["EXISTS", other]).await, 0);
    assert_eq!(
        cmd::<Option<i64>, _>(&mut obs, &["GET", stock]).await,
        Some(98)
    );
    l.resign().await.expect("resign");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holders_fenced_write_is_refused_on_a_cluster_and_the_new_holders_go_through() {
    let c = cluster(3, 0);
    let (a, b) = (client(&c.url()), client(&c.url()));
    let mut obs = observer(&c).await;
    let (name, stock) = ("stock:{sku-7}", "flash-sale:stock:{sku-7}");
    let ga = a
        .lock(name)
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    ga.fence().set(stock, "10").await.expect("set");
    // the lock taken from A behind its back (as an expiry during a pause
    // would): B holds it now; A still believes it holds
    let _: i64 = cmd(&mut obs, &["DEL", name]).await;
    let lb = b
        .election(name)
        .expect("name")
        .campaign("b")
        .await
        .expect("campaign");
    assert!(ga.is_held(), "A has not noticed");
    let stale = ga.fence().incr_by(stock, -1).await;
    match &stale {
        Err(e @ Error::FenceRefused { .. }) => assert!(e.is_fence_refused()),
        other => panic!("the stale write went through: {other:?}"),
    }
    assert_eq!(
        cmd::<Option<i64>, _>(&mut obs, &["GET", stock]).await,
        Some(10)
    );
    assert_eq!(lb.fence().incr_by(stock, -1).await.expect("b's write"), 9);
    assert_eq!(
        cmd::<Option<i64>, _>(&mut obs, &["GET", stock]).await,
        Some(9)
    );
    assert!(lb.term() > ga.fencing_token());
    lb.resign().await.expect("resign");
    drop(ga);
}

/// The leader record's key: `lockcore_leader:{name}`, or, for a name with
/// a hash tag of its own, `lockcore_leader:name` (so that it shares the
/// tag's slot, as Redisson's helper keys do).
fn record_key(name: &str) -> String {
    if name.contains('{') {
        format!("lockcore_leader:{name}")
    } else {
        format!("lockcore_leader:{{{name}}}")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_on_a_cluster_records_observes_and_hands_over_by_sharded_pub_sub() {
    let c = cluster(3, 0);
    let (a, b) = (client(&c.url()), client(&c.url()));
    let mut obs = observer(&c).await;
    for name in ["jobs", "jobs:{eu}"] {
        let record = record_key(name);
        assert_eq!(
            c.key_slot(&record).expect("slot"),
            c.key_slot(name).expect("slot"),
            "{name}: the record shares the lock's slot"
        );
        let (ea, eb) = (
            a.election(name).expect("name"),
            b.election(name).expect("name"),
        );
        let mut watch = eb.observe();
        assert_eq!(watch.changed().await.expect("observe"), None);
        let la = ea.campaign("a").await.expect("campaign");
        // the record, read with the test's own connection
        let fields: HashMap<String, String> = cmd(&mut obs, &["HGETALL", &record]).await;
        assert_eq!(
            fields.get("value").map(String::as_str),
            Some("a"),
            "{name}: {fields:?}"
        );
        assert_eq!(fields.get("term"), Some(&la.term().to_string()));
        let owner = fields.get("owner").cloned().unwrap_or_default();
        assert_eq!(cmd::<i64, _>(&mut obs, &["HEXISTS", name, &owner]).await, 1);
        // B's view: leader() and observe()
        let seen = eb.leader().await.expect("leader").expect("a leader");
        assert_eq!((seen.value(), seen.term()), (Some("a"), Some(la.term())));
        let change = tokio::time::timeout(Duration::from_secs(3), watch.changed())
            .await
            .expect("observe in time")
            .expect("observe");
        assert_eq!(change.and_then(|l| l.term()), Some(la.term()));
        // B campaigns, woken by A's resign
        let waiting = tokio::spawn({
            let eb = eb.clone();
            async move { eb.campaign("b").await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "{name}: a leads");
        let term_a = la.term();
        let resigned = tokio::time::Instant::now();
        la.resign().await.expect("resign");
        let lb = tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .expect("b woken in time")
            .expect("join")
            .expect("campaign");
        let woke = resigned.elapsed();
        println!("cluster election {name}: b led {woke:?} after a resigned");
        assert!(woke < Duration::from_secs(1), "{woke:?}");
        assert!(lb.term() > term_a);
        // a key in the lock's slot (the record's name with a suffix)
        let key = format!("{record}:fenced");
        lb.fence().set(&key, "b").await.expect("fenced set");
        assert_eq!(
            cmd::<Option<String>, _>(&mut obs, &["GET", &key])
                .await
                .as_deref(),
            Some("b")
        );
        lb.resign().await.expect("resign");
    }
}
