//! Methods: `&self`, `&mut self`, `self`, `self: Box<Self>`; generic impls;
//! async fns in traits (native, no `#[async_trait]`), with and without a
//! `Send` bound; a trait's default method; recursion; a crate that
//! re-exports lock-core.
#![deny(warnings)]
use std::future::Future;
use std::sync::Arc;

use lock_core::{distributed_lock, LockClient};

#[derive(Debug)]
pub struct PayError(pub lock_core::Error);

impl From<lock_core::Error> for PayError {
    fn from(err: lock_core::Error) -> Self {
        PayError(err)
    }
}

pub struct Order {
    pub id: u64,
}

pub struct User {
    pub id: u32,
}

pub struct Payments {
    locks: LockClient,
    paid: u64,
}

impl Payments {
    #[distributed_lock(
        key = "order:{order.id}:{user.id}",
        wait = "5s",
        lease = "30s",
        client = self.locks.clone()
    )]
    pub async fn pay(&self, order: &Order, user: &User) -> Result<u64, PayError> {
        Ok(order.id + u64::from(user.id) + self.paid)
    }

    /// `&mut self`, a key from `self`'s fields, a borrowed client.
    #[distributed_lock(key = "payments:{self.paid}", client = &self.locks)]
    pub async fn settle(&mut self, amount: u64) -> Result<u64, PayError> {
        self.paid += amount;
        Ok(self.paid)
    }

    /// `self` by value; the client is taken out of it before the body runs.
    #[distributed_lock(key = "close", client = self.locks.clone(), skip_if_locked)]
    pub async fn close(self) -> Option<u64> {
        Some(self.paid)
    }

    #[distributed_lock(key = "boxed", client = self.locks.clone())]
    pub async fn boxed(self: Box<Self>) -> Result<u64, PayError> {
        Ok(self.paid)
    }

    /// `cancel_on_lost` on a method: dropped when the lock is lost.
    #[distributed_lock(key = "refund:{order.id}", client = &self.locks, cancel_on_lost)]
    pub async fn refund(&self, order: &Order) -> Result<u64, PayError> {
        Ok(order.id + self.paid)
    }

    /// No `self` needed: an associated fn with the default client.
    #[distributed_lock(key = "audit:{day}")]
    pub async fn audit(day: u32) -> Result<u32, PayError> {
        Ok(day)
    }

    /// Recursion re-enters the lock (the future is boxed, as for any
    /// recursive async fn).
    #[distributed_lock(key = "countdown", client = &self.locks)]
    pub async fn countdown(&self, n: u32) -> Result<u32, PayError> {
        if n == 0 {
            return Ok(0);
        }
        let rest = Box::pin(self.countdown(n - 1)).await?;
        Ok(rest + 1)
    }
}

/// A generic impl with a where clause.
pub struct Repo<T> {
    locks: Arc<LockClient>,
    items: Vec<T>,
}

impl<T> Repo<T>
where
    T: std::fmt::Display + Send + Sync,
{
    #[distributed_lock(key = "repo:{index}", client = self.locks)]
    pub async fn get(&self, index: usize) -> Result<Option<&T>, PayError> {
        Ok(self.items.get(index))
    }
}

/// Native async fns in a (crate-private: `async_fn_in_trait`) trait.
trait Shop {
    async fn restock(&self, sku: &str) -> Result<u32, PayError>;

    /// A default method with a body can carry the attribute too.
    #[distributed_lock(key = "shop:{sku}")]
    async fn describe(&self, sku: &str) -> Result<String, PayError> {
        Ok(sku.to_owned())
    }
}

impl Shop for Payments {
    #[distributed_lock(key = "stock:{sku}", client = self.locks.clone())]
    async fn restock(&self, sku: &str) -> Result<u32, PayError> {
        Ok(sku.len() as u32)
    }
}

/// A trait that promises `Send` futures, implemented with `async fn`.
pub trait Handler: Sync {
    fn handle(&self, id: u64) -> impl Future<Output = Result<u64, PayError>> + Send;
}

impl Handler for Payments {
    #[distributed_lock(key = "handle:{id}", client = &self.locks)]
    async fn handle(&self, id: u64) -> Result<u64, PayError> {
        Ok(id)
    }
}

/// A crate that re-exports lock-core names it with `crate = "..."`.
mod facade {
    pub use ::lock_core as locks;
}

#[distributed_lock(key = "facade", crate = "crate::facade::locks")]
async fn through_facade() -> Result<(), PayError> {
    Ok(())
}

fn assert_send<T: Send>(_: T) {}

#[allow(dead_code)]
fn futures_are_send(payments: Payments, repo: &'static Repo<String>) {
    let order = Order { id: 1 };
    let user = User { id: 2 };
    assert_send(payments.pay(&order, &user));
    assert_send(payments.countdown(3));
    assert_send(payments.refund(&order));
    assert_send(payments.restock("x"));
    assert_send(payments.handle(1));
    assert_send(Payments::audit(1));
    assert_send(repo.get(0));
    assert_send(through_facade());
    tokio::spawn(async move {
        let mut payments = payments;
        let _ = payments.settle(1).await;
        let _ = payments.describe("x").await;
        let _ = Box::new(payments).boxed().await;
    });
}

#[allow(dead_code)]
async fn by_value(payments: Payments) -> Option<u64> {
    payments.close().await
}

fn main() {
    let _ = futures_are_send;
    let _ = by_value;
}
