use lock_core::distributed_lock;

#[distributed_lock(key = "a", key = "b")]
async fn two_keys() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", wait = "1s", wait = "2s")]
async fn two_waits() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", skip_if_locked, skip_if_locked)]
async fn skip_twice() {}

fn main() {}
