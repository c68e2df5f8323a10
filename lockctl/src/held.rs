//! What `run` holds while the command runs: a lock (or a side of a
//! read-write lock), or one permit of a semaphore.

use lock_core::{LockGuard, Permits};

/// A lock's guard or a permit, with the words messages use for it.
#[derive(Debug)]
pub(crate) struct Held {
    guard: Guard,
    what: String,
}

#[derive(Debug)]
enum Guard {
    Lock(LockGuard),
    Permit(Permits),
}

impl Held {
    /// A held lock called `name`: "lock `name`" in messages.
    pub(crate) fn lock(guard: LockGuard, name: &str) -> Self {
        Held {
            guard: Guard::Lock(guard),
            what: format!("lock `{name}`"),
        }
    }

    /// A permit of the semaphore `name`: "permit of semaphore `name`".
    pub(crate) fn permit(permit: Permits, name: &str) -> Self {
        Held {
            guard: Guard::Permit(permit),
            what: format!("permit of semaphore `{name}`"),
        }
    }

    /// What is held, for messages: "lock `x`", "permit of semaphore `x`".
    pub(crate) fn what(&self) -> &str {
        &self.what
    }

    /// Resolves when it is lost (expired, taken away, renewals failed).
    pub(crate) async fn lost(&self) {
        match &self.guard {
            Guard::Lock(guard) => guard.lost().await,
            Guard::Permit(permit) => permit.lost().await,
        }
    }

    /// Gives it back; `Err(Lost)` when it was lost before.
    pub(crate) async fn release(self) -> lock_core::Result<()> {
        match self.guard {
            Guard::Lock(guard) => guard.release().await,
            Guard::Permit(permit) => permit.release().await,
        }
    }
}
