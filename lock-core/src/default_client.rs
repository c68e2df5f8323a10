//! The process-wide default client: installed once at startup, used by
//! `#[distributed_lock]` when it is not given a `client = ...`.

use std::sync::OnceLock;

use crate::client::LockClient;
use crate::error::{Error, Result};

static DEFAULT: OnceLock<LockClient> = OnceLock::new();

/// Installs `client` as the process-wide default client, the one that
/// `#[distributed_lock]` uses when it is not given `client = ...`.
///
/// Call it once, at startup, from the runtime that lives as long as the
/// process (the client's background tasks run on it). A second call fails
/// with [`Error::InvalidArgument`] and leaves the first client in place.
///
/// ```no_run
/// # #[tokio::main]
/// # async fn main() -> lock_core::Result<()> {
/// let client = lock_core::LockClient::connect("redis://127.0.0.1:6379").await?;
/// lock_core::install_default(client)?;
/// assert!(lock_core::default_client().is_ok());
/// # Ok(()) }
/// ```
pub fn install_default(client: LockClient) -> Result<()> {
    DEFAULT
        .set(client)
        .map_err(|_| Error::InvalidArgument("a default lock client is already installed".into()))
}

/// The client installed with [`install_default`], or
/// [`Error::NoDefaultClient`] when none was.
///
/// ```
/// // nothing installed in this program
/// assert!(lock_core::default_client().unwrap_err().is_no_default_client());
/// ```
pub fn default_client() -> Result<&'static LockClient> {
    DEFAULT.get().ok_or(Error::NoDefaultClient)
}
