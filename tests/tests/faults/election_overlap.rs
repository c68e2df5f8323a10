//! Never two leaders: three processes campaign on one election in a loop
//! (two with `run_as_leader`, one with `campaign` / `resign`), resigning
//! at random, while the test kills the leader (SIGKILL, then starts the
//! process again), black-holes the leader's connection (the fault proxy in
//! front of each process), pauses the leader past its lease (SIGSTOP, then
//! SIGCONT) and restarts Redis (same port, every key lost).
//!
//! Each leader appends `term,server-time-µs` to a log list every ~20 ms
//! through a fenced write (`Fence::eval`; the time is Redis's own `TIME`
//! when the write was applied). The observer (the test's own connection)
//! drains the log as the run goes (it has to: a restart loses it), then
//! judges it: per term the first and last write; no two terms' spans
//! overlap, terms increase in time order, and enough terms happened for
//! the faults to have caused fail-overs. Fail-over time: from the fault
//! (Redis's clock, read with the leader's identity just before the fault)
//! to the next term's first write; printed per kind of fault.
//!
//! Each child also says its local leadership windows (from the campaign's
//! return to `ended()`, wall clock): outside Redis data loss a window ends
//! before the next leader's begins; after a restart the overlap (the old
//! leader learns of the lost lock at its next write or renewal) is printed.
//!
//! This binary re-runs itself as the child processes (`child_process`,
//! ignored, with a role in the environment), as `sem_kill` does.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::election::{self as log, Entry, DRAIN, LOG_BODY};
use crate::support::{self, env_var};
use lock_core::{FencedScript, Leadership, LockClient};
use lock_tests::FaultProxy;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const ROLE: &str = "LOCK_TEST_ELECT_ROLE";
const URL: &str = "LOCK_TEST_ELECT_URL";
const NAME: &str = "LOCK_TEST_ELECT_NAME";
const LOG: &str = "LOCK_TEST_ELECT_LOG";
const ME: &str = "LOCK_TEST_ELECT_ME";
const STOP_AT: &str = "LOCK_TEST_ELECT_STOP_AT";
const SEED: &str = "LOCK_TEST_ELECT_SEED";

/// Every process's watchdog timeout: the lease of a leadership.
const WATCHDOG: Duration = Duration::from_millis(600);
/// A leader's write period.
const WRITE_EVERY: Duration = Duration::from_millis(20);
/// How long the test injects faults; the children stop a little after.
const FAULTS_FOR: Duration = Duration::from_secs(30);
/// Normal operation between two faults.
const GAP: Duration = Duration::from_millis(1_200);
/// How long a partition or a pause lasts (well past the lease).
const OUTAGE: Duration = Duration::from_millis(1_500);

/// Entry point of the campaigning processes; does nothing unless started
/// by the test below with a role.
#[test]
#[ignore = "entry point of the child processes of the election overlap test"]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(campaigner(role == "campaign"));
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The wall clock in µs (the same host's clock as Redis's `TIME`).
fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Time left until the unix time `stop_at` (ms).
fn left(stop_at: u64) -> Duration {
    Duration::from_millis(stop_at.saturating_sub(unix_ms()))
}

/// xorshift64
fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// Campaign, lead (fenced writes), resign or lose, again; until `STOP_AT`.
async fn campaigner(manual: bool) {
    let client = LockClient::builder(env_var(URL))
        .watchdog_timeout(WATCHDOG)
        .command_timeout(Duration::from_millis(400))
        .connect_timeout(Duration::from_millis(400))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"));
    let election = client
        .election(env_var(NAME))
        .unwrap_or_else(|e| panic!("election: {e}"));
    let (me, key) = (env_var(ME), env_var(LOG));
    let stop_at: u64 = env_var(STOP_AT).parse().unwrap_or(0);
    let mut rng: u64 = env_var(SEED).parse::<u64>().unwrap_or(1) * 0x9E37_79B9 + 1;
    let script = FencedScript::new(LOG_BODY);
    let (mut led, mut rounds) = (0u64, 0u64);
    while rounds < 100_000 && !left(stop_at).is_zero() {
        rounds += 1;
        if manual {
            let campaign = election.campaign_timeout(me.clone(), Duration::from_secs(2));
            match tokio::time::timeout(left(stop_at), campaign).await {
                Ok(Ok(l)) => {
                    led += 1;
                    lead(&l, &script, &key, next(&mut rng), stop_at).await;
                    let _ = tokio::time::timeout(Duration::from_secs(2), l.resign()).await;
                }
                Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(_) => break,
            }
        } else {
            let base = next(&mut rng);
            let mut n = 0u64;
            let run = election.run_as_leader(me.clone(), |l| {
                n += 1;
                led += 1;
                let (script, key) = (script.clone(), key.clone());
                let seed = base ^ n.wrapping_mul(0x2545_F491_4F6C_DD1D);
                async move { lead(&l, &script, &key, seed, stop_at).await }
            });
            match tokio::time::timeout(left(stop_at), run).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(_) => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(next(&mut rng) % 100)).await;
    }
    println!("{me}: led {led} times in {rounds} rounds");
}

/// A leader's work: a fenced log write every `WRITE_EVERY` while leader,
/// for a random 10 to 100 writes (then it resigns); stops when refused.
async fn lead(l: &Leadership, script: &FencedScript, key: &str, mut rng: u64, stop_at: u64) {
    let term = l.term().to_string();
    // the local window: from the campaign's return to the end of the
    // leadership (loss, deadline or resign), said on stdout
    let (watcher, start) = (l.clone(), wall_us());
    let said = term.clone();
    tokio::spawn(async move {
        watcher.ended().await;
        println!("WIN {said} {start} {}", wall_us());
    });
    let writes = 10 + next(&mut rng) % 90;
    for _ in 0..writes {
        if !l.is_leader() || left(stop_at).is_zero() {
            return;
        }
        match l.fence().eval::<String>(script, &[key], &[&term]).await {
            Ok(_) => {}
            Err(e) if e.is_fence_refused() => return,
            // a lost reply: the outcome is unknown, the next write tells
            Err(_) => {}
        }
        tokio::time::sleep(WRITE_EVERY).await;
    }
}

/// One campaigning child process and its stdout (kept for a failure's
/// message).
struct Kid {
    child: Child,
    out: Arc<Mutex<Vec<String>>>,
}

/// The children, killed when the test ends (also when it fails).
struct Kids(Vec<Kid>);

impl Drop for Kids {
    fn drop(&mut self) {
        for k in &mut self.0 {
            let _ = k.child.kill();
            let _ = k.child.wait();
        }
    }
}

fn spawn(envs: &[(&str, String)]) -> Kid {
    let mut child = support::spawn_child(module_path!(), envs, Stdio::null());
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("piped stdout"));
    let out = Arc::new(Mutex::new(Vec::new()));
    let lines = out.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            lines.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    });
    Kid { child, out }
}

/// The test's own view of Redis: a plain connection, made again after a
/// restart.
struct Observer {
    client: redis::Client,
    conn: Option<redis::aio::MultiplexedConnection>,
    name: String,
    log: String,
    /// Every log line drained so far.
    lines: Vec<String>,
}

/// The current leader as Redis has it, with the server's time: `{time}`
/// when nobody leads (or the holder wrote no record yet), else `{time,
/// value, term, pttl}`.
const LEADER_NOW: &str = "\
local t = redis.call('TIME') \
local us = t[1] .. string.format('%06d', tonumber(t[2])) \
local owner = redis.call('HGET', KEYS[2], 'owner') \
if owner and redis.call('HEXISTS', KEYS[1], owner) == 1 then \
  return {us, redis.call('HGET', KEYS[2], 'value') or '', redis.call('HGET', KEYS[2], 'term') or '', \
          tostring(redis.call('PTTL', KEYS[1]))} \
end \
return {us}";

/// The leader just before a fault.
#[derive(Debug, Clone)]
struct LeaderNow {
    us: u64,
    child: usize,
    term: u64,
    pttl_ms: i64,
}

impl Observer {
    async fn conn(&mut self) -> Option<&mut redis::aio::MultiplexedConnection> {
        if self.conn.is_none() {
            self.conn = self.client.get_multiplexed_async_connection().await.ok();
        }
        self.conn.as_mut()
    }

    /// Takes what the leaders wrote since the last drain.
    async fn drain(&mut self) {
        let key = self.log.clone();
        let Some(conn) = self.conn().await else {
            return;
        };
        let got: redis::RedisResult<Vec<String>> =
            redis::Script::new(DRAIN).key(&key).invoke_async(conn).await;
        match got {
            Ok(lines) => self.lines.extend(lines),
            Err(_) => self.conn = None,
        }
    }

    /// Drains every 100 ms for `d`.
    async fn drain_for(&mut self, d: Duration) {
        let until = Instant::now() + d;
        for _ in 0..1_000 {
            self.drain().await;
            let rest = until.saturating_duration_since(Instant::now());
            if rest.is_zero() {
                return;
            }
            tokio::time::sleep(rest.min(Duration::from_millis(100))).await;
        }
    }

    async fn leader_now(&mut self) -> Option<LeaderNow> {
        let (lock, record) = (
            self.name.clone(),
            format!("lockcore_leader:{{{}}}", self.name),
        );
        let conn = self.conn().await?;
        let got: redis::RedisResult<Vec<String>> = redis::Script::new(LEADER_NOW)
            .key(&lock)
            .key(&record)
            .invoke_async(conn)
            .await;
        let Ok(v) = got else {
            self.conn = None;
            return None;
        };
        Some(LeaderNow {
            us: v.first()?.parse().ok()?,
            child: v.get(1)?.strip_prefix("child-")?.parse().ok()?,
            term: v.get(2)?.parse().ok()?,
            pttl_ms: v.get(3)?.parse().ok()?,
        })
    }

    /// The leader, waiting for one (at most 3 s, draining meanwhile).
    async fn wait_leader(&mut self) -> Option<LeaderNow> {
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            if let Some(l) = self.leader_now().await {
                return Some(l);
            }
            self.drain().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    BlackHole,
    Stop,
    Restart,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_two_leaders_under_kills_partitions_pauses_and_redis_restarts() {
    let mut server = support::server();
    let (name, log_key) = ("xp:elect", "xp:elect:log");
    let proxies: Vec<FaultProxy> = (0..3)
        .map(|_| FaultProxy::start(server.addr()).expect("proxy"))
        .collect();
    let stop_at = unix_ms() + (FAULTS_FOR + Duration::from_secs(5)).as_millis() as u64;
    let envs = |i: usize, generation: u64| -> Vec<(&'static str, String)> {
        vec![
            (ROLE, if i == 0 { "campaign" } else { "run" }.to_string()),
            (URL, proxies[i].url()),
            (NAME, name.to_string()),
            (LOG, log_key.to_string()),
            (ME, format!("child-{i}")),
            (STOP_AT, stop_at.to_string()),
            (SEED, (i as u64 * 1_000 + generation + 1).to_string()),
        ]
    };
    let mut kids = Kids((0..3).map(|i| spawn(&envs(i, 0))).collect());
    let mut obs = Observer {
        client: redis::Client::open(server.url()).expect("url"),
        conn: None,
        name: name.to_string(),
        log: log_key.to_string(),
        lines: Vec::new(),
    };
    let started = Instant::now();
    let plan = [Fault::Kill, Fault::BlackHole, Fault::Stop, Fault::Restart];
    let mut faults: Vec<(Fault, LeaderNow)> = Vec::new();
    let mut skipped = 0;
    // the stdout of killed children
    let mut dead: Vec<Arc<Mutex<Vec<String>>>> = Vec::new();
    for round in 0..40usize {
        if started.elapsed() >= FAULTS_FOR {
            break;
        }
        obs.drain_for(GAP).await;
        let Some(leader) = obs.wait_leader().await else {
            skipped += 1;
            continue;
        };
        let fault = plan[round % plan.len()];
        let i = leader.child;
        match fault {
            Fault::Kill => {
                let kid = &mut kids.0[i];
                kid.child.kill().expect("SIGKILL");
                let _ = kid.child.wait();
                faults.push((fault, leader));
                obs.drain_for(Duration::from_millis(200)).await;
                let old = std::mem::replace(&mut kids.0[i], spawn(&envs(i, round as u64 + 1)));
                dead.push(old.out.clone());
                drop(old);
            }
            Fault::BlackHole => {
                proxies[i].black_hole();
                faults.push((fault, leader));
                obs.drain_for(OUTAGE).await;
                proxies[i].heal();
            }
            Fault::Stop => {
                let pid = Pid::from_raw(kids.0[i].child.id() as i32);
                kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
                faults.push((fault, leader));
                obs.drain_for(OUTAGE).await;
                kill(pid, Signal::SIGCONT).expect("SIGCONT");
            }
            Fault::Restart => {
                // what was written up to now (a restart loses the log):
                // the leader read again just before the kill
                obs.drain().await;
                let Some(leader) = obs.leader_now().await else {
                    skipped += 1;
                    continue;
                };
                tokio::task::block_in_place(|| server.restart()).expect("restart");
                obs.conn = None;
                faults.push((fault, leader));
            }
        }
    }
    let faulted = started.elapsed();
    // the children stop by themselves at `stop_at`
    let mut failed = Vec::new();
    for (i, kid) in kids.0.iter_mut().enumerate() {
        let deadline = Instant::now() + left(stop_at) + Duration::from_secs(10);
        let status = loop {
            match kid.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    obs.drain_for(Duration::from_millis(50)).await
                }
                _ => break None,
            }
        };
        let out = kid.out.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if !status.is_some_and(|s| s.success()) {
            failed.push(format!("child-{i}: {status:?}\n{}", out.join("\n")));
        }
        if let Some(said) = out.iter().find(|l| l.contains(" led ")) {
            println!("{said}");
        }
    }
    obs.drain().await;
    let said: Vec<String> = kids
        .0
        .iter()
        .map(|k| k.out.clone())
        .chain(dead)
        .flat_map(|o| o.lock().unwrap_or_else(|p| p.into_inner()).clone())
        .collect();
    let windows = local_windows(&said, &faults);

    // the judgement
    let entries: Vec<Entry> = log::parse(&obs.lines);
    let spans = log::spans(&entries);
    let violations = log::violations(&entries);
    let count = |k: Fault| faults.iter().filter(|(f, _)| *f == k).count();
    let mut report = Vec::new();
    let mut too_slow = Vec::new();
    for kind in plan {
        let mut ms = Vec::new();
        for (f, at) in faults.iter().filter(|(f, _)| *f == kind) {
            // the next term's first write after the fault
            let next = spans
                .iter()
                .filter(|s| s.term != at.term && s.first > at.us)
                .min_by_key(|s| s.first);
            let Some(next) = next else {
                too_slow.push(format!("{f:?} at {} µs: no later term", at.us));
                continue;
            };
            let took = (next.first - at.us) as f64 / 1e3;
            ms.push(took);
            // nobody else can be granted before the faulted holder's lock
            // expires (it cannot release it): not before its PTTL
            if kind != Fault::Restart && took + 5.0 < at.pttl_ms as f64 {
                too_slow.push(format!(
                    "{f:?}: term {} wrote {took:.1} ms after the fault, before the old lock's PTTL {} ms ran out",
                    next.term, at.pttl_ms
                ));
            }
            if took > 3_000.0 {
                too_slow.push(format!("{f:?}: fail-over took {took:.1} ms"));
            }
        }
        report.push(format!("{kind:?} x{}: {}", ms.len(), log::summary(&ms)));
    }
    println!(
        "election overlap: {} fenced writes by {} terms over {:?} (faults for {faulted:?}, {skipped} rounds without a leader to fault); \
         faults: kill {}, black hole {}, SIGSTOP {}, Redis restart {}; violations {}",
        entries.len(),
        spans.len(),
        started.elapsed(),
        count(Fault::Kill),
        count(Fault::BlackHole),
        count(Fault::Stop),
        count(Fault::Restart),
        violations.len()
    );
    println!(
        "fail-over (fault to the next term's first write, lease {WATCHDOG:?}): {}",
        report.join("; ")
    );
    println!(
        "local leadership windows (campaign return to ended(), wall clock): {} windows; overlaps of the next leader's window: \
         after a Redis restart {} (max {:.1} ms: the old leader learns of the lost data at its next renewal or write); \
         otherwise {} (max {:.1} ms); windows of paused leaders left out: {}",
        windows.count,
        windows.restart.len(),
        windows.restart.iter().copied().fold(0.0, f64::max),
        windows.other.len(),
        windows.other.iter().copied().fold(0.0, f64::max),
        windows.paused
    );
    assert!(failed.is_empty(), "children failed: {failed:?}");
    // outside data loss, a leader's local window ends before the next
    // leader's begins (50 ms allowed for the scheduling of the
    // `ended()` task that timestamps it)
    assert!(
        windows.other.iter().all(|ms| *ms <= 50.0),
        "local leadership windows overlap: {:?}",
        windows.other
    );
    assert!(violations.is_empty(), "two leaders: {violations:#?}");
    assert!(spans.len() >= 20, "only {} terms", spans.len());
    for kind in plan {
        assert!(count(kind) >= 2, "{kind:?} ran {} times", count(kind));
    }
    assert!(too_slow.is_empty(), "{too_slow:#?}");
}

/// The local leadership windows' overlaps, in ms.
struct Windows {
    count: usize,
    /// Overlaps of a window of the leader at a Redis restart.
    restart: Vec<f64>,
    /// Other overlaps.
    other: Vec<f64>,
    /// Windows of paused (SIGSTOP) leaders, left out: their `ended()`
    /// runs only after SIGCONT.
    paused: usize,
}

/// The children's `WIN term start end` lines; a killed leader's window ends
/// at its kill. Each window against the one that reaches furthest before it.
fn local_windows(said: &[String], faults: &[(Fault, LeaderNow)]) -> Windows {
    let faulted = |kind: Fault, term: u64| {
        faults
            .iter()
            .find(|(f, at)| *f == kind && at.term == term)
            .map(|(_, at)| at.us)
    };
    let mut wins: Vec<(u64, u64, u64)> = said
        .iter()
        .filter_map(|l| {
            let rest = &l[l.find("WIN ")? + 4..];
            let mut it = rest.split(' ').map(|v| v.trim().parse::<u64>());
            Some((it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?))
        })
        .collect();
    // killed leaders said no end: their window ends at the kill
    for (_, at) in faults.iter().filter(|(f, _)| *f == Fault::Kill) {
        if !wins.iter().any(|w| w.0 == at.term) {
            wins.push((at.term, at.us.saturating_sub(1), at.us));
        }
    }
    let paused = wins
        .iter()
        .filter(|w| faulted(Fault::Stop, w.0).is_some())
        .count();
    wins.retain(|w| faulted(Fault::Stop, w.0).is_none());
    wins.sort_by_key(|w| (w.1, w.0));
    let (mut restart, mut other) = (Vec::new(), Vec::new());
    let mut reach: Option<(u64, u64, u64)> = None;
    for w in &wins {
        if let Some(r) = reach {
            if r.2 > w.1 {
                let ms = (r.2 - w.1) as f64 / 1e3;
                if faulted(Fault::Restart, r.0).is_some() {
                    restart.push(ms);
                } else {
                    other.push(ms);
                }
            }
        }
        if reach.is_none_or(|r| w.2 > r.2) {
            reach = Some(*w);
        }
    }
    Windows {
        count: wins.len(),
        restart,
        other,
        paused,
    }
}
