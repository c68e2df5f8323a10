//! `#[distributed_lock(mode = "read" | "write")]` against real Redis: the
//! sides of a read-write lock, judged by an independent observer (a script
//! on its own connection, `support::RwInside`). Read calls overlap, write
//! calls are alone, across two clients; the body sees its side; nested
//! calls downgrade and refuse to upgrade; `skip_if_locked` goes by the
//! other holders' sides; the lock in Redis has Redisson's layout.

use std::time::{Duration, Instant};

use crate::support::{self, within, RwInside};
use lock_core::{distributed_lock, HeldLock, LockClient, LockMode};

/// The side the body runs under, from its section.
fn side() -> Option<LockMode> {
    HeldLock::current().map(|held| held.mode())
}

/// A reader that stays inside until `together` readers have been inside
/// at once (at most 3 s): calls that excluded each other would never meet.
#[distributed_lock(key = "catalog:{sku}", mode = "read", client = client)]
async fn read_until_met(
    client: &LockClient,
    sku: &str,
    observer: &RwInside,
    together: i64,
) -> Result<bool, lock_core::Error> {
    let mut observer = observer.clone();
    observer.enter_read().await;
    let met = observer
        .await_max_readers(together, Duration::from_secs(3))
        .await;
    observer.leave_read().await;
    Ok(met)
}

#[distributed_lock(key = "catalog:{sku}", mode = "read", client = client)]
async fn read_a_while(
    client: &LockClient,
    sku: &str,
    observer: &RwInside,
) -> Result<Option<LockMode>, lock_core::Error> {
    let mut observer = observer.clone();
    observer.enter_read().await;
    tokio::time::sleep(Duration::from_millis(15)).await;
    observer.leave_read().await;
    Ok(side())
}

#[distributed_lock(key = "catalog:{sku}", mode = "write", client = client)]
async fn write_a_while(
    client: &LockClient,
    sku: &str,
    observer: &RwInside,
) -> Result<Option<LockMode>, lock_core::Error> {
    let mut observer = observer.clone();
    observer.enter_write().await;
    tokio::time::sleep(Duration::from_millis(15)).await;
    observer.leave_write().await;
    Ok(side())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_calls_share_the_lock_across_clients() {
    let server = support::server();
    let clients = [
        support::client_for(&server, 5_000),
        support::client_for(&server, 5_000),
    ];
    let observer = RwInside::new(&server, "macro-readers").await;
    let readers = 4;
    let mut tasks = Vec::new();
    for i in 0..readers {
        let client = clients[i % 2].clone();
        let observer = observer.clone();
        tasks.push(tokio::spawn(async move {
            read_until_met(&client, "sku-1", &observer, readers as i64).await
        }));
    }
    for task in tasks {
        let met = within(Duration::from_secs(20), "reader", task)
            .await
            .unwrap_or_else(|e| panic!("task: {e}"))
            .unwrap_or_else(|e| panic!("read call: {e}"));
        assert!(met, "a reader waited alone: read calls excluded each other");
    }
    let mut observer = observer;
    assert_eq!(observer.max_readers().await, readers as i64);
    assert_eq!(observer.violations().await, 0);
    assert_eq!(observer.entries().await, (readers as i64, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_calls_run_alone_among_read_calls() {
    let server = support::server();
    let clients = [
        support::client_for(&server, 5_000),
        support::client_for(&server, 5_000),
    ];
    let observer = RwInside::new(&server, "macro-mixed").await;
    let (readers, writers, rounds) = (4usize, 2usize, 5usize);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..readers + writers {
        let client = clients[i % 2].clone();
        let observer = observer.clone();
        let write = i >= readers;
        tasks.push(tokio::spawn(async move {
            let mut sides = Vec::new();
            for _ in 0..rounds {
                let side = if write {
                    write_a_while(&client, "sku-2", &observer).await
                } else {
                    read_a_while(&client, "sku-2", &observer).await
                };
                sides.push(side.unwrap_or_else(|e| panic!("call: {e}")));
            }
            (write, sides)
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        let done = within(Duration::from_secs(30), "caller", task).await;
        results.push(done.unwrap_or_else(|e| panic!("task: {e}")));
    }
    // The observer first: what the calls did, whatever they think they held.
    let mut observer = observer;
    assert_eq!(
        observer.violations().await,
        0,
        "a writer was inside with someone"
    );
    for (write, sides) in results {
        let expected = if write {
            LockMode::Write
        } else {
            LockMode::Read
        };
        assert_eq!(sides, vec![Some(expected); rounds]);
    }
    assert_eq!(
        observer.entries().await,
        ((readers * rounds) as i64, (writers * rounds) as i64)
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

// ---------------------------------------------------------------------------
// Nesting, the default mode and the layout in Redis

#[distributed_lock(key = "doc:{id}", mode = "read", client = client)]
async fn read_doc(client: &LockClient, id: u32) -> Result<Option<LockMode>, lock_core::Error> {
    Ok(side())
}

#[distributed_lock(key = "doc:{id}", mode = "write", client = client)]
async fn write_doc(client: &LockClient, id: u32) -> Result<Option<LockMode>, lock_core::Error> {
    Ok(side())
}

/// A read call nested in a write call of the same key: a downgrade.
#[distributed_lock(key = "doc:{id}", mode = "write", client = client)]
async fn write_then_read(
    client: &LockClient,
    id: u32,
) -> Result<(Option<LockMode>, Option<LockMode>), lock_core::Error> {
    let inner = read_doc(client, id).await?;
    Ok((inner, side()))
}

/// A write call nested in a read call of the same key: refused at once.
#[distributed_lock(key = "doc:{id}", mode = "read", client = client)]
async fn read_then_write(
    client: &LockClient,
    id: u32,
) -> Result<lock_core::Error, lock_core::Error> {
    match write_doc(client, id).await {
        Ok(side) => panic!("an upgrade was granted ({side:?})"),
        Err(err) => Ok(err),
    }
}

/// A read call nested in a read call of the same key: re-entered.
#[distributed_lock(key = "doc:{id}", mode = "read", client = client)]
async fn read_then_read(
    client: &LockClient,
    id: u32,
) -> Result<Option<LockMode>, lock_core::Error> {
    read_doc(client, id).await
}

/// No `mode`: the exclusive lock, as before.
#[distributed_lock(key = "plain:{id}", client = client)]
async fn exclusive(client: &LockClient, id: u32) -> Result<Option<LockMode>, lock_core::Error> {
    Ok(side())
}

async fn hash_mode(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    support::cmd(conn, &["HGET", key, "mode"]).await
}

#[distributed_lock(key = "doc:{id}", mode = "read", client = client)]
async fn read_and_look(
    client: &LockClient,
    id: u32,
    mut conn: redis::aio::MultiplexedConnection,
) -> Result<Option<String>, lock_core::Error> {
    Ok(hash_mode(&mut conn, &format!("doc:{id}")).await)
}

#[distributed_lock(key = "doc:{id}", mode = "write", client = client)]
async fn write_and_look(
    client: &LockClient,
    id: u32,
    mut conn: redis::aio::MultiplexedConnection,
) -> Result<Option<String>, lock_core::Error> {
    Ok(hash_mode(&mut conn, &format!("doc:{id}")).await)
}

#[tokio::test]
async fn nested_calls_downgrade_reenter_and_refuse_to_upgrade() {
    let server = support::server();
    let client = support::client_for(&server, 5_000);
    let limit = Duration::from_secs(10);

    assert_eq!(
        within(limit, "read", read_doc(&client, 1)).await.ok(),
        Some(Some(LockMode::Read))
    );
    assert_eq!(
        within(limit, "write", write_doc(&client, 1)).await.ok(),
        Some(Some(LockMode::Write))
    );
    assert_eq!(
        within(limit, "plain", exclusive(&client, 1)).await.ok(),
        Some(Some(LockMode::Exclusive))
    );

    let downgrade = within(limit, "downgrade", write_then_read(&client, 2))
        .await
        .unwrap_or_else(|e| panic!("downgrade: {e}"));
    assert_eq!(downgrade, (Some(LockMode::Read), Some(LockMode::Write)));

    let refused = within(limit, "upgrade", read_then_write(&client, 3))
        .await
        .unwrap_or_else(|e| panic!("read call: {e}"));
    assert!(
        matches!(refused, lock_core::Error::UpgradeRefused { ref name } if name == "doc:3"),
        "{refused:?}"
    );

    let reentered = within(limit, "re-entry", read_then_read(&client, 4))
        .await
        .unwrap_or_else(|e| panic!("re-entry: {e}"));
    assert_eq!(reentered, Some(LockMode::Read));

    // Nothing is left behind.
    for id in 1..=4 {
        let status = client
            .rw_lock(format!("doc:{id}"))
            .unwrap_or_else(|e| panic!("{e}"))
            .status()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(status.owners.is_empty(), "doc:{id}: {status:?}");
    }
}

#[tokio::test]
async fn the_lock_in_redis_is_redissons_read_write_layout() {
    let server = support::server();
    let client = support::client_for(&server, 5_000);
    let conn = support::raw(&server).await;
    let limit = Duration::from_secs(10);
    let read = within(limit, "read", read_and_look(&client, 5, conn.clone()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.as_deref(), Some("read"));
    let write = within(limit, "write", write_and_look(&client, 5, conn.clone()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(write.as_deref(), Some("write"));
    let mut conn = conn;
    let exists: i64 = support::cmd(&mut conn, &["EXISTS", "doc:5"]).await;
    assert_eq!(exists, 0, "the lock is gone after the calls");
}

// ---------------------------------------------------------------------------
// skip_if_locked by side

#[distributed_lock(key = "report:{day}", mode = "read", skip_if_locked, client = client)]
async fn read_report(client: &LockClient, day: u32) -> Option<Option<LockMode>> {
    Some(side())
}

#[distributed_lock(key = "report:{day}", mode = "write", skip_if_locked, client = client)]
async fn rebuild_report(client: &LockClient, day: u32) -> Option<Option<LockMode>> {
    Some(side())
}

#[tokio::test]
async fn skip_if_locked_skips_only_what_the_holders_side_excludes() {
    let server = support::server();
    let client = support::client_for(&server, 5_000);
    // Another replica holds the sides by hand.
    let other = support::client_for(&server, 5_000);
    let rw = other.rw_lock("report:7").unwrap_or_else(|e| panic!("{e}"));
    let limit = Duration::from_secs(10);

    // Free: both run.
    assert_eq!(
        within(limit, "read", read_report(&client, 7)).await,
        Some(Some(LockMode::Read))
    );
    assert_eq!(
        within(limit, "write", rebuild_report(&client, 7)).await,
        Some(Some(LockMode::Write))
    );

    // A reader elsewhere: readers run, writers skip.
    let reading = rw.read().acquire().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        within(limit, "read", read_report(&client, 7)).await,
        Some(Some(LockMode::Read))
    );
    assert_eq!(
        within(limit, "write", rebuild_report(&client, 7)).await,
        None
    );
    reading.release().await.unwrap_or_else(|e| panic!("{e}"));

    // A writer elsewhere: both skip.
    let writing = rw.write().acquire().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(within(limit, "read", read_report(&client, 7)).await, None);
    assert_eq!(
        within(limit, "write", rebuild_report(&client, 7)).await,
        None
    );
    writing.release().await.unwrap_or_else(|e| panic!("{e}"));

    assert_eq!(
        within(limit, "write", rebuild_report(&client, 7)).await,
        Some(Some(LockMode::Write))
    );
}

/// A call of `mode = "fair"`: it records its turn in Redis (a raw
/// connection) while it holds the fair lock `ledger:{day}`.
#[distributed_lock(key = "ledger:{day}", mode = "fair", client = client, wait = "20s")]
async fn close_day(
    client: &LockClient,
    conn: redis::aio::MultiplexedConnection,
    day: u32,
    who: usize,
) -> Result<(), lock_core::Error> {
    let mut conn = conn;
    let _: i64 =
        crate::support::cmd(&mut conn, &["RPUSH", "macro:fair:order", &who.to_string()]).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_calls_queue_in_redissons_queue_and_run_in_arrival_order() {
    let server = crate::support::server();
    let client = crate::support::client_for(&server, 5_000);
    let mut conn = crate::support::raw(&server).await;
    let holder = client
        .fair_lock("ledger:7")
        .expect("name")
        .acquire()
        .await
        .expect("held");
    let mut calls = Vec::new();
    for who in 0..5usize {
        let (client, call_conn) = (client.clone(), crate::support::raw(&server).await);
        calls.push(tokio::spawn(async move {
            close_day(&client, call_conn, 7, who).await
        }));
        let mut queued = 0;
        for _ in 0..400 {
            let q: Vec<String> = crate::support::cmd(
                &mut conn,
                &["LRANGE", "redisson_lock_queue:{ledger:7}", "0", "-1"],
            )
            .await;
            queued = q.len();
            if queued > who {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(queued, who + 1, "call {who} waits in the fair queue");
    }
    holder.release().await.expect("release");
    for call in calls {
        crate::support::within(Duration::from_secs(20), "a call", call)
            .await
            .expect("join")
            .expect("call");
    }
    let order: Vec<String> =
        crate::support::cmd(&mut conn, &["LRANGE", "macro:fair:order", "0", "-1"]).await;
    assert_eq!(order, ["0", "1", "2", "3", "4"]);
}
