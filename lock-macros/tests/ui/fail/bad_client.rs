use lock_core::distributed_lock;

#[distributed_lock(key = "a", client = "redis://127.0.0.1:6379")]
async fn url_is_not_a_client() -> lock_core::Result<()> {
    Ok(())
}

fn main() {}
