//! Fairness and load: processes and tasks taking turns on one lock, and
//! 500 waiters on one key, judged by figures (shares, waits, deadlines)
//! that CPU contention skews. A binary of their own, so that these tests
//! share the machine only with one another, never with the heavy suites of
//! the other binaries (50 000 watchdog holds on a cluster, cuts at every
//! byte offset).

mod support;

/// The suites, one module per file in `contention/`.
mod contention {
    mod fairness;
    mod load_fairness;
}
