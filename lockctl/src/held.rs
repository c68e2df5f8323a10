//! What `run` holds while the command runs: a lock (or a side of a
//! read-write lock), or one permit of a semaphore; what `elect` holds: a
//! won election.

use lock_core::{Leadership, LockGuard, Permits};

/// A lock's guard, a permit or a leadership, with the words messages use
/// for it.
#[derive(Debug)]
pub(crate) struct Held {
    guard: Guard,
    what: String,
}

#[derive(Debug)]
enum Guard {
    Lock(LockGuard),
    Permit(Permits),
    Leader(Leadership),
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

    /// A won election called `name`: "leadership of election `name`".
    pub(crate) fn leadership(leadership: Leadership, name: &str) -> Self {
        Held {
            guard: Guard::Leader(leadership),
            what: format!("leadership of election `{name}`"),
        }
    }

    /// What is held, for messages: "lock `x`", "permit of semaphore `x`",
    /// "leadership of election `x`".
    pub(crate) fn what(&self) -> &str {
        &self.what
    }

    /// Resolves when it is lost (expired, taken away, renewals failed).
    pub(crate) async fn lost(&self) {
        match &self.guard {
            Guard::Lock(guard) => guard.lost().await,
            Guard::Permit(permit) => permit.lost().await,
            Guard::Leader(leadership) => leadership.lost().await,
        }
    }

    /// Gives it back (a leadership: resigns); `Err(Lost)` when it was lost
    /// before.
    pub(crate) async fn release(self) -> lock_core::Result<()> {
        match self.guard {
            Guard::Lock(guard) => guard.release().await,
            Guard::Permit(permit) => permit.release().await,
            Guard::Leader(leadership) => {
                // Not leader before resigning: the leadership ended by
                // itself (its deadline passed, or the lock was found gone).
                let lost = !leadership.is_leader();
                let name = leadership.name().to_owned();
                let resigned = leadership.resign().await;
                match lost {
                    true => Err(lock_core::Error::Lost { name }),
                    false => resigned,
                }
            }
        }
    }
}
