//! Both semaphores under a load of acquisitions and releases (bounded
//! loops) while their calls meet faults through the harness's fault
//! proxies: replies lost on a silent connection, replies and commands held
//! up past the command time-out (a late copy of a cancelled acquire),
//! connections reset mid-reply or cut mid-command, and black holes that
//! hold every byte of a proxy for a while. An observer with its own
//! connection counts the permits inside: never more than N. At the end,
//! the clients shut down, every permit is back: the plain kind's counter is
//! N and no grant is left, the expirable kind's `available + ZCARD` is N at
//! every look and N available once leases passed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Error, LockClient};
use lock_tests::{CommandMatch, CutKind, Fault, FaultProxy};

use crate::support::sem::{
    sem_acquire_sha, sem_cancel_sha, sem_leave_sha, sem_release_sha, sem_state, AnySem, Kind,
    SemInside,
};
use crate::support::{self, renew_sha, within};

/// Permits of the semaphore.
const N: i64 = 3;

/// How long the load runs.
const LOAD: Duration = Duration::from_secs(6);

fn through(proxy: &FaultProxy) -> LockClient {
    LockClient::builder(proxy.url())
        .watchdog_timeout(Duration::from_secs(3))
        .command_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// One proxy's faults until `stop`: one armed at a time on one of the
/// semaphore's script calls, and now and then a black hole of 150 to
/// 250 ms (with quiet time around it, so that a release's retries outlast
/// it). Returns (faults fired, black holes).
async fn inject(proxy: Arc<FaultProxy>, p: usize, kind: Kind, stop: Instant) -> (usize, usize) {
    let faults = [
        Fault::DropReply,
        Fault::DelayReply(Duration::from_millis(450)),
        Fault::DelayCommand(Duration::from_millis(450)),
        Fault::CutReply {
            after: 0,
            how: CutKind::Rst,
        },
        Fault::CutCommand {
            after: 20,
            how: CutKind::Fin,
        },
    ];
    let release = match kind {
        Kind::Plain => sem_cancel_sha(),
        Kind::Expirable => sem_release_sha(),
    };
    // mostly acquisitions and releases; cancellations, leaving the line
    // and renewals (expirable kind) are rarer calls
    let scripts = [
        sem_acquire_sha(),
        release.clone(),
        sem_acquire_sha(),
        release,
        sem_cancel_sha(),
        sem_acquire_sha(),
        sem_leave_sha(),
        renew_sha(),
    ];
    let (mut fired, mut holes) = (0, 0);
    for round in 0..300usize {
        if Instant::now() > stop {
            break;
        }
        if round % 9 == 8 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            proxy.black_hole();
            tokio::time::sleep(Duration::from_millis(150 + 50 * (round % 3) as u64)).await;
            proxy.heal();
            holes += 1;
            tokio::time::sleep(Duration::from_millis(400)).await;
            continue;
        }
        let sha = scripts[(round + p) % scripts.len()].clone();
        let fault = faults[(round / 2 + p) % faults.len()].clone();
        let handle = proxy.fault_next(CommandMatch::name("EVALSHA").with_exact_arg(sha), fault);
        let waited =
            tokio::task::spawn_blocking(move || handle.wait_fired(Duration::from_millis(300)))
                .await
                .unwrap_or(false);
        fired += usize::from(waited);
        proxy.clear_rules();
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    (fired, holes)
}

/// What the load's tasks did.
#[derive(Default, Debug)]
struct Tally {
    sections: u32,
    acquire_errors: u32,
    wait_timeouts: u32,
    longest_wait: Duration,
    release_errors: u32,
    lost: u32,
}

async fn under_faults(kind: Kind) {
    let server = support::server();
    let name = format!("sem-faults-{}", kind.label());
    let proxies: Vec<Arc<FaultProxy>> = (0..2)
        .map(|_| {
            Arc::new(FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}")))
        })
        .collect();
    let mut clients: Vec<LockClient> = proxies.iter().map(|p| through(p)).collect();
    clients.push(support::client_for(&server, 3_000));
    assert!(AnySem::of(&clients[2], kind, &name)
        .try_set_permits(N as u64)
        .await
        .expect("set"));
    let seen = SemInside::new(&server, &name, N).await;
    let conn = support::raw(&server).await;
    let started = Instant::now();
    let stop = started + LOAD;
    let injectors: Vec<_> = proxies
        .iter()
        .enumerate()
        .map(|(p, proxy)| tokio::spawn(inject(proxy.clone(), p, kind, stop)))
        .collect();
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..3u32 {
            let sem = AnySem::of(client, kind, &name);
            let mut seen = seen.clone();
            let owner = format!("c{c}t{t}");
            tasks.push(tokio::spawn(async move {
                let mut tally = Tally::default();
                for round in 0..400u32 {
                    if Instant::now() > stop {
                        break;
                    }
                    let n = if (round + t).is_multiple_of(5) { 2 } else { 1 };
                    let asked = Instant::now();
                    let got = sem.acquire_timeout(n, Duration::from_secs(2)).await;
                    tally.longest_wait = tally.longest_wait.max(asked.elapsed());
                    let permits = match got {
                        Ok(p) => p,
                        Err(e) => {
                            if e.is_wait_timeout() {
                                tally.wait_timeouts += 1;
                            } else {
                                tally.acquire_errors += 1;
                            }
                            continue;
                        }
                    };
                    if !permits.is_held() {
                        continue;
                    }
                    seen.enter(&owner, i64::from(n)).await;
                    tokio::time::sleep(Duration::from_millis(2 + u64::from(round % 4))).await;
                    seen.leave(&owner, i64::from(n)).await;
                    assert!(permits.is_held(), "permits lost while inside");
                    match permits.release().await {
                        Ok(()) => {}
                        Err(Error::Lost { .. }) => tally.lost += 1,
                        Err(_) => tally.release_errors += 1,
                    }
                    tally.sections += 1;
                }
                tally
            }));
        }
    }
    // every look while the load runs: the expirable kind's permits move
    // between the counter and the set, never out of them
    let mut looks = 0;
    while tasks.iter().any(|t| !t.is_finished()) && started.elapsed() < LOAD * 4 {
        if kind == Kind::Expirable {
            let s = sem_state(&conn, &name).await;
            assert_eq!(s.total(), N, "mid-run: {s:?}");
            looks += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut total = Tally::default();
    for t in tasks {
        let t = within(Duration::from_secs(30), "task", t)
            .await
            .expect("a task panicked");
        total.sections += t.sections;
        total.acquire_errors += t.acquire_errors;
        total.wait_timeouts += t.wait_timeouts;
        total.longest_wait = total.longest_wait.max(t.longest_wait);
        total.release_errors += t.release_errors;
        total.lost += t.lost;
    }
    let (mut fired, mut holes) = (0, 0);
    for i in injectors {
        let (f, h) = within(Duration::from_secs(10), "injector", i)
            .await
            .expect("join");
        fired += f;
        holes += h;
    }
    for p in &proxies {
        p.clear_rules();
        p.heal();
    }
    let mut reports = Vec::new();
    for c in &clients {
        reports.push(c.shutdown(Duration::from_secs(5)).await);
    }
    let mut seen = seen;
    let (max, violations, entries) = (
        seen.max().await,
        seen.violations().await,
        seen.entries().await,
    );
    // conserved: every permit back (the expirable kind's ids that a failed
    // release left come back with their lease)
    let judge = support::client_for(&server, 3_000);
    let sem = AnySem::of(&judge, kind, &name);
    let back = support::eventually(Duration::from_secs(6), || async {
        // (`available` reclaims expired ids first)
        let available = sem.available().await.expect("available");
        let s = sem_state(&conn, &name).await;
        available == N as u64 && s.ids.is_empty() && s.grants.is_empty()
    })
    .await;
    let end = sem_state(&conn, &name).await;
    eprintln!(
        "sem under faults ({}): {} sections ({entries} entries seen), {total:?}, {fired} faults fired, {holes} black holes, {looks} mid-run looks, most inside {max}/{N}; shutdowns {reports:?}; back to {N} after {back:?}; {:?}",
        kind.label(),
        total.sections,
        started.elapsed()
    );
    assert_eq!(violations, 0, "more than {N} permits inside");
    assert!((2..=N).contains(&max), "most inside: {max}");
    assert!(back.is_some(), "not conserved: {end:?}");
    assert_eq!(end.available, N, "{end:?}");
    assert!(fired >= 8, "faults fired: {fired}");
    assert!(holes >= 2, "black holes: {holes}");
    assert!(total.sections > 50, "sections ran: {}", total.sections);
    if kind == Kind::Plain {
        assert_eq!(total.lost, 0, "plain permits have no lease to lose");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_permits_are_never_more_than_n_and_all_come_back_under_faults() {
    under_faults(Kind::Plain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expirable_permits_are_never_more_than_n_and_all_come_back_under_faults() {
    under_faults(Kind::Expirable).await;
}
