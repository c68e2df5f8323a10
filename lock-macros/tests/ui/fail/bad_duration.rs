use lock_core::distributed_lock;

#[distributed_lock(key = "a", wait = "5 sec")]
async fn spaced() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "b", wait = "1.5s")]
async fn fractional() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "c", lease = "30")]
async fn no_unit() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "d", wait = "0ms")]
async fn zero_wait() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "e", lease = "0s")]
async fn zero_lease() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "f", lease = "9000h")]
async fn too_long() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "g", wait = 5)]
async fn not_a_string() -> lock_core::Result<()> {
    Ok(())
}

fn main() {}
