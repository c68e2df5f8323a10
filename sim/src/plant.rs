//! Known bugs planted back, to show that the simulation finds them (a
//! simulator that never found a known bug has not shown it works).

use std::str::FromStr;

use lock_core::__private::{
    acquire_script_sha, release_script_sha, rw_acquire_script_sha, sem_add_script_sha,
    sem_release_script_sha, MemoryServerForTests,
};
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
    /// Every unlock message lost, and every lease five times longer in
    /// Redis than asked for: a waiter whose unlock message is lost sleeps
    /// on a remaining time that no longer means anything, past the time a
    /// free lock may keep a waiter waiting (the observer's free-lock
    /// bound). Checks that the observer sees waiters wait on a free lock.
    LostUnlocks,
    /// A read-write lock whose writers are granted as readers: the write
    /// script's mode rewritten to a read, so a writer shares the lock with
    /// readers (and other writers). Checks that the observer's read-write
    /// rule sees a writer beside anyone.
    SharedWriter,
    /// A semaphore whose releases give back one permit more than they
    /// took: a plain release's count rewritten from n to n + 1, and every
    /// release of expirable permits preceded by one more on the counter.
    /// Checks that the observer's "never more than N inside" and the
    /// conservation of permits see it.
    GenerousRelease,
}

impl FromStr for Plant {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "late-release" => Ok(Plant::LateRelease),
            "fast-clock" => Ok(Plant::FastClock),
            "lost-unlocks" => Ok(Plant::LostUnlocks),
            "shared-writer" => Ok(Plant::SharedWriter),
            "generous-release" => Ok(Plant::GenerousRelease),
            other => Err(format!(
                "unknown plant `{other}` (late-release, fast-clock, lost-unlocks, shared-writer, generous-release)"
            )),
        }
    }
}

impl std::fmt::Display for Plant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Plant::LateRelease => "late-release",
            Plant::FastClock => "fast-clock",
            Plant::LostUnlocks => "lost-unlocks",
            Plant::SharedWriter => "shared-writer",
            Plant::GenerousRelease => "generous-release",
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
        if *self == Plant::LostUnlocks && is_acquire(&args) {
            // `acquire.lua`: `EVALSHA sha 5 K1 .. K5 A1 ..`, A1 the lease.
            let lease = std::str::from_utf8(&args[LEASE])
                .ok()
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(lease) = lease {
                args[LEASE] = (lease * 5).to_string().into_bytes();
            }
            return args;
        }
        if *self == Plant::GenerousRelease {
            return generous(server, args);
        }
        if *self == Plant::SharedWriter && is_rw_acquire(&args) {
            if args[RW_MODE] == b"write" {
                args[RW_MODE] = b"read".to_vec();
            }
            return args;
        }
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

/// `acquire.lua`'s lease argument.
const LEASE: usize = 8;

fn is_acquire(args: &[Vec<u8>]) -> bool {
    static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    args.len() > LEASE
        && args[0].eq_ignore_ascii_case(b"evalsha")
        && args[1] == SHA.get_or_init(acquire_script_sha).as_bytes()
        && args[2] == b"5"
}

/// `rw_acquire.lua`'s mode argument: `EVALSHA sha 6 K1 .. K6 A1 A2 A3 ..`.
const RW_MODE: usize = 11;

fn is_rw_acquire(args: &[Vec<u8>]) -> bool {
    static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    args.len() > RW_MODE
        && args[0].eq_ignore_ascii_case(b"evalsha")
        && args[1] == SHA.get_or_init(rw_acquire_script_sha).as_bytes()
        && args[2] == b"6"
}

fn is_release(args: &[Vec<u8>]) -> bool {
    static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    args.len() > COUNT
        && args[0].eq_ignore_ascii_case(b"evalsha")
        && args[1] == SHA.get_or_init(release_script_sha).as_bytes()
        && args[2] == b"4"
}

/// `sem_add.lua`: `EVALSHA sha 5 K1 .. K5 A1 ..`; a release when K5 (the
/// acquisition's latch) is not K4 (its own); A1 the count.
const SEM_ADD_N: usize = 8;

/// `sem_release.lua`: `EVALSHA sha 3 K1 K2 K3 A1 ids..`; K1 the counter.
const SEM_COUNTER: usize = 3;

/// [`Plant::GenerousRelease`]: `args` as the planted bug would run them.
fn generous(server: &MemoryServerForTests, mut args: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    static ADD: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static RELEASE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let script = |sha: &str, keys: &[u8]| {
        args.len() > 4
            && args[0].eq_ignore_ascii_case(b"evalsha")
            && args[1] == sha.as_bytes()
            && args[2] == keys
    };
    if script(ADD.get_or_init(sem_add_script_sha), b"5")
        && args.len() > SEM_ADD_N
        && args[6] != args[7]
    {
        let n = std::str::from_utf8(&args[SEM_ADD_N])
            .ok()
            .and_then(|n| n.parse::<i64>().ok());
        if let Some(n) = n {
            args[SEM_ADD_N] = (n + 1).to_string().into_bytes();
        }
    } else if script(RELEASE.get_or_init(sem_release_script_sha), b"3") {
        let _ = server.call(&[b"INCRBY".to_vec(), args[SEM_COUNTER].clone(), b"1".to_vec()]);
    }
    args
}
