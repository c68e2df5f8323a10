//! The command line: global options and the subcommands.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lock_core::LockMode;

use crate::duration::parse_duration;

/// The Redis used when neither `--url` nor `$REDIS_URL` says otherwise.
pub(crate) const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// A distributed `flock`: run a command while holding a lock on Redis, hold a
/// lock, and see or force-unlock locks (lock-core's and Redisson's `RLock`,
/// with --read/--write a side of a read-write lock, Redisson's
/// `RReadWriteLock`, with --fair the fair lock, Redisson's `RFairLock`,
/// waiters served in arrival order); with --permits, run a command holding one of N permits
/// of a semaphore (Redisson's `RPermitExpirableSemaphore`); run a command
/// while leader of an election (elect), see who leads (leader).
#[derive(Debug, Parser)]
#[command(name = "lockctl", version, about, after_help = crate::exit::EXIT_CODES_HELP)]
pub(crate) struct Cli {
    /// The Redis URL.
    #[arg(
        help = "Redis URL: redis://[user[:password]@]host[:port][/db] (rediss:// with TLS builds)",
        long,
        global = true,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = DEFAULT_URL,
        value_name = "URL"
    )]
    pub(crate) url: String,

    /// Prefix of every lock and semaphore key (the same as the services' client key prefix)
    #[arg(
        long,
        global = true,
        default_value = "",
        value_name = "P",
        hide_default_value = true
    )]
    pub(crate) prefix: String,

    /// Watchdog timeout: the lease of locks and permits held without --lease (and of leaderships); renewed every third of it
    #[arg(long, global = true, default_value = "30s", value_name = "DUR", value_parser = parse_duration)]
    pub(crate) watchdog: Duration,

    /// Wait allowance of fair locks (--fair; Redisson's fairLockWaitTimeout): every client of a fair lock must use the same value
    #[arg(long = "fair-wait", global = true, default_value = "5m", value_name = "DUR", value_parser = parse_duration)]
    pub(crate) fair_wait: Duration,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Acquire NAME (--read/--write: a side of the read-write lock NAME; --fair: the fair lock NAME, in arrival order; --permits N: one of N permits of the semaphore NAME), run CMD with it held, release; exit with CMD's exit code
    Run(RunArgs),
    /// Acquire NAME (--read/--write: a side of the read-write lock NAME; --fair: the fair lock NAME, in arrival order), print it as one JSON line, hold it until --for passes or SIGINT/SIGTERM
    Hold(HoldArgs),
    /// Print NAME's holders and TTL as one JSON line (a read-write lock: also its mode, readers and writer; a fair lock with waiters: its queue, first first, with their deadlines)
    Status(NameArg),
    /// Delete NAME whoever holds it and wake its waiters (needs --force)
    Unlock(UnlockArgs),
    /// Print every lock that exists now, one JSON line each as `status` prints it but without fair queues (SCAN, never KEYS)
    List(ListArgs),
    /// See and set up the semaphores `run --permits` uses (Redisson's RPermitExpirableSemaphore; `status` reads a plain RSemaphore too)
    #[command(subcommand)]
    Semaphore(SemaphoreCommand),
    /// Campaign in the election NAME, run CMD while leader (SIGTERM on a lost leadership, exit 76), resign; exit with CMD's exit code
    Elect(ElectArgs),
    /// Print the current leader of the election NAME (value, term, time left) as one JSON line; `"leader":null` when there is none
    Leader(LeaderArgs),
}

/// `lockctl semaphore ...`
#[derive(Debug, Subcommand)]
pub(crate) enum SemaphoreCommand {
    /// Print NAME's available permits and the permits held (id, time left) as one JSON line
    Status(SemaphoreStatusArgs),
    /// Create NAME with N permits, unless it exists (its count is then left alone)
    Set(SemaphoreSetArgs),
    /// Add DELTA permits to NAME (negative: take them away; never below zero: exit 64 then)
    Add(SemaphoreAddArgs),
}

/// `lockctl semaphore status NAME [--limit N]`
#[derive(Debug, Args)]
pub(crate) struct SemaphoreStatusArgs {
    /// The semaphore's name
    pub(crate) name: String,

    /// List at most N held permits, soonest to expire first (`held_total` counts them all)
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) limit: usize,
}

/// `lockctl semaphore set NAME N`
#[derive(Debug, Args)]
pub(crate) struct SemaphoreSetArgs {
    /// The semaphore's name
    pub(crate) name: String,

    /// The permits it starts with
    #[arg(value_name = "N")]
    pub(crate) permits: u64,
}

/// `lockctl semaphore add NAME DELTA`
#[derive(Debug, Args)]
pub(crate) struct SemaphoreAddArgs {
    /// The semaphore's name
    pub(crate) name: String,

    /// Permits to add; negative to take them away (e.g. -2)
    #[arg(value_name = "DELTA", allow_negative_numbers = true)]
    pub(crate) delta: i64,
}

/// How to acquire: which lock (the plain lock, a side of the read-write
/// lock of that name, or the fair lock of that name), wait bound and lease.
#[derive(Debug, Args)]
pub(crate) struct AcquireArgs {
    /// Take the read side of the read-write lock NAME: shared with other readers, excludes writers
    #[arg(long, conflicts_with = "write")]
    pub(crate) read: bool,

    /// Take the write side of the read-write lock NAME: no readers, no other writer
    #[arg(long)]
    pub(crate) write: bool,

    /// Take the fair lock NAME (Redisson's RFairLock): waiters of every process and language get it in the order they began to wait, queued in Redis (`status` shows the queue), with Redisson's default wait allowance (5m, fairLockWaitTimeout). It excludes the plain lock NAME and is excluded by it
    #[arg(long, conflicts_with_all = ["read", "write"])]
    pub(crate) fair: bool,

    /// Give up (exit 75) when not acquired within DUR; 0s = one attempt. Default: wait forever
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub(crate) wait: Option<Duration>,

    /// Hold for at most DUR, never renewed. Default: the watchdog renews the lock (or permit) while held
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub(crate) lease: Option<Duration>,
}

impl AcquireArgs {
    /// The lock asked for: [`LockMode::Exclusive`] (the plain lock, the
    /// default, or with `--fair` the fair lock), or [`LockMode::Read`] /
    /// [`LockMode::Write`] for `--read` / `--write` (clap refuses two of
    /// the three at once).
    pub(crate) fn mode(&self) -> LockMode {
        match (self.read, self.write) {
            (true, _) => LockMode::Read,
            (false, true) => LockMode::Write,
            (false, false) => LockMode::Exclusive,
        }
    }
}

/// The most permits `run --permits` may name (lock-core's bound on one
/// acquisition, as the macro's `permits = N`).
pub(crate) const MAX_PERMITS: u32 = 10_000;

/// `lockctl run NAME [--read | --write | --fair | --permits N] [--wait DUR] [--lease DUR] -- CMD [ARGS...]`
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The lock's name (with --permits: the semaphore's)
    pub(crate) name: String,

    #[command(flatten)]
    pub(crate) acquire: AcquireArgs,

    /// Take one of N permits (1 to 10000) of the semaphore NAME instead of a lock: at most N runs at once, anywhere. Created with N permits when absent; an existing one keeps its count
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PERMITS)),
        conflicts_with_all = ["read", "write", "fair"]
    )]
    pub(crate) permits: Option<u32>,

    /// The command and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// `lockctl elect NAME [--value V] [--wait DUR] -- CMD [ARGS...]`
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The election's name (the lock NAME: a Redisson RLock on it excludes the leader and is excluded)
    pub(crate) name: String,

    /// What `lockctl leader NAME` shows of this leader. Default: HOSTNAME:PID (this machine and process)
    #[arg(long, value_name = "V")]
    pub(crate) value: Option<String>,

    /// Give up (exit 75) when not leader within DUR; 0s = one attempt. Default: campaign until elected
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub(crate) wait: Option<Duration>,

    /// The command and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// `lockctl hold NAME [--read | --write | --fair] [--wait DUR] [--lease DUR] [--for DUR]`
#[derive(Debug, Args)]
pub(crate) struct HoldArgs {
    /// The lock's name
    pub(crate) name: String,

    #[command(flatten)]
    pub(crate) acquire: AcquireArgs,

    /// Release after DUR. Default: hold until SIGINT/SIGTERM
    #[arg(long = "for", value_name = "DUR", value_parser = parse_duration)]
    pub(crate) hold_for: Option<Duration>,
}

/// A lock name.
#[derive(Debug, Args)]
pub(crate) struct NameArg {
    /// The lock's name
    pub(crate) name: String,
}

/// `lockctl leader NAME`
#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    /// The election's name
    pub(crate) name: String,
}

/// `lockctl unlock --force NAME`
#[derive(Debug, Args)]
pub(crate) struct UnlockArgs {
    /// Required: the lock is taken away from its holder, whose critical section may still run
    #[arg(long, required = true)]
    pub(crate) force: bool,

    /// The lock's name
    pub(crate) name: String,
}

/// `lockctl list [--match PATTERN]`
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Glob over lock names (without the prefix), as SCAN MATCH: `*`, `?`, `[abc]`
    #[arg(long = "match", default_value = "*", value_name = "PATTERN")]
    pub(crate) pattern: String,
}
