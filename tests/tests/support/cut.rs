//! What the cut-at-every-byte suites share: every fault offset of a
//! command and its reply, the lengths of a command and its reply, and a
//! set-up acquisition that rides out the previous step's cut.

use std::time::Duration;

use lock_tests::{CommandMatch, CutKind, Fault, FaultProxy};

/// Every offset of the command (`CutCommand`) and of its reply (`CutReply`),
/// with FIN and RST: `(label, fault)`.
pub fn faults(command_len: usize, reply_len: usize) -> Vec<(String, Fault)> {
    let mut out = Vec::new();
    for how in [CutKind::Fin, CutKind::Rst] {
        for after in 0..=command_len {
            out.push((
                format!("command cut after {after}/{command_len} bytes ({how:?})"),
                Fault::CutCommand { after, how },
            ));
        }
        for after in 0..=reply_len {
            out.push((
                format!("reply cut after {after}/{reply_len} bytes ({how:?})"),
                Fault::CutReply { after, how },
            ));
        }
    }
    out
}

/// Like [`faults`], sampled: every offset of the reply and the last three
/// of the command (its final bytes, `\r` and `\n`: whole or not), and of
/// the rest of the command every `every`-th offset, FIN and RST at offsets
/// `every / 2` apart (so that together they cover every
/// `every / 2`-th byte). For sweeps that would take too long at every byte.
pub fn sampled(command_len: usize, reply_len: usize, every: usize) -> Vec<(String, Fault)> {
    let every = every.max(1);
    faults(command_len, reply_len)
        .into_iter()
        .filter(|(_, fault)| match fault {
            Fault::CutCommand { after, how } => {
                let phase = if *how == CutKind::Fin { 0 } else { every / 2 };
                *after + 3 > command_len || after % every == phase
            }
            _ => true,
        })
        .collect()
}

/// The lengths of the next command matching `matcher` and of its reply,
/// measured while `op` runs (after a first run that loads the script, so
/// that the reply measured is not NOSCRIPT).
pub async fn lengths<F, Fut>(proxy: &FaultProxy, matcher: CommandMatch, op: F) -> (usize, usize)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    op().await;
    let seen = proxy.observe_next(matcher);
    op().await;
    assert!(
        seen.wait_fired(Duration::from_secs(2)),
        "observed the command"
    );
    (
        seen.command_len().expect("command length"),
        seen.reply_len().expect("reply length"),
    )
}

/// Acquires for a test's set-up (not the step under test): a connection
/// cut by the previous step may fail the next call once, so this retries a
/// few times.
pub async fn setup_acquire(lock: &lock_core::Lock) -> lock_core::LockGuard {
    for _ in 0..5 {
        match lock.acquire_timeout(Duration::from_secs(3)).await {
            Ok(g) => return g,
            Err(e) if e.is_redis() => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => panic!("set-up acquire: {e:?}"),
        }
    }
    panic!("set-up acquire kept failing")
}

/// Every offset of the command and of its reply, each cut once: FIN at
/// even offsets, RST at odd ones (`(label, fault)`). Every byte is still
/// cut, at half the cases of [`faults`].
pub fn alternating(command_len: usize, reply_len: usize) -> Vec<(String, Fault)> {
    let how = |after: usize| {
        if after.is_multiple_of(2) {
            CutKind::Fin
        } else {
            CutKind::Rst
        }
    };
    let mut out = Vec::new();
    for after in 0..=command_len {
        let how = how(after);
        out.push((
            format!("command cut after {after}/{command_len} bytes ({how:?})"),
            Fault::CutCommand { after, how },
        ));
    }
    for after in 0..=reply_len {
        let how = how(after);
        out.push((
            format!("reply cut after {after}/{reply_len} bytes ({how:?})"),
            Fault::CutReply { after, how },
        ));
    }
    out
}
