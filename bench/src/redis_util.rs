//! Raw Redis access for the benchmark's own commands: connections with
//! time-outs (to a server or a whole cluster, through lock-core's
//! `RedisConnection`), INFO parsing and summing over servers, clean-up of
//! a run's keys.

use std::collections::HashMap;
use std::time::Duration;

use crate::BenchResult;

/// The benchmark's own connections: a redis-rs connection to one server,
/// or to a whole cluster (commands routed by their keys' slots).
pub(crate) type Conn = lock_core::RedisConnection;

/// Connect and reply time-out of every raw connection: no call waits forever.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound on SCAN iterations of [`delete_run_keys`].
const MAX_SCAN_ROUNDS: usize = 100_000;

/// A connection to `url` (`redis://` or `redis+cluster://`) with connect
/// and reply time-outs.
pub(crate) async fn connect(url: &str) -> BenchResult<Conn> {
    let client = lock_core::LockClient::builder(url)
        .connect_timeout(TIMEOUT)
        .command_timeout(TIMEOUT)
        .build()?;
    Ok(client.redis_connection().await?)
}

/// One connection per server of a deployment (`urls`: every node of a
/// cluster, or the one server), for INFO figures summed over them.
pub(crate) async fn connect_servers(urls: &[String]) -> BenchResult<Vec<Conn>> {
    let mut conns = Vec::with_capacity(urls.len());
    for url in urls {
        conns.push(connect(url).await?);
    }
    Ok(conns)
}

/// `INFO <section>` as a map of `name → value` lines.
pub(crate) async fn info(conn: &mut Conn, section: &str) -> BenchResult<HashMap<String, String>> {
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

/// CPU seconds (user + system) the servers have used so far (`INFO cpu`,
/// summed).
pub(crate) async fn server_cpu_s(servers: &mut [Conn]) -> BenchResult<f64> {
    let mut total = 0.0;
    for conn in servers {
        let cpu = info(conn, "cpu").await?;
        let secs = |name: &str| {
            cpu.get(name)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        total += secs("used_cpu_user") + secs("used_cpu_sys");
    }
    Ok(total)
}

/// Calls per command from `INFO commandstats` (`"evalsha" → 1234`),
/// summed over the servers.
pub(crate) async fn command_calls(servers: &mut [Conn]) -> BenchResult<HashMap<String, u64>> {
    let mut total: HashMap<String, u64> = HashMap::new();
    for conn in servers {
        for (k, v) in info(conn, "commandstats").await? {
            let Some(name) = k.strip_prefix("cmdstat_") else {
                continue;
            };
            let calls: Option<u64> = v
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|c| c.parse().ok());
            if let Some(calls) = calls {
                *total.entry(name.to_owned()).or_default() += calls;
            }
        }
    }
    Ok(total)
}

/// Whether a command (as `INFO commandstats` names it) runs a script or
/// manages scripts: EVAL, EVALSHA, FCALL (and their `_RO` forms), SCRIPT.
/// A script cannot run any of them (Redis refuses them inside scripts), so
/// every call of these came from a client: one command on the wire each.
/// The commands a script runs are counted under their own names
/// (`INFO commandstats` and `total_commands_processed` of Redis 7 both
/// count them).
pub(crate) fn is_script_call(name: &str) -> bool {
    [
        "eval",
        "evalsha",
        "eval_ro",
        "evalsha_ro",
        "fcall",
        "fcall_ro",
    ]
    .contains(&name)
        || name.starts_with("script|")
        || name == "script"
}

/// The commands clients sent, out of an `INFO commandstats` delta
/// (`after - before`, per command): every script call ([`is_script_call`])
/// plus the commands named in `direct` — the plain commands the measured
/// loop sends itself, which none of its scripts run (L-min's `set`,
/// raw-INCRBY's `incrby`). Every other command in the delta ran inside a
/// script, or is one of the benchmark's own INFO calls, and is not counted.
pub(crate) fn client_calls(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
    direct: &[&str],
) -> u64 {
    after
        .iter()
        .filter(|(name, _)| is_script_call(name) || direct.contains(&name.as_str()))
        .map(|(name, &n)| n.saturating_sub(before.get(name).copied().unwrap_or(0)))
        .sum()
}

/// Counters of `INFO stats`, summed over the servers.
pub(crate) async fn stats(servers: &mut [Conn]) -> BenchResult<HashMap<String, u64>> {
    let mut total: HashMap<String, u64> = HashMap::new();
    for conn in servers {
        for (k, v) in info(conn, "stats").await? {
            if let Ok(n) = v.parse::<u64>() {
                *total.entry(k).or_default() += n;
            }
        }
    }
    Ok(total)
}

/// A counter from [`stats`] (0 when the servers do not report it).
pub(crate) fn stat(stats: &HashMap<String, u64>, name: &str) -> u64 {
    stats.get(name).copied().unwrap_or(0)
}

/// Deletes every key containing `prefix` (the run's lock keys, counters and
/// the fencing counters `redisson_lock_token:{<prefix>…}`), so a run against
/// a shared Redis (`--url`) leaves nothing behind.
pub(crate) async fn delete_run_keys(conn: &mut Conn, prefix: &str) -> BenchResult<u64> {
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

/// Deletes every key of this server that matches the glob `pattern`, one
/// UNLINK per key (pipelined per SCAN page, so that keys of different
/// cluster slots may be deleted on a cluster node); how many.
pub(crate) async fn delete_matching(conn: &mut Conn, pattern: &str) -> BenchResult<u64> {
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    for _ in 0..MAX_SCAN_ROUNDS {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("UNLINK").arg(key);
            }
            let counts: Vec<u64> = pipe.query_async(conn).await?;
            deleted += counts.iter().sum::<u64>();
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(deleted)
}

/// `s` with the glob characters of SCAN's MATCH escaped.
pub(crate) fn escape_glob(s: &str) -> String {
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
        assert_eq!(
            m.get("total_commands_processed").map(String::as_str),
            Some("42")
        );
        assert!(!m.contains_key("# Stats"));
        let counters: HashMap<String, u64> = [("total_reads_processed".to_owned(), 7)].into();
        assert_eq!(stat(&counters, "total_reads_processed"), 7);
        assert_eq!(stat(&counters, "missing"), 0);
    }

    #[test]
    fn client_calls_are_script_calls_and_the_direct_commands() {
        let before: HashMap<String, u64> =
            [("evalsha".to_owned(), 10), ("set".to_owned(), 5)].into();
        let after: HashMap<String, u64> = [
            ("evalsha".to_owned(), 30),
            ("set".to_owned(), 25),
            ("get".to_owned(), 20),
            ("info".to_owned(), 4),
            ("script|load".to_owned(), 1),
        ]
        .into();
        // set ran inside the scripts: not a call of this loop
        assert_eq!(client_calls(&before, &after, &[]), 21);
        // set sent by the loop itself
        assert_eq!(client_calls(&before, &after, &["set"]), 41);
        assert!(is_script_call("evalsha_ro") && is_script_call("script|flush"));
        assert!(!is_script_call("publish"));
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(escape_glob("lb:1:"), "lb:1:");
        assert_eq!(escape_glob("a*b[c]"), "a\\*b\\[c\\]");
    }
}
