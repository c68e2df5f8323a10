use lock_core::leader_only;

#[leader_only]
async fn no_election() -> lock_core::Result<()> {
    Ok(())
}

#[leader_only(key = "relay")]
async fn key_instead() -> lock_core::Result<()> {
    Ok(())
}

#[leader_only(election = "relay", wait = "5s")]
async fn lock_option() -> lock_core::Result<()> {
    Ok(())
}

#[leader_only(election = "relay:{nope}")]
async fn unknown_name(_region: &str) -> lock_core::Result<()> {
    Ok(())
}

#[leader_only(election = "relay", value = "")]
async fn empty_value() -> lock_core::Result<()> {
    Ok(())
}

#[leader_only(election = "relay", client = "redis://127.0.0.1:6379")]
async fn url_is_not_a_client() -> lock_core::Result<()> {
    Ok(())
}

fn main() {}
