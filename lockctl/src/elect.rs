//! `lockctl elect NAME -- CMD [ARGS...]`: the command runs only while this
//! process leads the election NAME (lock-core's `Election`, on the lock
//! NAME); `lockctl leader NAME` shows who leads it.

use std::time::Duration;

use lock_core::{Election, Leadership, LockClient};
use serde_json::{json, Map, Value};

use crate::cli::{ElectArgs, LeaderArgs};
use crate::commands::{emit, ttl_json};
use crate::exit::{CliError, SIGNAL_BASE, WAIT_TIMEOUT};
use crate::held::Held;
use crate::run::{split_command, supervise};
use crate::signals::Signals;

/// Campaigns, runs the command while leader (as `run` runs it while the
/// lock is held), resigns, and returns the exit code: the command's, or 76
/// when the leadership was lost while it ran (the command then got
/// SIGTERM, and SIGKILL 10 s later).
pub(crate) async fn elect(client: &LockClient, args: ElectArgs) -> Result<u8, CliError> {
    let election = client.election(&args.name)?;
    let command = split_command(&args.command)?;
    let value = args.value.unwrap_or_else(default_value);
    let mut signals = Signals::install()?;
    let leadership = campaign(&election, value, args.wait, &mut signals).await?;
    let held = Held::leadership(leadership, election.name());
    supervise(held, command, &mut signals).await
}

/// `<hostname>:<pid>`: who leads, for `lockctl leader`.
fn default_value() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .map(|h| h.to_string_lossy().into_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// Campaigns with the wait bound `wait` (`0s`: one attempt; none: until
/// elected), unless SIGINT/SIGTERM comes first (then the exit code is 128 +
/// the signal's number).
async fn campaign(
    election: &Election,
    value: String,
    wait: Option<Duration>,
    signals: &mut Signals,
) -> Result<Leadership, CliError> {
    let name = election.name();
    let campaigning = async {
        match wait {
            Some(wait) if wait.is_zero() => election.try_campaign(value).await?.ok_or_else(|| {
                CliError::new(
                    WAIT_TIMEOUT,
                    format!("election `{name}` has another leader"),
                )
            }),
            Some(wait) => Ok(election.campaign_timeout(value, wait).await?),
            None => Ok(election.campaign(value).await?),
        }
    };
    tokio::select! {
        won = campaigning => won,
        sig = signals.recv() => Err(CliError::new(
            SIGNAL_BASE + sig as u8,
            format!("interrupted by {} while campaigning in election `{name}`", sig.as_str()),
        )),
    }
}

/// `lockctl leader NAME`: `{"name","leader":{"value","term","ttl_ms"},"key"}`,
/// with `"leader":null` when nobody holds the lock NAME. `value` and
/// `term` are `null` for a holder that wrote no leader record (a Redisson
/// client's `RLock`, or a leader in its first round trip); `ttl_ms` is the
/// lock's time to live.
pub(crate) async fn leader(client: &LockClient, args: LeaderArgs) -> Result<u8, CliError> {
    let election = client.election(&args.name)?;
    let key = client.lock(&args.name)?.key().to_owned();
    let leader = election.leader().await?;
    let mut line = Map::new();
    line.insert("name".into(), json!(election.name()));
    let leader = match leader {
        None => Value::Null,
        Some(leader) => json!({
            "value": leader.value(),
            "term": leader.term(),
            // `-1`: the lock has no TTL (as `status` shows it)
            "ttl_ms": ttl_json(Some(leader.expires_in().unwrap_or(Duration::MAX))),
        }),
    };
    line.insert("leader".into(), leader);
    line.insert("key".into(), json!(key));
    emit(&Value::Object(line))?;
    Ok(0)
}
