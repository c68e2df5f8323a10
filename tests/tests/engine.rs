//! lock-core's engine end to end, each test on private redis-servers:
//! acquire, re-entry and release, ownership by context, the watchdog and
//! fixed leases, waiters and local queues, hold identity and fencing tokens,
//! several processes on one lock; and `layers`, which reads lock-core's
//! sources to check its layer rule.

mod support;

/// The suites, one module per file in `engine/`.
mod engine {
    mod cross_process;
    mod hold_identity;
    mod layers;
    mod local_queue;
    mod lock_core;
    mod memory_backend;
}
