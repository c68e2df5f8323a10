//! `#[leader_only]`: free fns and `&self` methods, templates, `value`,
//! `client` (owned, borrowed, `Arc`), `mut` and destructured arguments,
//! arguments only a template uses (not cloned, need not be `Clone`),
//! `?` and `return` converting to the fn's error, `Leadership::current()`
//! in the body; the futures stay `Send`.
#![deny(warnings)]
use std::sync::Arc;

use lock_core::{leader_only, Leadership, LockClient};

#[derive(Debug)]
pub enum RelayError {
    Lock(lock_core::Error),
    Empty,
}

impl From<lock_core::Error> for RelayError {
    fn from(err: lock_core::Error) -> Self {
        RelayError::Lock(err)
    }
}

/// Display only: a template may use it, the body does not.
pub struct Region(pub &'static str);

impl std::fmt::Display for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

#[leader_only(election = "outbox-relay")]
pub async fn relay() -> Result<u64, RelayError> {
    let leadership = Leadership::current().ok_or(RelayError::Empty)?;
    leadership.ensure_leader()?;
    Ok(leadership.term())
}

#[leader_only(election = "relay:{region}", value = "{host}:{port}")]
pub async fn relay_region(region: Region, host: String, port: u16, mut budget: u32) -> Result<u32, RelayError> {
    if host.is_empty() {
        return Err(RelayError::Empty);
    }
    budget -= u32::from(port % 2);
    Ok(budget)
}

#[leader_only(election = "{{jobs}}:{pair.0}", client = client)]
pub async fn pair(client: &LockClient, pair: (u8, u8), (a, mut b): (u8, u8)) -> lock_core::Result<u8> {
    b += a;
    Ok(pair.1 + b)
}

pub struct Scheduler {
    locks: Arc<LockClient>,
    shard: u32,
}

impl Scheduler {
    #[leader_only(election = "scheduler:{self.shard}", client = self.locks.clone())]
    pub async fn run(&self, jobs: Vec<String>) -> Result<usize, RelayError> {
        Ok(jobs.len() + self.shard as usize)
    }

    #[leader_only(election = "compactor", value = "shard-{self.shard}", client = &*self.locks, crate = "::lock_core")]
    pub async fn compact(&self) -> lock_core::Result<()> {
        Ok(())
    }

    /// `&mut self` is fine when the body does not use `self`.
    #[leader_only(election = "tick:{self.shard}", client = self.locks.as_ref())]
    pub async fn tick(&mut self, n: u32) -> lock_core::Result<u32> {
        Ok(n)
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(relay());
    assert_send(relay_region(Region("eu"), String::new(), 1, 2));
    if let Ok(client) = LockClient::builder("redis://127.0.0.1:1").build() {
        assert_send(pair(&client, (1, 2), (3, 4)));
        let mut scheduler = Scheduler { locks: Arc::new(client), shard: 1 };
        assert_send(scheduler.run(Vec::new()));
        assert_send(scheduler.compact());
        assert_send(scheduler.tick(1));
    }
}
