//! `lockctl run NAME -- CMD [ARGS...]`: the command runs only while the lock
//! (with `--permits N`, one of N permits of the semaphore NAME) is held.
//! [`supervise`] is the part `lockctl elect` shares: run the command while
//! something is held, stop it when that is lost.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use lock_core::{Lock, LockClient, PermitSemaphore};
use nix::sys::signal::Signal;
use tokio::process::{Child, Command};

use crate::cli::RunArgs;
use crate::commands::{acquire, lock_for};
use crate::exit::{chain, CliError, CANNOT_EXECUTE, LOST, NOT_FOUND, SIGNAL_BASE, SOFTWARE};
use crate::held::Held;
use crate::semaphore::acquire_permit;
use crate::signals::{interrupt_reached_the_group, send, Signals};

/// How long a command told to stop (SIGTERM, lock lost) gets before SIGKILL.
const KILL_AFTER: Duration = Duration::from_secs(10);

/// Acquires, runs the command with inherited stdin/stdout/stderr, releases,
/// and returns the exit code: the command's, or 76 when the lock (or the
/// permit) was lost while it ran.
pub(crate) async fn run(client: &LockClient, args: RunArgs) -> Result<u8, CliError> {
    let target = match args.permits {
        Some(permits) => Target::Semaphore(client.permit_semaphore(&args.name)?, permits),
        None => Target::Lock(lock_for(client, &args.name, &args.acquire)?),
    };
    let command = split_command(&args.command)?;
    let mut signals = Signals::install()?;
    let guard = match &target {
        Target::Lock(lock) => Held::lock(
            acquire(lock, &args.acquire, &mut signals).await?,
            lock.name(),
        ),
        Target::Semaphore(semaphore, permits) => Held::permit(
            acquire_permit(semaphore, *permits, &args.acquire, &mut signals).await?,
            semaphore.name(),
        ),
    };
    supervise(guard, command, &mut signals).await
}

/// The program and its arguments (clap requires at least the program).
pub(crate) fn split_command(command: &[OsString]) -> Result<(&OsString, &[OsString]), CliError> {
    command
        .split_first()
        .ok_or_else(|| CliError::new(crate::exit::USAGE, "no command given after `--`"))
}

/// Runs the command with inherited stdin/stdout/stderr while `guard` is
/// held (a lock, a permit, a leadership), forwarding SIGINT/SIGTERM to it,
/// then releases; the exit code is the command's, or 76 when `guard` was
/// lost (the command then got SIGTERM, and SIGKILL after [`KILL_AFTER`]).
pub(crate) async fn supervise(
    guard: Held,
    (program, program_args): (&OsString, &[OsString]),
    signals: &mut Signals,
) -> Result<u8, CliError> {
    let what = guard.what().to_owned();

    let shown = program.to_string_lossy().into_owned();
    let mut child = match Command::new(program).args(program_args).spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = guard.release().await;
            let code = match e.kind() {
                ErrorKind::NotFound => NOT_FOUND,
                _ => CANNOT_EXECUTE,
            };
            return Err(CliError::new(code, format!("cannot run `{shown}`: {e}")));
        }
    };
    let Some(pid) = child.id() else {
        return Err(CliError::new(SOFTWARE, "the command has no process id"));
    };

    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| CliError::new(SOFTWARE, format!("waiting for `{shown}`: {e}")))?;
                return Ok(match guard.release().await {
                    Ok(()) => exit_code(status),
                    Err(e) if e.is_lost() => {
                        eprintln!("lockctl: {} was lost before the command finished", what);
                        LOST
                    }
                    Err(e) => {
                        eprintln!(
                            "lockctl: could not release {} ({}); it expires with its lease",
                            what,
                            chain(&e)
                        );
                        exit_code(status)
                    }
                });
            }
            _ = guard.lost() => {
                eprintln!(
                    "lockctl: {} was lost while the command ran; sending it SIGTERM",
                    what
                );
                stop(&mut child, pid).await;
                return Ok(LOST);
            }
            sig = signals.recv() => {
                // The command ends on it (or not); the lock is released when it does.
                if sig != Signal::SIGINT || !interrupt_reached_the_group() {
                    let _ = send(pid, sig);
                }
            }
        }
    }
}

/// What `run` takes: a lock (or a side of a read-write lock), or with
/// `--permits N` one permit of the semaphore NAME of N permits.
enum Target {
    Lock(Lock),
    Semaphore(PermitSemaphore, u32),
}

/// SIGTERM, then SIGKILL after [`KILL_AFTER`]; waits for the exit.
async fn stop(child: &mut Child, pid: u32) {
    let _ = send(pid, Signal::SIGTERM);
    if tokio::time::timeout(KILL_AFTER, child.wait())
        .await
        .is_err()
    {
        eprintln!(
            "lockctl: the command did not exit within {}s of SIGTERM; sending SIGKILL",
            KILL_AFTER.as_secs()
        );
        let _ = child.kill().await;
    }
}

/// The shell's convention: the exit code, or 128 + N when killed by signal N.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => SIGNAL_BASE.saturating_add(u8::try_from(sig).unwrap_or(0)),
        (None, None) => 1,
    }
}
