//! `lockctl`: a distributed `flock` on Redis, built on lock-core.
//!
//! It is how a shell script or a cron job runs "only one of us at a time"
//! across machines, and how an operator sees and clears locks. The locks
//! are lock-core's, which are wire-compatible with Redisson's `RLock`, so
//! Rust services, Java services and scripts all exclude each other. With
//! `--read` or `--write`, `run` and `hold` take a side of the read-write
//! lock NAME instead (Redisson's `RReadWriteLock`): readers share it, a
//! writer has it alone; the two flags exclude each other (exit 64).
//!
//! With `--fair`, `run` and `hold` take the fair lock NAME (Redisson's
//! `RFairLock`): waiters of every process and language get it in the order
//! they began to wait, queued in Redis (`redisson_lock_queue:{NAME}`); it
//! excludes the plain lock NAME and is excluded by it. `--fair` with
//! `--read`, `--write` or `--permits` is exit 64. `status` always reads the
//! fair queue beside the lock (no extra round trip) and, when someone
//! waits in it, adds `"queue":[{"owner","deadline_ms"}]`, first first, with
//! each waiter's deadline in ms since the epoch; `unlock --force` of a lock
//! with a queue tells the first waiter at once.
//!
//! With `--permits N`, `run` takes one of N permits of the expirable
//! semaphore NAME instead (Redisson's `RPermitExpirableSemaphore`, created
//! with N permits when absent; an existing one keeps its count): at most N
//! commands run at once, anywhere; `--permits` with `--read`/`--write`, or
//! `--permits 0`, is exit 64. `semaphore status` shows a semaphore's
//! available and held permits, `semaphore set` / `semaphore add` set it up.
//!
//! ```text
//! lockctl [--url URL] [--prefix P] [--watchdog DUR] <command>
//!
//!   run NAME [--read | --write | --fair | --permits N] [--wait DUR] [--lease DUR] -- CMD [ARGS...]
//!   hold NAME [--read | --write | --fair] [--wait DUR] [--lease DUR] [--for DUR]
//!   status NAME
//!   unlock --force NAME
//!   list [--match PATTERN]
//!   semaphore status NAME [--limit N]
//!   semaphore set NAME N
//!   semaphore add NAME DELTA
//!   elect NAME [--value V] [--wait DUR] -- CMD [ARGS...]
//!   leader NAME
//! ```
//!
//! `--url` defaults to `$REDIS_URL`, else `redis://127.0.0.1:6379`;
//! durations are written `250ms`, `5s`, `1.5s`, `2m`, `1h`. `hold`,
//! `status`, `unlock` and `list` print one JSON line per result (in
//! `status` and `list`, `ttl_ms` is `null` for a free lock and `-1` for a
//! key without expiry; a read-write lock's line adds its `mode`, `read` or
//! `write`, its `readers` and its `writer` with their hold counts, and each
//! owner's `mode`; in `status`, a fair lock's waiters as `queue`). Exit codes
//! are listed at the end of `lockctl --help` (75: `--wait` passed; 76: the
//! lock was lost while held; `run` passes the command's own code through).
//!
//! ```sh
//! # a cron job that must never run twice at once, anywhere
//! lockctl run nightly-report --wait 10s -- ./report.sh
//! lockctl status nightly-report
//! # {"name":"nightly-report","locked":true,"owners":[{"owner":"…:1","count":1}],"ttl_ms":28345,"key":"nightly-report"}
//!
//! # at most 2 imports at once, across every machine
//! lockctl run imports --permits 2 --wait 5m -- ./import.sh
//! lockctl semaphore status imports
//! # {"name":"imports","available":1,"held_total":1,"held":[{"id":"e0a7…f952","ttl_ms":29919}],"key":"imports"}
//!
//! # readers share, a writer waits for them
//! lockctl hold prices --read --for 1m &
//! lockctl run prices --write --wait 2m -- ./reprice.sh
//! lockctl status prices
//! # {"name":"prices","locked":true,"mode":"read","owners":[{"owner":"…:1","count":1,"mode":"read"}],
//! #  "readers":[{"owner":"…:1","count":1}],"writer":null,"ttl_ms":29120,"key":"prices"}
//!
//! # month-end closes run one at a time, in the order they were started
//! lockctl run --fair ledger-close --wait 1h -- ./close.sh
//! lockctl status ledger-close
//! # {"name":"ledger-close","locked":true,"owners":[{"owner":"…:1","count":1}],
//! #  "queue":[{"owner":"…:1","deadline_ms":1795132800123}],"ttl_ms":29120,"key":"ledger-close"}
//! ```
//!
//! `elect` campaigns in the election NAME (lock-core's `Election`, on the
//! lock NAME, so a Redisson `RLock` on NAME excludes it and is excluded)
//! and runs the command while leader, as `run` runs it while the lock is
//! held: a lost leadership sends the command SIGTERM (SIGKILL 10 s later)
//! and exits 76; a command that ends resigns and passes its code through.
//! `leader` prints who leads (the value given with `--value`, default
//! `<hostname>:<pid>`, and the term, the leader's fencing token).
//!
//! ```sh
//! # the outbox relay runs on exactly one machine; another takes over on a loss
//! lockctl elect outbox-relay --value "$(hostname)" -- ./relay
//! lockctl leader outbox-relay
//! # {"name":"outbox-relay","leader":{"value":"web-2","term":17,"ttl_ms":29120},"key":"outbox-relay"}
//! ```
//!
//! # Why its own crate
//!
//! lockctl is a separate package (`lockctl/`, installed with
//! `cargo install --path lockctl`) rather than a binary behind a feature
//! of lock-core: a library user's dependency tree and `Cargo.lock` never
//! contain clap or serde_json, and no feature flag of the library exists
//! only for a tool.

mod cli;
mod commands;
mod duration;
mod elect;
mod exit;
mod held;
mod run;
mod semaphore;
mod signals;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;
use lock_core::LockClient;

use crate::cli::{Cli, Command};
use crate::exit::{CliError, SOFTWARE, UNAVAILABLE, USAGE};

fn main() -> ExitCode {
    // A bug must still end with one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        eprintln!("lockctl: internal error: {}", what.replace('\n', " "));
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(SOFTWARE, format!("cannot start the runtime: {e}")))
        .and_then(|runtime| runtime.block_on(dispatch(cli)));
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("lockctl: {e}");
            ExitCode::from(e.code)
        }
    }
}

async fn dispatch(cli: Cli) -> Result<u8, CliError> {
    let shown_url = redact(&cli.url);
    dispatch_to(cli).await.map_err(|mut e| {
        if e.code == UNAVAILABLE {
            e.message = format!("redis at {shown_url}: {}", e.message);
        }
        e
    })
}

async fn dispatch_to(cli: Cli) -> Result<u8, CliError> {
    let client = LockClient::builder(cli.url)
        .key_prefix(cli.prefix)
        .watchdog_timeout(cli.watchdog)
        .fair_lock_wait_timeout(cli.fair_wait)
        .build()?;
    match cli.command {
        Command::Run(args) => run::run(&client, args).await,
        Command::Hold(args) => commands::hold(&client, args).await,
        Command::Status(args) => commands::status(&client, args).await,
        Command::Unlock(args) => commands::unlock(&client, args).await,
        Command::List(args) => commands::list(&client, args).await,
        Command::Semaphore(command) => semaphore::semaphore(&client, command).await,
        Command::Elect(args) => elect::elect(&client, args).await,
        Command::Leader(args) => elect::leader(&client, args).await,
    }
}

/// `--help` and `--version` print as usual (exit 0); a usage error prints
/// its first line only (exit 64), e.g. `lockctl: invalid value '5x' for
/// '--wait <DUR>': unknown unit …`.
fn usage_error(err: &clap::Error) -> ExitCode {
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            ExitCode::from(USAGE)
        }
        _ => {
            // The message is the first paragraph (a missing argument's
            // name is on the lines after the first); usage hints follow.
            let rendered = err.render().to_string();
            let paragraph: Vec<&str> = rendered
                .lines()
                .take_while(|line| !line.trim().is_empty())
                .map(str::trim)
                .collect();
            let text = paragraph.join(" ");
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            eprintln!("lockctl: {text} (see --help)");
            ExitCode::from(USAGE)
        }
    }
}

/// `url` without its password, for messages.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    match url[scheme_end..].rfind('@').map(|i| i + scheme_end) {
        Some(at) => match url[scheme_end..at].find(':') {
            Some(colon) => format!("{}:***{}", &url[..scheme_end + colon], &url[at..]),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_hidden_in_messages() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("not a url"), "not a url");
    }
}
