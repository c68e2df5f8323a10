use lock_core::distributed_lock;

#[distributed_lock(key = "stock:{sku}")]
fn buy(sku: &str) -> Result<(), lock_core::Error> {
    let _ = sku;
    Ok(())
}

fn main() {
    // The fn is still emitted: no second error here.
    let _ = buy("x");
}
