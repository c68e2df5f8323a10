use lock_core::distributed_lock;

#[distributed_lock(key = "a", permits = 0)]
async fn zero() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", permits = -3)]
async fn negative() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", permits = 10_001)]
async fn too_many() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", permits = "4")]
async fn a_string() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", permits = 1.5)]
async fn fractional() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", permits = 2, mode = "read")]
async fn with_a_mode() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", mode = "exclusive", permits = 2)]
async fn with_the_default_mode_spelled_out() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", permits = 2, permits = 3)]
async fn twice() -> lock_core::Result<()> {
    Ok(())
}

// The return type must still carry a failure to take a permit.
#[distributed_lock(key = "a", permits = 2)]
async fn unit() {}

fn main() {}
