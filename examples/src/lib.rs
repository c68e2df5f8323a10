//! Code shared by the example programs (and by the gRPC tests of
//! `lock-tests`): the generated gRPC code of `proto/accounts.proto`, and the
//! deliberately race-prone account ledger both account examples protect
//! with lock-tower.

/// The `accounts` gRPC service: messages, client and server, generated at
/// build time from `proto/accounts.proto` (protox + tonic-prost-build).
/// Needs the `grpc` feature (on by default).
#[cfg(feature = "grpc")]
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("accounts");
}

pub mod ledger;

/// The error type of the examples.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The Redis URL to use: `$REDIS_URL`, or a private `redis-server` started
/// for this run (kept alive as long as the returned server value lives).
///
/// ```no_run
/// let (url, _server) = lock_examples::redis_url()?;
/// println!("using {url}");
/// # Ok::<(), lock_examples::BoxError>(())
/// ```
pub fn redis_url() -> Result<(String, Option<lock_tests::RedisServer>), BoxError> {
    match std::env::var("REDIS_URL") {
        Ok(url) => Ok((url, None)),
        Err(_) => {
            let server = lock_tests::RedisServer::start()?;
            println!("started a private redis-server on {}", server.url());
            Ok((server.url(), Some(server)))
        }
    }
}
