use lock_core::leader_only;

pub struct Relay {
    sent: u64,
}

/// Not `Clone`.
pub struct Batch(pub Vec<u8>);

impl Relay {
    #[leader_only(election = "relay")]
    async fn by_mut_self(&mut self) -> lock_core::Result<u64> {
        self.sent += 1;
        Ok(self.sent)
    }

    #[leader_only(election = "relay")]
    async fn by_value(self) -> lock_core::Result<u64> {
        Ok(self.sent)
    }
}

#[leader_only(election = "relay")]
async fn mut_ref(out: &mut Vec<u8>) -> lock_core::Result<()> {
    out.push(1);
    Ok(())
}

#[leader_only(election = "relay")]
async fn not_clone(batch: Batch) -> lock_core::Result<usize> {
    Ok(batch.0.len())
}

fn main() {}
