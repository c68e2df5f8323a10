use lock_core::distributed_lock;

#[distributed_lock(key = "stock:{skuu}")]
async fn buy(sku: &str, qty: u32) -> lock_core::Result<u32> {
    let _ = sku;
    Ok(qty)
}

#[distributed_lock(key = "job:{self.id}")]
async fn no_self() -> lock_core::Result<()> {
    Ok(())
}

struct Order {
    id: u64,
}

#[distributed_lock(key = "order:{order.number}")]
async fn unknown_field(order: &Order) -> lock_core::Result<u64> {
    Ok(order.id)
}

fn main() {
    let _ = (buy("x", 1), no_self(), unknown_field(&Order { id: 1 }));
}
