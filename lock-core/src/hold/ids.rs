//! Where a client's random numbers come from (its id, its request-id
//! prefix, its back-off jitter) and the owner numbers: random and
//! process-wide normally; drawn from a seed on this thread while a
//! simulation asks for it (`seeded`, feature `memory`), so that a seeded run names every
//! client and every hold the same way each time it is replayed.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Owner numbers, unique in this process: contexts and context-less
/// acquisitions draw from the same counter, so they never collide.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// While seeded: the generator's state and this thread's next owner
    /// number.
    static SEEDED: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// 128 random bits: from the thread's seed while seeded, else from the
/// operating system (through uuid v4).
pub(crate) fn random_u128() -> u128 {
    SEEDED.with(|seeded| match seeded.get() {
        Some((state, owner)) => {
            let (state, high) = splitmix64(state);
            let (state, low) = splitmix64(state);
            seeded.set(Some((state, owner)));
            (u128::from(high) << 64) | u128::from(low)
        }
        None => uuid::Uuid::new_v4().as_u128(),
    })
}

/// A fresh id in uuid v4's form (random bits from [`random_u128`]).
pub(crate) fn uuid_v4() -> uuid::Uuid {
    uuid::Builder::from_random_bytes(random_u128().to_be_bytes()).into_uuid()
}

/// A fresh owner number: unique in the process; while seeded, counted
/// from 1 on this thread (a simulation's clients are its own).
pub(crate) fn fresh_owner_number() -> u64 {
    SEEDED.with(|seeded| match seeded.get() {
        Some((state, owner)) => {
            seeded.set(Some((state, owner + 1)));
            owner
        }
        None => NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
    })
}

/// SplitMix64: the next state and its output.
fn splitmix64(state: u64) -> (u64, u64) {
    let state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (state, z ^ (z >> 31))
}

/// Draws this thread's ids from `seed` until the returned value is
/// dropped (then they are random again).
#[cfg(any(test, feature = "memory"))]
pub(crate) fn seeded(seed: u64) -> Seeded {
    let before = SEEDED.with(|s| s.replace(Some((seed, 1))));
    Seeded { before }
}

/// Keeps a thread's ids seeded (see `seeded`).
#[cfg(any(test, feature = "memory"))]
#[derive(Debug)]
pub(crate) struct Seeded {
    before: Option<(u64, u64)>,
}

#[cfg(any(test, feature = "memory"))]
impl Drop for Seeded {
    fn drop(&mut self) {
        SEEDED.with(|s| s.set(self.before));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_names_the_same_way_twice() {
        let first = {
            let _seeded = seeded(7);
            (uuid_v4(), fresh_owner_number(), fresh_owner_number())
        };
        let second = {
            let _seeded = seeded(7);
            (uuid_v4(), fresh_owner_number(), fresh_owner_number())
        };
        assert_eq!(first, second);
        assert_eq!((first.1, first.2), (1, 2));
        assert_eq!(first.0.get_version_num(), 4);
        assert_ne!(uuid_v4(), uuid_v4(), "random again after the seed");
    }
}
