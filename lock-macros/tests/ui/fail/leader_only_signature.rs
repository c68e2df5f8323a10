use lock_core::leader_only;

#[leader_only(election = "relay")]
fn not_async() -> lock_core::Result<()> {
    Ok(())
}

#[leader_only(election = "relay")]
async fn unit() {}

#[leader_only(election = "relay")]
async fn count() -> u64 {
    1
}

#[derive(Debug)]
pub struct NotFromLockError;

#[leader_only(election = "relay")]
async fn wrong_error() -> Result<(), NotFromLockError> {
    Ok(())
}

fn main() {}
