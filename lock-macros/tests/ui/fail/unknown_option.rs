use lock_core::distributed_lock;

#[distributed_lock(key = "a", timeout = "1s")]
async fn timeout() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", skip_if_locked = true)]
async fn skip_with_value() {}

#[distributed_lock(key = "a", crate = "not a path")]
async fn bad_crate() -> lock_core::Result<()> {
    Ok(())
}

fn main() {}
