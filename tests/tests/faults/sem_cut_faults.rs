//! The semaphores' and the latch's scripts cut at every byte offset of the
//! reply and every 4th of the command (see [`EVERY`]), with FIN and with
//! RST, through the harness's fault proxy: `sem_acquire.lua` (both kinds),
//! `sem_add.lua` (`add_permits`), `sem_release.lua` (an expirable
//! release), `sem_cancel.lua` (a plain release, and the cancellation of an
//! acquire whose reply was lost, both kinds), `sem_leave.lua` (a waiter
//! giving up) and `latch_count_down.lua`.
//!
//! Each offset runs on a fresh client (so that every command under test has
//! the same bytes: request ids carry a per-client sequence number), which is
//! shut down after it (that drains its background work). After each offset
//! a raw connection (not the library) reads the counter, the permit ids and
//! the line: never a permit created or lost — the plain kind's grants
//! exactly those of live guards and `available + held by live guards ==
//! N`, the expirable kind's ids exactly those of live guards and
//! `available + ZCARD == N` — and a latch counted down at most once per
//! call (exactly once when the call succeeded).

use std::time::{Duration, Instant};

use lock_core::{Error, LockClient};
use lock_tests::{CommandMatch, CutKind, Fault, FaultProxy};

use crate::support::cut::{lengths, sampled};
use crate::support::sem::{
    conserved, latch_count_down_sha, sem_acquire_sha, sem_add_sha, sem_cancel_sha, sem_leave_sha,
    sem_release_sha, sem_state, AnySem, Kind,
};
use crate::support::{self, cmd, raw, within};

/// Permits of every semaphore here (one digit: replies of one length).
const N: i64 = 3;

/// The command offsets are sampled (every reply offset and the command's
/// last three are always cut): FIN every 8th byte, RST every 8th byte 4
/// apart. Every byte (about 5 000 offsets over these sweeps, 20 to 75 ms
/// each on a fresh client) would take several minutes.
const EVERY: usize = 8;

struct Rig {
    server: lock_tests::RedisServer,
    proxy: FaultProxy,
    /// Direct to the server: another client.
    other: LockClient,
    conn: redis::aio::MultiplexedConnection,
}

async fn rig() -> Rig {
    let server = support::server();
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    let other = support::client_for(&server, 30_000);
    let conn = raw(&server).await;
    Rig {
        server,
        proxy,
        other,
        conn,
    }
}

impl Rig {
    /// A fresh client through the proxy (watchdog 1 s).
    fn through(&self) -> LockClient {
        self.through_with(Duration::from_millis(500))
    }

    /// A fresh client through the proxy whose command and connect
    /// time-outs are `timeouts`.
    fn through_with(&self, timeouts: Duration) -> LockClient {
        LockClient::builder(self.proxy.url())
            .watchdog_timeout(Duration::from_secs(1))
            .command_timeout(timeouts)
            .connect_timeout(timeouts)
            .build()
            .unwrap_or_else(|e| panic!("client: {e}"))
    }

    /// A semaphore `name` of `kind` with `N` permits.
    async fn semaphore(&self, kind: Kind, name: &str) {
        assert!(AnySem::of(&self.other, kind, name)
            .try_set_permits(N as u64)
            .await
            .expect("set"));
    }
}

/// Shuts `client` down (its background work drained) and checks that it
/// finished.
async fn shut(client: &LockClient, what: &str) {
    let report = client.shutdown(Duration::from_secs(5)).await;
    assert!(report.is_complete(), "{what}: shutdown {report:?}");
}

fn script(sha: String, counter: &str) -> CommandMatch {
    CommandMatch::name("EVALSHA")
        .with_exact_arg(sha)
        .with_exact_arg(counter)
}

/// A new acquisition (`try_acquire(1)`) cut at every offset: granted with
/// its permit in Redis, or failed with every permit back.
async fn acquire_cut_everywhere(kind: Kind) {
    let r = rig().await;
    let name = format!("sem-cut-acq-{}", kind.label());
    r.semaphore(kind, &name).await;
    let matcher = || script(sem_acquire_sha(), &name);
    let (command_len, reply_len) = lengths(&r.proxy, matcher(), || async {
        let c = r.through();
        let p = AnySem::of(&c, kind, &name)
            .try_acquire(1)
            .await
            .expect("probe")
            .expect("free");
        p.release().await.expect("release");
        shut(&c, "probe").await;
    })
    .await;
    let started = Instant::now();
    let (mut granted, mut failed) = (0, 0);
    for (label, fault) in sampled(command_len, reply_len, EVERY) {
        let c = r.through();
        let sem = AnySem::of(&c, kind, &name);
        let cut = r.proxy.fault_next(matcher(), fault);
        let outcome = within(Duration::from_secs(5), &label, sem.try_acquire(1)).await;
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: the fault fired"
        );
        if kind == Kind::Expirable {
            // every script of the kind moves permits between the counter
            // and the set atomically
            assert_eq!(sem_state(&r.conn, &name).await.total(), N, "{label}");
        }
        match outcome {
            Ok(Some(p)) => {
                granted += 1;
                conserved(&r.conn, kind, &name, N, &[&p], &label).await;
                p.release().await.expect("release");
            }
            Ok(None) => panic!("{label}: nobody else holds {name}"),
            Err(e) => {
                assert!(
                    e.is_redis() && !matches!(e, Error::Protocol(_)),
                    "{label}: {e:?}"
                );
                failed += 1;
            }
        }
        conserved(&r.conn, kind, &name, N, &[], &label).await;
        shut(&c, &label).await;
        conserved(&r.conn, kind, &name, N, &[], &label).await;
    }
    eprintln!(
        "sem acquire ({}): {} offsets (command {command_len} B sampled every {EVERY}, reply {reply_len} B, FIN+RST): {granted} granted, {failed} failed; no permit created or lost; {:?}",
        kind.label(),
        granted + failed,
        started.elapsed()
    );
    assert!(failed > 0 && granted > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_acquire_cut_at_every_offset_creates_and_loses_no_permit() {
    acquire_cut_everywhere(Kind::Plain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expirable_acquire_cut_at_every_offset_creates_and_loses_no_permit() {
    acquire_cut_everywhere(Kind::Expirable).await;
}

/// A release (plain: `sem_cancel.lua`; expirable: `sem_release.lua`) cut at
/// every offset while another client holds a permit too: exactly the
/// released permit comes back, the other's stays taken.
async fn release_cut_everywhere(kind: Kind) {
    let r = rig().await;
    let name = format!("sem-cut-rel-{}", kind.label());
    r.semaphore(kind, &name).await;
    let sha = match kind {
        Kind::Plain => sem_cancel_sha(),
        Kind::Expirable => sem_release_sha(),
    };
    let matcher = || script(sha.clone(), &name);
    let theirs = AnySem::of(&r.other, kind, &name)
        .acquire(1)
        .await
        .expect("theirs");
    let (command_len, reply_len) = lengths(&r.proxy, matcher(), || async {
        let c = r.through();
        let p = AnySem::of(&c, kind, &name)
            .acquire_timeout(1, Duration::from_secs(5))
            .await
            .expect("probe");
        p.release().await.expect("release");
        shut(&c, "probe").await;
    })
    .await;
    let started = Instant::now();
    let mut errors = 0;
    let mut cases = 0;
    for (label, fault) in sampled(command_len, reply_len, EVERY) {
        let c = r.through();
        let mine = AnySem::of(&c, kind, &name)
            .acquire_timeout(1, Duration::from_secs(5))
            .await
            .expect("set-up acquire");
        conserved(&r.conn, kind, &name, N, &[&mine, &theirs], &label).await;
        let cut = r.proxy.fault_next(matcher(), fault);
        let result = within(Duration::from_secs(5), &label, mine.release()).await;
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: the fault fired"
        );
        errors += usize::from(result.is_err());
        conserved(&r.conn, kind, &name, N, &[&theirs], &label).await;
        shut(&c, &label).await;
        conserved(&r.conn, kind, &name, N, &[&theirs], &label).await;
        cases += 1;
    }
    eprintln!(
        "sem release ({}): {cases} offsets (command {command_len} B sampled every {EVERY}, reply {reply_len} B, FIN+RST): {errors} releases reported an error; each released permit came back exactly once, the other client's stayed taken; {:?}",
        kind.label(),
        started.elapsed()
    );
    theirs.release().await.expect("theirs");
    conserved(&r.conn, kind, &name, N, &[], "end").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_release_cut_at_every_offset_gives_back_exactly_once() {
    release_cut_everywhere(Kind::Plain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expirable_release_cut_at_every_offset_gives_back_exactly_once() {
    release_cut_everywhere(Kind::Expirable).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_permits_cut_at_every_offset_adds_at_most_once() {
    let r = rig().await;
    let name = "sem-cut-add";
    r.semaphore(Kind::Plain, name).await;
    let matcher = || script(sem_add_sha(), name);
    let (command_len, reply_len) = lengths(&r.proxy, matcher(), || async {
        let c = r.through();
        AnySem::of(&c, Kind::Plain, name)
            .add_permits(1)
            .await
            .expect("probe");
        r.other
            .semaphore(name)
            .expect("name")
            .add_permits(-1)
            .await
            .expect("back");
        shut(&c, "probe").await;
    })
    .await;
    let started = Instant::now();
    let (mut added, mut failed_not_applied, mut failed_applied) = (0, 0, 0);
    for (label, fault) in sampled(command_len, reply_len, EVERY) {
        let c = r.through();
        let cut = r.proxy.fault_next(matcher(), fault);
        let result = within(
            Duration::from_secs(5),
            &label,
            AnySem::of(&c, Kind::Plain, name).add_permits(1),
        )
        .await;
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: the fault fired"
        );
        shut(&c, &label).await;
        let now = sem_state(&r.conn, name).await.available;
        match result {
            Ok(v) => {
                assert_eq!((now, v as i64), (N + 1, N + 1), "{label}: added once");
                added += 1;
            }
            Err(e) => {
                assert!(now == N || now == N + 1, "{label}: {now} after {e:?}");
                if now == N {
                    failed_not_applied += 1;
                } else {
                    failed_applied += 1;
                }
            }
        }
        if now > N {
            r.other
                .semaphore(name)
                .expect("name")
                .add_permits(N - now)
                .await
                .expect("back to N");
        }
    }
    eprintln!(
        "sem add_permits(1): {} offsets (command {command_len} B sampled every {EVERY}, reply {reply_len} B, FIN+RST): {added} added once, {failed_not_applied} failed unapplied, {failed_applied} failed applied once; never twice; {:?}",
        added + failed_not_applied + failed_applied,
        started.elapsed()
    );
    assert!(added > 0);
}

/// An acquire whose reply is lost is cancelled by `sem_cancel.lua`; that
/// cancellation cut at every offset still gives the permit back once. (The
/// lost reply's connection was reset: the acquisition retries once under a
/// new request id, which may be granted; the lost grant comes back all the
/// same, and the retry's grant is exactly the guard's.)
async fn cancel_cut_everywhere(kind: Kind) {
    let r = rig().await;
    let name = format!("sem-cut-cancel-{}", kind.label());
    r.semaphore(kind, &name).await;
    let cancel = || script(sem_cancel_sha(), &name);
    let acquire = || script(sem_acquire_sha(), &name);
    // the acquire script loaded (a reply cut on a NOSCRIPT error would
    // never let the client load it: no grant would ever be cancelled), and
    // the length of a grant's reply
    AnySem::of(&r.other, kind, &name)
        .acquire(1)
        .await
        .expect("loads the script")
        .release()
        .await
        .expect("release");
    let granted = r.proxy.observe_next(acquire());
    let c = r.through();
    AnySem::of(&c, kind, &name)
        .try_acquire(1)
        .await
        .expect("probe")
        .expect("free")
        .release()
        .await
        .expect("release");
    shut(&c, "probe").await;
    let granted_len = granted.reply_len().expect("a grant's reply length");
    let lost_reply = Fault::CutReply {
        after: 0,
        how: CutKind::Rst,
    };
    // The outcome of an acquisition whose first reply was lost: the lost
    // grant given back (by the cancellation, before the guard of a retry
    // is released: a plain release is a `sem_cancel.lua` call too); true
    // when the retry was granted.
    let settle = |label: String, outcome: lock_core::Result<Option<lock_core::Permits>>| {
        let (r, name) = (&r, &name);
        async move {
            match outcome {
                Ok(Some(p)) => {
                    conserved(&r.conn, kind, name, N, &[&p], &label).await;
                    p.release().await.expect("release");
                    true
                }
                Ok(None) => panic!("{label}: nobody else holds {name}"),
                Err(e) => {
                    assert!(
                        e.is_redis() && !matches!(e, Error::Protocol(_)),
                        "{label}: {e:?}"
                    );
                    false
                }
            }
        }
    };
    let (command_len, reply_len) = lengths(&r.proxy, cancel(), || async {
        let c = r.through();
        let lost = r.proxy.fault_next(acquire(), lost_reply.clone());
        let outcome = AnySem::of(&c, kind, &name).try_acquire(1).await;
        assert!(
            lost.wait_fired(Duration::from_secs(2)),
            "the reply was lost"
        );
        assert_eq!(lost.reply_len(), Some(granted_len), "a grant was lost");
        settle("probe".into(), outcome).await;
        conserved(&r.conn, kind, &name, N, &[], "probe").await;
        shut(&c, "probe").await;
        conserved(&r.conn, kind, &name, N, &[], "probe").await;
    })
    .await;
    let started = Instant::now();
    let (mut retried, mut failed) = (0, 0);
    for (label, fault) in sampled(command_len, reply_len, EVERY) {
        let c = r.through();
        let lost = r.proxy.fault_next(acquire(), lost_reply.clone());
        let cut = r.proxy.fault_next(cancel(), fault);
        let outcome = within(
            Duration::from_secs(5),
            &label,
            AnySem::of(&c, kind, &name).try_acquire(1),
        )
        .await;
        assert!(
            lost.wait_fired(Duration::from_secs(2)),
            "{label}: the reply was lost"
        );
        assert_eq!(
            lost.reply_len(),
            Some(granted_len),
            "{label}: the reply lost was a grant's"
        );
        assert!(
            cut.wait_fired(Duration::from_secs(3)),
            "{label}: the cancellation was cut"
        );
        if settle(label.clone(), outcome).await {
            retried += 1;
        } else {
            failed += 1;
        }
        conserved(&r.conn, kind, &name, N, &[], &label).await;
        shut(&c, &label).await;
        conserved(&r.conn, kind, &name, N, &[], &label).await;
    }
    eprintln!(
        "sem cancel ({}): {} offsets (command {command_len} B sampled every {EVERY}, reply {reply_len} B, FIN+RST): the lost grant came back exactly once ({retried} retries granted, {failed} acquisitions failed); {:?}",
        kind.label(),
        retried + failed,
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_cancellation_cut_at_every_offset_gives_back_exactly_once() {
    cancel_cut_everywhere(Kind::Plain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expirable_cancellation_cut_at_every_offset_gives_back_exactly_once() {
    cancel_cut_everywhere(Kind::Expirable).await;
}

/// Server time in ms.
async fn server_ms(conn: &redis::aio::MultiplexedConnection) -> i64 {
    let mut c = conn.clone();
    let t: Vec<String> = cmd(&mut c, &["TIME"]).await;
    let secs: i64 = t[0].parse().expect("secs");
    let micros: i64 = t[1].parse().expect("micros");
    secs * 1000 + micros / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_leaving_the_line_cut_at_every_offset_moves_no_permit_and_lapses() {
    let r = rig().await;
    let name = "sem-cut-leave";
    let (line, alive) = (
        format!("lockcore_sem_line:{{{name}}}"),
        format!("lockcore_sem_alive:{{{name}}}"),
    );
    let timeouts = Duration::from_millis(250);
    // alive_ms of lock-core: 2 re-check periods and a command bound (the
    // connect and command time-outs)
    let alive_ms = 2_000 + 2 * timeouts.as_millis() as i64;
    r.semaphore(Kind::Plain, name).await;
    let theirs = r
        .other
        .semaphore(name)
        .expect("name")
        .acquire(N as u32)
        .await
        .expect("all");
    let leave = || {
        CommandMatch::name("EVALSHA")
            .with_exact_arg(sem_leave_sha())
            .with_exact_arg(&line)
    };
    let wait_and_give_up = |c: LockClient| async move {
        let outcome = c
            .semaphore(name)
            .expect("name")
            .acquire_timeout(1, Duration::from_millis(50))
            .await;
        (c, outcome)
    };
    let (command_len, reply_len) = lengths(&r.proxy, leave(), || async {
        let (c, outcome) = wait_and_give_up(r.through_with(timeouts)).await;
        assert!(
            matches!(outcome, Err(Error::WaitTimeout { .. })),
            "{outcome:?}"
        );
        shut(&c, "probe").await;
    })
    .await;
    let started = Instant::now();
    let (mut left, mut lapses) = (0, 0);
    let mut conn = r.conn.clone();
    for (label, fault) in sampled(command_len, reply_len, EVERY) {
        let cut = r.proxy.fault_next(leave(), fault);
        let (c, outcome) = within(
            Duration::from_secs(5),
            &label,
            wait_and_give_up(r.through_with(timeouts)),
        )
        .await;
        assert!(
            matches!(outcome, Err(Error::WaitTimeout { .. })),
            "{label}: {outcome:?}"
        );
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: the fault fired"
        );
        shut(&c, &label).await;
        let state = conserved(&r.conn, Kind::Plain, name, N, &[&theirs], &label).await;
        match state.line.as_slice() {
            [] => left += 1,
            [member] => {
                // not taken out: its place lapses within alive_ms
                let until: Option<f64> = cmd(&mut conn, &["ZSCORE", &alive, member]).await;
                let ahead = until.expect("an alive time") as i64 - server_ms(&r.conn).await;
                assert!(ahead <= alive_ms, "{label}: lapses in {ahead} ms");
                lapses += 1;
                let _: i64 = cmd(&mut conn, &["DEL", &line, &alive]).await;
            }
            more => panic!("{label}: line {more:?}"),
        }
    }
    eprintln!(
        "sem leave: {} offsets (command {command_len} B sampled every {EVERY}, reply {reply_len} B, FIN+RST): {left} left the line, {lapses} left a place that lapses; no permit moved; {:?}",
        left + lapses,
        started.elapsed()
    );
    assert!(left > 0 && lapses > 0);
    // a place left behind blocks the line (one asking for all N waits
    // behind it), but only until it lapses
    let cut = r.proxy.fault_next(
        leave(),
        Fault::CutCommand {
            after: 0,
            how: CutKind::Rst,
        },
    );
    let (c, _) = wait_and_give_up(r.through_with(timeouts)).await;
    assert!(cut.wait_fired(Duration::from_secs(2)));
    shut(&c, "lapse").await;
    let stale = sem_state(&r.conn, name).await.line;
    assert_eq!(stale.len(), 1, "a stale place: {stale:?}");
    let until: Option<f64> = cmd(&mut conn, &["ZSCORE", &alive, &stale[0]]).await;
    let lapses_in = until.expect("an alive time") as i64 - server_ms(&r.conn).await;
    theirs.release().await.expect("release");
    let next = support::client_for(&r.server, 30_000);
    let waited = Instant::now();
    let p = within(
        Duration::from_millis(alive_ms as u64 + 3_000),
        "the next waiter",
        next.semaphore(name).expect("name").acquire(N as u32),
    )
    .await
    .expect("acquired once the stale place lapsed");
    let waited = waited.elapsed();
    eprintln!(
        "sem leave: a stale place lapsing in {lapses_in} ms; the next waiter for all {N} got in after {waited:?}"
    );
    assert!(
        waited + Duration::from_millis(100) >= Duration::from_millis(lapses_in as u64)
            && waited <= Duration::from_millis(lapses_in as u64 + 1_500),
        "waited {waited:?} for a place lapsing in {lapses_in} ms"
    );
    p.release().await.expect("release");
    conserved(&r.conn, Kind::Plain, name, N, &[], "end").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_down_cut_at_every_offset_counts_at_most_once() {
    let r = rig().await;
    let name = "latch-cut";
    let start: i64 = 5_000_000;
    assert!(r
        .other
        .latch(name)
        .expect("name")
        .try_set_count(start as u64)
        .await
        .expect("set"));
    let matcher = || script(latch_count_down_sha(), name);
    let count = |conn: &redis::aio::MultiplexedConnection| {
        let mut c = conn.clone();
        async move {
            let v: Option<i64> = cmd(&mut c, &["GET", name]).await;
            v.unwrap_or(0)
        }
    };
    let (command_len, reply_len) = lengths(&r.proxy, matcher(), || async {
        let c = r.through();
        c.latch(name)
            .expect("name")
            .count_down()
            .await
            .expect("probe");
        shut(&c, "probe").await;
    })
    .await;
    let started = Instant::now();
    let (mut ok, mut failed_not_applied, mut failed_applied) = (0, 0, 0);
    for (label, fault) in sampled(command_len, reply_len, EVERY) {
        let before = count(&r.conn).await;
        let c = r.through();
        let cut = r.proxy.fault_next(matcher(), fault);
        let result = within(
            Duration::from_secs(5),
            &label,
            c.latch(name).expect("name").count_down(),
        )
        .await;
        assert!(
            cut.wait_fired(Duration::from_secs(2)),
            "{label}: the fault fired"
        );
        shut(&c, &label).await;
        let after = count(&r.conn).await;
        match result {
            Ok(v) => {
                assert_eq!((after, v as i64), (before - 1, before - 1), "{label}: once");
                ok += 1;
            }
            Err(e) => {
                assert!(
                    after == before || after == before - 1,
                    "{label}: {before} -> {after} ({e:?})"
                );
                if after == before {
                    failed_not_applied += 1;
                } else {
                    failed_applied += 1;
                }
            }
        }
    }
    let calls = ok + failed_not_applied + failed_applied;
    let end = count(&r.conn).await;
    eprintln!(
        "latch count_down: {calls} offsets (command {command_len} B sampled every {EVERY}, reply {reply_len} B, FIN+RST): {ok} counted once, {failed_not_applied} failed unapplied, {failed_applied} failed applied once; {:?}",
        started.elapsed()
    );
    assert_eq!(
        end,
        start - 2 - (ok + failed_applied) as i64,
        "every count-down once (2 probes)"
    );
    assert!(ok > 0);
}
