use lock_core::distributed_lock;

#[distributed_lock(key = "a", skip_if_locked)]
async fn number() -> u32 {
    1
}

#[distributed_lock(key = "b", skip_if_locked)]
async fn result_of_value() -> Result<u32, lock_core::Error> {
    Ok(1)
}

#[distributed_lock(key = "c", skip_if_locked)]
async fn vec() -> Vec<u8> {
    Vec::new()
}

fn main() {}
