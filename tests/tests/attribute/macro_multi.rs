//! `#[distributed_lock(key = ["...", "..."])]` against real Redis: a
//! multi-lock of every key around the call. Transfers between accounts in
//! both orders by concurrent calls on two clients never overlap on an
//! account and conserve the sum (read by a raw connection); the keys are
//! released after a return, an error and a dropped call; `skip_if_locked`
//! skips the body while one key is held (by a Redisson-style holder);
//! `cancel_on_lost` ends the body when one of the locks is lost.

use std::time::Duration;

use crate::support::{self, cmd, eventually, raw, within};
use lock_core::{distributed_lock, LockClient};

const ACCOUNTS: usize = 6;

#[distributed_lock(key = ["macro:acct:{from}", "macro:acct:{to}"], client = client, wait = "20s")]
async fn transfer(
    client: &LockClient,
    conn: redis::aio::MultiplexedConnection,
    from: usize,
    to: usize,
    amount: i64,
) -> Result<(), lock_core::Error> {
    let mut conn = conn;
    for i in [from, to] {
        let n: i64 = cmd(&mut conn, &["INCR", &format!("macro:inside:{i}")]).await;
        if n != 1 {
            let _: i64 = cmd(&mut conn, &["INCR", "macro:violations"]).await;
        }
    }
    let a: i64 = cmd(&mut conn, &["GET", &format!("macro:balance:{from}")]).await;
    let b: i64 = cmd(&mut conn, &["GET", &format!("macro:balance:{to}")]).await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    let _: () = cmd(
        &mut conn,
        &[
            "SET",
            &format!("macro:balance:{from}"),
            &(a - amount).to_string(),
        ],
    )
    .await;
    let _: () = cmd(
        &mut conn,
        &[
            "SET",
            &format!("macro:balance:{to}"),
            &(b + amount).to_string(),
        ],
    )
    .await;
    for i in [from, to] {
        let _: i64 = cmd(&mut conn, &["DECR", &format!("macro:inside:{i}")]).await;
    }
    Ok(())
}

#[distributed_lock(key = ["macro:skip:a", "macro:skip:{other}"], client = client, skip_if_locked)]
async fn both_or_skip(client: &LockClient, other: &str) -> Option<u32> {
    Some(7)
}

#[distributed_lock(key = ["macro:lost:a", "macro:lost:b"], client = client, cancel_on_lost)]
async fn until_lost(client: &LockClient) -> Result<(), lock_core::Error> {
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(())
}

#[distributed_lock(key = ["macro:err:a", "macro:err:b"], client = client)]
async fn failing(client: &LockClient) -> Result<(), lock_core::Error> {
    Err(lock_core::Error::InvalidArgument(
        "the body's own error".into(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transfers_in_both_orders_never_overlap_and_conserve_the_sum() {
    let server = support::server();
    let clients = [
        support::client_for(&server, 2_000),
        support::client_for(&server, 2_000),
    ];
    let mut conn = raw(&server).await;
    for i in 0..ACCOUNTS {
        let _: () = cmd(&mut conn, &["SET", &format!("macro:balance:{i}"), "100"]).await;
    }
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let client = clients[(t % 2) as usize].clone();
        let conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = t * 2_654_435_761 + 1;
            for _ in 0..25 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let from = (rng % ACCOUNTS as u64) as usize;
                let to = (from + 1 + (rng / 7 % (ACCOUNTS as u64 - 1)) as usize) % ACCOUNTS;
                transfer(&client, conn.clone(), from, to, 1 + (rng % 9) as i64)
                    .await
                    .expect("transfer");
            }
        }));
    }
    for task in tasks {
        within(Duration::from_secs(60), "transfers end", task)
            .await
            .expect("task");
    }
    let mut sum = 0;
    for i in 0..ACCOUNTS {
        let b: i64 = cmd(&mut conn, &["GET", &format!("macro:balance:{i}")]).await;
        sum += b;
        let held: i64 = cmd(&mut conn, &["EXISTS", &format!("macro:acct:{i}")]).await;
        assert_eq!(held, 0, "account {i}'s lock released");
    }
    let violations: Option<i64> = cmd(&mut conn, &["GET", "macro:violations"]).await;
    assert_eq!(violations.unwrap_or(0), 0, "two calls inside one account");
    assert_eq!(sum, 100 * ACCOUNTS as i64, "the sum is conserved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_cancel_on_lost_errors_and_drops_release_every_key() {
    let server = support::server();
    let client = support::client_for(&server, 600);
    let mut conn = raw(&server).await;
    // a Redisson-style holder of one key: skipped, nothing taken
    let _: i64 = cmd(&mut conn, &["HINCRBY", "macro:skip:b", "java-uuid:1", "1"]).await;
    let _: i64 = cmd(&mut conn, &["PEXPIRE", "macro:skip:b", "30000"]).await;
    assert_eq!(both_or_skip(&client, "b").await, None);
    let a: i64 = cmd(&mut conn, &["EXISTS", "macro:skip:a"]).await;
    assert_eq!(a, 0, "a skipped call takes none of its keys");
    assert_eq!(both_or_skip(&client, "c").await, Some(7));
    // the body's error comes back, the keys are released
    let err = failing(&client).await.expect_err("the body's error");
    assert!(err.is_invalid_input(), "{err}");
    let n: i64 = cmd(&mut conn, &["EXISTS", "macro:err:a", "macro:err:b"]).await;
    assert_eq!(n, 0);
    // one key deleted under the body: cancelled with `Lost`, the other released
    let call = tokio::spawn({
        let client = client.clone();
        async move { until_lost(&client).await }
    });
    let taken = eventually(Duration::from_secs(3), || {
        let mut c = conn.clone();
        async move { cmd::<i64, _>(&mut c, &["EXISTS", "macro:lost:a", "macro:lost:b"]).await == 2 }
    })
    .await;
    assert!(taken.is_some(), "the call holds both keys");
    let _: i64 = cmd(&mut conn, &["DEL", "macro:lost:b"]).await;
    let err = within(Duration::from_secs(3), "cancelled on lost", call)
        .await
        .expect("task")
        .expect_err("lost");
    assert!(err.is_lost(), "{err}");
    let n: i64 = cmd(&mut conn, &["EXISTS", "macro:lost:a", "macro:lost:b"]).await;
    assert_eq!(n, 0, "every key released");
    // a dropped call releases both keys in the background
    let call = tokio::spawn({
        let client = client.clone();
        async move { until_lost(&client).await }
    });
    let taken = eventually(Duration::from_secs(3), || {
        let mut c = conn.clone();
        async move { cmd::<i64, _>(&mut c, &["EXISTS", "macro:lost:a", "macro:lost:b"]).await == 2 }
    })
    .await;
    assert!(taken.is_some());
    call.abort();
    let freed = eventually(Duration::from_secs(3), || {
        let mut c = conn.clone();
        async move { cmd::<i64, _>(&mut c, &["EXISTS", "macro:lost:a", "macro:lost:b"]).await == 0 }
    })
    .await;
    assert!(freed.is_some(), "a dropped call releases every key");
}
