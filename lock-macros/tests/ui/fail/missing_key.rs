use lock_core::distributed_lock;

#[distributed_lock]
async fn no_arguments() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(wait = "5s")]
async fn no_key() -> lock_core::Result<()> {
    Ok(())
}

fn main() {
    let _ = (no_arguments(), no_key());
}
