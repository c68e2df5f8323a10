//! How busy the machine was with work other than the benchmark: the load
//! average, and the CPU time that processes other than this program, its
//! reaped W3 children and its private redis-server used during the run
//! (from `/proc/stat`, so that a run disturbed by someone's build shows it).

use nix::sys::resource::{getrusage, UsageWho};

use crate::stats::mono_ns;

/// Clock ticks per second of `/proc` CPU times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

/// The 1-minute load average of the machine (`?` when unknown).
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// Busy time of every CPU of the machine so far, in seconds: the `cpu`
/// line of `/proc/stat` without idle and iowait.
fn machine_busy_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice,
    // already inside user and nice].
    let busy: u64 = fields
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    Some(busy as f64 / TICKS_PER_SEC)
}

/// User + system CPU time of process `pid` so far, in seconds.
fn process_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count from its `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / TICKS_PER_SEC)
}

/// CPU time of this process and its reaped children so far, in seconds.
fn own_secs() -> Option<f64> {
    let secs = |who| {
        let usage = getrusage(who).ok()?;
        let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        Some(tv(usage.user_time()) + tv(usage.system_time()))
    };
    Some(secs(UsageWho::RUSAGE_SELF)? + secs(UsageWho::RUSAGE_CHILDREN)?)
}

/// A snapshot at the start of the run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Usage {
    wall_ns: u64,
    machine: Option<f64>,
    own: Option<f64>,
    redis: Option<f64>,
}

impl Usage {
    /// Now; `redis` is the private redis-server's pid (none with `--url`).
    pub(crate) fn now(redis: Option<u32>) -> Self {
        Usage {
            wall_ns: mono_ns(),
            machine: machine_busy_secs(),
            own: own_secs(),
            redis: redis.and_then(process_secs),
        }
    }

    /// The CPU that other processes used since `self`, in percent of one
    /// CPU on average (with `--url`, a redis-server on this machine counts
    /// as "other"). `None` when `/proc` cannot tell.
    pub(crate) fn others_pct_since(&self, redis: Option<u32>) -> Option<f64> {
        let end = Usage::now(redis);
        let wall = end.wall_ns.saturating_sub(self.wall_ns) as f64 / 1e9;
        let machine = end.machine? - self.machine?;
        let own = end.own? - self.own?;
        let redis = match (self.redis, end.redis) {
            (Some(a), Some(b)) => b - a,
            _ => 0.0,
        };
        (wall > 0.0).then(|| ((machine - own - redis) / wall * 100.0).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_and_the_machine_have_cpu_times() {
        assert!(machine_busy_secs().is_some_and(|s| s > 0.0));
        assert!(process_secs(std::process::id()).is_some());
        assert!(own_secs().is_some());
        let start = Usage::now(None);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(start.others_pct_since(None).is_some());
    }
}
