use lock_core::distributed_lock;

#[distributed_lock(key = [])]
async fn no_key() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = ["a", 1])]
async fn not_a_string() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = ["a", "b"], mode = "read")]
async fn with_a_mode() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = ["a", "b"], permits = 2)]
async fn with_permits() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = ["a:{x}", "b:{y}"])]
async fn unknown_name(x: u32) -> lock_core::Result<()> {
    Ok(())
}

fn main() {}
