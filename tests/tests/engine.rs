//! lock-core's engine end to end, each test on private redis-servers:
//! acquire, re-entry and release, ownership by context, the watchdog and
//! fixed leases, waiters and local queues, hold identity and fencing tokens,
//! several processes on one lock; `layers`, which reads lock-core's
//! sources to check its layer rule; and `conformance`, which compares
//! lock-core's in-memory Redis with a real redis-server, case by case;
//! `redisson_rwlock`, Redisson's read-write lock protocol spoken by the
//! reference client the read-write lock's interop suites use; `rwlock`,
//! the read-write lock itself, and `rwlock_interop`, it and Redisson's
//! protocol on the same names; `redisson_semaphore`, Redisson's semaphore
//! and latch protocols spoken by reference clients; `semaphore`, the
//! semaphores and the count-down latch themselves; `election`, leader
//! election (campaign, leader record, observe, run_as_leader, a
//! Redisson-protocol holder on the same name) and fenced writes.

mod support;

/// The suites, one module per file in `engine/`.
mod engine {
    mod conformance;
    mod cross_process;
    mod election;
    mod fair_lock;
    mod group_commit;
    mod hold_identity;
    mod layers;
    mod local_queue;
    mod lock_core;
    mod memory_backend;
    mod multi_lock;
    mod redisson_rwlock;
    mod redisson_semaphore;
    mod rwlock;
    mod rwlock_interop;
    mod semaphore;
}
