//! One lock of one client as the engine sees it.

use std::sync::Arc;

use crate::hold::engine::Engine;
use crate::protocol::keys::LockKeys;

/// One lock of one client, as the engine sees it: the client's engine and
/// the lock's keys. Every public face of a lock (its handle, its guards)
/// reaches the engine through one.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) engine: Arc<Engine>,
    pub(crate) keys: Arc<LockKeys>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("key", &self.keys.lock)
            .finish()
    }
}
