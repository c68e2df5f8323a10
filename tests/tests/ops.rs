//! Running the lock in production: the ACL of a restricted user, TLS,
//! the eviction-policy check, how connections are used, inspection,
//! metrics and shutdown.
//!
//! `metrics` installs its recorders per thread (`with_local_recorder`),
//! never process-wide, so the other suites here record nowhere; `tls`
//! and `shutdown` run their fresh-process cases as child processes.

mod support;

/// The suites, one module per file in `ops/`.
mod ops {
    mod acl;
    mod acl_pubsub;
    mod connections;
    mod eviction;
    mod inspect;
    mod metrics;
    mod shutdown;
    mod tls;
}
