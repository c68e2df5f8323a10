//! Read-only inspection (`Lock::status`, `LockClient::scan_locks`) against
//! real redis-server processes.

use std::time::Duration;

use crate::support::{self, client_for, cmd, env, raw};
use lock_core::{in_context, LockClient};

/// Names of the listed locks.
fn names(statuses: &[lock_core::LockStatus]) -> Vec<String> {
    statuses.iter().map(|s| s.name.clone()).collect()
}

#[tokio::test]
async fn status_of_a_free_lock_has_no_owner_and_no_ttl() {
    let e = env(30_000);
    let status = e
        .client
        .lock("free")
        .expect("name")
        .status()
        .await
        .expect("status");
    assert_eq!(status.name, "free");
    assert_eq!(status.key, "free");
    assert!(!status.is_locked());
    assert!(status.owners.is_empty());
    assert_eq!(status.ttl, None);
}

#[tokio::test]
async fn status_shows_the_owner_its_hold_count_and_the_ttl() {
    let e = env(5_000);
    let lock = e.client.lock("held").expect("name");
    in_context(async {
        let outer = lock.acquire().await.expect("outer");
        let inner = lock.acquire().await.expect("re-entry");
        let status = lock.status().await.expect("status");
        assert!(status.is_locked());
        assert_eq!(status.owners.len(), 1);
        assert_eq!(status.owners[0].owner, outer.owner_id());
        assert_eq!(status.owners[0].count, 2);
        let ttl = status.ttl.expect("a held lock has a ttl");
        assert!(
            ttl > Duration::ZERO && ttl <= Duration::from_secs(5),
            "{ttl:?}"
        );
        inner.release().await.expect("inner");
        assert_eq!(lock.status().await.expect("status").owners[0].count, 1);
        outer.release().await.expect("outer");
    })
    .await;
    assert!(!lock.status().await.expect("status").is_locked());
}

#[tokio::test]
async fn status_reports_a_fixed_lease_and_a_prefixed_key() {
    let server = support::server();
    let client = LockClient::builder(server.url())
        .key_prefix("app:")
        .build()
        .expect("client");
    let lock = client.lock("job").expect("name");
    let guard = lock
        .acquire_with_lease(Duration::from_secs(60))
        .await
        .expect("acquire");
    let status = lock.status().await.expect("status");
    assert_eq!(
        (status.name.as_str(), status.key.as_str()),
        ("job", "app:job")
    );
    let ttl = status.ttl.expect("ttl");
    assert!(
        ttl > Duration::from_secs(50) && ttl <= Duration::from_secs(60),
        "{ttl:?}"
    );
    guard.release().await.expect("release");
}

#[tokio::test]
async fn status_of_a_key_that_is_not_a_lock_is_a_protocol_error() {
    let e = env(30_000);
    let mut conn = raw(&e.server).await;
    let _: () = cmd(&mut conn, &["SET", "a-string", "x"]).await;
    let _: i64 = cmd(&mut conn, &["HSET", "a-hash", "name", "alice"]).await;
    for key in ["a-string", "a-hash"] {
        let err = e
            .client
            .lock(key)
            .expect("name")
            .status()
            .await
            .expect_err("not a lock");
        assert!(matches!(err, lock_core::Error::Protocol(_)), "{err:?}");
        assert!(err.to_string().contains("is not a lock"), "{err}");
    }
}

#[tokio::test]
async fn scan_lists_only_locks_under_the_prefix_and_strips_it() {
    let server = support::server();
    let app = LockClient::builder(server.url())
        .key_prefix("app:")
        .build()
        .expect("client");
    let plain = client_for(&server, 30_000);
    let mut guards = Vec::new();
    for name in ["a", "b:1", "b:2"] {
        guards.push(
            app.lock(name)
                .expect("name")
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    guards.push(
        plain
            .lock("other")
            .expect("name")
            .acquire()
            .await
            .expect("acquire"),
    );
    // Keys that are not locks: strings, another hash, a lock's helper keys
    // (the fencing counters exist already).
    let mut conn = raw(&server).await;
    let _: () = cmd(&mut conn, &["SET", "app:c", "1"]).await;
    let _: i64 = cmd(&mut conn, &["HSET", "app:profile", "name", "alice"]).await;
    let _: i64 = cmd(&mut conn, &["EXISTS", "redisson_lock_token:{app:a}"]).await;

    let all = app.scan_locks("*").await.expect("scan");
    assert_eq!(names(&all), ["a", "b:1", "b:2"]);
    assert_eq!(all[0].key, "app:a");
    assert_eq!(all[0].owners[0].owner, guards[0].owner_id());
    assert!(all.iter().all(|s| s.ttl.is_some()));
    assert_eq!(
        names(&app.scan_locks("b:*").await.expect("scan")),
        ["b:1", "b:2"]
    );
    assert!(app.scan_locks("zzz*").await.expect("scan").is_empty());
    assert_eq!(
        names(&plain.scan_locks("*").await.expect("scan")),
        ["app:a", "app:b:1", "app:b:2", "other"]
    );

    let released = guards.remove(1);
    released.release().await.expect("release");
    assert_eq!(
        names(&app.scan_locks("*").await.expect("scan")),
        ["a", "b:2"]
    );
}

#[tokio::test]
async fn glob_characters_in_the_prefix_match_literally() {
    let server = support::server();
    let odd = LockClient::builder(server.url())
        .key_prefix("t[1]*:")
        .build()
        .expect("client");
    let plain = client_for(&server, 30_000);
    let _mine = odd
        .lock("x")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    // Would match an unescaped `t[1]*:*` glob.
    let _other = plain
        .lock("t1-zzz:y")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    assert_eq!(names(&odd.scan_locks("*").await.expect("scan")), ["x"]);
}

#[tokio::test]
async fn scan_walks_a_large_keyspace_and_finds_redisson_written_locks() {
    let e = env(30_000);
    let mut conn = raw(&e.server).await;
    // 3000 plain keys and 40 lock hashes as a Java client would write them.
    let mut pipe = redis::pipe();
    for i in 0..3000 {
        pipe.cmd("SET").arg(format!("noise:{i}")).arg(i).ignore();
    }
    for i in 0..40 {
        let key = format!("java:{i:02}");
        pipe.cmd("HSET")
            .arg(&key)
            .arg("0b6a4c1e-58f4-4c5e-9a3e-1f2d3c4b5a69:1")
            .arg(1)
            .ignore();
        pipe.cmd("PEXPIRE").arg(&key).arg(60_000).ignore();
    }
    let _: () = pipe.query_async(&mut conn).await.expect("fill");
    let found = e.client.scan_locks("*").await.expect("scan");
    assert_eq!(found.len(), 40, "{:?}", names(&found));
    assert_eq!(found[0].name, "java:00");
    assert_eq!(found[39].owners[0].count, 1);
    assert!(e
        .client
        .scan_locks("")
        .await
        .expect_err("empty")
        .is_invalid_input());
}
