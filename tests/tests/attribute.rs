//! `#[distributed_lock]` against real Redis: the calls it locks and what
//! the body sees of its lock (`#[leader_only]` too: `macro_leader`). No test here installs a process-wide default
//! client (`macros` checks that calls without one fail); the suite that
//! needs one is the `macros_default_client` binary.

mod support;

/// The suites, one module per file in `attribute/`.
mod attribute {
    mod macro_hold;
    mod macro_leader;
    mod macro_modes;
    mod macro_multi;
    mod macro_permits;
    mod macros;
}
