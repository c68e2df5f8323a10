//! The harness's Redis Cluster (`lock_tests::RedisCluster`), checked from
//! the servers themselves: it forms with every slot served and every
//! replica linked, keys live on the primary of their slot (others answer
//! MOVED), a slot moves with its keys, `CLUSTER FAILOVER` promotes a
//! replica, and a killed primary's replica takes over.

use std::time::{Duration, Instant};

use crate::support::cluster;
use lock_tests::RespValue;

fn info_field(reply: &RespValue, name: &str) -> Option<String> {
    reply.as_string()?.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == name).then(|| v.trim().to_owned())
    })
}

#[test]
fn three_primaries_with_a_replica_each_serve_every_slot() {
    let c = cluster(3, 1);
    assert_eq!(c.nodes().len(), 6);
    for (i, node) in c.nodes().iter().enumerate() {
        let info = node
            .command(&["CLUSTER", "INFO"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            info_field(&info, "cluster_state").as_deref(),
            Some("ok"),
            "node {i}"
        );
        assert_eq!(
            info_field(&info, "cluster_slots_assigned").as_deref(),
            Some("16384")
        );
        assert_eq!(info_field(&info, "cluster_size").as_deref(), Some("3"));
        let role = c.role(i).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(role, if i < 3 { "master" } else { "slave" }, "node {i}");
    }
    for p in 0..3 {
        let repl = c.nodes()[p]
            .command(&["INFO", "replication"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            info_field(&repl, "connected_slaves").as_deref(),
            Some("1"),
            "primary {p}"
        );
    }
    // The slots are split into three ranges, one per primary.
    let owners: Vec<usize> = [0u16, 5000, 10_000, 16_383]
        .iter()
        .map(|&s| c.primary_for_slot(s).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert_eq!(owners, vec![0, 0, 1, 2]);
}

#[test]
fn a_key_lives_on_its_slots_primary_and_others_redirect() {
    let c = cluster(3, 1);
    let key = "{user:7}:lock";
    let slot = c.key_slot(key).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.key_slot("{user:7}").unwrap_or_else(|e| panic!("{e}")),
        slot,
        "hash tag"
    );
    let owner = c.primary_for_slot(slot).unwrap_or_else(|e| panic!("{e}"));
    let set = c.nodes()[owner]
        .command(&["SET", key, "v"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.as_string().as_deref(), Some("OK"));
    let other = (owner + 1) % 3;
    let moved = c.nodes()[other]
        .command(&["GET", key])
        .unwrap_or_else(|e| panic!("{e}"));
    let expected = format!("MOVED {slot} 127.0.0.1:{}", c.nodes()[owner].port());
    assert_eq!(moved.as_error(), Some(expected.as_str()));
}

#[test]
fn a_slot_moves_with_its_keys() {
    let c = cluster(3, 1);
    let slot = c.key_slot("{mig}").unwrap_or_else(|e| panic!("{e}"));
    let from = c.primary_for_slot(slot).unwrap_or_else(|e| panic!("{e}"));
    let to = (from + 1) % 3;
    for i in 0..250 {
        let key = format!("{{mig}}:{i}");
        c.nodes()[from]
            .command(&["SET", &key, &i.to_string()])
            .unwrap_or_else(|e| panic!("{e}"));
    }
    c.migrate_slot(slot, from, to)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.primary_for_slot(slot).unwrap_or_else(|e| panic!("{e}")),
        to
    );
    for i in 0..250 {
        let key = format!("{{mig}}:{i}");
        let got = c.nodes()[to]
            .command(&["GET", &key])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.as_string(), Some(i.to_string()), "{key}");
    }
    let old = c.nodes()[from]
        .command(&["GET", "{mig}:0"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        old.as_error()
            .is_some_and(|e| e.starts_with(&format!("MOVED {slot} "))),
        "{old:?}"
    );
}

#[test]
fn cluster_failover_promotes_the_replica() {
    let c = cluster(3, 1);
    // node 3 replicates primary 0
    c.failover(3).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.role(3).unwrap_or_else(|e| panic!("{e}")), "master");
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.role(0).unwrap_or_else(|e| panic!("{e}")) != "slave" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(c.role(0).unwrap_or_else(|e| panic!("{e}")), "slave");
    assert_eq!(c.primary_for_slot(0).unwrap_or_else(|e| panic!("{e}")), 3);
}

#[test]
fn a_killed_primary_is_replaced_by_its_replica() {
    let mut c = cluster(3, 1);
    let slot = 6000; // primary 1's range; node 4 replicates it
    assert_eq!(
        c.primary_for_slot(slot).unwrap_or_else(|e| panic!("{e}")),
        1
    );
    let killed_at = Instant::now();
    c.node_mut(1).unwrap_or_else(|| panic!("node 1")).kill();
    let deadline = killed_at + Duration::from_secs(20);
    loop {
        if c.role(4).ok().as_deref() == Some("master") {
            break;
        }
        assert!(Instant::now() < deadline, "no failover within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.wait_ok(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.primary_for_slot(slot).unwrap_or_else(|e| panic!("{e}")),
        4
    );
    eprintln!(
        "replica took over {:.1} s after its primary was killed (node timeout {:?})",
        killed_at.elapsed().as_secs_f64(),
        lock_tests::NODE_TIMEOUT
    );
}
