use lock_core::distributed_lock;

#[distributed_lock(key = "stock:{sku")]
async fn unclosed(sku: &str) -> lock_core::Result<()> {
    let _ = sku;
    Ok(())
}

#[distributed_lock(key = "stock:sku}")]
async fn unmatched() -> lock_core::Result<()> {
    Ok(())
}

#[distributed_lock(key = "stock:{}")]
async fn empty(sku: &str) -> lock_core::Result<()> {
    let _ = sku;
    Ok(())
}

#[distributed_lock(key = "stock:{sku:?}")]
async fn format_spec(sku: &str) -> lock_core::Result<()> {
    let _ = sku;
    Ok(())
}

#[distributed_lock(key = "")]
async fn empty_key() -> lock_core::Result<()> {
    Ok(())
}

fn main() {}
