//! The network between clients and an in-memory server, as a simulation
//! drives it: an [`Interposer`] set on a server decides what happens to
//! each command and each pub/sub message on the way (delays, silences,
//! resets, a command that runs twice). Without one, a command runs at once
//! and its reply is back at once, as before.
//!
//! A link (one connection) keeps the order of a TCP stream: its commands
//! reach the server in the order they were sent and their replies come
//! back in that order, each no earlier than the one before; commands of
//! different links, and replies against pub/sub messages, are reordered by
//! their delays. Not a public API (lock-sim drives it through
//! `lock_core::__private`).

use std::time::Duration;

/// What happens to one command (or one pipeline, as a unit) sent on a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandFate {
    /// It reaches the server `before` after it was sent (never before the
    /// link's earlier commands) and runs; its reply comes back `after`
    /// later (never before the link's earlier replies).
    Deliver {
        /// From send to arrival at the server.
        before: Duration,
        /// From the run to the reply's arrival at the client.
        after: Duration,
    },
    /// As `Deliver`, but the command runs a second time `again` after the
    /// first (a copy retried under the caller, as a cluster client retries
    /// a timed-out command); the caller gets the second copy's reply.
    Twice {
        /// From send to the first run.
        before: Duration,
        /// From the first run to the second.
        again: Duration,
        /// From the second run to the reply.
        after: Duration,
    },
    /// The link goes silent (a black hole): the command runs or not
    /// (`runs`), no reply comes back, and no later command of the link
    /// reaches the server. Callers wait out their reply time-out.
    Silence {
        /// Whether the command reached the server before the silence.
        runs: bool,
    },
    /// The connection is reset: the command runs or not (`runs`), its
    /// caller gets a connection-reset error `after` later, and every later
    /// command of the link fails the same way at once.
    Reset {
        /// Whether the command reached the server before the reset.
        runs: bool,
        /// From the reset to the error's arrival at the client.
        after: Duration,
    },
}

/// What happens to one pub/sub message on its way to a subscriber.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageFate {
    /// It arrives `after` it was published (never before the messages
    /// published before it on that subscription).
    Deliver {
        /// From the publish to the arrival.
        after: Duration,
    },
    /// It never arrives.
    Drop,
}

/// The network of an in-memory server: consulted for every command and
/// every message of the clients connected by a `memory://<name>` URL. For
/// a command, `link` is `<name>#<n>`, `n` numbering the server's links
/// (connections) from 1; for a message, `link` is `<name>` (aliases of
/// one server tell clients apart).
pub trait Interposer: Send + Sync + 'static {
    /// The fate of `commands` (one, or a pipeline's) sent on a link of
    /// `link`, decided when it is sent.
    fn command(&self, link: &str, commands: &[Vec<Vec<u8>>]) -> CommandFate;

    /// The fate of a message published on `channel`, for a subscriber
    /// connected by `link`.
    fn message(&self, link: &str, channel: &[u8]) -> MessageFate;

    /// The arguments a command runs with, asked at the moment it runs:
    /// the same, unless the simulation plants an old protocol behaviour
    /// (it may read the server first: nothing runs in between on the
    /// simulation's one thread).
    fn rewrite(&self, link: &str, args: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let _ = link;
        args
    }
}
