//! The permits a client holds now (both semaphore kinds), so that a
//! shutdown gives every one of them back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::hold::Hold;
use crate::protocol::sem_keys::SemKeys;

/// One acquisition's permits: what releasing them needs.
#[derive(Debug)]
pub(crate) struct PermitRecord {
    pub(crate) keys: Arc<SemKeys>,
    /// Identity (the acquire's request id, or the permit ids), validity
    /// deadline and lost signal, as a lock's hold.
    pub(crate) hold: Arc<Hold>,
    pub(crate) n: u32,
    /// The permit ids in hex (expirable kind; empty for the plain kind).
    pub(crate) ids: Vec<String>,
    /// The same ids as Redis stores them (16 bytes each).
    pub(crate) raw_ids: Vec<[u8; 16]>,
    /// The acquire's request id (the plain kind's grant) and latch key (a
    /// release marks it, so a late copy of the acquire is refused).
    pub(crate) request: String,
    pub(crate) acquisition: String,
    /// The fixed lease asked for (`None`: renewed by the watchdog; the
    /// plain kind has no lease at all).
    pub(crate) lease: Option<Duration>,
}

/// Held permits by record address.
#[derive(Debug, Default)]
pub(crate) struct PermitRegistry {
    held: Mutex<HashMap<usize, Arc<PermitRecord>>>,
}

impl PermitRegistry {
    fn held(&self) -> MutexGuard<'_, HashMap<usize, Arc<PermitRecord>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers `record` until [`remove`](Self::remove).
    pub(crate) fn insert(&self, record: &Arc<PermitRecord>) {
        self.held()
            .insert(Arc::as_ptr(record) as usize, record.clone());
    }

    /// Forgets `record`; false when it was not there (a shutdown took it).
    pub(crate) fn remove(&self, record: &Arc<PermitRecord>) -> bool {
        self.held()
            .remove(&(Arc::as_ptr(record) as usize))
            .is_some()
    }

    /// Takes every record (a shutdown).
    pub(crate) fn take_all(&self) -> Vec<Arc<PermitRecord>> {
        self.held().drain().map(|(_, r)| r).collect()
    }
}
