use lock_core::distributed_lock;

trait Shop {
    #[distributed_lock(key = "stock:{sku}")]
    async fn buy(&self, sku: &str) -> lock_core::Result<()>;
}

#[distributed_lock(key = "x")]
struct NotAFn;

fn main() {}
