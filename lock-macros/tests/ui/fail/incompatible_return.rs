use lock_core::distributed_lock;

#[distributed_lock(key = "a")]
async fn unit() {}

#[distributed_lock(key = "b")]
async fn option() -> Option<u32> {
    None
}

#[distributed_lock(key = "c")]
async fn plain() -> u32 {
    1
}

/// An error type that lock failures cannot convert into.
#[derive(Debug)]
struct ShopError;

#[distributed_lock(key = "d")]
async fn no_from() -> Result<u32, ShopError> {
    Ok(1)
}

fn main() {}
