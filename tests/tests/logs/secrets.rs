//! No password in anything the library shows: `Debug` of the client and its
//! configuration, `Display`/`Debug` of errors, the error hook's argument,
//! and every tracing event (captured by `support::Capture`, which records
//! all spans and events at every level).

use std::time::Duration;

use crate::support::Capture;
use lock_core::LockClient;
use lock_tests::RedisServer;

const SECRET: &str = "s3cret-pw-4711";

#[test]
fn no_password_in_debug_errors_hook_or_logs() {
    let server = RedisServer::builder()
        .args(["--requirepass", SECRET])
        .client_auth("default", SECRET)
        .start()
        .expect("server");
    let capture = Capture::default();
    let hooked = Capture::default();
    let seen = capture.clone();
    tracing::subscriber::with_default(capture.clone(), || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let good = format!("redis://:{SECRET}@127.0.0.1:{}", server.port());
            let hook = hooked.clone();
            let client = LockClient::builder(&good)
                .watchdog_timeout(Duration::from_millis(300))
                .error_hook(move |err| hook.push(format!("{err} / {err:?}")))
                .build()
                .expect("client");
            seen.push(format!("{client:?} {:?}", client.config()));
            seen.push(format!("{:?}", LockClient::builder(&good)));
            let lock = client.lock("secret").expect("name");
            seen.push(format!("{lock:?}"));
            let guard = lock.acquire().await.expect("acquire");
            tokio::time::sleep(Duration::from_millis(250)).await; // a renewal
            drop(guard); // released in the background
            let guard = lock.acquire().await.expect("again");
            guard.release().await.expect("release");
            // Failures: a wrong password, a bad URL, a server that went away.
            let wrong = format!("redis://:{SECRET}-wrong@127.0.0.1:{}", server.port());
            let bad = LockClient::builder(&wrong).build().expect("client");
            let err = bad
                .lock("x")
                .expect("name")
                .acquire()
                .await
                .expect_err("auth");
            seen.push(format!("{err} / {err:?}"));
            let invalid = format!("redis://:{SECRET}@127.0.0.1:notaport");
            if let Err(err) = LockClient::builder(&invalid).build() {
                seen.push(format!("{err} / {err:?}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        });
    });
    let lines = capture.lines();
    assert!(
        lines.iter().any(|l| l.starts_with("event")),
        "events were captured"
    );
    let mut leaks: Vec<String> = lines
        .iter()
        .filter(|l| l.contains(SECRET))
        .cloned()
        .collect();
    leaks.extend(hooked.lines().into_iter().filter(|l| l.contains(SECRET)));
    assert!(leaks.is_empty(), "the password leaked: {leaks:#?}");
    eprintln!(
        "secrets: {} captured lines and {} hook reports, no password",
        lines.len(),
        hooked.lines().len()
    );
}
