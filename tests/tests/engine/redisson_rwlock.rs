//! Redisson's `RReadWriteLock` protocol, spoken by the reference client of
//! `support/redisson_rw.rs` against a real redis-server: the layout and
//! rules the read-write lock must interoperate with (readers share, a
//! writer excludes, a downgrade, the hash's TTL after a read release, the
//! release messages). The interop suites of the read-write lock build on
//! this client.

use std::time::Duration;

use futures_util::StreamExt;

use crate::support::redisson_rw::RedissonRw;
use crate::support::{self, cmd, raw, within};

async fn clients(
    server: &lock_tests::RedisServer,
    name: &str,
    owners: &[(&str, u64)],
) -> Vec<RedissonRw> {
    let mut out = Vec::new();
    for (owner, lease) in owners {
        out.push(RedissonRw::new(raw(server).await, name, owner, *lease));
    }
    out
}

async fn subscribed(server: &lock_tests::RedisServer, channel: &str) -> redis::aio::PubSub {
    let client = redis::Client::open(server.url()).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(channel).await.expect("subscribe");
    pubsub
}

async fn next_message(pubsub: &mut redis::aio::PubSub) -> Vec<u8> {
    within(
        Duration::from_secs(2),
        "release message",
        pubsub.on_message().next(),
    )
    .await
    .expect("a message")
    .get_payload_bytes()
    .to_vec()
}

#[tokio::test]
async fn readers_share_a_writer_waits_and_the_last_read_release_says_0() {
    let server = support::server();
    let mut c = clients(
        &server,
        "rw-share",
        &[("a:1", 30_000), ("b:7", 30_000), ("w:1", 30_000)],
    )
    .await;
    let mut conn = raw(&server).await;
    assert_eq!(c[0].read_lock().await, None, "first reader");
    assert_eq!(c[1].read_lock().await, None, "second reader shares");
    assert_eq!(c[0].read_lock().await, None, "a reader re-enters");
    let pttl = c[2].write_lock().await.expect("the writer waits");
    assert!(pttl > 25_000, "{pttl}");
    let mode: String = cmd(&mut conn, &["HGET", "rw-share", "mode"]).await;
    assert_eq!(mode, "read");
    let a: i64 = cmd(&mut conn, &["HGET", "rw-share", "a:1"]).await;
    assert_eq!(a, 2, "a's read count");
    for k in [1, 2] {
        let v: i64 = cmd(&mut conn, &["GET", &c[0].timeout_key(k)]).await;
        assert_eq!(v, 1, "one timeout key per read acquisition");
    }
    assert_eq!(c[0].timeout_key(2), "{rw-share}:a:1:rwlock_timeout:2");
    let mut pubsub = subscribed(&server, &c[0].channel()).await;
    assert_eq!(c[0].channel(), "redisson_rwlock:{rw-share}");
    assert_eq!(c[0].read_unlock().await, Some(1));
    assert_eq!(c[0].read_unlock().await, Some(1));
    assert_eq!(c[0].read_unlock().await, None, "not held any more");
    let gone: i64 = cmd(&mut conn, &["EXISTS", &c[0].timeout_key(1)]).await;
    assert_eq!(gone, 0, "its timeout keys went with its releases");
    assert!(c[2].write_lock().await.is_some(), "b still reads");
    assert_eq!(c[1].read_unlock().await, Some(1));
    assert_eq!(next_message(&mut pubsub).await, b"0");
    let exists: i64 = cmd(&mut conn, &["EXISTS", "rw-share"]).await;
    assert_eq!(exists, 0, "the last read release deletes the hash");
    assert_eq!(c[2].write_lock().await, None, "now the writer");
}

#[tokio::test]
async fn a_writer_excludes_everyone_re_enters_adding_its_lease_and_says_1() {
    let server = support::server();
    let mut c = clients(
        &server,
        "rw-write",
        &[("w:1", 10_000), ("r:1", 10_000), ("x:1", 10_000)],
    )
    .await;
    let mut conn = raw(&server).await;
    assert_eq!(c[0].write_lock().await, None);
    assert!(
        c[1].read_lock().await.is_some(),
        "no reader beside a writer"
    );
    assert!(c[2].write_lock().await.is_some(), "no second writer");
    assert_eq!(c[0].write_lock().await, None, "the writer re-enters");
    let pttl: i64 = cmd(&mut conn, &["PTTL", "rw-write"]).await;
    assert!(pttl > 15_000, "a re-entry adds its lease: {pttl}");
    let w: i64 = cmd(&mut conn, &["HGET", "rw-write", "w:1:write"]).await;
    assert_eq!(w, 2);
    let mut pubsub = subscribed(&server, &c[0].channel()).await;
    assert_eq!(c[0].write_unlock().await, Some(0), "one count of two");
    assert_eq!(c[0].write_unlock().await, Some(1));
    assert_eq!(next_message(&mut pubsub).await, b"1");
    assert_eq!(c[1].read_lock().await, None, "free: a reader gets in");
}

#[tokio::test]
async fn a_writer_downgrades_and_its_write_release_leaves_the_read_hold() {
    let server = support::server();
    let mut c = clients(&server, "rw-down", &[("d:1", 30_000), ("r:1", 30_000)]).await;
    let mut conn = raw(&server).await;
    assert_eq!(c[0].write_lock().await, None);
    assert_eq!(
        c[0].read_lock().await,
        None,
        "the writer may read (downgrade)"
    );
    assert!(c[1].read_lock().await.is_some(), "others may not yet");
    assert_eq!(c[0].write_unlock().await, Some(1));
    let mode: String = cmd(&mut conn, &["HGET", "rw-down", "mode"]).await;
    assert_eq!(mode, "read", "the read hold stays, in read mode");
    assert_eq!(c[1].read_lock().await, None, "now readers share");
    assert_eq!(c[0].read_unlock().await, Some(1));
    assert_eq!(c[1].read_unlock().await, Some(1));
    let exists: i64 = cmd(&mut conn, &["EXISTS", "rw-down"]).await;
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn a_read_release_sets_the_ttl_to_the_longest_remaining_read() {
    let server = support::server();
    let mut c = clients(
        &server,
        "rw-ttl",
        &[("short:1", 10_000), ("long:1", 60_000)],
    )
    .await;
    let mut conn = raw(&server).await;
    assert_eq!(c[1].read_lock().await, None);
    assert_eq!(c[0].read_lock().await, None);
    // The long reader's timeout key runs down to 40 s (as after 20 s).
    let _: i64 = cmd(&mut conn, &["PEXPIRE", &c[1].timeout_key(1), "40000"]).await;
    assert_eq!(c[0].read_unlock().await, Some(1));
    let pttl: i64 = cmd(&mut conn, &["PTTL", "rw-ttl"]).await;
    assert!(
        (35_000..=40_000).contains(&pttl),
        "the hash lives as long as the longest remaining read: {pttl}"
    );
}

#[tokio::test]
async fn a_braced_name_keeps_its_own_tag() {
    let server = support::server();
    let c = clients(&server, "orders:{7}", &[("a:1", 1_000)]).await;
    assert_eq!(c[0].channel(), "redisson_rwlock:orders:{7}");
    assert_eq!(c[0].timeout_key(1), "orders:{7}:a:1:rwlock_timeout:1");
}
