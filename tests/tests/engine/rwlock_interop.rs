//! The read-write lock against a client speaking Redisson's
//! `RReadWriteLock` protocol (`support/redisson_rw.rs`) on the same names,
//! on a real redis-server: readers of both share, a writer of either
//! excludes the other's readers and writers, release messages wake the
//! other side, a read release recomputes the hash's TTL from a Redisson
//! reader's timeout keys, and our renewal never touches them.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_core::LockClient;

use crate::support::redisson_rw::RedissonRw;
use crate::support::{self, cmd, raw, within};

fn client(server: &lock_tests::RedisServer, watchdog_ms: u64) -> LockClient {
    support::client_for(server, watchdog_ms)
}

async fn java(server: &lock_tests::RedisServer, name: &str, owner: &str, lease: u64) -> RedissonRw {
    RedissonRw::new(raw(server).await, name, owner, lease)
}

async fn pttl(server: &lock_tests::RedisServer, key: &str) -> i64 {
    let mut conn = raw(server).await;
    cmd(&mut conn, &["PTTL", key]).await
}

#[tokio::test]
async fn rust_and_redisson_readers_share_and_exclude_each_others_writers() {
    let server = support::server();
    let rw = client(&server, 30_000).rw_lock("ix:share").expect("name");
    let mut j1 = java(&server, "ix:share", "java-1:11", 30_000).await;
    let mut j2 = java(&server, "ix:share", "java-2:12", 30_000).await;
    assert_eq!(j1.read_lock().await, None, "a Redisson reader");
    let ours = rw
        .read()
        .acquire_timeout(Duration::from_secs(1))
        .await
        .expect("ours shares");
    assert_eq!(
        j2.read_lock().await,
        None,
        "a second Redisson reader shares with ours"
    );
    // writers of both sides wait
    assert!(
        j2.write_lock().await.is_some(),
        "a Redisson writer waits for our reader"
    );
    assert!(
        rw.write().try_acquire().await.expect("try").is_none(),
        "ours waits for theirs"
    );
    assert_eq!(j1.read_unlock().await, Some(1));
    assert_eq!(j2.read_unlock().await, Some(1));
    // only ours is left: still no Redisson writer
    assert!(
        j2.write_lock().await.is_some(),
        "our reader alone still excludes"
    );
    ours.release().await.expect("release");
    assert_eq!(
        j2.write_lock().await,
        None,
        "free: the Redisson writer gets it"
    );
    assert!(
        rw.read().try_acquire().await.expect("try").is_none(),
        "a Redisson writer excludes our readers"
    );
    assert!(
        rw.write().try_acquire().await.expect("try").is_none(),
        "and our writers"
    );
    assert_eq!(j2.write_unlock().await, Some(1));
    let w = rw
        .write()
        .try_acquire()
        .await
        .expect("try")
        .expect("free again");
    assert!(
        j1.read_lock().await.is_some(),
        "our writer excludes Redisson readers"
    );
    assert!(j1.write_lock().await.is_some(), "and Redisson writers");
    w.release().await.expect("release");
    assert_eq!(j1.read_lock().await, None);
    assert_eq!(j1.read_unlock().await, Some(1));
}

#[tokio::test]
async fn release_messages_wake_the_other_side() {
    let server = support::server();
    let rw = client(&server, 30_000).rw_lock("ix:wake").expect("name");
    let mut j = java(&server, "ix:wake", "java-1:11", 30_000).await;
    let channel = j.channel();
    assert_eq!(channel, "redisson_rwlock:{ix:wake}");
    // a Redisson writer's release ('1') wakes our waiting readers
    assert_eq!(j.write_lock().await, None);
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let r = rw.read();
            tokio::spawn(async move { r.acquire_timeout(Duration::from_secs(10)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert_eq!(j.write_unlock().await, Some(1));
    for r in readers {
        let g = within(Duration::from_secs(5), "reader", r)
            .await
            .expect("join")
            .expect("woken reader");
        drop(g);
    }
    assert!(
        released.elapsed() < Duration::from_secs(1),
        "woken by the message, not by the 30 s lease: {:?}",
        released.elapsed()
    );
    support::eventually(Duration::from_secs(2), || async {
        let mut conn = raw(&server).await;
        cmd::<i64, _>(&mut conn, &["EXISTS", "ix:wake"]).await == 0
    })
    .await
    .expect("our readers' dropped guards released");
    // our releases say what Redisson's waiters listen for
    let sub = redis::Client::open(server.url()).expect("url");
    let mut pubsub = sub.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(&channel).await.expect("subscribe");
    let w = rw.write().acquire().await.expect("write");
    w.release().await.expect("release");
    let r = rw.read().acquire().await.expect("read");
    r.release().await.expect("release");
    let mut messages = pubsub.on_message();
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = within(Duration::from_secs(2), "message", messages.next())
            .await
            .expect("a message");
        got.push(String::from_utf8_lossy(m.get_payload_bytes()).into_owned());
    }
    assert_eq!(got, ["1", "0"], "a write release says 1, a read release 0");
}

#[tokio::test]
async fn our_read_release_sets_the_ttl_from_a_redisson_readers_keys() {
    let server = support::server();
    let rw = client(&server, 30_000).rw_lock("ix:ttl").expect("name");
    let mut j = java(&server, "ix:ttl", "java-1:11", 5_000).await;
    let ours = rw.read().acquire().await.expect("read");
    assert_eq!(j.read_lock().await, None);
    assert!(pttl(&server, "ix:ttl").await > 25_000, "our 30 s lease");
    ours.release().await.expect("release");
    let left = pttl(&server, "ix:ttl").await;
    assert!(
        (1..=5_000).contains(&left),
        "the hash lives as long as the Redisson reader's key: {left}"
    );
    let key = j.timeout_key(1);
    let theirs = pttl(&server, &key).await;
    assert!((left - theirs).abs() < 200, "{left} vs {theirs}");
    assert_eq!(j.read_unlock().await, Some(1));
}

#[tokio::test]
async fn our_renewal_never_touches_a_redisson_readers_keys() {
    let server = support::server();
    // watchdog lease 600 ms: renewed every 200 ms
    let rw = client(&server, 600).rw_lock("ix:renew").expect("name");
    let mut j = java(&server, "ix:renew", "java-1:11", 1_500).await;
    assert_eq!(j.read_lock().await, None);
    let ours = rw.read().acquire().await.expect("read");
    let our_key = format!("{{ix:renew}}:{}:rwlock_timeout:1", ours.owner_id());
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let theirs = pttl(&server, &j.timeout_key(1)).await;
    assert!(
        (1..=600).contains(&theirs),
        "the Redisson reader's key runs down untouched: {theirs}"
    );
    let mine = pttl(&server, &our_key).await;
    assert!(mine > 300, "our own key is renewed: {mine}");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(ours.is_held(), "our reader is still held after 3 leases");
    assert!(pttl(&server, &our_key).await > 300);
    assert_eq!(pttl(&server, &j.timeout_key(1)).await, -2, "theirs expired");
    ours.release().await.expect("release");
}

#[tokio::test]
async fn a_redisson_reader_does_not_see_our_waiting_writers_mark() {
    let server = support::server();
    let (a, b) = (client(&server, 30_000), client(&server, 30_000));
    let rw_a = a.rw_lock("ix:mark").expect("name");
    let rw_b = b.rw_lock("ix:mark").expect("name");
    let first = rw_a.read().acquire().await.expect("read");
    let writer = tokio::spawn({
        let w = rw_b.write();
        async move { w.acquire_timeout(Duration::from_secs(10)).await }
    });
    // the writer waits, and has left its mark
    support::eventually(Duration::from_secs(2), || async {
        let mut conn = raw(&server).await;
        cmd::<i64, _>(&mut conn, &["EXISTS", "lockcore_writer:{ix:mark}"]).await == 1
    })
    .await
    .expect("the waiting writer's mark");
    assert!(
        rw_a.read().try_acquire().await.expect("try").is_none(),
        "our new readers wait behind the writer"
    );
    let mut j = java(&server, "ix:mark", "java-1:11", 30_000).await;
    assert_eq!(
        j.read_lock().await,
        None,
        "a Redisson reader does not see the mark"
    );
    first.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !writer.is_finished(),
        "the Redisson reader keeps the writer out"
    );
    assert_eq!(j.read_unlock().await, Some(1));
    let w = within(Duration::from_secs(5), "writer", writer)
        .await
        .expect("join")
        .expect("the writer gets in once the Java reader leaves");
    w.release().await.expect("release");
}

/// The limit the docs state: Redisson's readers do not know our waiting
/// writer's mark, so 8 Java readers reading back to back (overlapping,
/// 100 ms each) keep our writer out for as long as they go on.
#[tokio::test]
async fn a_stream_of_redisson_readers_can_still_keep_our_writer_out() {
    let server = support::server();
    let stop = Instant::now() + Duration::from_millis(2_500);
    let mut readers = Vec::new();
    for i in 0..8u64 {
        let mut j = java(&server, "ix:stream", &format!("java-{i}:1"), 30_000).await;
        readers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(12 * i)).await;
            let mut reads = 0u32;
            for _ in 0..1_000 {
                if Instant::now() > stop {
                    break;
                }
                if j.read_lock().await.is_none() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    j.read_unlock().await;
                    reads += 1;
                } else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            reads
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rw = client(&server, 30_000).rw_lock("ix:stream").expect("name");
    let started = Instant::now();
    let got = rw
        .write()
        .acquire_timeout(Duration::from_millis(1_500))
        .await;
    let waited = started.elapsed();
    let mut reads = 0;
    for r in readers {
        reads += within(Duration::from_secs(10), "java reader", r)
            .await
            .expect("join");
    }
    println!(
        "our writer under 8 looping Redisson readers: {:?} after {waited:?} ({reads} reads)",
        got.as_ref().map(|_| "acquired")
    );
    assert!(reads > 50, "the Java readers read: {reads}");
    assert!(
        matches!(got, Err(ref e) if e.is_wait_timeout()),
        "Java readers do not wait behind our writer's mark: {got:?}"
    );
    // once they stop, the writer gets in
    let w = rw
        .write()
        .acquire_timeout(Duration::from_secs(3))
        .await
        .expect("write");
    w.release().await.expect("release");
}
