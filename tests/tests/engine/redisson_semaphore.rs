//! Redisson's `RSemaphore`, `RPermitExpirableSemaphore` and
//! `RCountDownLatch` protocols, spoken by the reference clients of
//! `support/redisson_sem.rs` against a real redis-server: the layouts and
//! rules the semaphores and the latch must interoperate with (groundwork
//! for their issue: counters without TTL, messages carrying the new value,
//! expired permits reclaimed first, the nearest expiry answered, a live
//! permit renewed and an expired one not, the latch's `1` and `0`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;

use crate::support::redisson_sem::{hex_id, raw_id, RedissonLatch, RedissonSemaphore, NO_LEASE};
use crate::support::{self, cmd, raw, within};

async fn subscribed(server: &lock_tests::RedisServer, channel: &str) -> redis::aio::PubSub {
    let client = redis::Client::open(server.url()).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(channel).await.expect("subscribe");
    pubsub
}

async fn messages(pubsub: &mut redis::aio::PubSub, n: usize) -> Vec<String> {
    let mut stream = pubsub.on_message();
    let mut out = Vec::new();
    for _ in 0..n {
        let m = within(Duration::from_secs(2), "message", stream.next())
            .await
            .expect("a message");
        out.push(String::from_utf8_lossy(m.get_payload_bytes()).into_owned());
    }
    out
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn id(n: u8) -> String {
    format!("{n:02x}").repeat(16)
}

#[tokio::test]
async fn a_semaphore_is_a_counter_without_ttl_and_says_its_new_value() {
    let server = support::server();
    let mut a = RedissonSemaphore::new(raw(&server).await, "sem:plain");
    let mut b = RedissonSemaphore::new(raw(&server).await, "sem:plain");
    assert_eq!(a.channel(), "redisson_sc:{sem:plain}");
    assert!(!a.try_acquire(1).await, "a missing counter has no permits");
    let mut pubsub = subscribed(&server, &a.channel()).await;
    assert!(a.try_set_permits(3).await);
    assert!(!b.try_set_permits(5).await, "set only when absent");
    assert!(a.try_acquire(2).await);
    assert!(!b.try_acquire(2).await, "one left");
    assert!(b.try_acquire(1).await);
    assert_eq!(a.add(2).await, 2, "a release of two");
    assert_eq!(b.add(-1).await, 1, "permits taken away");
    assert_eq!(messages(&mut pubsub, 3).await, ["3", "2", "1"]);
    let mut conn = raw(&server).await;
    let ttl: i64 = cmd(&mut conn, &["PTTL", "sem:plain"]).await;
    assert_eq!(ttl, -1, "no TTL: permits never expire");
    let value: String = cmd(&mut conn, &["GET", "sem:plain"]).await;
    assert_eq!(value, "1");
}

#[tokio::test]
async fn expirable_permits_are_ids_scored_by_expiry_and_reclaimed_when_they_lapse() {
    let server = support::server();
    let mut a = RedissonSemaphore::new(raw(&server).await, "sem:exp");
    let mut b = RedissonSemaphore::new(raw(&server).await, "sem:exp");
    assert_eq!(a.timeout_set(), "{sem:exp}:timeout");
    assert!(a.try_set_permits(2).await);
    let now = now_ms();
    // one with a 300 ms lease, one without a lease
    assert_eq!(a.expirable_acquire(now, now + 300, &[id(1)]).await, Ok(()));
    assert_eq!(b.expirable_acquire(now, NO_LEASE, &[id(2)]).await, Ok(()));
    let mut conn = raw(&server).await;
    let scores: Vec<(Vec<u8>, i64)> = cmd(
        &mut conn,
        &["ZRANGE", "{sem:exp}:timeout", "0", "-1", "WITHSCORES"],
    )
    .await;
    let scores: Vec<(String, i64)> = scores.into_iter().map(|(m, s)| (hex_id(&m), s)).collect();
    assert_eq!(scores, [(id(1), now + 300), (id(2), NO_LEASE)]);
    assert_eq!(id(1).len(), 32, "ids shown as 32 hex characters");
    assert_eq!(raw_id(&id(1)).len(), 16, "stored as 16 bytes");
    // none left: the nearest expiry is answered
    assert_eq!(
        b.expirable_acquire(now_ms(), NO_LEASE, &[id(3)]).await,
        Err(Some(now + 300))
    );
    // a live id is renewed; once it lapsed, it cannot be
    let renewed = now_ms() + 200;
    assert!(a.update_lease(now_ms(), &id(1), renewed).await);
    tokio::time::sleep(Duration::from_millis(260)).await;
    assert!(
        !a.update_lease(now_ms(), &id(1), now_ms() + 1_000).await,
        "expired"
    );
    // the lapsed permit was reclaimed into the counter
    let value: String = cmd(&mut conn, &["GET", "sem:exp"]).await;
    assert_eq!(value, "1");
    let mut pubsub = subscribed(&server, &a.channel()).await;
    assert_eq!(
        b.expirable_acquire(now_ms(), NO_LEASE, &[id(3)]).await,
        Ok(())
    );
    assert!(
        !a.expirable_release(now_ms(), &id(1)).await,
        "an expired id is not held"
    );
    assert!(b.expirable_release(now_ms(), &id(2)).await);
    assert!(
        !b.expirable_release(now_ms(), &id(2)).await,
        "released once"
    );
    assert_eq!(messages(&mut pubsub, 1).await, ["1"]);
    // every id without a lease: nothing to wait for but a release
    assert_eq!(
        a.expirable_acquire(now_ms(), NO_LEASE, &[id(4)]).await,
        Ok(())
    );
    assert_eq!(
        a.expirable_acquire(now_ms(), NO_LEASE, &[id(5)]).await,
        Err(Some(NO_LEASE))
    );
}

#[tokio::test]
async fn a_latch_says_1_when_set_and_0_when_it_reaches_zero() {
    let server = support::server();
    let mut a = RedissonLatch::new(raw(&server).await, "latch:batch");
    let mut b = RedissonLatch::new(raw(&server).await, "latch:batch");
    assert_eq!(
        a.channel(),
        "redisson_countdownlatch__channel__{latch:batch}"
    );
    let mut pubsub = subscribed(&server, &a.channel()).await;
    assert!(a.try_set_count(2).await);
    assert!(!b.try_set_count(5).await, "set only when absent");
    assert_eq!(b.count_down().await, 1);
    assert_eq!(a.count_down().await, 0);
    assert_eq!(messages(&mut pubsub, 2).await, ["1", "0"]);
    let mut conn = raw(&server).await;
    let exists: i64 = cmd(&mut conn, &["EXISTS", "latch:batch"]).await;
    assert_eq!(exists, 0, "deleted at zero");
    assert_eq!(a.count_down().await, 0, "below zero: still zero, gone");
    let exists: i64 = cmd(&mut conn, &["EXISTS", "latch:batch"]).await;
    assert_eq!(exists, 0);
    // a name with its own tag gets a second pair of braces on the channel
    let tagged = RedissonLatch::new(raw(&server).await, "{job}:latch");
    assert_eq!(
        tagged.channel(),
        "redisson_countdownlatch__channel__{{job}:latch}"
    );
}
