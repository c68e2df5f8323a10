use lock_core::distributed_lock;

struct Sku(u32);

#[distributed_lock(key = "stock:{sku}")]
async fn buy(sku: Sku) -> lock_core::Result<u32> {
    Ok(sku.0)
}

fn main() {
    let _ = buy(Sku(1));
}
