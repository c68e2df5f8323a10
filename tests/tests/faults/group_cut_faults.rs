//! Group commit cut at every byte: a grouped acquire call (several fresh
//! acquisitions in one script call) and a grouped release call, each cut
//! at every offset of its reply and at sampled offsets of its command,
//! with FIN and RST, through the fault proxy.
//!
//! Each step puts [`IN_FLIGHT`] acquisitions in flight behind a 30 ms reply
//! delay and [`QUEUED`] more behind them, which go as one grouped call
//! (the step checks that the grouped call was the one cut). Judged on a raw
//! connection: a name whose acquisition gave a guard holds exactly that
//! guard's owner with one count; a name whose acquisition gave none ends
//! with no hold (within a bound: the cancellation after the lost reply);
//! a release cut anywhere still frees its lock, exactly once.

use std::time::Duration;

use crate::support::cut::{lengths, sampled};
use crate::support::{self, cmd, grouped_acquire_sha, grouped_release_sha, raw, within};
use lock_core::{LockClient, LockGuard};
use lock_tests::{CommandMatch, Direction, FaultProxy, RedisServer};

/// Calls of one group in flight before the next ones queue
/// (`group_commit::MAX_IN_FLIGHT`).
const IN_FLIGHT: usize = 4;
/// Acquisitions queued behind them: one grouped call.
const QUEUED: usize = 3;

struct Rig {
    _server: RedisServer,
    proxy: FaultProxy,
    client: LockClient,
    conn: redis::aio::MultiplexedConnection,
}

async fn rig() -> Rig {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let client = LockClient::builder(proxy.url())
        .watchdog_timeout(Duration::from_secs(30))
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .group_commit(true)
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"));
    let conn = raw(&server).await;
    Rig {
        _server: server,
        proxy,
        client,
        conn,
    }
}

fn names() -> Vec<String> {
    (0..IN_FLIGHT + QUEUED)
        .map(|i| format!("gcut:{i}"))
        .collect()
}

/// Starts every acquisition at once behind a reply delay (so the first
/// ones are in flight when the others come); returns each one's guard.
async fn acquire_all(rig: &Rig) -> Vec<(String, Option<LockGuard>)> {
    rig.proxy
        .delay(Direction::ToClient, Duration::from_millis(30));
    let mut joins = Vec::new();
    for name in names() {
        let lock = rig.client.lock(&name).expect("name");
        joins.push(tokio::spawn(async move {
            let got = lock.try_acquire().await;
            (name, got)
        }));
        // in this order: the first IN_FLIGHT are sent before the rest
        tokio::task::yield_now().await;
    }
    let mut out = Vec::new();
    for j in joins {
        let (name, got) = within(Duration::from_secs(10), "acquisition", j)
            .await
            .expect("task");
        out.push((name, got.ok().flatten()));
    }
    rig.proxy.clear_delay();
    out
}

/// The lock hash of `name` as a raw connection reads it.
async fn hash(conn: &redis::aio::MultiplexedConnection, name: &str) -> Vec<String> {
    let mut c = conn.clone();
    cmd(&mut c, &["HGETALL", name]).await
}

/// Every name ends free (bounded).
async fn all_free(conn: &redis::aio::MultiplexedConnection, what: &str) {
    for name in names() {
        let free = support::eventually(Duration::from_secs(5), || async {
            hash(conn, &name).await.is_empty()
        })
        .await;
        assert!(
            free.is_some(),
            "{what}: {name} still held: {:?}",
            hash(conn, &name).await
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_acquire_cut_anywhere_leaves_no_hold_without_its_guard() {
    let rig = rig().await;
    let matcher = || CommandMatch::name("EVALSHA").with_exact_arg(grouped_acquire_sha());
    let (command_len, reply_len) = lengths(&rig.proxy, matcher(), || async {
        for (_, g) in acquire_all(&rig).await {
            if let Some(g) = g {
                g.release().await.expect("release");
            }
        }
    })
    .await;
    let steps = sampled(command_len, reply_len, 64);
    let (mut kept, mut undone) = (0, 0);
    for (label, fault) in &steps {
        let cut = rig.proxy.fault_next(matcher(), fault.clone());
        let got = acquire_all(&rig).await;
        assert!(cut.fired(), "{label}: the grouped call was not the one cut");
        for (name, guard) in &got {
            match guard {
                Some(g) => {
                    assert_eq!(
                        hash(&rig.conn, name).await,
                        [g.owner_id().to_string(), "1".to_string()],
                        "{label}: {name} given with a guard"
                    );
                    kept += 1;
                }
                None => undone += 1,
            }
        }
        for (_, g) in got {
            if let Some(g) = g {
                g.release().await.expect("release");
            }
        }
        all_free(&rig.conn, label).await;
    }
    eprintln!(
        "{} cuts of a grouped acquire ({command_len}-byte command, {reply_len}-byte reply): {kept} guards kept, {undone} acquisitions without a guard, none left held",
        steps.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_release_cut_anywhere_frees_every_lock_once() {
    let rig = rig().await;
    let matcher = || CommandMatch::name("EVALSHA").with_exact_arg(grouped_release_sha());
    let release_all = |guards: Vec<(String, Option<LockGuard>)>| async {
        rig.proxy
            .delay(Direction::ToClient, Duration::from_millis(30));
        let mut joins = Vec::new();
        for (name, g) in guards {
            let g = g.unwrap_or_else(|| panic!("{name}: set-up acquisition failed"));
            joins.push(tokio::spawn(async move { (name, g.release().await) }));
            tokio::task::yield_now().await;
        }
        let mut out = Vec::new();
        for j in joins {
            out.push(
                within(Duration::from_secs(10), "release", j)
                    .await
                    .expect("task"),
            );
        }
        rig.proxy.clear_delay();
        out
    };
    let setup = || async {
        // set-up: every name acquired (no fault armed for acquire calls)
        for _ in 0..5 {
            let got = acquire_all(&rig).await;
            if got.iter().all(|(_, g)| g.is_some()) {
                return got;
            }
            for (_, g) in got.into_iter() {
                if let Some(g) = g {
                    let _ = g.release().await;
                }
            }
            all_free(&rig.conn, "set-up").await;
        }
        panic!("set-up acquisitions kept failing");
    };
    let (command_len, reply_len) = lengths(&rig.proxy, matcher(), || async {
        for (name, r) in release_all(setup().await).await {
            r.unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    })
    .await;
    let steps = sampled(command_len, reply_len, 64);
    for (label, fault) in &steps {
        let guards = setup().await;
        let cut = rig.proxy.fault_next(matcher(), fault.clone());
        let released = release_all(guards).await;
        assert!(cut.fired(), "{label}: the grouped call was not the one cut");
        for (name, r) in released {
            r.unwrap_or_else(|e| panic!("{label}: {name}: release failed: {e}"));
        }
        // freed at once: the release answered only after Redis had it
        for name in names() {
            assert!(
                hash(&rig.conn, &name).await.is_empty(),
                "{label}: {name} still held"
            );
        }
    }
    eprintln!(
        "{} cuts of a grouped release ({command_len}-byte command, {reply_len}-byte reply): every lock freed",
        steps.len()
    );
}
