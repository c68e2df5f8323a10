//! Test harness for the lock crates: starts private, throwaway `redis-server`
//! processes on loopback ports and talks to them with a tiny blocking RESP2
//! client, so tests can kill, pause, restart and inspect real servers.
//!
//! Everything is synchronous and bounded in time; all traffic goes to
//! `127.0.0.1`. Each [`RedisServer`] has its own temp dir, runs with
//! persistence off, and is killed and reaped when dropped.
//!
//! A [`FaultProxy`] can sit between a client and a server to inject network
//! faults: black holes, latency, and one-shot faults aimed at one command or
//! its reply (delay, cut after N bytes with FIN or RST, lost reply).
//!
//! The binary is `$REDIS_SERVER_BIN` if set, else `redis-server` on `PATH`
//! (or whatever [`RedisServerBuilder::binary`] says).
//!
//! ```
//! use lock_tests::RedisServer;
//!
//! let mut server = RedisServer::start()?;
//! server.command(&["SET", "k", "v"])?;
//! assert_eq!(server.command(&["GET", "k"])?.as_string().as_deref(), Some("v"));
//!
//! server.restart()?; // same port, empty data
//! assert!(server.command(&["GET", "k"])?.is_nil());
//! # Ok::<(), lock_tests::HarnessError>(())
//! ```
#![deny(missing_docs)]

mod cluster;
mod error;
mod poll;
mod proxy;
mod replicated;
mod resp;
mod sentinel;
mod server;

pub use cluster::{RedisCluster, CLUSTER_SLOTS, NODE_TIMEOUT};
pub use error::HarnessError;
pub use proxy::{CommandMatch, CutKind, Direction, Fault, FaultHandle, FaultProxy};
pub use replicated::ReplicatedPair;
pub use resp::RespValue;
pub use sentinel::{SentinelSet, SENTINEL_DOWN_AFTER};
pub use server::{free_port, RedisServer, RedisServerBuilder, REDIS_SERVER_BIN_ENV};
