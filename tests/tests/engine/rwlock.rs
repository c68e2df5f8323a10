//! The read-write lock (`LockClient::rw_lock`) on a real redis-server:
//! readers share, a writer excludes, re-entry, downgrade, the upgrade
//! refused at once, wake-ups, renewal of a reader's own keys, writers not
//! starved by a stream of readers, and "never a writer with anyone" under
//! a mixed load, judged by an observer with its own connection.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{in_context, AcquireOptions, Error, LockClient, LockContext, LockMode};

use crate::support::RwInside;
use crate::support::{self, cmd, raw, within};

fn client(server: &lock_tests::RedisServer) -> LockClient {
    support::client_for(server, 30_000)
}

async fn hash(
    server: &lock_tests::RedisServer,
    key: &str,
) -> std::collections::HashMap<String, String> {
    let mut conn = raw(server).await;
    cmd(&mut conn, &["HGETALL", key]).await
}

#[tokio::test]
async fn the_observer_catches_a_writer_with_a_reader() {
    let server = support::server();
    let mut seen = RwInside::new(&server, "planted").await;
    seen.enter_read().await;
    seen.enter_read().await;
    assert_eq!(seen.violations().await, 0, "readers share");
    seen.enter_write().await;
    assert_eq!(
        seen.violations().await,
        1,
        "a writer with readers is caught"
    );
    seen.leave_write().await;
    seen.leave_read().await;
    seen.leave_read().await;
    seen.enter_write().await;
    seen.enter_read().await;
    assert_eq!(
        seen.violations().await,
        2,
        "a reader with a writer is caught"
    );
    assert_eq!(seen.max_readers().await, 2);
}

#[tokio::test]
async fn readers_share_in_redissons_layout_and_a_writer_waits_for_them() {
    let server = support::server();
    let (a, b) = (client(&server), client(&server));
    let rw_a = a.rw_lock("rw:share").expect("name");
    let rw_b = b.rw_lock("rw:share").expect("name");
    assert_eq!(rw_a.read().mode(), LockMode::Read);
    assert_eq!(rw_a.write().mode(), LockMode::Write);
    let r1 = rw_a.read().acquire().await.expect("first reader");
    let r2 = rw_a
        .read()
        .acquire()
        .await
        .expect("a second reader of the same client");
    let r3 = rw_b
        .read()
        .acquire()
        .await
        .expect("a reader of another client");
    assert_ne!(r1.owner_id(), r2.owner_id(), "two holds, not a re-entry");
    assert!(r2.fencing_token() > r1.fencing_token());
    let h = hash(&server, "rw:share").await;
    assert_eq!(h.get("mode").map(String::as_str), Some("read"));
    for g in [&r1, &r2, &r3] {
        assert_eq!(h.get(g.owner_id()).map(String::as_str), Some("1"));
        let mut conn = raw(&server).await;
        let key = format!("{{rw:share}}:{}:rwlock_timeout:1", g.owner_id());
        let pttl: i64 = cmd(&mut conn, &["PTTL", &key]).await;
        assert!(pttl > 25_000, "{key}: {pttl}");
    }
    let status = rw_b.status().await.expect("status");
    assert_eq!(status.mode, Some(LockMode::Read));
    assert_eq!(status.owners.len(), 3);
    assert!(status.owners.iter().all(|o| o.mode == LockMode::Read));
    // a writer cannot come in while they read
    assert!(rw_b.write().try_acquire().await.expect("try").is_none());
    let writer = tokio::spawn({
        let w = rw_b.write();
        async move { w.acquire_timeout(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "the writer waits for the readers");
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!writer.is_finished(), "one reader is left");
    let released = Instant::now();
    r3.release().await.expect("release");
    let w = within(Duration::from_secs(3), "writer", writer)
        .await
        .expect("join")
        .expect("the writer gets the lock");
    assert!(
        released.elapsed() < Duration::from_secs(1),
        "woken by the last read release, not by a lease: {:?}",
        released.elapsed()
    );
    let h = hash(&server, "rw:share").await;
    assert_eq!(h.get("mode").map(String::as_str), Some("write"));
    assert_eq!(
        h.get(&format!("{}:write", w.owner_id()))
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(h.len(), 2);
    // readers wait for the writer
    assert!(rw_a.read().try_acquire().await.expect("try").is_none());
    w.release().await.expect("release");
    let mut conn = raw(&server).await;
    let exists: i64 = cmd(&mut conn, &["EXISTS", "rw:share"]).await;
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn a_write_release_wakes_every_waiting_reader_at_once() {
    let server = support::server();
    let (a, b) = (client(&server), client(&server));
    let w = a
        .rw_lock("rw:wake")
        .expect("name")
        .write()
        .acquire()
        .await
        .expect("write");
    let rw_b = b.rw_lock("rw:wake").expect("name");
    let mut readers = Vec::new();
    for _ in 0..5 {
        let r = rw_b.read();
        readers.push(tokio::spawn(async move {
            let g = r.acquire_timeout(Duration::from_secs(10)).await?;
            let at = Instant::now();
            tokio::time::sleep(Duration::from_millis(300)).await;
            g.release().await?;
            Ok::<_, Error>(at)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    w.release().await.expect("release");
    let mut last = released;
    for r in readers {
        let at = within(Duration::from_secs(5), "reader", r)
            .await
            .expect("join")
            .expect("a reader gets in");
        last = last.max(at);
    }
    // all five in within one hold time of each other: they read together
    assert!(
        last - released < Duration::from_millis(250),
        "every reader in soon after the write release: {:?}",
        last - released
    );
}

#[tokio::test]
async fn an_upgrade_fails_at_once_and_a_downgrade_keeps_a_read() {
    let server = support::server();
    let (a, b) = (client(&server), client(&server));
    let rw = a.rw_lock("rw:grade").expect("name");
    let other = b.rw_lock("rw:grade").expect("name");
    // upgrade: read, then write in the same context
    in_context(async {
        let r = rw.read().acquire().await.expect("read");
        let started = Instant::now();
        let err = rw
            .write()
            .acquire_timeout(Duration::from_secs(5))
            .await
            .expect_err("refused");
        assert!(
            matches!(err, Error::UpgradeRefused { ref name } if name == "rw:grade"),
            "{err}"
        );
        assert!(started.elapsed() < Duration::from_millis(100), "at once");
        r.release().await.expect("release");
        // with the read gone, the write is fine
        let w = rw.write().acquire().await.expect("write");
        w.release().await.expect("release");
    })
    .await;
    // outside any context there is nothing to upgrade: a plain wait
    let r = rw.read().acquire().await.expect("read");
    assert!(rw.write().try_acquire().await.expect("try").is_none());
    r.release().await.expect("release");
    // downgrade: write, read under it, release the write: a read remains
    in_context(async {
        let w = rw.write().acquire().await.expect("write");
        let r = rw
            .read()
            .acquire_timeout(Duration::from_millis(500))
            .await
            .expect("a downgrade is granted at once");
        assert!(
            other.read().try_acquire().await.expect("try").is_none(),
            "others still wait"
        );
        w.release().await.expect("release the write");
        let h = hash(&server, "rw:grade").await;
        assert_eq!(h.get("mode").map(String::as_str), Some("read"));
        assert_eq!(h.get(r.owner_id()).map(String::as_str), Some("1"));
        assert_eq!(h.len(), 2, "{h:?}");
        // now another client's reader joins, and a writer waits
        let shared = other.read().try_acquire().await.expect("try");
        assert!(shared.is_some(), "readers share after the downgrade");
        // (this context reads `other` now: its write would be an upgrade)
        let err = other.write().try_acquire().await.expect_err("refused");
        assert!(matches!(err, Error::UpgradeRefused { .. }), "{err}");
        if let Some(shared) = shared {
            shared.release().await.expect("release");
        }
        assert!(
            other.write().try_acquire().await.expect("try").is_none(),
            "a reader remains"
        );
        r.release().await.expect("release the read");
    })
    .await;
    support::eventually(Duration::from_secs(2), || async {
        let mut conn = raw(&server).await;
        cmd::<i64, _>(&mut conn, &["EXISTS", "rw:grade"]).await == 0
    })
    .await
    .expect("nothing left");
}

#[tokio::test]
async fn readers_and_writers_re_enter_in_a_context_and_a_section() {
    let server = support::server();
    let c = client(&server);
    let rw = c.rw_lock("rw:re").expect("name");
    in_context(async {
        let r1 = rw.read().acquire().await.expect("read");
        let r2 = rw.read().acquire().await.expect("re-entry");
        assert_eq!(r1.owner_id(), r2.owner_id(), "one hold, two counts");
        assert_eq!(rw.read().hold_count().await.expect("count"), 2);
        let mut conn = raw(&server).await;
        for k in [1, 2] {
            let key = format!("{{rw:re}}:{}:rwlock_timeout:{k}", r1.owner_id());
            let v: i64 = cmd(&mut conn, &["EXISTS", &key]).await;
            assert_eq!(v, 1, "{key}");
        }
        r2.release().await.expect("inner");
        let key2 = format!("{{rw:re}}:{}:rwlock_timeout:2", r1.owner_id());
        let v: i64 = cmd(&mut conn, &["EXISTS", &key2]).await;
        assert_eq!(v, 0, "the inner release took its timeout key");
        r1.release().await.expect("outer");
        let w1 = rw.write().acquire().await.expect("write");
        let w2 = rw.write().acquire().await.expect("write re-entry");
        assert_eq!(w1.owner_id(), w2.owner_id());
        let h = hash(&server, "rw:re").await;
        assert_eq!(
            h.get(&format!("{}:write", w1.owner_id()))
                .map(String::as_str),
            Some("2")
        );
        assert_eq!(rw.write().hold_count().await.expect("count"), 2);
        drop(w2);
        w1.release().await.expect("outer");
    })
    .await;
    // a section: the nested read re-enters the section's read
    let outer = rw
        .read()
        .acquire_with(AcquireOptions::new().for_section())
        .await
        .expect("read");
    let owner = outer.owner_id().to_string();
    LockContext::new()
        .enter(&outer)
        .scope(async {
            let inner = rw.read().acquire().await.expect("nested read");
            assert_eq!(inner.owner_id(), owner);
            let err = rw.write().acquire().await.expect_err("refused");
            assert!(matches!(err, Error::UpgradeRefused { .. }), "{err}");
            inner.release().await.expect("inner");
        })
        .await;
    outer.release().await.expect("outer");
}

#[tokio::test]
async fn a_writer_is_not_starved_by_a_stream_of_readers() {
    let server = support::server();
    let readers_client = client(&server);
    let other_readers = client(&server);
    let writer_client = client(&server);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let rw = if i % 2 == 0 {
            &readers_client
        } else {
            &other_readers
        }
        .rw_lock("rw:starve")
        .expect("name");
        let (stop, reads) = (stop.clone(), reads.clone());
        tasks.push(tokio::spawn(async move {
            // staggered: at any moment several readers are inside
            tokio::time::sleep(Duration::from_millis(12 * i)).await;
            let started = Instant::now();
            // no pause between reads; bounded in count and time
            for _ in 0..100_000 {
                if stop.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(20) {
                    break;
                }
                if let Ok(g) = rw.read().acquire_timeout(Duration::from_secs(10)).await {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let _ = g.release().await;
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // the readers overlap from now on
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rw = writer_client.rw_lock("rw:starve").expect("name");
    let mut waits = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let w = rw
            .write()
            .acquire_timeout(Duration::from_secs(10))
            .await
            .expect("the writer gets its turn");
        waits.push(started.elapsed());
        w.release().await.expect("release");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        within(Duration::from_secs(15), "reader loop", t)
            .await
            .expect("join");
    }
    println!("writer waits under 8 looping readers: {waits:?}");
    assert!(reads.load(Ordering::Relaxed) > 20, "the readers did read");
    // a reader holds 100 ms: the writer waits for those inside (and new
    // readers wait behind it), never for the readers to stop
    for w in &waits {
        assert!(*w < Duration::from_secs(2), "writer waited {waits:?}");
    }
}

#[tokio::test]
async fn never_a_writer_with_anyone_under_a_mixed_load() {
    let server = support::server();
    let clients: Vec<LockClient> = (0..3).map(|_| client(&server)).collect();
    let seen = RwInside::new(&server, "mixed").await;
    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        for t in 0..4 {
            let rw = c.rw_lock("rw:mixed").expect("name");
            let mut seen = seen.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = (0u32, 0u32);
                for round in 0..25u32 {
                    let write = (round + t + i as u32).is_multiple_of(5);
                    if write {
                        let g = rw.write().acquire_timeout(Duration::from_secs(20)).await?;
                        seen.enter_write().await;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        seen.leave_write().await;
                        g.release().await?;
                        done.1 += 1;
                    } else {
                        let g = rw.read().acquire_timeout(Duration::from_secs(20)).await?;
                        seen.enter_read().await;
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        seen.leave_read().await;
                        g.release().await?;
                        done.0 += 1;
                    }
                }
                Ok::<_, Error>(done)
            }));
        }
    }
    let (mut reads, mut writes) = (0, 0);
    for t in tasks {
        let (r, w) = within(Duration::from_secs(60), "mixed task", t)
            .await
            .expect("join")
            .expect("every acquisition succeeds");
        reads += r;
        writes += w;
    }
    let mut seen = seen;
    assert_eq!(seen.violations().await, 0, "never a writer with anyone");
    assert_eq!((reads, writes), (240, 60));
    assert!(seen.max_readers().await > 1, "readers did share");
    let mut conn = raw(&server).await;
    let exists: i64 = cmd(&mut conn, &["EXISTS", "rw:mixed"]).await;
    assert_eq!(exists, 0, "nothing left");
}

#[tokio::test]
async fn writers_of_several_clients_take_turns() {
    let server = support::server();
    let clients: Vec<LockClient> = (0..3).map(|_| client(&server)).collect();
    let seen = RwInside::new(&server, "turns").await;
    let stop = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        for _ in 0..2 {
            let w = c.rw_lock("rw:turns").expect("name").write();
            let mut seen = seen.clone();
            tasks.push(tokio::spawn(async move {
                let mut mine = 0u32;
                // no pause between sections; bounded in count and time
                for _ in 0..10_000 {
                    if Instant::now() > stop {
                        break;
                    }
                    let g = w.acquire_timeout(Duration::from_secs(5)).await?;
                    seen.enter_write().await;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    seen.leave_write().await;
                    g.release().await?;
                    mine += 1;
                }
                Ok::<_, Error>((i, mine))
            }));
        }
    }
    let mut per_client = [0u32; 3];
    for t in tasks {
        let (i, n) = within(Duration::from_secs(20), "writer", t)
            .await
            .expect("join")
            .expect("every write succeeds");
        per_client[i] += n;
    }
    let mut seen = seen;
    assert_eq!(seen.violations().await, 0, "one writer at a time");
    let total: u32 = per_client.iter().sum();
    println!("writes per client in 3 s: {per_client:?}");
    for n in per_client {
        assert!(
            n * 5 >= total,
            "every client's writers got turns: {per_client:?}"
        );
    }
}

#[tokio::test]
async fn a_read_unlocked_by_its_context_frees_it_for_the_next_read_of_that_context() {
    let server = support::server();
    let c = client(&server);
    let rw = c.rw_lock("rw:unlock").expect("name");
    in_context(async {
        let first = rw.read().acquire().await.expect("read");
        let owner = first.owner_id().to_string();
        rw.read().unlock().await.expect("unlock, Redisson-style");
        assert_eq!(rw.read().hold_count().await.expect("count"), 0);
        let started = Instant::now();
        let again = rw
            .read()
            .acquire_timeout(Duration::from_secs(5))
            .await
            .expect("a new read");
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "not held up by the released hold: {:?}",
            started.elapsed()
        );
        assert_ne!(again.owner_id(), owner, "a new hold");
        again.release().await.expect("release");
        drop(first); // its hold was released already: nothing more
    })
    .await;
    let w = rw.write().try_acquire().await.expect("try");
    assert!(w.is_some(), "nothing left held");
}

#[tokio::test]
async fn shutdown_gives_back_every_read_and_write_hold() {
    let server = support::server();
    let c = client(&server);
    let other = client(&server);
    let rw = c.rw_lock("rw:shutdown").expect("name");
    let alone = rw.read().acquire().await.expect("read");
    let (outer, inner) = in_context(async {
        let outer = rw.read().acquire().await.expect("read in a context");
        let inner = rw.read().acquire().await.expect("its re-entry");
        (outer, inner)
    })
    .await;
    let elsewhere = c
        .rw_lock("rw:shutdown-w")
        .expect("name")
        .write()
        .acquire()
        .await
        .expect("write");
    let report = c.shutdown(Duration::from_secs(5)).await;
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.released, 3, "{report:?}");
    for g in [&alone, &outer, &inner, &elsewhere] {
        assert!(!g.is_held());
    }
    let mut conn = raw(&server).await;
    // (the fencing counters and request latches stay for their retention)
    let hashes: i64 = cmd(&mut conn, &["EXISTS", "rw:shutdown", "rw:shutdown-w"]).await;
    assert_eq!(hashes, 0, "no hold left");
    let left: Vec<String> = cmd(&mut conn, &["KEYS", "{rw:shutdown}:*"]).await;
    assert!(left.is_empty(), "no reader's timeout key left: {left:?}");
    // the other client gets the write side at once
    let w = other
        .rw_lock("rw:shutdown")
        .expect("name")
        .write()
        .try_acquire()
        .await
        .expect("try");
    assert!(w.is_some());
    drop((alone, outer, inner, elsewhere));
}

/// A re-entry with a longer fixed lease moves the hold's deadline; its
/// release must leave that lease on the read's remaining timeout key, or
/// another reader's release (which sets the hash's TTL from every
/// reader's keys) deletes the lock under a guard that is still valid.
#[tokio::test]
async fn an_inner_read_release_keeps_the_longer_lease_the_hold_relies_on() {
    let server = support::server();
    let (a, b, w) = (client(&server), client(&server), client(&server));
    let lease = |ms| AcquireOptions::new().lease(Duration::from_millis(ms));
    let rw_a = a.rw_lock("rw:inner-lease").expect("name");
    in_context(async {
        let outer = rw_a
            .read()
            .acquire_with(lease(1_500))
            .await
            .expect("outer, 1.5 s");
        tokio::time::sleep(Duration::from_millis(700)).await;
        // the re-entry's lease reaches 2.2 s from the start: the hold's deadline
        let inner = rw_a
            .read()
            .acquire_with(lease(1_500))
            .await
            .expect("inner, 1.5 s");
        inner.release().await.expect("inner release");
        let theirs = b
            .rw_lock("rw:inner-lease")
            .expect("name")
            .read()
            .acquire()
            .await
            .expect("another reader");
        // past the outer acquisition's own lease, within the re-entry's
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert!(outer.is_held(), "the hold's deadline rests on the re-entry");
        theirs
            .release()
            .await
            .expect("their release recounts the TTL");
        let writer = w
            .rw_lock("rw:inner-lease")
            .expect("name")
            .write()
            .try_acquire()
            .await
            .expect("try");
        assert!(
            writer.is_none() || !outer.is_held(),
            "a writer got in while our read was valid"
        );
        drop(writer);
        drop(outer);
    })
    .await;
}

/// A section's read nested in the context's manual read re-enters it,
/// also while another client's writer waits (a fresh read would wait
/// behind the writer, which waits for the outer read: a deadlock).
#[tokio::test]
async fn a_section_read_nested_in_a_manual_read_re_enters_it_while_a_writer_waits() {
    let server = support::server();
    let (a, b) = (client(&server), client(&server));
    let rw = a.rw_lock("rw:nested-section").expect("name");
    in_context(async {
        let outer = rw.read().acquire().await.expect("manual read");
        let writer = tokio::spawn({
            let w = b.rw_lock("rw:nested-section").expect("name").write();
            async move { w.acquire_timeout(Duration::from_secs(10)).await }
        });
        support::eventually(Duration::from_secs(2), || async {
            let mut conn = raw(&server).await;
            cmd::<i64, _>(
                &mut conn,
                &["EXISTS", "lockcore_writer:{rw:nested-section}"],
            )
            .await
                == 1
        })
        .await
        .expect("the writer waits, with its mark");
        let started = Instant::now();
        let nested = rw
            .read()
            .acquire_with(
                AcquireOptions::new()
                    .for_section()
                    .wait(Duration::from_secs(2)),
            )
            .await
            .expect("the section re-enters the manual read");
        assert_eq!(nested.owner_id(), outer.owner_id());
        assert!(started.elapsed() < Duration::from_millis(500));
        nested.release().await.expect("inner");
        outer.release().await.expect("outer");
        within(Duration::from_secs(5), "writer", writer)
            .await
            .expect("join")
            .expect("then the writer")
            .release()
            .await
            .expect("release");
    })
    .await;
}

/// A reader that gives up does not take its client's waiting writer out
/// of the line of clients waiting in Redis; a read release gives the turn
/// to the longest-waiting writer, its own client's included.
#[tokio::test]
async fn a_readers_give_up_and_release_leave_its_clients_writer_its_place() {
    let server = support::server();
    let (a, b) = (client(&server), client(&server));
    let rw_a = a.rw_lock("rw:place").expect("name");
    let rw_b = b.rw_lock("rw:place").expect("name");
    let held = rw_a.write().acquire().await.expect("a writes");
    // b: a writer waits (takes b's place), then a reader of b gives up
    let writer = tokio::spawn({
        let w = rw_b.write();
        async move { w.acquire_timeout(Duration::from_secs(10)).await }
    });
    let mut conn = raw(&server).await;
    support::eventually(Duration::from_secs(2), || {
        let mut conn = conn.clone();
        async move {
            cmd::<Vec<String>, _>(
                &mut conn,
                &["ZRANGE", "lockcore_waiters:{rw:place}", "0", "-1"],
            )
            .await
            .len()
                == 1
        }
    })
    .await
    .expect("b's writer in the line");
    let place: Vec<String> = cmd(
        &mut conn,
        &["ZRANGE", "lockcore_waiters:{rw:place}", "0", "-1"],
    )
    .await;
    let gave_up = rw_b
        .read()
        .acquire_timeout(Duration::from_millis(200))
        .await;
    assert!(gave_up.is_err(), "the reader timed out behind the writer");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let still: Vec<String> = cmd(
        &mut conn,
        &["ZRANGE", "lockcore_waiters:{rw:place}", "0", "-1"],
    )
    .await;
    assert_eq!(still, place, "b's writer keeps its place");
    held.release().await.expect("release");
    within(Duration::from_secs(5), "b's writer", writer)
        .await
        .expect("join")
        .expect("b's writer")
        .release()
        .await
        .expect("release");
    // a read release of b while b's writer waited longest: the turn is b's
    let reader = rw_b.read().acquire().await.expect("b reads");
    let b_writer = tokio::spawn({
        let w = rw_b.write();
        async move { w.acquire_timeout(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let a_writer = tokio::spawn({
        let w = rw_a.write();
        async move { w.acquire_timeout(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    reader.release().await.expect("b's read release");
    let first = within(Duration::from_secs(5), "b's writer", b_writer)
        .await
        .expect("join")
        .expect("b's writer, which waited longest, goes first");
    assert!(!a_writer.is_finished(), "a's writer after it");
    first.release().await.expect("release");
    within(Duration::from_secs(5), "a's writer", a_writer)
        .await
        .expect("join")
        .expect("a's writer")
        .release()
        .await
        .expect("release");
}

/// lock-sim seeds 1003665 and 3004085: a writer that gave up left its
/// `lockcore_writer` mark, so new readers of lock-core waited for the mark
/// to lapse (about 2 s) with nobody writing or waiting to write.
#[tokio::test]
async fn a_writer_that_gives_up_takes_its_mark_away_and_readers_go_on() {
    let server = support::server();
    let holder = client(&server);
    let writer = client(&server);
    let reader = client(&server);
    let name = "rw:writer-gives-up";
    let mark = format!("lockcore_writer:{{{name}}}");
    let mut conn = raw(&server).await;
    let held = holder
        .rw_lock(name)
        .expect("name")
        .read()
        .acquire()
        .await
        .expect("read");
    let gave_up = writer
        .rw_lock(name)
        .expect("name")
        .write()
        .acquire_timeout(Duration::from_millis(150))
        .await
        .expect_err("a reader holds");
    assert!(gave_up.is_wait_timeout(), "{gave_up}");
    let exists: i64 = cmd(&mut conn, &["EXISTS", &mark]).await;
    assert_eq!(exists, 0, "the writer's mark left with it");
    // a new reader is not kept out by a writer that is gone
    let read = reader
        .rw_lock(name)
        .expect("name")
        .read()
        .acquire_timeout(Duration::from_millis(800))
        .await
        .expect("nobody writes or waits to write");
    read.release().await.expect("release");
    held.release().await.expect("release");
}
