//! The transport: how a client reaches Redis — one server, Sentinel
//! discovery and Cluster set-up (`endpoint`, from the URL forms parsed in
//! `config::url`), connections in lanes
//! (`connection`), TLS (`tls`) and the pub/sub connection shared by every
//! waiter (`pubsub`, with Redis Cluster's sharded pub/sub in
//! `pubsub::cluster` and the choice between them in `pubsub::sharding`).
//!
//! The layer rule: modules here import only the leaves (`config`, `error`,
//! `metrics`, `options`) and each other, never the protocol, the hold engine or the
//! public faces above them (`tests/tests/engine/layers.rs` checks it).

pub(crate) mod connection;
pub(crate) mod endpoint;
#[cfg(feature = "memory")]
pub(crate) mod memory_link;
pub(crate) mod pubsub;
pub(crate) mod tls;
