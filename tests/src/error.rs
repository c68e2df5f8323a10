//! The harness's one error type.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while starting, driving or talking to a
/// test `redis-server`.
///
/// ```
/// use lock_tests::{HarnessError, RedisServer};
///
/// let err = RedisServer::builder()
///     .binary("/nonexistent/redis-server")
///     .start()
///     .unwrap_err();
/// assert!(matches!(err, HarnessError::BinaryNotFound { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The `redis-server` binary could not be found (neither the path given
    /// by `REDIS_SERVER_BIN` / [`RedisServerBuilder::binary`] nor
    /// `redis-server` on `PATH`).
    ///
    /// [`RedisServerBuilder::binary`]: crate::RedisServerBuilder::binary
    ///
    /// ```
    /// use lock_tests::HarnessError;
    ///
    /// let err = HarnessError::BinaryNotFound { tried: "redis-server".into() };
    /// assert!(err.to_string().contains("apt-get install redis-server"));
    /// ```
    #[error(
        "redis-server was not found on PATH (set REDIS_SERVER_BIN to its path, or install it: \
         apt-get install redis-server on Debian/Ubuntu, brew install redis on macOS)"
    )]
    BinaryNotFound {
        /// The program name or path that was tried.
        tried: PathBuf,
    },

    /// An I/O error (spawning the process, connecting, reading, writing).
    ///
    /// ```
    /// use lock_tests::HarnessError;
    ///
    /// let err = HarnessError::from(std::io::Error::other("boom"));
    /// assert!(matches!(err, HarnessError::Io(_)));
    /// ```
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),

    /// The server process was started but did not answer `PING` in time.
    ///
    /// ```
    /// use lock_tests::HarnessError;
    /// use std::time::Duration;
    ///
    /// let err = HarnessError::NotReady {
    ///     port: 6379,
    ///     waited: Duration::from_secs(10),
    ///     last_error: "connection refused".into(),
    ///     log_tail: String::new(),
    /// };
    /// assert!(err.to_string().contains("did not become ready"));
    /// ```
    #[error(
        "redis-server on port {port} did not become ready within {waited:?} \
         (last probe: {last_error}); last log lines:\n{log_tail}"
    )]
    NotReady {
        /// The port the server was asked to listen on.
        port: u16,
        /// How long the harness waited.
        waited: Duration,
        /// Why the last readiness probe failed.
        last_error: String,
        /// The last lines of the server's log file.
        log_tail: String,
    },

    /// The server process exited before it became ready (for example
    /// because its port was taken, or because of a bad argument).
    ///
    /// ```
    /// use lock_tests::HarnessError;
    ///
    /// let err = HarnessError::ServerExited {
    ///     port: 6379,
    ///     status: "exit status: 1".into(),
    ///     log_tail: "Address already in use".into(),
    /// };
    /// assert!(err.to_string().contains("exited before it became ready"));
    /// ```
    #[error("redis-server on port {port} exited before it became ready ({status}); last log lines:\n{log_tail}")]
    ServerExited {
        /// The port the server was asked to listen on.
        port: u16,
        /// The process's exit status, as text.
        status: String,
        /// The last lines of the server's log file.
        log_tail: String,
    },

    /// The server did not answer within the read/write timeout (for example
    /// because it is paused).
    ///
    /// ```
    /// use lock_tests::HarnessError;
    /// use std::time::Duration;
    ///
    /// let err = HarnessError::Timeout { after: Duration::from_millis(200) };
    /// assert!(err.is_timeout());
    /// ```
    #[error("redis-server did not answer within {after:?}")]
    Timeout {
        /// The timeout that elapsed.
        after: Duration,
    },

    /// The server sent something that is not valid RESP2.
    ///
    /// ```
    /// use lock_tests::HarnessError;
    ///
    /// let err = HarnessError::Protocol("unexpected byte".into());
    /// assert!(err.to_string().starts_with("protocol error"));
    /// ```
    #[error("protocol error: {0}")]
    Protocol(String),

    /// The server answered a command the harness itself sends (such as
    /// `AUTH` or `INFO`) with an error reply.
    ///
    /// ```
    /// use lock_tests::HarnessError;
    ///
    /// let err = HarnessError::ServerError("WRONGPASS invalid password".into());
    /// assert!(err.to_string().contains("WRONGPASS"));
    /// ```
    #[error("redis-server replied with an error: {0}")]
    ServerError(String),

    /// The operation needs a running server, but it was killed.
    ///
    /// ```
    /// use lock_tests::{HarnessError, RedisServer};
    ///
    /// let mut server = RedisServer::start()?;
    /// server.kill();
    /// assert!(matches!(server.pause(), Err(HarnessError::NotRunning)));
    /// # Ok::<(), HarnessError>(())
    /// ```
    #[error("the redis-server is not running")]
    NotRunning,

    /// A cluster (or another group of servers) did not reach the state the
    /// harness waited for.
    ///
    /// ```
    /// use lock_tests::HarnessError;
    /// use std::time::Duration;
    ///
    /// let err = HarnessError::NotFormed {
    ///     what: "cluster_state:ok on every node".into(),
    ///     waited: Duration::from_secs(30),
    /// };
    /// assert!(err.to_string().contains("cluster_state:ok"));
    /// ```
    #[error("not reached within {waited:?}: {what}")]
    NotFormed {
        /// What was waited for.
        what: String,
        /// How long the harness waited.
        waited: Duration,
    },
}

impl HarnessError {
    /// True if this error is a read/write or connect timeout.
    ///
    /// ```
    /// use lock_tests::HarnessError;
    /// use std::time::Duration;
    ///
    /// assert!(HarnessError::Timeout { after: Duration::from_secs(1) }.is_timeout());
    /// assert!(!HarnessError::NotRunning.is_timeout());
    /// ```
    pub fn is_timeout(&self) -> bool {
        matches!(self, HarnessError::Timeout { .. })
    }
}
