//! The fenced write (`fenced.lua` around `incr_by`'s body) and an
//! election's record write (`leader_record.lua`, run by `campaign` right
//! after the grant) cut at every byte offset of the command and of the
//! reply, with FIN and with RST, through the harness's fault proxy.
//!
//! Each offset runs on a fresh client through the proxy, shut down after
//! it. A raw connection (not the library) judges: a fenced write is
//! applied at most once, and answered `Ok` only when it was applied (with
//! the value Redis holds); a cut campaign either leads — its record in
//! Redis naming the lock's holder, with its term and value — or fails and
//! leaves the lock free.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lock_core::LockClient;
use lock_tests::{CommandMatch, FaultProxy};

use crate::support::cut::{faults, lengths, setup_acquire};
use crate::support::{self, cmd, raw, within};

struct Rig {
    _server: lock_tests::RedisServer,
    proxy: FaultProxy,
    /// Direct to the server: another client.
    other: LockClient,
    conn: redis::aio::MultiplexedConnection,
}

async fn rig() -> Rig {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let other = support::client_for(&server, 30_000);
    let conn = raw(&server).await;
    Rig {
        _server: server,
        proxy,
        other,
        conn,
    }
}

impl Rig {
    /// A fresh client through the proxy (watchdog 1 s, 500 ms time-outs).
    fn through(&self) -> LockClient {
        LockClient::builder(self.proxy.url())
            .watchdog_timeout(Duration::from_secs(1))
            .command_timeout(Duration::from_millis(500))
            .connect_timeout(Duration::from_millis(500))
            .build()
            .unwrap_or_else(|e| panic!("client: {e}"))
    }
}

async fn shut(client: &LockClient, what: &str) {
    let report = client.shutdown(Duration::from_secs(5)).await;
    assert!(report.is_complete(), "{what}: shutdown {report:?}");
}

async fn counter(conn: &redis::aio::MultiplexedConnection, key: &str) -> i64 {
    let mut conn = conn.clone();
    let value: Option<i64> = cmd(&mut conn, &["GET", key]).await;
    value.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_cut_at_every_offset_is_applied_at_most_once_and_ok_only_when_applied() {
    let r = rig().await;
    let (name, key) = ("fence-cut:{a}", "fence-cut:{a}:n");
    let matcher = || {
        CommandMatch::name("EVALSHA")
            .with_exact_arg(name)
            .with_exact_arg(key)
    };
    let (command_len, reply_len) = lengths(&r.proxy, matcher(), || async {
        let c = r.through();
        let guard = setup_acquire(&c.lock(name).expect("name")).await;
        guard.fence().incr_by(key, 1).await.expect("probe");
        guard.release().await.expect("release");
        shut(&c, "probe").await;
    })
    .await;
    let started = Instant::now();
    let (mut applied_ok, mut applied_unknown, mut not_applied) = (0, 0, 0);
    for (label, fault) in faults(command_len, reply_len) {
        let c = r.through();
        let guard = setup_acquire(&c.lock(name).expect("name")).await;
        let before = counter(&r.conn, key).await;
        let cut = r.proxy.fault_next(matcher(), fault);
        let outcome = within(
            Duration::from_secs(5),
            &label,
            guard.fence().incr_by(key, 1),
        )
        .await;
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: the fault fired"
        );
        let after = counter(&r.conn, key).await;
        match outcome {
            Ok(value) => {
                assert_eq!(
                    (after - before, value),
                    (1, after),
                    "{label}: Ok means applied once"
                );
                applied_ok += 1;
            }
            Err(e) => {
                assert!(e.is_redis() && !e.is_fence_refused(), "{label}: {e:?}");
                match after - before {
                    0 => not_applied += 1,
                    1 => applied_unknown += 1,
                    n => panic!("{label}: applied {n} times"),
                }
            }
        }
        drop(guard);
        shut(&c, &label).await;
        // A little later, still applied at most once (nothing retried it).
        assert!(counter(&r.conn, key).await - before <= 1, "{label}");
    }
    eprintln!(
        "fenced write: {} offsets (command {command_len} B, reply {reply_len} B, FIN+RST): {applied_ok} applied and Ok, {applied_unknown} applied with an error (outcome unknown to the caller), {not_applied} not applied; never twice; {:?}",
        applied_ok + applied_unknown + not_applied,
        started.elapsed()
    );
    assert!(applied_ok > 0 && not_applied > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_whose_record_write_is_cut_at_every_offset_leads_with_its_record_or_frees_the_lock(
) {
    let r = rig().await;
    let name = "elect-cut";
    let record = "lockcore_leader:{elect-cut}";
    let matcher = || CommandMatch::name("EVALSHA").with_exact_arg(record);
    let (command_len, reply_len) = lengths(&r.proxy, matcher(), || async {
        let c = r.through();
        let l = c
            .election(name)
            .expect("name")
            .campaign("probe")
            .await
            .expect("probe");
        l.resign().await.expect("resign");
        shut(&c, "probe").await;
    })
    .await;
    let started = Instant::now();
    let (mut led, mut failed) = (0, 0);
    let observer = r.other.election(name).expect("name");
    for (label, fault) in faults(command_len, reply_len) {
        let c = r.through();
        let election = c.election(name).expect("name");
        let cut = r.proxy.fault_next(matcher(), fault);
        let outcome = within(
            Duration::from_secs(10),
            &label,
            election.campaign_timeout("v", Duration::from_secs(3)),
        )
        .await;
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: the fault fired"
        );
        match outcome {
            Ok(leadership) => {
                let mut conn = r.conn.clone();
                let rec: HashMap<String, String> = cmd(&mut conn, &["HGETALL", record]).await;
                let lock: HashMap<String, String> = cmd(&mut conn, &["HGETALL", name]).await;
                assert!(
                    lock.contains_key(&rec["owner"]),
                    "{label}: {rec:?} {lock:?}"
                );
                assert_eq!(rec["value"], "v", "{label}");
                assert_eq!(rec["term"], leadership.term().to_string(), "{label}");
                let seen = observer.leader().await.expect("read").expect("a leader");
                assert_eq!(seen.term(), Some(leadership.term()), "{label}");
                leadership.resign().await.expect("resign");
                led += 1;
            }
            Err(e) => {
                assert!(e.is_redis() || e.is_lost(), "{label}: {e:?}");
                failed += 1;
            }
        }
        shut(&c, &label).await;
        let mut conn = r.conn.clone();
        let held: i64 = cmd(&mut conn, &["EXISTS", name]).await;
        assert_eq!(
            held, 0,
            "{label}: the lock is free after the client shut down"
        );
        assert_eq!(observer.leader().await.expect("read"), None, "{label}");
    }
    eprintln!(
        "campaign record write: {} offsets (command {command_len} B, reply {reply_len} B, FIN+RST): {led} led with their record, {failed} failed with the lock freed; {:?}",
        led + failed,
        started.elapsed()
    );
    assert!(led > 0);
}
