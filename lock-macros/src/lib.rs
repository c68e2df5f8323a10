//! `#[distributed_lock(key = "...")]` for async functions.
//!
//! **Not implemented yet.** This crate will provide an attribute macro that
//! builds a lock key from a function's arguments, acquires a
//! [`lock-core`](https://docs.rs/lock-core) lock before the body runs and
//! releases it after the body returns, panics or is cancelled. Until then it
//! exports nothing; use `lock_core::Lock` directly.
#![deny(missing_docs)]
