//! Connections cut at every byte offset of a lock command or of its reply,
//! with FIN and with RST, through the harness's fault proxy.
//!
//! For acquire, re-entry, release and renewal, each offset is tried once;
//! afterwards a raw connection (not the library) reads the lock's hash and
//! checks that the hold count in Redis equals the guards that exist, that
//! no hold outlives its guards, and that a release never touches another
//! owner's hold.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::cut::{faults, lengths, setup_acquire};
use crate::support::{self, acquire_sha, cmd, raw, release_sha, renew_sha, within};
use lock_core::{in_context, LockClient, LockGuard};
use lock_tests::{CommandMatch, FaultProxy, RedisServer};

type Hash = HashMap<String, String>;

struct Rig {
    server: RedisServer,
    proxy: FaultProxy,
    client: LockClient,
    /// Direct to the server: another owner.
    other: LockClient,
    conn: redis::aio::MultiplexedConnection,
}

async fn rig(watchdog_ms: u64) -> Rig {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let client = LockClient::builder(proxy.url())
        .watchdog_timeout(Duration::from_millis(watchdog_ms))
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"));
    let other = support::client_for(&server, 30_000);
    let conn = raw(&server).await;
    Rig {
        server,
        proxy,
        client,
        other,
        conn,
    }
}

/// Waits (bounded) until the lock's hash is `want`; panics with what it
/// is otherwise.
async fn settles(conn: &redis::aio::MultiplexedConnection, key: &str, want: &Hash, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = conn.clone();
        let now: Hash = cmd(&mut c, &["HGETALL", key]).await;
        if &now == want {
            return;
        }
        if Instant::now() > deadline {
            panic!("{what}: lock hash is {now:?}, want {want:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn one(guard: &LockGuard, count: u32) -> Hash {
    HashMap::from([(guard.owner_id().to_string(), count.to_string())])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_cut_at_every_offset_leaves_no_hold_without_a_guard() {
    let r = rig(30_000).await;
    let sha = acquire_sha();
    // Names of one length, so that every attempt has the same layout.
    let name = |i: usize| format!("cut-acq-{i:05}");
    let matcher = |key: &str| {
        CommandMatch::name("EVALSHA")
            .with_exact_arg(&sha)
            .with_exact_arg("new")
            .with_exact_arg(key)
    };
    let probe = r.client.lock(name(0)).expect("name");
    let (command_len, reply_len) = lengths(&r.proxy, matcher(&name(0)), || async {
        probe
            .acquire()
            .await
            .expect("probe")
            .release()
            .await
            .expect("release");
    })
    .await;
    settles(&r.conn, &name(0), &Hash::new(), "probe").await;

    let started = Instant::now();
    let (mut granted, mut failed) = (0, 0);
    for (i, (label, fault)) in faults(command_len, reply_len).into_iter().enumerate() {
        let key = name(i + 1);
        let lock = r.client.lock(&key).expect("name");
        let cut = r.proxy.fault_next(matcher(&key), fault);
        let outcome = within(Duration::from_secs(5), &label, lock.try_acquire()).await;
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: the fault fired"
        );
        match outcome {
            Ok(Some(guard)) => {
                granted += 1;
                settles(&r.conn, &key, &one(&guard, 1), &label).await;
                drop(guard);
            }
            Ok(None) => panic!("{label}: nobody else holds {key}"),
            Err(_) => failed += 1,
        }
        // No hold outlives its guards: an attempt whose reply was lost is
        // cancelled (undone, or refused if it arrives later).
        settles(&r.conn, &key, &Hash::new(), &label).await;
    }
    eprintln!(
        "acquire: {} offsets (command {command_len} B, reply {reply_len} B, FIN+RST): {granted} granted, {failed} failed; no hold left; {:?}",
        granted + failed,
        started.elapsed()
    );
    assert!(failed > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_cut_at_every_offset_keeps_the_count_equal_to_the_guards() {
    let r = rig(30_000).await;
    let sha = acquire_sha();
    let key = "cut-reentry";
    let lock = r.client.lock(key).expect("name");
    let matcher = || {
        CommandMatch::name("EVALSHA")
            .with_exact_arg(&sha)
            .with_exact_arg("re")
            .with_exact_arg(key)
    };
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
                    settles(&r.conn, key, &one(&outer, 2), &label).await;
                    inner.release().await.expect("inner release");
                }
                Err(_) => failed += 1,
            }
            // The count equals the guards: one.
            settles(&r.conn, key, &one(&outer, 1), &label).await;
            outer.release().await.expect("outer release");
        })
        .await;
        settles(&r.conn, key, &Hash::new(), &label).await;
    }
    eprintln!(
        "re-entry: {} offsets (command {command_len} B, reply {reply_len} B, FIN+RST): {entered} entered, {failed} failed; counts always equal to guards; {:?}",
        entered + failed,
        started.elapsed()
    );
    // A cut connection is cancelled and re-entered once on a fresh one, so
    // most cuts end entered; each case was checked above.
    assert!(entered > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_cut_at_every_offset_decrements_once_and_never_touches_another_hold() {
    let mut r = rig(30_000).await;
    let sha = release_sha();
    let key = "cut-release";
    let lock = r.client.lock(key).expect("name");
    let other = r.other.lock(key).expect("name");
    let matcher = || {
        CommandMatch::name("EVALSHA")
            .with_exact_arg(&sha)
            .with_exact_arg(key)
    };
    let (command_len, reply_len) = lengths(&r.proxy, matcher(), || async {
        lock.acquire()
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
        // A re-entered hold: the cut release of the inner guard must take
        // exactly one count, however often it is retried.
        in_context(async {
            let outer = setup_acquire(&lock).await;
            let inner = setup_acquire(&lock).await;
            let cut = r.proxy.fault_next(matcher(), fault.clone());
            let result = within(Duration::from_secs(5), &label, inner.release()).await;
            assert!(
                cut.wait_fired(Duration::from_secs(2)),
                "{label}: the fault fired"
            );
            errors += usize::from(result.is_err());
            settles(&r.conn, key, &one(&outer, 1), &label).await;
            outer.release().await.expect("outer");
        })
        .await;
        settles(&r.conn, key, &Hash::new(), &label).await;

        // The last count: the lock is freed once, and another owner who
        // takes it right after keeps it.
        let g = setup_acquire(&lock).await;
        let cut = r.proxy.fault_next(matcher(), fault);
        let result = within(Duration::from_secs(5), &label, g.release()).await;
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: the fault fired"
        );
        errors += usize::from(result.is_err());
        let theirs = within(
            Duration::from_secs(5),
            &label,
            other.acquire_timeout(Duration::from_secs(4)),
        )
        .await
        .expect("the other owner gets the lock");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let mut c = r.conn.clone();
        let now: Hash = cmd(&mut c, &["HGETALL", key]).await;
        assert_eq!(
            now,
            one(&theirs, 1),
            "{label}: another owner's hold untouched"
        );
        theirs.release().await.expect("theirs");
    }
    eprintln!(
        "release: {} offsets x 2 (command {command_len} B, reply {reply_len} B, FIN+RST): {errors} releases reported an error, every count taken exactly once; {:?}",
        2 * (command_len + reply_len + 2),
        started.elapsed()
    );
    let _ = &mut r.server;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_cut_at_every_offset_never_leaves_a_hold_without_its_guard() {
    // lease 150 ms: renewed every 50 ms
    let r = rig(150).await;
    let sha = renew_sha();
    let key = "cut-renew";
    let lock = r.client.lock(key).expect("name");
    let matcher = || {
        CommandMatch::name("EVALSHA")
            .with_exact_arg(&sha)
            .with_exact_arg(key)
    };
    let guard = lock.acquire().await.expect("guard");
    // two renewals: the first may load the script
    let (command_len, reply_len) = lengths(&r.proxy, matcher(), || async {
        tokio::time::sleep(Duration::from_millis(60)).await;
    })
    .await;

    let started = Instant::now();
    let mut guard = Some(guard);
    let (mut kept, mut lost) = (0, 0);
    for (label, fault) in faults(command_len, reply_len) {
        let g = match guard.take() {
            Some(g) => g,
            None => setup_acquire(&lock).await,
        };
        let cut = r.proxy.fault_next(matcher(), fault);
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: a renewal was cut"
        );
        // Give the watchdog its retries (well before the deadline).
        tokio::time::sleep(Duration::from_millis(60)).await;
        let mut c = r.conn.clone();
        let now: Hash = cmd(&mut c, &["HGETALL", key]).await;
        if g.is_held() {
            kept += 1;
            assert_eq!(now, one(&g, 1), "{label}: held, and Redis agrees");
            guard = Some(g);
        } else {
            lost += 1;
            assert!(
                now.is_empty() || now == one(&g, 1),
                "{label}: {now:?} — not another owner's"
            );
            drop(g);
            settles(&r.conn, key, &Hash::new(), &label).await;
        }
    }
    if let Some(g) = guard {
        drop(g);
    }
    settles(&r.conn, key, &Hash::new(), "end").await;
    eprintln!(
        "renewal: {} offsets (command {command_len} B, reply {reply_len} B, FIN+RST): hold kept through {kept}, lost {lost}; {:?}",
        kept + lost,
        started.elapsed()
    );
}
