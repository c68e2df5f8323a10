use lock_core::distributed_lock;

#[distributed_lock(key = "a", cancel_on_lost)]
async fn unit() {}

#[distributed_lock(key = "b", cancel_on_lost)]
async fn option() -> Option<u32> {
    None
}

#[distributed_lock(key = "c", cancel_on_lost)]
async fn plain() -> u32 {
    1
}

#[distributed_lock(key = "d", skip_if_locked, cancel_on_lost)]
async fn skip_and_cancel() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "e", cancel_on_lost = true)]
async fn with_value() -> lock_core::Result<()> {
    Ok(())
}

/// An error type that a lost lock cannot convert into.
#[derive(Debug)]
struct ShopError;

#[distributed_lock(key = "f", cancel_on_lost)]
async fn no_from() -> Result<u32, ShopError> {
    Ok(1)
}

fn main() {
    // The fns are still emitted: no second error here.
    let _ = (unit(), option(), plain(), skip_and_cancel(), with_value());
}
