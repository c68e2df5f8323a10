//! What the library logs: the tracing vocabulary of lock-core, the
//! lock-tower layer's rejection events, no password in any event, and a
//! healthy pub/sub connection logging no warning.
//!
//! Every test here runs the library only inside its own capturing
//! subscriber (`tracing::subscriber::with_default` around a current-thread
//! runtime), and no suite that runs it outside one may join them: tracing
//! caches each call site's interest process-wide, and a call site first hit
//! on a thread without a subscriber, while only one subscriber is
//! registered, is cached as "never": its events are then lost to the
//! capturing tests.

mod support;

/// The suites, one module per file in `logs/`.
mod logs {
    mod pubsub_health;
    mod secrets;
    mod tower_extension_logging;
    mod tracing_vocabulary;
}
