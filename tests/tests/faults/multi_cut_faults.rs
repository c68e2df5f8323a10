//! The multi-lock's script (`multi_acquire.lua`, three locks of one server
//! taken in one call) cut at every byte offset of its command and of its
//! reply, with FIN and with RST, through the harness's fault proxy.
//!
//! After each offset a raw connection (not the library) reads the three
//! lock hashes: a grant has every lock, each with its guard's owner id and
//! count 1, and nothing else; a failure ends (after its cancellations) with
//! none of them; and once the guard is dropped, none. So no hold is ever
//! left without a guard (an orphan), and a multi-lock never has part of
//! its locks: all or nothing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lock_core::LockClient;
use lock_tests::{CommandMatch, FaultProxy};

use crate::support::cut::{faults, lengths};
use crate::support::{self, cmd, raw, within};

type Hash = HashMap<String, String>;

fn multi_acquire_sha() -> String {
    redis::Script::new(include_str!(
        "../../../lock-core/src/protocol/multi_acquire.lua"
    ))
    .get_hash()
    .to_string()
}

/// The three lock names of attempt `i` (one length for every attempt, so
/// that the commands have one layout).
fn names(i: usize) -> [String; 3] {
    ["a", "b", "c"].map(|s| format!("cut-multi-{i:05}-{s}"))
}

/// The three hashes, read raw.
async fn hashes(conn: &redis::aio::MultiplexedConnection, names: &[String; 3]) -> Vec<Hash> {
    let mut out = Vec::new();
    for name in names {
        let mut c = conn.clone();
        out.push(cmd(&mut c, &["HGETALL", name]).await);
    }
    out
}

/// Waits (bounded) until the three hashes are `want`; panics with what
/// they are otherwise.
async fn settles(
    conn: &redis::aio::MultiplexedConnection,
    names: &[String; 3],
    want: &[Hash],
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = hashes(conn, names).await;
        if now == want {
            return;
        }
        if Instant::now() > deadline {
            panic!("{what}: lock hashes are {now:?}, want {want:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_acquire_cut_at_every_offset_leaves_all_or_nothing_and_no_orphan_hold() {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let client = LockClient::builder(proxy.url())
        .watchdog_timeout(Duration::from_secs(30))
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"));
    let conn = raw(&server).await;
    let sha = multi_acquire_sha();
    let matcher = |first: &str| {
        CommandMatch::name("EVALSHA")
            .with_exact_arg(&sha)
            .with_exact_arg(first)
    };
    let empty = vec![Hash::new(); 3];
    let probe_names = names(0);
    let probe = client.multi_lock(&probe_names).expect("names");
    let (command_len, reply_len) = lengths(&proxy, matcher(&probe_names[0]), || async {
        probe
            .acquire()
            .await
            .expect("probe")
            .release()
            .await
            .expect("release");
    })
    .await;
    settles(&conn, &probe_names, &empty, "probe").await;

    let started = Instant::now();
    let (mut granted, mut failed, mut partial_seen) = (0, 0, 0);
    for (i, (label, fault)) in faults(command_len, reply_len).into_iter().enumerate() {
        let names = names(i + 1);
        let multi = client.multi_lock(&names).expect("names");
        let cut = proxy.fault_next(matcher(&names[0]), fault);
        let outcome = within(Duration::from_secs(5), &label, multi.try_acquire()).await;
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: the fault fired"
        );
        match outcome {
            Ok(Some(guard)) => {
                granted += 1;
                // every lock, each with its own guard's hold, at once
                let want: Vec<Hash> = guard
                    .guards()
                    .iter()
                    .map(|g| HashMap::from([(g.owner_id().to_string(), "1".to_string())]))
                    .collect();
                assert_eq!(hashes(&conn, &names).await, want, "{label}: all taken");
                drop(guard);
            }
            Ok(None) => panic!("{label}: nobody else holds {names:?}"),
            Err(_) => {
                failed += 1;
                // the cancellations run lock by lock: a moment with part
                // of them undone is counted, and must end with none
                let now = hashes(&conn, &names).await;
                let present = now.iter().filter(|h| !h.is_empty()).count();
                if present != 0 && present != 3 {
                    partial_seen += 1;
                }
            }
        }
        // No hold outlives its guards: an attempt whose reply was lost is
        // cancelled (undone lock by lock, or refused if it arrives later).
        settles(&conn, &names, &empty, &label).await;
    }
    eprintln!(
        "multi-acquire (3 locks): {} offsets (command {command_len} B, reply {reply_len} B, FIN+RST): {granted} granted, {failed} failed ({partial_seen} seen mid-cancellation); none left; {:?}",
        granted + failed,
        started.elapsed()
    );
    assert!(failed > 0 && granted > 0);
    // the client still works, and is left holding nothing
    let last = names(99_999);
    let guard = client
        .multi_lock(&last)
        .expect("names")
        .acquire_timeout(Duration::from_secs(3))
        .await
        .expect("after the cuts");
    guard.release().await.expect("release");
    settles(&conn, &last, &empty, "after the cuts").await;
}
