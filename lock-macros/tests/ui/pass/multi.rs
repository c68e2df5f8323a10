use lock_core::{distributed_lock, LockClient};

#[derive(Debug)]
pub struct BankError;

impl From<lock_core::Error> for BankError {
    fn from(_: lock_core::Error) -> Self {
        BankError
    }
}

pub struct Account {
    pub id: u64,
}

#[distributed_lock(key = ["account:{from.id}", "account:{to.id}"])]
async fn transfer(from: &Account, to: &Account, cents: u64) -> Result<u64, BankError> {
    Ok(cents)
}

#[distributed_lock(key = ["a", "b:{n}", "c"], client = client, wait = "2s", lease = "10s", cancel_on_lost)]
async fn three(client: &LockClient, n: u32) -> lock_core::Result<u32> {
    Ok(n)
}

#[distributed_lock(key = ["x:{n}", "y:{n}"], client = client, skip_if_locked)]
async fn or_skip(client: &LockClient, n: u32) -> Option<u32> {
    Some(n)
}

#[distributed_lock(key = ["x:{n}", "y:{n}",], client = client, skip_if_locked)]
async fn or_skip_result(client: &LockClient, n: u32) -> lock_core::Result<Option<u32>> {
    Ok(Some(n))
}

// a list of one: the plain lock
#[distributed_lock(key = ["solo:{n}"])]
async fn solo(n: u32) -> lock_core::Result<u32> {
    Ok(n)
}

fn main() {
    let _ = (transfer, three, or_skip, or_skip_result, solo);
}
