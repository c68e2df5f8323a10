//! What every service made by one layer shares, and the per-request
//! settings the layer was given.

use std::time::Duration;

use lock_core::{AcquireOptions, LockClient, MAX_LEASE};

/// What every service made by one layer shares: the client (whose local
/// per-key queues and pub/sub connection are shared by all of them) and
/// the key function. axum clones a layer for every route; they all point
/// at this one value.
pub(crate) struct Shared<K> {
    pub(crate) client: LockClient,
    pub(crate) key: K,
}

/// The wait bound, the lease, and whether a lost lock cancels the request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) wait: Duration,
    pub(crate) lease: Option<Duration>,
    pub(crate) cancel_on_lost: bool,
}

impl Settings {
    pub(crate) fn acquire_options(self) -> AcquireOptions {
        let options = if self.wait.is_zero() {
            AcquireOptions::new().no_wait()
        } else {
            AcquireOptions::new().wait(self.wait)
        };
        match self.lease {
            Some(lease) => options.lease(lease.clamp(Duration::from_millis(1), MAX_LEASE)),
            None => options,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_wait_is_one_attempt_and_leases_are_clamped() {
        let s = Settings {
            wait: Duration::ZERO,
            lease: Some(Duration::ZERO),
            cancel_on_lost: false,
        };
        assert_eq!(
            s.acquire_options(),
            AcquireOptions::new()
                .no_wait()
                .lease(Duration::from_millis(1))
        );
        let s = Settings {
            wait: Duration::from_secs(1),
            lease: Some(Duration::MAX),
            cancel_on_lost: false,
        };
        assert_eq!(
            s.acquire_options(),
            AcquireOptions::new()
                .wait(Duration::from_secs(1))
                .lease(MAX_LEASE)
        );
    }
}
