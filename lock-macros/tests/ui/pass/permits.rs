//! `permits = N`: one permit of an expirable semaphore, with every option
//! that goes with it, on free fns and methods; futures stay `Send`.
#![deny(warnings)]
use std::sync::Arc;

use lock_core::{distributed_lock, LockClient};

#[derive(Debug)]
pub enum ExportError {
    Lock(lock_core::Error),
}

impl From<lock_core::Error> for ExportError {
    fn from(err: lock_core::Error) -> Self {
        ExportError::Lock(err)
    }
}

/// At most 4 at once, on the default client.
#[distributed_lock(key = "exports:{tenant}", permits = 4)]
pub async fn export(tenant: &str) -> Result<usize, ExportError> {
    Ok(tenant.len())
}

#[distributed_lock(key = "exports", permits = 2, wait = "5s", lease = "30s")]
pub async fn bounded() -> Result<(), ExportError> {
    Ok(())
}

#[distributed_lock(key = "thumbnails", permits = 8, skip_if_locked)]
pub async fn thumbnail() -> Option<u8> {
    Some(1)
}

#[distributed_lock(key = "thumbnails", permits = 8, skip_if_locked, wait = "250ms")]
pub async fn thumbnail_result() -> Result<Option<u8>, ExportError> {
    Ok(Some(1))
}

#[distributed_lock(key = "reports:{day}", permits = 1, cancel_on_lost)]
pub async fn report(day: u32) -> lock_core::Result<u32> {
    Ok(day)
}

pub struct Gateway {
    locks: Arc<LockClient>,
}

impl Gateway {
    #[distributed_lock(key = "upstream:{name}", permits = 20, client = self.locks.clone())]
    pub async fn call(&self, name: &str) -> Result<usize, ExportError> {
        Ok(name.len())
    }

    #[distributed_lock(key = "upstream", permits = 10_000, client = &*self.locks, crate = "::lock_core")]
    pub async fn call_mut(&mut self) -> Result<(), ExportError> {
        Ok(())
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(export("a"));
    assert_send(bounded());
    assert_send(thumbnail());
    assert_send(thumbnail_result());
    assert_send(report(1));
    if let Ok(client) = LockClient::builder("redis://127.0.0.1:1").build() {
        let mut gateway = Gateway { locks: Arc::new(client) };
        assert_send(gateway.call("a"));
        assert_send(gateway.call_mut());
    }
}
