//! lock-core's tracing vocabulary (the crate docs, "Logging"), on a real
//! Redis: one `lock.acquire` span per acquire and one `lock.release` span
//! per release, both naming the lock (`lock`, without the client's key
//! prefix) and its key (`key`, with it); one event per outcome; `lock`
//! never the full key.
//!
//! `support::Capture` records events as text without their spans, so this
//! suite has a subscriber of its own that keeps spans (name, fields), the
//! spans each event sits in, and every event's level, message and fields.
//! It does not implement `current_span` (its type is not nameable through
//! `tracing`), so `Span::current()` is empty under it: the spans checked
//! here reach the library's spawned tasks only because it passes them on
//! explicitly.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use crate::support::{self, cmd, raw, within};
use lock_core::LockClient;
use lock_tests::RedisServer;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

const PREFIX: &str = "userapp:";

type Fields = BTreeMap<String, String>;

#[derive(Clone, Debug)]
struct SpanRecord {
    name: &'static str,
    fields: Fields,
}

#[derive(Clone, Debug)]
struct EventRecord {
    level: Level,
    target: String,
    message: String,
    fields: Fields,
    /// The spans it sits in, outermost first.
    spans: Vec<SpanRecord>,
}

impl EventRecord {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// The innermost span called `name` it sits in.
    fn span(&self, name: &str) -> Option<&SpanRecord> {
        self.spans.iter().rev().find(|s| s.name == name)
    }

    /// Whether it sits in a span that names a lock.
    fn in_lock_span(&self) -> bool {
        self.spans
            .iter()
            .any(|s| s.name.starts_with("lock.") && s.fields.contains_key("key"))
    }
}

#[derive(Default)]
struct State {
    spans: HashMap<u64, SpanRecord>,
    /// Entered spans, per thread (innermost last).
    stacks: HashMap<ThreadId, Vec<u64>>,
    events: Vec<EventRecord>,
}

/// A subscriber that records spans, the spans events sit in, and events.
#[derive(Clone, Default)]
struct Recorder {
    state: Arc<Mutex<State>>,
    next_id: Arc<AtomicU64>,
}

struct FieldText<'a>(&'a mut Fields);

impl tracing::field::Visit for FieldText<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}

impl Recorder {
    fn locked(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn events(&self) -> Vec<EventRecord> {
        self.locked().events.clone()
    }

    /// Events of lock-core with `message`.
    fn with_message(&self, message: &str) -> Vec<EventRecord> {
        self.events()
            .into_iter()
            .filter(|e| e.message == message)
            .collect()
    }

    /// Every span lock-core opened, by name.
    fn spans(&self, name: &str) -> Vec<SpanRecord> {
        self.locked()
            .spans
            .values()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = Fields::new();
        span.record(&mut FieldText(&mut fields));
        let record = SpanRecord {
            name: span.metadata().name(),
            fields,
        };
        self.locked().spans.insert(id, record);
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(record) = self.locked().spans.get_mut(&span.into_u64()) {
            values.record(&mut FieldText(&mut record.fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::new();
        event.record(&mut FieldText(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        let mut state = self.locked();
        let ids: Vec<u64> = match event.parent() {
            Some(parent) => vec![parent.into_u64()],
            None => state
                .stacks
                .get(&std::thread::current().id())
                .cloned()
                .unwrap_or_default(),
        };
        let spans = ids
            .iter()
            .filter_map(|id| state.spans.get(id).cloned())
            .collect();
        state.events.push(EventRecord {
            level: *event.metadata().level(),
            target: event.metadata().target().to_string(),
            message,
            fields,
            spans,
        });
    }

    fn enter(&self, span: &Id) {
        self.locked()
            .stacks
            .entry(std::thread::current().id())
            .or_default()
            .push(span.into_u64());
    }

    fn exit(&self, span: &Id) {
        let mut state = self.locked();
        if let Some(stack) = state.stacks.get_mut(&std::thread::current().id()) {
            if let Some(i) = stack.iter().rposition(|id| *id == span.into_u64()) {
                stack.remove(i);
            }
        }
    }
}

/// Runs `test` with the recorder as the thread's subscriber, on a
/// current-thread runtime (the library's tasks log on this thread too),
/// then checks the rules that hold for every test: `lock` is never the
/// full key, and every lock-core event about a lock either sits in a span
/// that names it or carries `key` itself.
fn recorded<F, Fut>(test: F) -> Recorder
where
    F: FnOnce(Recorder) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let recorder = Recorder::default();
    let inner = recorder.clone();
    tracing::subscriber::with_default(recorder.clone(), move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(test(inner));
        drop(runtime);
    });
    check_common_rules(&recorder);
    recorder
}

fn check_common_rules(recorder: &Recorder) {
    let state = recorder.locked();
    for span in state.spans.values() {
        if let Some(lock) = span.fields.get("lock") {
            assert!(
                !lock.starts_with(PREFIX),
                "span {} names the lock by its full key: {span:?}",
                span.name
            );
        }
        if span.name.starts_with("lock.") {
            assert!(
                span.fields.contains_key("lock") && span.fields.contains_key("key"),
                "{span:?}"
            );
        }
    }
    for event in &state.events {
        if let Some(lock) = event.field("lock") {
            assert!(
                !lock.starts_with(PREFIX),
                "an event names the lock by its full key: {event:?}"
            );
        }
        // Client-wide events (pub/sub, eviction check, shutdown, client
        // drop) and the watchdog's summaries of a batch (`locks`: how
        // many) name no lock; every other lock-core event does.
        let about_a_lock = ["lock_core::lock", "lock_core::client", "lock_core::guard"]
            .iter()
            .chain(["lock_core::hold", "lock_core::watchdog"].iter())
            .any(|t| event.target == *t);
        if about_a_lock && !event.in_lock_span() && event.field("locks").is_none() {
            assert!(
                event.field("key").is_some_and(|k| k.starts_with(PREFIX)),
                "an event outside a lock span does not name its key: {event:?}"
            );
        }
    }
}

fn client(server: &RedisServer, watchdog_ms: u64) -> LockClient {
    LockClient::builder(server.url())
        .key_prefix(PREFIX)
        .watchdog_timeout(Duration::from_millis(watchdog_ms))
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

#[test]
fn one_acquire_logs_one_acquired_event_inside_a_span_naming_the_lock() {
    let server = support::server();
    let recorder = recorded(|_| async {
        let client = client(&server, 30_000);
        let lock = client.lock("account:7").expect("name");
        let guard = lock.acquire().await.expect("acquire");
        guard.release().await.expect("release");
    });
    let acquired = recorder.with_message("lock acquired");
    assert_eq!(acquired.len(), 1, "{acquired:#?}");
    let event = &acquired[0];
    assert_eq!(event.level, Level::DEBUG);
    let span = event.span("lock.acquire").expect("inside lock.acquire");
    assert_eq!(
        span.fields.get("lock").map(String::as_str),
        Some("account:7")
    );
    assert_eq!(
        span.fields.get("key").map(String::as_str),
        Some("userapp:account:7")
    );
    assert_eq!(event.field("via"), Some("redis"));
    assert!(event.field("token").is_some() && event.field("waited_ms").is_some());
    assert_eq!(
        recorder.spans("lock.acquire").len(),
        1,
        "one span per acquire"
    );

    let released = recorder.with_message("lock released");
    assert_eq!(released.len(), 1, "{released:#?}");
    let span = released[0]
        .span("lock.release")
        .expect("inside lock.release");
    assert_eq!(
        span.fields.get("lock").map(String::as_str),
        Some("account:7")
    );
    assert_eq!(
        span.fields.get("key").map(String::as_str),
        Some("userapp:account:7")
    );
    assert_eq!(
        recorder.spans("lock.release").len(),
        1,
        "one span per release"
    );
    assert!(
        recorder
            .events()
            .iter()
            .all(|e| e.level > Level::INFO || e.target.starts_with("lock_core::shutdown")),
        "nothing above DEBUG for a plain acquire and release: {:#?}",
        recorder.events()
    );
}

#[test]
fn a_contended_acquisition_logs_its_wait_once_and_its_hand_off() {
    let server = support::server();
    let recorder = recorded(|_| async {
        let client = client(&server, 30_000);
        let lock = client.lock("account:8").expect("name");
        let first = lock.acquire().await.expect("first");
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let lock = lock.clone();
            tasks.push(tokio::spawn(async move {
                let guard = lock.acquire().await.expect("queued acquire");
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.release().await.expect("queued release");
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        first.release().await.expect("first release");
        for task in tasks {
            within(Duration::from_secs(5), "queued task", task)
                .await
                .expect("task");
        }
    });
    let acquired = recorder.with_message("lock acquired");
    assert_eq!(
        acquired.len(),
        3,
        "one event per acquisition: {acquired:#?}"
    );
    let vias: Vec<&str> = acquired.iter().filter_map(|e| e.field("via")).collect();
    assert_eq!(
        vias.iter().filter(|v| **v == "hand-off").count(),
        1,
        "{vias:?}"
    );
    let waiting = recorder.with_message("lock busy; waiting");
    assert_eq!(
        waiting.len(),
        2,
        "once per waiting acquisition: {waiting:#?}"
    );
    for event in waiting.iter().chain(&acquired) {
        let span = event.span("lock.acquire").expect("inside lock.acquire");
        assert_eq!(
            span.fields.get("lock").map(String::as_str),
            Some("account:8")
        );
    }
    let handed = recorder.with_message("lock handed off");
    assert_eq!(handed.len(), 1, "{handed:#?}");
    assert!(handed[0].span("lock.release").is_some());
    assert_eq!(recorder.spans("lock.acquire").len(), 3);
    assert_eq!(recorder.spans("lock.release").len(), 3);
}

#[test]
fn a_re_entered_release_says_the_lock_is_still_held() {
    let server = support::server();
    let recorder = recorded(|recorder| async move {
        let client = client(&server, 30_000);
        let lock = client.lock("account:9").expect("name");
        lock_core::in_context(async {
            let outer = lock.acquire().await.expect("outer");
            let inner = lock.acquire().await.expect("inner");
            inner.release().await.expect("inner release");
            assert!(
                recorder.with_message("lock released").is_empty(),
                "the lock is still held: {:#?}",
                recorder.events()
            );
            let still = recorder.with_message("lock re-entry released; still held");
            assert_eq!(still.len(), 1, "{still:#?}");
            assert!(still[0].span("lock.release").is_some());
            outer.release().await.expect("outer release");
        })
        .await;
    });
    assert_eq!(recorder.with_message("lock acquired").len(), 1);
    let reentered = recorder.with_message("lock re-entered");
    assert_eq!(reentered.len(), 1, "{reentered:#?}");
    assert!(reentered[0].span("lock.acquire").is_some());
    assert_eq!(recorder.with_message("lock released").len(), 1);
    assert_eq!(
        recorder
            .with_message("lock re-entry released; still held")
            .len(),
        1
    );
}

#[test]
fn a_lost_lock_logs_one_warning_with_its_reason() {
    let server = support::server();
    let recorder = recorded(|_| async {
        let client = client(&server, 900);
        let mut conn = raw(&server).await;
        let guard = client
            .lock("account:10")
            .expect("name")
            .acquire()
            .await
            .expect("acquire");
        let _: i64 = cmd(&mut conn, &["DEL", "userapp:account:10"]).await;
        within(Duration::from_secs(3), "loss noticed", guard.lost()).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let err = guard.release().await.expect_err("lost");
        assert!(err.is_lost(), "{err}");
    });
    let warnings: Vec<EventRecord> = recorder
        .events()
        .into_iter()
        .filter(|e| e.level == Level::WARN)
        .collect();
    assert_eq!(warnings.len(), 1, "one warning: {warnings:#?}");
    let lost = &warnings[0];
    assert_eq!(lost.message, "lock lost");
    assert!(
        lost.field("reason").is_some_and(|r| !r.is_empty()),
        "{lost:?}"
    );
    assert_eq!(lost.field("lock"), Some("account:10"));
    assert_eq!(lost.field("key"), Some("userapp:account:10"));
}

#[test]
fn busy_and_timed_out_acquisitions_log_their_outcome_in_their_span() {
    let server = support::server();
    let recorder = recorded(|_| async {
        let holder = client(&server, 30_000);
        let other = client(&server, 30_000);
        let guard = holder
            .lock("account:11")
            .expect("name")
            .acquire()
            .await
            .expect("hold");
        let lock = other.lock("account:11").expect("name");
        assert!(lock.try_acquire().await.expect("try").is_none());
        let err = lock
            .acquire_timeout(Duration::from_millis(150))
            .await
            .expect_err("times out");
        assert!(err.is_wait_timeout());
        guard.release().await.expect("release");
    });
    for message in ["lock busy", "lock wait bound passed", "lock busy; waiting"] {
        let events = recorder.with_message(message);
        assert_eq!(events.len(), 1, "{message}: {events:#?}");
        assert_eq!(events[0].level, Level::DEBUG);
        let span = events[0].span("lock.acquire").expect("inside lock.acquire");
        assert_eq!(
            span.fields.get("lock").map(String::as_str),
            Some("account:11")
        );
    }
    assert_eq!(recorder.with_message("lock acquired").len(), 1);
}
