//! Known bugs planted back, to show that the simulation finds them (a
//! simulator that never found a known bug has not shown it works).

use std::str::FromStr;

use lock_core::__private::{release_script_sha, MemoryServerForTests};
use redis::Value;

/// A bug the simulation can plant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// The round-3 late-release bug (fixed in issue 21): a release of one
    /// count of several took one count off whatever count Redis had, so a
    /// late first copy of an inner release, landing after its retry, took
    /// a second count off and freed the lock under the outer guard.
    /// Planted by rewriting, at the moment each release runs, the count it
    /// names to the count Redis has: exactly the old script's behaviour.
    LateRelease,
    /// A server clock running 5 % fast, five times the drift the validity
    /// deadline allows for (1 % of the lease + 2 ms): leases end in Redis
    /// before their holders stop believing they hold them.
    FastClock,
}

impl FromStr for Plant {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "late-release" => Ok(Plant::LateRelease),
            "fast-clock" => Ok(Plant::FastClock),
            other => Err(format!(
                "unknown plant `{other}` (late-release, fast-clock)"
            )),
        }
    }
}

impl std::fmt::Display for Plant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Plant::LateRelease => "late-release",
            Plant::FastClock => "fast-clock",
        })
    }
}

/// `release.lua`'s arguments: `EVALSHA sha 4 K1 K2 K3 K4 A1 .. A7`; A1 is
/// the owner id, A6 the count the client believes the hold has.
const OWNER: usize = 7;
const COUNT: usize = 12;

impl Plant {
    /// `args` as the planted bug would have them run.
    pub(crate) fn rewrite(
        &self,
        server: &MemoryServerForTests,
        mut args: Vec<Vec<u8>>,
    ) -> Vec<Vec<u8>> {
        if *self != Plant::LateRelease || !is_release(&args) {
            return args;
        }
        let named = std::str::from_utf8(&args[COUNT])
            .ok()
            .and_then(|n| n.parse::<u64>().ok());
        if named.is_some_and(|n| n > 1) {
            let lock = args[3].clone();
            let owner = args[OWNER].clone();
            if let Ok(Value::BulkString(count)) = server.call(&[b"HGET".to_vec(), lock, owner]) {
                args[COUNT] = count;
            }
        }
        args
    }
}

fn is_release(args: &[Vec<u8>]) -> bool {
    static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    args.len() > COUNT
        && args[0].eq_ignore_ascii_case(b"evalsha")
        && args[1] == SHA.get_or_init(release_script_sha).as_bytes()
        && args[2] == b"4"
}
