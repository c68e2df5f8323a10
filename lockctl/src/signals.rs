//! SIGINT and SIGTERM as async events, and forwarding them to the command.

use std::fs::File;

use nix::sys::signal::{kill, Signal};
use nix::unistd::{getpgrp, tcgetpgrp, Pid};
use tokio::signal::unix::{signal, SignalKind};

use crate::exit::{CliError, SOFTWARE};

/// The signals lockctl handles itself (instead of dying and leaving the
/// lock held until its lease runs out).
#[derive(Debug)]
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers; from now on SIGINT and SIGTERM no longer kill
    /// the process.
    pub(crate) fn install() -> Result<Self, CliError> {
        let install = |kind: SignalKind| {
            signal(kind).map_err(|e| {
                CliError::new(SOFTWARE, format!("cannot install a signal handler: {e}"))
            })
        };
        Ok(Signals {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
        })
    }

    /// The next SIGINT or SIGTERM. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
        }
    }
}

/// Sends `sig` to the process `pid`; an error when it is already gone.
pub(crate) fn send(pid: u32, sig: Signal) -> nix::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| nix::errno::Errno::ESRCH)?;
    kill(Pid::from_raw(pid), sig)
}

/// Whether a SIGINT that lockctl got most likely reached the command too:
/// Ctrl-C on a terminal signals the whole foreground process group, which
/// the command shares with lockctl. Forwarding it then would deliver it
/// twice (many programs read a second Ctrl-C as "quit now").
pub(crate) fn interrupt_reached_the_group() -> bool {
    let Ok(tty) = File::open("/dev/tty") else {
        return false; // no controlling terminal: nobody signals our group for us
    };
    tcgetpgrp(&tty).is_ok_and(|fg| fg == getpgrp())
}
