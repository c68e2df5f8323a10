//! The read-write lock's scripts cut at every byte offset of the command
//! and of its reply, with FIN and with RST, through the harness's fault
//! proxy: `rw_acquire.lua` (a new read, a new write, a read re-entry),
//! `rw_release.lua` (one of several read counts, the last read beside
//! another client's reader, the last write) and `rw_cancel.lua` (the
//! cancellation of a read whose reply was lost, itself cut).
//!
//! After each offset a raw connection (not the library) reads the lock's
//! hash and the readers' timeout keys: the counts in Redis equal the
//! guards that exist, every read count has its timeout key, no hold
//! outlives its guards, and another owner's hold is never touched.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::cut::{faults, lengths, setup_acquire};
use crate::support::{self, cmd, raw, rw_acquire_sha, rw_cancel_sha, rw_release_sha, within};
use lock_core::{in_context, LockClient, LockGuard};
use lock_tests::{CommandMatch, CutKind, Fault, FaultProxy};

type Hash = HashMap<String, String>;

struct Rig {
    _server: lock_tests::RedisServer,
    proxy: FaultProxy,
    client: LockClient,
    /// Direct to the server: another client.
    other: LockClient,
    conn: redis::aio::MultiplexedConnection,
}

async fn rig() -> Rig {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let client = LockClient::builder(proxy.url())
        .watchdog_timeout(Duration::from_secs(30))
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"));
    let other = support::client_for(&server, 30_000);
    let conn = raw(&server).await;
    Rig {
        _server: server,
        proxy,
        client,
        other,
        conn,
    }
}

/// The lock's hash and its readers' timeout keys (sorted), as Redis has them.
async fn state(conn: &redis::aio::MultiplexedConnection, key: &str) -> (Hash, Vec<String>) {
    let mut c = conn.clone();
    let hash: Hash = cmd(&mut c, &["HGETALL", key]).await;
    let mut timeouts: Vec<String> =
        cmd(&mut c, &["KEYS", &format!("{{{key}}}:*:rwlock_timeout:*")]).await;
    timeouts.sort();
    (hash, timeouts)
}

/// Waits (bounded) until the lock is `want` (hash, timeout keys).
async fn settles(
    conn: &redis::aio::MultiplexedConnection,
    key: &str,
    want: &(Hash, Vec<String>),
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = state(conn, key).await;
        if &now == want {
            return;
        }
        if Instant::now() > deadline {
            panic!("{what}: lock is {now:?}, want {want:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn free() -> (Hash, Vec<String>) {
    (Hash::new(), Vec::new())
}

/// Readers `(guard, count)` and no writer: the hash and timeout keys.
fn reading(key: &str, readers: &[(&LockGuard, u32)]) -> (Hash, Vec<String>) {
    let mut hash = Hash::from([("mode".to_string(), "read".to_string())]);
    let mut keys = Vec::new();
    for (g, n) in readers {
        hash.insert(g.owner_id().to_string(), n.to_string());
        for k in 1..=*n {
            keys.push(format!("{{{key}}}:{}:rwlock_timeout:{k}", g.owner_id()));
        }
    }
    keys.sort();
    (hash, keys)
}

fn writing(g: &LockGuard) -> (Hash, Vec<String>) {
    (
        Hash::from([
            ("mode".to_string(), "write".to_string()),
            (format!("{}:write", g.owner_id()), "1".to_string()),
        ]),
        Vec::new(),
    )
}

fn acquire_matcher(mode: &str, key: &str) -> CommandMatch {
    CommandMatch::name("EVALSHA")
        .with_exact_arg(rw_acquire_sha())
        .with_exact_arg(mode)
        .with_exact_arg(key)
}

/// A new read or write (`mode`) cut at every offset: granted with its hold
/// in Redis, or failed with nothing left.
async fn fresh_cut_everywhere(mode: &str) {
    let r = rig().await;
    let name = |i: usize| format!("rw-cut-{mode}-{i:05}");
    let side = |rw: &lock_core::RwLock| {
        if mode == "read" {
            rw.read()
        } else {
            rw.write()
        }
    };
    let probe = side(&r.client.rw_lock(name(0)).expect("name"));
    let (command_len, reply_len) = lengths(&r.proxy, acquire_matcher(mode, &name(0)), || async {
        probe
            .acquire()
            .await
            .expect("probe")
            .release()
            .await
            .expect("release");
    })
    .await;
    settles(&r.conn, &name(0), &free(), "probe").await;
    let started = Instant::now();
    let (mut granted, mut failed) = (0, 0);
    for (i, (label, fault)) in faults(command_len, reply_len).into_iter().enumerate() {
        let key = name(i + 1);
        let lock = side(&r.client.rw_lock(&key).expect("name"));
        let cut = r.proxy.fault_next(acquire_matcher(mode, &key), fault);
        let outcome = within(Duration::from_secs(5), &label, lock.try_acquire()).await;
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: the fault fired"
        );
        match outcome {
            Ok(Some(guard)) => {
                granted += 1;
                let want = if mode == "read" {
                    reading(&key, &[(&guard, 1)])
                } else {
                    writing(&guard)
                };
                settles(&r.conn, &key, &want, &label).await;
                drop(guard);
            }
            Ok(None) => panic!("{label}: nobody else holds {key}"),
            Err(_) => failed += 1,
        }
        settles(&r.conn, &key, &free(), &label).await;
    }
    eprintln!(
        "rw {mode}: {} offsets (command {command_len} B, reply {reply_len} B, FIN+RST): {granted} granted, {failed} failed; no hold or timeout key left; {:?}",
        granted + failed,
        started.elapsed()
    );
    assert!(failed > 0 && granted > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_read_cut_at_every_offset_leaves_no_hold_without_a_guard() {
    fresh_cut_everywhere("read").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_write_cut_at_every_offset_leaves_no_hold_without_a_guard() {
    fresh_cut_everywhere("write").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_reentry_cut_at_every_offset_keeps_counts_and_keys_equal_to_the_guards() {
    let r = rig().await;
    let key = "rw-cut-reentry";
    let lock = r.client.rw_lock(key).expect("name").read();
    let matcher = || acquire_matcher("read-re", key);
    let (command_len, reply_len) = in_context(async {
        let outer = lock.acquire().await.expect("outer");
        let lens = lengths(&r.proxy, matcher(), || async {
            lock.acquire()
                .await
                .expect("inner")
                .release()
                .await
                .expect("release");
        })
        .await;
        outer.release().await.expect("outer release");
        lens
    })
    .await;
    let started = Instant::now();
    let (mut entered, mut failed) = (0, 0);
    for (label, fault) in faults(command_len, reply_len) {
        in_context(async {
            let outer = setup_acquire(&lock).await;
            let cut = r.proxy.fault_next(matcher(), fault);
            let inner = within(Duration::from_secs(5), &label, lock.acquire()).await;
            assert!(
                cut.wait_fired(Duration::from_secs(2)),
                "{label}: the fault fired"
            );
            match inner {
                Ok(inner) => {
                    entered += 1;
                    settles(&r.conn, key, &reading(key, &[(&outer, 2)]), &label).await;
                    inner.release().await.expect("inner release");
                }
                Err(_) => failed += 1,
            }
            settles(&r.conn, key, &reading(key, &[(&outer, 1)]), &label).await;
            outer.release().await.expect("outer release");
        })
        .await;
        settles(&r.conn, key, &free(), &label).await;
    }
    eprintln!(
        "rw read re-entry: {} offsets (command {command_len} B, reply {reply_len} B, FIN+RST): {entered} entered, {failed} failed; counts and timeout keys always equal to guards; {:?}",
        entered + failed,
        started.elapsed()
    );
    assert!(entered > 0);
}

/// Which release a cut hits.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Release {
    /// One of two read counts: exactly one taken, with its timeout key.
    InnerRead,
    /// The last read count beside another client's reader: ours ends,
    /// theirs stays.
    LastRead,
    /// The last write count: freed once; another client's writer right
    /// after keeps the lock.
    LastWrite,
}

/// `case` cut at every offset of the release command and its reply.
async fn release_cut_everywhere(case: Release) {
    let r = rig().await;
    let key = match case {
        Release::InnerRead => "rw-cut-release-inner",
        Release::LastRead => "rw-cut-release-read",
        Release::LastWrite => "rw-cut-release-write",
    };
    let rw = r.client.rw_lock(key).expect("name");
    let theirs = r.other.rw_lock(key).expect("name");
    let side = || match case {
        Release::LastWrite => rw.write(),
        _ => rw.read(),
    };
    let matcher = || {
        CommandMatch::name("EVALSHA")
            .with_exact_arg(rw_release_sha())
            .with_exact_arg(key)
    };
    let (command_len, reply_len) = lengths(&r.proxy, matcher(), || async {
        side()
            .acquire()
            .await
            .expect("g")
            .release()
            .await
            .expect("release");
    })
    .await;
    let started = Instant::now();
    let mut errors = 0;
    for (label, fault) in faults(command_len, reply_len) {
        match case {
            Release::InnerRead => {
                in_context(async {
                    let outer = setup_acquire(&rw.read()).await;
                    let inner = setup_acquire(&rw.read()).await;
                    let cut = r.proxy.fault_next(matcher(), fault);
                    let result = within(Duration::from_secs(5), &label, inner.release()).await;
                    assert!(
                        cut.wait_fired(Duration::from_secs(2)),
                        "{label}: the fault fired"
                    );
                    errors += usize::from(result.is_err());
                    settles(&r.conn, key, &reading(key, &[(&outer, 1)]), &label).await;
                    outer.release().await.expect("outer");
                })
                .await;
            }
            Release::LastRead => {
                let mine = setup_acquire(&rw.read()).await;
                let other_reader = theirs.read().acquire().await.expect("their reader");
                let cut = r.proxy.fault_next(matcher(), fault);
                let result = within(Duration::from_secs(5), &label, mine.release()).await;
                assert!(
                    cut.wait_fired(Duration::from_secs(2)),
                    "{label}: the fault fired"
                );
                errors += usize::from(result.is_err());
                settles(&r.conn, key, &reading(key, &[(&other_reader, 1)]), &label).await;
                other_reader.release().await.expect("theirs");
            }
            Release::LastWrite => {
                let w = setup_acquire(&rw.write()).await;
                let cut = r.proxy.fault_next(matcher(), fault);
                let result = within(Duration::from_secs(5), &label, w.release()).await;
                assert!(
                    cut.wait_fired(Duration::from_secs(2)),
                    "{label}: the fault fired"
                );
                errors += usize::from(result.is_err());
                let their_write = within(
                    Duration::from_secs(5),
                    &label,
                    theirs.write().acquire_timeout(Duration::from_secs(4)),
                )
                .await
                .expect("the other client's writer gets the lock");
                tokio::time::sleep(Duration::from_millis(5)).await;
                assert_eq!(state(&r.conn, key).await, writing(&their_write), "{label}");
                their_write.release().await.expect("theirs");
            }
        }
        settles(&r.conn, key, &free(), &label).await;
    }
    eprintln!(
        "rw release ({case:?}): {} offsets (command {command_len} B, reply {reply_len} B, FIN+RST): {errors} releases reported an error; every count and timeout key taken exactly once, the other client's holds untouched; {:?}",
        2 * (command_len + reply_len + 2),
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_read_counts_cut_at_every_offset_is_taken_once() {
    release_cut_everywhere(Release::InnerRead).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_read_cut_at_every_offset_ends_and_leaves_another_reader_alone() {
    release_cut_everywhere(Release::LastRead).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_write_cut_at_every_offset_frees_once_for_another_writer() {
    release_cut_everywhere(Release::LastWrite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_cut_at_every_offset_still_leaves_no_hold() {
    let r = rig().await;
    let cancel = || {
        CommandMatch::name("EVALSHA")
            .with_exact_arg(rw_cancel_sha())
            .with_exact_arg("new")
    };
    // a read whose reply is lost is cancelled; measure that cancellation
    let probe_key = "rw-cut-cancel-00000";
    let probe = r.client.rw_lock(probe_key).expect("name").read();
    let lost_reply = Fault::CutReply {
        after: 0,
        how: CutKind::Rst,
    };
    let (command_len, reply_len) = lengths(&r.proxy, cancel(), || async {
        let lost = r
            .proxy
            .fault_next(acquire_matcher("read", probe_key), lost_reply.clone());
        let _ = probe.try_acquire().await;
        assert!(lost.wait_fired(Duration::from_secs(2)));
        settles(&r.conn, probe_key, &free(), "probe").await;
    })
    .await;
    let started = Instant::now();
    let mut cases = 0;
    for (i, (label, fault)) in faults(command_len, reply_len).into_iter().enumerate() {
        let key = format!("rw-cut-cancel-{:05}", i + 1);
        let lock = r.client.rw_lock(&key).expect("name").read();
        let lost = r
            .proxy
            .fault_next(acquire_matcher("read", &key), lost_reply.clone());
        let cut = r.proxy.fault_next(cancel().with_exact_arg(&key), fault);
        let outcome = within(Duration::from_secs(5), &label, lock.try_acquire()).await;
        assert!(
            lost.wait_fired(Duration::from_secs(2)),
            "{label}: the reply was lost"
        );
        assert!(
            cut.wait_fired(Duration::from_secs(3)),
            "{label}: the cancellation was cut"
        );
        if let Ok(Some(g)) = outcome {
            // the one retry on a fresh connection took the lock
            drop(g);
        }
        settles(&r.conn, &key, &free(), &label).await;
        cases += 1;
    }
    eprintln!(
        "rw cancel: {cases} offsets (command {command_len} B, reply {reply_len} B, FIN+RST): no hold or timeout key left; {:?}",
        started.elapsed()
    );
}
