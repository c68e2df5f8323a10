//! Raw Redis access for the benchmark's own commands: connections with
//! time-outs, INFO parsing, clean-up of a run's keys.

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;

use crate::BenchResult;

/// Connect and reply time-out of every raw connection: no call waits forever.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound on SCAN iterations of [`delete_run_keys`].
const MAX_SCAN_ROUNDS: usize = 100_000;

/// A multiplexed connection to `url` with connect and reply time-outs.
pub(crate) async fn connect(url: &str) -> BenchResult<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(TIMEOUT))
        .set_response_timeout(Some(TIMEOUT));
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// `INFO <section>` as a map of `name → value` lines.
pub(crate) async fn info(
    conn: &mut MultiplexedConnection,
    section: &str,
) -> BenchResult<HashMap<String, String>> {
    let text: String = redis::cmd("INFO").arg(section).query_async(conn).await?;
    Ok(parse_info(&text))
}

fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// CPU seconds (user + system) the server has used so far (`INFO cpu`).
pub(crate) async fn server_cpu_s(conn: &mut MultiplexedConnection) -> BenchResult<f64> {
    let cpu = info(conn, "cpu").await?;
    let secs = |name: &str| {
        cpu.get(name)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(secs("used_cpu_user") + secs("used_cpu_sys"))
}

/// Calls per command from `INFO commandstats` (`"evalsha" → 1234`).
pub(crate) async fn command_calls(
    conn: &mut MultiplexedConnection,
) -> BenchResult<HashMap<String, u64>> {
    Ok(info(conn, "commandstats")
        .await?
        .into_iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("cmdstat_")?;
            let calls = v
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect())
}

/// A counter from `INFO stats` (0 when the server does not report it).
pub(crate) fn stat(stats: &HashMap<String, String>, name: &str) -> u64 {
    stats.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Deletes every key containing `prefix` (the run's lock keys, counters and
/// the fencing counters `redisson_lock_token:{<prefix>…}`), so a run against
/// a shared Redis (`--url`) leaves nothing behind.
pub(crate) async fn delete_run_keys(
    conn: &mut MultiplexedConnection,
    prefix: &str,
) -> BenchResult<u64> {
    let pattern = format!("*{}*", escape_glob(prefix));
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    for _ in 0..MAX_SCAN_ROUNDS {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        if !keys.is_empty() {
            let n: u64 = redis::cmd("UNLINK").arg(&keys).query_async(conn).await?;
            deleted += n;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(deleted)
}

fn escape_glob(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_lines_become_a_map() {
        let m =
            parse_info("# Stats\r\ntotal_commands_processed:42\r\ninstantaneous_ops_per_sec:7\r\n");
        assert_eq!(stat(&m, "total_commands_processed"), 42);
        assert_eq!(stat(&m, "missing"), 0);
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(escape_glob("lb:1:"), "lb:1:");
        assert_eq!(escape_glob("a*b[c]"), "a\\*b\\[c\\]");
    }
}
