//! The eviction check: a Redis whose `maxmemory-policy` may evict keys can
//! drop a held lock (every lock key has a TTL, the first choice of the
//! `volatile-*` policies), so connecting (`ping`) reports such a policy
//! once through the error hook; `noeviction` is silent, and so is a user
//! who may not run `CONFIG GET`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockClient;
use lock_tests::RedisServer;

/// A client of `url` whose error hook records every report's text.
fn client_with_reports(url: String) -> (LockClient, Arc<Mutex<Vec<String>>>) {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink = reports.clone();
    let client = LockClient::builder(url)
        .connect_timeout(Duration::from_secs(2))
        .error_hook(move |err| {
            assert!(err.is_eviction_policy(), "a distinct variant: {err:?}");
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(err.to_string())
        })
        .build()
        .expect("client");
    (client, reports)
}

fn taken(reports: &Mutex<Vec<String>>) -> Vec<String> {
    std::mem::take(&mut *reports.lock().unwrap_or_else(|p| p.into_inner()))
}

fn server_with(args: &[&str]) -> RedisServer {
    RedisServer::builder()
        .args(args)
        .start()
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"))
}

#[tokio::test]
async fn an_evicting_policy_is_reported_once_on_connect() {
    let server = server_with(&["--maxmemory-policy", "volatile-lru"]);
    let (client, reports) = client_with_reports(server.url());
    client.ping().await.expect("connect works all the same");
    let got = taken(&reports);
    eprintln!("reported: {got:?}");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].contains("maxmemory-policy is `volatile-lru`"),
        "{got:?}"
    );
    assert!(got[0].contains("noeviction"), "the fix is named: {got:?}");

    // Once per policy: the next pings and lock work stay quiet...
    client.ping().await.expect("ping");
    let guard = client
        .lock("evict")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    guard.release().await.expect("release");
    assert!(taken(&reports).is_empty());
    // ...until the policy changes to another evicting one.
    server
        .command(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
        .expect("config set");
    client.ping().await.expect("ping");
    let got = taken(&reports);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].contains("allkeys-lru"), "{got:?}");
    // Back to noeviction: nothing to report.
    server
        .command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .expect("config set");
    client.ping().await.expect("ping");
    assert!(taken(&reports).is_empty());
}

#[tokio::test]
async fn noeviction_is_not_reported() {
    let server = server_with(&["--maxmemory-policy", "noeviction"]);
    let (client, reports) = client_with_reports(server.url());
    client.ping().await.expect("connect");
    client.ping().await.expect("ping");
    assert!(taken(&reports).is_empty());
    // LockClient::connect runs the same check (no hook to observe, but it
    // must not fail).
    LockClient::connect(server.url()).await.expect("connect");
}

#[tokio::test]
async fn a_user_without_config_connects_and_nothing_is_reported() {
    let server = RedisServer::builder()
        .args(["--maxmemory-policy", "volatile-lru"])
        .args(["--user", "admin", "on", ">adminpw", "~*", "&*", "+@all"])
        .args(["--user", "app", "on", ">pw", "~*", "&*", "+@all", "-config"])
        .client_auth("admin", "adminpw")
        .start()
        .expect("server");
    let url = format!("redis://app:pw@127.0.0.1:{}", server.port());
    let (client, reports) = client_with_reports(url.clone());
    client.ping().await.expect("connect works without CONFIG");
    client.ping().await.expect("ping");
    let guard = client
        .lock("evict")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    guard.release().await.expect("release");
    assert!(
        taken(&reports).is_empty(),
        "a refused CONFIG GET is no error"
    );
    LockClient::connect(url).await.expect("connect");
    // Each client was refused once, and did not ask again: two clients,
    // two denials of `config|get` (ACL LOG counts repeats in one entry).
    let log = server.command(&["ACL", "LOG"]).expect("acl log");
    assert_eq!(denials(&log, "config|get"), 2, "{log:?}");
}

/// The `count` of the ACL LOG entry whose object is `object` (0 if none).
fn denials(log: &lock_tests::RespValue, object: &str) -> i64 {
    let entries = log.as_array().unwrap_or_default();
    for entry in entries {
        let fields = entry.as_array().unwrap_or_default();
        let field = |name: &str| {
            fields
                .chunks(2)
                .find(|pair| pair[0].as_string().as_deref() == Some(name))
                .and_then(|pair| pair.get(1).cloned())
        };
        if field("object").and_then(|v| v.as_string()).as_deref() == Some(object) {
            return field("count").and_then(|v| v.as_i64()).unwrap_or(0);
        }
    }
    0
}
