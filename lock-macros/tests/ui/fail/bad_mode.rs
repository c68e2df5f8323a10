use lock_core::distributed_lock;

#[distributed_lock(key = "a", mode = "shared")]
async fn shared() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", mode = read)]
async fn not_a_string() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", mode = 1)]
async fn a_number() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", mode = "Write")]
async fn capitalised() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", mode = "read", mode = "write")]
async fn two_modes() -> lock_core::Result<()> {
    Ok(())
}

fn main() {}
