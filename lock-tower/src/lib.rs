//! A tower `Layer` that serializes requests per derived key across every
//! replica of a service.
//!
//! **Not implemented yet.** This crate will provide `LockLayer`, a middleware
//! for axum and tonic routers that maps each request to an optional lock key
//! and runs requests with the same key one at a time, using a
//! [`lock-core`](https://docs.rs/lock-core) lock. Until then it exports nothing.
#![deny(missing_docs)]
