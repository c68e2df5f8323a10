//! The harness's Sentinel set (`lock_tests::SentinelSet`), checked from
//! the servers: it forms (replica linked, three sentinels that see it and
//! each other), a write reaches the replica (`WAIT`), `SENTINEL FAILOVER`
//! and a killed primary both move the primary to the replica, and a paused
//! replica acknowledges nothing (`WAIT` answers 0: what replica
//! acknowledgement must detect).

use std::time::{Duration, Instant};

use crate::support::sentinel_set;
use lock_tests::RedisServer;

/// `SET k v` then `WAIT 1 timeout_ms` on one connection (WAIT counts the
/// replicas that acknowledged this connection's writes); the count.
fn write_and_wait(primary: &RedisServer, timeout_ms: u64) -> i64 {
    let client = redis::Client::open(primary.url()).unwrap_or_else(|e| panic!("{e}"));
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("{e}"));
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("{e}"));
    redis::cmd("WAIT")
        .arg(1)
        .arg(timeout_ms)
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_primary_a_linked_replica_and_three_sentinels() {
    let s = sentinel_set();
    assert_eq!(s.current_primary().unwrap_or_else(|e| panic!("{e}")), 0);
    assert_eq!(s.role(0).unwrap_or_else(|e| panic!("{e}")), "master");
    assert!(s.replica_linked(1).unwrap_or_else(|e| panic!("{e}")));
    let primary = &s.data_nodes()[0];
    primary
        .command(&["SET", "k", "v"])
        .unwrap_or_else(|e| panic!("{e}"));
    let acked = primary
        .command(&["WAIT", "1", "2000"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        acked.as_i64(),
        Some(1),
        "the replica acknowledged the write"
    );
    let copied = s.data_nodes()[1]
        .command(&["GET", "k"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(copied.as_string().as_deref(), Some("v"));
}

#[test]
fn a_paused_replica_acknowledges_nothing() {
    let s = sentinel_set();
    s.data_nodes()[1].pause().unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    let acked = write_and_wait(&s.data_nodes()[0], 300);
    assert_eq!(acked, 0);
    assert!(
        started.elapsed() >= Duration::from_millis(290),
        "WAIT waited its time-out"
    );
    s.data_nodes()[1].resume().unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn sentinel_failover_moves_the_primary_to_the_replica() {
    let s = sentinel_set();
    s.failover().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.current_primary().unwrap_or_else(|e| panic!("{e}")), 1);
    assert_eq!(s.role(1).unwrap_or_else(|e| panic!("{e}")), "master");
    let deadline = Instant::now() + Duration::from_secs(15);
    while s.role(0).ok().as_deref() != Some("slave") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        s.role(0).unwrap_or_else(|e| panic!("{e}")),
        "slave",
        "the old primary follows"
    );
}

#[test]
fn a_killed_primary_is_replaced_by_the_replica() {
    let mut s = sentinel_set();
    let killed_at = Instant::now();
    s.data_node_mut(0)
        .unwrap_or_else(|| panic!("node 0"))
        .kill();
    s.wait_for_primary(1, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "sentinels promoted the replica {:.1} s after the primary was killed (down-after {:?})",
        killed_at.elapsed().as_secs_f64(),
        lock_tests::SENTINEL_DOWN_AFTER
    );
}
