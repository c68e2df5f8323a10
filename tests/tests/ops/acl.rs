//! The minimal ACL of a restricted Redis user, as README.md documents it,
//! checked on a real server: a user with exactly these rights can take a
//! contended lock (with a waiter woken by pub/sub), release it, re-enter it
//! in a context, force-unlock it and inspect locks (status, scan), use the
//! read-write lock (readers sharing, a woken writer, a downgrade, a
//! reader's renewal, force-unlock), and
//! Redis denies nothing on the way (ACL LOG stays empty but for the
//! optional `CONFIG GET`). A user missing one of the key patterns gets a
//! prompt `NOPERM` error (`is_no_permission()`), never a hang.

use std::time::{Duration, Instant};

use crate::support::{self, within};
use lock_core::LockClient;
use lock_tests::{RedisServer, RespValue};

/// The key prefix of the restricted user's locks.
const PREFIX: &str = "app:";

/// The ACL rules of README.md's "Restricted Redis users (ACL)" section for
/// the key prefix `app:`, word for word.
const KEYS: &[&str] = &[
    "~app:*",
    "~redisson_lock_token:{app:*",
    "~redisson_unlock_latch:{app:*",
    // the release scripts name the channel among their keys, as Redisson's do
    "~redisson_lock__channel:{app:*",
    // lock-core's turns between waiting clients
    "~lockcore_waiters:{app:*",
    "~lockcore_turn:{app:*",
    // the read-write lock: its readers' timeout keys (`{app:<name>}:...`,
    // built inside the scripts), its channel, a waiting writer's mark
    "~{app:*",
    "~redisson_rwlock:{app:*",
    "~lockcore_writer:{app:*",
    // the semaphores (their channel is a key of their scripts; the
    // expirable kind's `{app:<name>}:timeout` is under `~{app:*`), the line
    // of waiting acquisitions, request latches; the latch's channel and
    // its count-down latches
    "~redisson_sc:{app:*",
    "~lockcore_sem_line:{app:*",
    "~lockcore_sem_alive:{app:*",
    "~lockcore_sem_req:{app:*",
    "~lockcore_sem_grants:{app:*",
    "~redisson_countdownlatch__channel__{app:*",
    "~lockcore_latch_req:{app:*",
    // an election's leader record and its channel (a key of the record's script)
    "~lockcore_leader:{app:*",
    "~lockcore_leader__channel:{app:*",
    // the fair lock: Redisson's queue and deadlines, lock-core's liveness marks
    "~redisson_lock_queue:{app:*",
    "~redisson_lock_timeout:{app:*",
    "~lockcore_fair_alive:{app:*",
];
const CHANNELS: &[&str] = &[
    "&redisson_lock__channel:{app:*",
    "&redisson_rwlock:{app:*",
    "&redisson_sc:{app:*",
    "&redisson_countdownlatch__channel__{app:*",
    "&lockcore_leader__channel:{app:*",
];
const COMMANDS: &[&str] = &[
    // sent by the client
    "+evalsha",
    "+script|load",
    "+exists",
    "+hget",
    "+hgetall",
    "+hlen",
    "+pttl",
    "+type",
    "+scan",
    "+multi",
    "+exec",
    "+ping",
    "+subscribe",
    "+unsubscribe",
    "+zrem",
    // run by the lock's Lua scripts
    "+del",
    "+exists",
    "+get",
    "+set",
    "+hdel",
    "+hexists",
    "+hincrby",
    "+pexpire",
    "+pttl",
    "+time",
    "+publish",
    "+zadd",
    "+zrange",
    // run by the read-write lock's scripts
    "+hset",
    "+hkeys",
    // sent for the semaphores' status, and run by their scripts
    "+zcard",
    "+incrby",
    "+decrby",
    "+decr",
    "+zscore",
    "+zrangebyscore",
    // sent for a fair lock's queue, and run by its scripts
    "+lrange",
    "+lindex",
    "+lpop",
    "+rpush",
    "+lrem",
    "+zincrby",
];

/// `--user <name> on >pw resetkeys resetchannels -@all <rules...>`.
fn user_args(name: &str, keys: &[&str]) -> Vec<String> {
    user_args_with(name, keys, &[])
}

/// [`user_args`] with `extra` rules at the end.
fn user_args_with(name: &str, keys: &[&str], extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--user",
        name,
        "on",
        ">pw",
        "resetkeys",
        "resetchannels",
        "-@all",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(keys.iter().map(|s| s.to_string()));
    args.extend(CHANNELS.iter().map(|s| s.to_string()));
    args.extend(COMMANDS.iter().map(|s| s.to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn server() -> RedisServer {
    let without_latch: Vec<&str> = KEYS
        .iter()
        .copied()
        .filter(|k| !k.contains("unlock_latch"))
        .collect();
    let without_lock: Vec<&str> = KEYS.iter().copied().filter(|k| *k != "~app:*").collect();
    RedisServer::builder()
        .args(["--user", "admin", "on", ">adminpw", "~*", "&*", "+@all"])
        .args(user_args("locker", KEYS))
        .args(user_args_with("locker_db", KEYS, &["+select"]))
        .args(user_args_with("locker_nohlen", KEYS, &["-hlen"]))
        .args(user_args("nolatch", &without_latch))
        .args(user_args("nolock", &without_lock))
        .client_auth("admin", "adminpw")
        .start()
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"))
}

fn client_as(server: &RedisServer, user: &str) -> LockClient {
    client_of(server, user, "")
}

/// A client of `user`, with `db` (`""` or `"/1"`) at the end of the URL.
fn client_of(server: &RedisServer, user: &str, db: &str) -> LockClient {
    LockClient::builder(format!("redis://{user}:pw@127.0.0.1:{}{db}", server.port()))
        .key_prefix(PREFIX)
        .connect_timeout(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(2))
        .error_hook(|err| panic!("no background error expected: {err}"))
        .build()
        .expect("client")
}

/// A client of `user` with a short watchdog lease (renewals run soon).
fn client_as_with_watchdog(server: &RedisServer, user: &str, lease: Duration) -> LockClient {
    LockClient::builder(format!("redis://{user}:pw@127.0.0.1:{}", server.port()))
        .key_prefix(PREFIX)
        .watchdog_timeout(lease)
        .connect_timeout(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(2))
        .error_hook(|err| panic!("no background error expected: {err}"))
        .build()
        .expect("client")
}

/// The ACL LOG entries as `(reason, object)` pairs.
fn acl_denials(server: &RedisServer) -> Vec<(String, String)> {
    let log = server.command(&["ACL", "LOG"]).expect("acl log");
    let mut out = Vec::new();
    for entry in log.as_array().unwrap_or_default() {
        let fields = entry.as_array().unwrap_or_default();
        let field = |name: &str| {
            fields
                .chunks(2)
                .find(|pair| pair[0].as_string().as_deref() == Some(name))
                .and_then(|pair| pair.get(1).and_then(RespValue::as_string))
                .unwrap_or_default()
        };
        out.push((field("reason"), field("object")));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_the_documented_acl_can_do_everything() {
    let server = server();
    let client = client_as(&server, "locker");
    let other = client_as(&server, "locker");
    client.ping().await.expect("ping");
    let lock = client.lock("stock:42").expect("name");

    // Contended: a waiter of another client is woken by the unlock message.
    let held = lock.acquire().await.expect("acquire");
    let theirs = other.lock("stock:42").expect("name");
    let waiter = tokio::spawn(async move { theirs.acquire_timeout(Duration::from_secs(5)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Inspection while held.
    let status = lock.status().await.expect("status");
    assert_eq!(status.owners.len(), 1);
    assert!(lock.is_locked().await.expect("is_locked"));
    assert!(lock.remaining_ttl().await.expect("pttl").is_some());
    let listed = client.scan_locks("*").await.expect("scan");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name, "stock:42");
    let released = Instant::now();
    held.release().await.expect("release");
    let guard = within(Duration::from_secs(5), "waiter", waiter)
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    let woke = released.elapsed();
    eprintln!("restricted user's waiter woken after {woke:?}");
    assert!(
        woke < Duration::from_millis(500),
        "woken by pub/sub: {woke:?}"
    );
    guard.release().await.expect("release");

    // Re-entry in a context, and the hand-off to a local waiter.
    lock_core::in_context(async {
        let outer = lock.acquire().await?;
        let inner = lock.acquire().await?;
        assert_eq!(lock.hold_count().await?, 2);
        assert!(lock.is_held_by_current_context().await?);
        inner.release().await?;
        outer.release().await
    })
    .await
    .expect("re-entry");
    let first = lock.acquire().await.expect("acquire");
    let local = lock.clone();
    let next = tokio::spawn(async move { local.acquire_timeout(Duration::from_secs(5)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    first.release().await.expect("release with hand-off");
    let second = within(Duration::from_secs(5), "hand-off", next)
        .await
        .expect("task")
        .expect("handed off");
    assert!(second.fencing_token() > 0);

    // Force-unlock, and a guard dropped without release.
    assert!(lock.force_unlock().await.expect("force unlock"));
    drop(second);
    let g = lock.try_acquire().await.expect("try").expect("free");
    drop(g);
    assert!(
        support::eventually(Duration::from_secs(2), || async {
            !lock.is_locked().await.unwrap_or(true)
        })
        .await
        .is_some(),
        "the dropped guard is released in the background"
    );

    // The read-write lock: readers of two clients share, a writer waits
    // and is woken by the last read release, a downgrade, renewal of a
    // reader's own keys (lease 1 s), status and force-unlock.
    let rw = client.rw_lock("catalog").expect("name");
    let rw_other = other.rw_lock("catalog").expect("name");
    let r1 = rw.read().acquire().await.expect("read");
    let r2 = rw_other
        .read()
        .acquire()
        .await
        .expect("a second reader shares");
    let writer = tokio::spawn({
        let w = rw_other.write();
        async move { w.acquire_timeout(Duration::from_secs(5)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let status = rw.status().await.expect("status");
    assert_eq!(status.owners.len(), 2, "{status:?}");
    r1.release().await.expect("release");
    let released = Instant::now();
    r2.release().await.expect("release");
    let w = within(Duration::from_secs(5), "writer", writer)
        .await
        .expect("task")
        .expect("the writer gets the lock");
    assert!(
        released.elapsed() < Duration::from_millis(500),
        "woken by pub/sub"
    );
    w.release().await.expect("release");
    lock_core::in_context(async {
        let w = rw.write().acquire().await?;
        let r = rw.read().acquire().await?; // a downgrade
        w.release().await?;
        r.release().await
    })
    .await
    .expect("downgrade");
    let renewing = client_as_with_watchdog(&server, "locker", Duration::from_millis(900));
    let kept = renewing
        .rw_lock("catalog")
        .expect("name")
        .read()
        .acquire()
        .await
        .expect("read");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(kept.is_held(), "renewed with the documented rights");
    assert!(rw.force_unlock().await.expect("force unlock"));
    drop(kept);

    // Both semaphores: a waiter of another client woken by a release, a
    // renewed permit (lease 900 ms), a permit given back on drop, status;
    // the latch: a waiter woken by the last count-down.
    for expirable in [false, true] {
        let acquire = |c: &lock_core::LockClient, n| {
            let c = c.clone();
            async move {
                if expirable {
                    c.permit_semaphore("exports")?.acquire(n).await
                } else {
                    c.semaphore("plain-exports")?.acquire(n).await
                }
            }
        };
        let set = if expirable {
            client
                .permit_semaphore("exports")
                .expect("name")
                .try_set_permits(1)
                .await
        } else {
            client
                .semaphore("plain-exports")
                .expect("name")
                .try_set_permits(1)
                .await
        };
        assert!(set.expect("set"));
        let p = acquire(&client, 1).await.expect("permit");
        let waiter = tokio::spawn(acquire(&other, 1));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = Instant::now();
        p.release().await.expect("release");
        let p2 = within(Duration::from_secs(5), "permit waiter", waiter)
            .await
            .expect("task")
            .expect("permit");
        assert!(
            released.elapsed() < Duration::from_millis(500),
            "woken by pub/sub"
        );
        drop(p2);
        let added = if expirable {
            client
                .permit_semaphore("exports")
                .expect("name")
                .add_permits(1)
                .await
        } else {
            client
                .semaphore("plain-exports")
                .expect("name")
                .add_permits(1)
                .await
        };
        // the dropped permit comes back in the background: 1 or 2 now
        assert!(matches!(added.expect("add"), 1 | 2));
    }
    let renewed = renewing
        .permit_semaphore("exports")
        .expect("name")
        .acquire(1)
        .await
        .expect("permit");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        renewed.is_held(),
        "permit renewed with the documented rights"
    );
    let status = client
        .permit_semaphore("exports")
        .expect("name")
        .status(10)
        .await
        .expect("status");
    assert_eq!(status.held_total, 1);
    renewed.release().await.expect("release");
    let latch = client.latch("boot").expect("name");
    assert!(latch.try_set_count(1).await.expect("set"));
    let opened = tokio::spawn({
        let l = other.latch("boot").expect("name");
        async move { l.wait_timeout(Duration::from_secs(5)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let counted = Instant::now();
    assert_eq!(latch.count_down().await.expect("count down"), 0);
    assert!(within(Duration::from_secs(5), "latch", opened)
        .await
        .expect("task")
        .expect("wait"));
    assert!(
        counted.elapsed() < Duration::from_millis(500),
        "woken by pub/sub"
    );

    // An election, observed by the other client, and fenced writes.
    let election = client.election("jobs").expect("name");
    let mut watch = other.election("jobs").expect("name").observe();
    assert_eq!(watch.changed().await.expect("first view"), None);
    let leadership = election.campaign("a").await.expect("campaign");
    let seen = within(Duration::from_secs(5), "observe", watch.changed())
        .await
        .expect("view")
        .expect("a leader");
    assert_eq!(seen.term(), Some(leadership.term()));
    assert_eq!(
        leadership
            .fence()
            .incr_by("app:jobs:runs", 1)
            .await
            .expect("fenced"),
        1
    );
    leadership.resign().await.expect("resign");
    assert_eq!(
        within(Duration::from_secs(5), "vacancy", watch.changed())
            .await
            .expect("view"),
        None
    );

    // A fair lock: a waiter queued behind the other client's hold, then served.
    let fair = client.fair_lock("ledger").expect("name");
    let held = other
        .fair_lock("ledger")
        .expect("name")
        .acquire()
        .await
        .expect("fair");
    let waiter = {
        let fair = fair.clone();
        tokio::spawn(async move { fair.acquire_timeout(Duration::from_secs(5)).await })
    };
    let mut queued = 0;
    for _ in 0..200 {
        queued = fair.fair_queue().await.expect("fair queue").len();
        if queued == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(queued, 1, "queued");
    held.release().await.expect("release");
    let turn = within(Duration::from_secs(5), "fair turn", waiter)
        .await
        .expect("task")
        .expect("fair acquire");
    turn.release().await.expect("release");

    // Nothing was denied but the optional CONFIG GET of the eviction check.
    let denials = acl_denials(&server);
    assert!(
        denials.iter().all(|(_, object)| object == "config|get"),
        "{denials:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_pattern_fails_at_once_with_noperm() {
    let server = server();
    for (user, what) in [("nolock", "the lock key"), ("nolatch", "the latch keys")] {
        let client = LockClient::builder(format!("redis://{user}:pw@127.0.0.1:{}", server.port()))
            .key_prefix(PREFIX)
            .build()
            .expect("client");
        client.ping().await.expect("ping needs no key");
        let lock = client.lock("stock:42").expect("name");
        let started = Instant::now();
        let err = within(Duration::from_secs(5), "acquire", lock.acquire())
            .await
            .expect_err("denied");
        let took = started.elapsed();
        eprintln!("{user} (without {what}): {err} after {took:?}");
        assert!(err.is_no_permission(), "{err:?}");
        // redis-rs spells the code `NoPerm`
        assert!(err.to_string().to_uppercase().contains("NOPERM"), "{err}");
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
}

/// `err`'s text and its sources', `" <- "`-separated: what a printer that
/// walks `source()` shows.
fn walked(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        text.push_str(" <- ");
        text.push_str(&e.to_string());
        next = e.source();
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_key_says_the_servers_text_once() {
    let server = server();
    let client = LockClient::builder(format!("redis://nolock:pw@127.0.0.1:{}", server.port()))
        .key_prefix(PREFIX)
        .build()
        .expect("client");
    let lock = client.lock("stock:42").expect("name");
    let err = within(Duration::from_secs(5), "acquire", lock.acquire())
        .await
        .expect_err("denied");
    assert!(err.is_no_permission(), "{err:?}");
    let said = "this user has no permissions to access one of the keys used as arguments";
    assert_eq!(err.to_string(), format!("redis error: NoPerm: {said}"));
    // a printer that walks the sources says it once too
    assert_eq!(walked(&err), err.to_string());
    // and so does lock-tower's error around it
    let layer_err = lock_tower::LockError::new("stock:42", err);
    assert_eq!(
        walked(&layer_err),
        format!("could not take lock `stock:42` <- redis error: NoPerm: {said}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_in_the_url_needs_select_too() {
    let server = server();
    let client = client_of(&server, "locker_db", "/1");
    client.ping().await.expect("ping");
    let lock = client.lock("stock:42").expect("name");
    lock.acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    let denied = LockClient::builder(format!("redis://locker:pw@127.0.0.1:{}/1", server.port()))
        .build()
        .expect("client")
        .ping()
        .await
        .expect_err("SELECT denied");
    eprintln!("without +select: {denied}");
    assert!(denied.to_string().contains("'select'"), "{denied}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_locks_still_lists_for_a_user_whose_acl_predates_hlen() {
    let server = server();
    let client = client_as(&server, "locker_nohlen");
    let lock = client.lock("stock:7").expect("name");
    let held = lock.acquire().await.expect("acquire");
    let listed = client.scan_locks("*").await.expect("scan");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name, "stock:7");
    held.release().await.expect("release");
    let denials = acl_denials(&server);
    assert!(
        denials.iter().any(|(_, object)| object == "hlen"),
        "HLEN was refused, and scan_locks read the hash without it: {denials:?}"
    );
}
