//! Setting each key's limit once: `try_set_permits` the first time a layer
//! sees the key, and again when a request of it found no permit (the
//! semaphore may be missing in Redis), never for every request.

use std::collections::HashSet;
use std::sync::Mutex;

use lock_core::PermitSemaphore;

/// How many keys a layer remembers as set before it forgets them all: keys
/// are unbounded (one per tenant, account, ...), and forgetting one costs
/// one `try_set_permits` call at its next request.
pub(crate) const REMEMBERED_KEYS: usize = 4096;

/// The limit of every key, and the keys whose semaphore this layer has
/// set (or found set) already. Shared by every service the layer makes.
#[derive(Debug)]
pub(crate) struct Seed {
    pub(crate) permits: u64,
    set: Mutex<HashSet<String>>,
}

impl Seed {
    pub(crate) fn new(permits: u64) -> Self {
        Seed {
            permits,
            set: Mutex::new(HashSet::new()),
        }
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.set.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives `sem` the layer's permits unless it has been seen set: one
    /// `try_set_permits` (a no-op on an existing semaphore, whose count is
    /// kept). Concurrent first requests of one key may each send one; the
    /// script makes that harmless.
    pub(crate) async fn ensure(&self, sem: &PermitSemaphore) -> lock_core::Result<()> {
        if self.set().contains(sem.name()) {
            return Ok(());
        }
        sem.try_set_permits(self.permits).await?;
        let mut set = self.set();
        if set.len() >= REMEMBERED_KEYS {
            set.clear();
        }
        set.insert(sem.name().to_string());
        Ok(())
    }

    /// Creates `sem` with the layer's permits if it is missing (deleted,
    /// or lost in Redis): true when it was created just now. Called when a
    /// request of it found no permit within its wait.
    pub(crate) async fn recreate(&self, sem: &PermitSemaphore) -> lock_core::Result<bool> {
        sem.try_set_permits(self.permits).await
    }

    #[cfg(test)]
    fn remembers(&self, name: &str) -> bool {
        self.set().contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keys_are_set_once_and_remembered_up_to_a_bound() {
        let server = lock_tests::RedisServer::start().expect("redis-server");
        let client = lock_core::LockClient::builder(server.url())
            .build()
            .expect("client");
        let seed = Seed::new(3);
        let sem = client.permit_semaphore("seed:a").expect("name");
        seed.ensure(&sem).await.expect("set");
        assert!(seed.remembers("seed:a"));
        assert_eq!(sem.available().await.expect("available"), 3);
        // Remembered: a changed count is not set again ...
        sem.add_permits(-3).await.expect("take all");
        seed.ensure(&sem).await.expect("no call");
        assert_eq!(sem.available().await.expect("available"), 0);
        // ... and an existing semaphore keeps its count when asked again;
        // a missing one is created.
        assert!(!seed.recreate(&sem).await.expect("try set"));
        assert_eq!(sem.available().await.expect("available"), 0);
        server.command(&["DEL", sem.key()]).expect("DEL");
        assert!(seed.recreate(&sem).await.expect("try set"));
        assert_eq!(sem.available().await.expect("available"), 3);
        for i in 0..REMEMBERED_KEYS {
            seed.set().insert(format!("k{i}"));
        }
        let other = client.permit_semaphore("seed:b").expect("name");
        seed.ensure(&other).await.expect("set");
        assert_eq!(seed.set().len(), 1, "a full set is cleared first");
    }
}
