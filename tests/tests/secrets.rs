//! No password in anything the library shows: `Debug` of the client and its
//! configuration, `Display`/`Debug` of errors, the error hook's argument,
//! and every tracing event (captured by a subscriber of this suite that
//! records all events at every level).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockClient;
use lock_tests::RedisServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

const SECRET: &str = "s3cret-pw-4711";

/// Records the text of every event and span field.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

struct Text<'a>(&'a mut String);

impl Visit for Text<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl Capture {
    fn push(&self, line: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut line = format!("span {}", span.metadata().name());
        span.record(&mut Text(&mut line));
        self.push(line);
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut line = String::from("record");
        values.record(&mut Text(&mut line));
        self.push(line);
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut line = format!("event {}", event.metadata().level());
        event.record(&mut Text(&mut line));
        self.push(line);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

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
