//! `mode`: the read and write sides of a read-write lock, with every other
//! option, on free fns and methods; futures stay `Send`.
#![deny(warnings)]
use std::sync::Arc;

use lock_core::{distributed_lock, HeldLock, LockClient, LockMode};

#[derive(Debug)]
pub enum CatalogError {
    Lock(lock_core::Error),
}

impl From<lock_core::Error> for CatalogError {
    fn from(err: lock_core::Error) -> Self {
        CatalogError::Lock(err)
    }
}

/// Many readers at once, on the default client.
#[distributed_lock(key = "price:{sku}", mode = "read")]
pub async fn price(sku: &str) -> Result<u32, CatalogError> {
    let held = HeldLock::current().map(|h| h.mode());
    Ok(u32::from(held == Some(LockMode::Read)) + sku.len() as u32)
}

/// One writer, no reader.
#[distributed_lock(key = "price:{sku}", mode = "write", wait = "5s", lease = "30s")]
pub async fn set_price(sku: &str, price: u32) -> Result<u32, CatalogError> {
    Ok(price)
}

/// The default, spelled out.
#[distributed_lock(key = "stock:{sku}", mode = "exclusive")]
pub async fn restock(sku: &str) -> lock_core::Result<usize> {
    Ok(sku.len())
}

#[distributed_lock(key = "report", mode = "read", skip_if_locked)]
pub async fn read_report() -> Option<u8> {
    Some(1)
}

#[distributed_lock(key = "report", mode = "write", skip_if_locked, wait = "250ms")]
pub async fn rebuild_report() -> Result<Option<u8>, CatalogError> {
    Ok(Some(1))
}

#[distributed_lock(key = "export:{day}", mode = "read", cancel_on_lost)]
pub async fn export(day: u32) -> Result<u32, CatalogError> {
    Ok(day)
}

pub struct Catalog {
    locks: Arc<LockClient>,
}

impl Catalog {
    #[distributed_lock(key = "catalog", mode = "read", client = self.locks.clone())]
    pub async fn list(&self) -> Result<Vec<u32>, CatalogError> {
        Ok(Vec::new())
    }

    #[distributed_lock(key = "catalog:{id}", mode = "write", client = &*self.locks)]
    pub async fn edit(&mut self, id: u64) -> Result<u64, CatalogError> {
        Ok(id)
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(price("a"));
    assert_send(set_price("a", 1));
    assert_send(restock("a"));
    assert_send(read_report());
    assert_send(rebuild_report());
    assert_send(export(1));
    if let Ok(client) = LockClient::builder("redis://127.0.0.1:1").build() {
        let mut catalog = Catalog { locks: Arc::new(client) };
        assert_send(catalog.list());
        assert_send(catalog.edit(1));
    }
}
