//! The read-write lock under a mixed load while its calls meet faults
//! through the harness's fault proxy: replies lost on a silent connection,
//! replies and commands held up past the command time-out, connections
//! reset mid-reply. An observer with its own connection counts who is
//! inside: never a writer with anyone, and nothing left in Redis after.

use std::time::{Duration, Instant};

use lock_core::{Error, LockClient};
use lock_tests::{CommandMatch, CutKind, Fault, FaultProxy};

use crate::support::RwInside;
use crate::support::{self, cmd, raw, rw_acquire_sha, rw_release_sha, within};

fn through(proxy: &FaultProxy) -> LockClient {
    LockClient::builder(proxy.url())
        .watchdog_timeout(Duration::from_secs(3))
        .command_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_a_writer_with_anyone_while_replies_are_lost_delayed_and_cut() {
    let server = support::server();
    let proxies: Vec<std::sync::Arc<FaultProxy>> = (0..2)
        .map(|_| {
            std::sync::Arc::new(
                FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}")),
            )
        })
        .collect();
    let mut clients: Vec<LockClient> = proxies.iter().map(|p| through(p)).collect();
    clients.push(support::client_for(&server, 3_000));
    let seen = RwInside::new(&server, "rw-faults").await;
    let stop = Instant::now() + Duration::from_secs(12);
    // the faults: one armed at a time on each proxy, on the read-write
    // scripts' calls, bounded in count and time
    let injectors: Vec<_> = proxies
        .iter()
        .enumerate()
        .map(|(p, proxy)| {
            let proxy = proxy.clone();
            tokio::spawn(async move {
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
                let mut fired = 0;
                for round in 0..200usize {
                    if Instant::now() > stop {
                        break;
                    }
                    let sha = if round % 3 == 2 {
                        rw_release_sha()
                    } else {
                        rw_acquire_sha()
                    };
                    let fault = faults[(round + p) % faults.len()].clone();
                    let handle =
                        proxy.fault_next(CommandMatch::name("EVALSHA").with_exact_arg(sha), fault);
                    let waited = tokio::task::spawn_blocking(move || {
                        handle.wait_fired(Duration::from_secs(2))
                    })
                    .await
                    .unwrap_or(false);
                    fired += usize::from(waited);
                    proxy.clear_rules();
                    tokio::time::sleep(Duration::from_millis(40)).await;
                }
                fired
            })
        })
        .collect();
    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        for t in 0..3u32 {
            let rw = c.rw_lock("rw:faults").expect("name");
            let mut seen = seen.clone();
            tasks.push(tokio::spawn(async move {
                let (mut done, mut failed) = (0u32, 0u32);
                for round in 0..400u32 {
                    if Instant::now() > stop {
                        break;
                    }
                    let write = (round + t + i as u32).is_multiple_of(4);
                    let side = if write { rw.write() } else { rw.read() };
                    let guard = match side.acquire_timeout(Duration::from_secs(2)).await {
                        Ok(g) => g,
                        Err(_) => {
                            failed += 1;
                            continue;
                        }
                    };
                    if !guard.is_held() {
                        continue;
                    }
                    if write {
                        seen.enter_write().await;
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        seen.leave_write().await;
                    } else {
                        seen.enter_read().await;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        seen.leave_read().await;
                    }
                    assert!(guard.is_held(), "a hold ended while inside");
                    match guard.release().await {
                        Ok(()) | Err(Error::Lost { .. }) => {}
                        Err(_) => failed += 1,
                    }
                    done += 1;
                }
                (done, failed)
            }));
        }
    }
    let (mut done, mut failed) = (0, 0);
    for t in tasks {
        let (d, f) = within(Duration::from_secs(60), "task", t)
            .await
            .expect("a task panicked");
        done += d;
        failed += f;
    }
    let mut fired = 0;
    for i in injectors {
        fired += within(Duration::from_secs(10), "injector", i)
            .await
            .expect("join");
    }
    let mut seen = seen;
    eprintln!("rw under faults: {done} sections, {failed} failed calls, {fired} faults fired");
    assert_eq!(seen.violations().await, 0, "never a writer with anyone");
    assert!(fired > 20, "faults fired: {fired}");
    assert!(done > 100, "sections ran: {done}");
    assert!(seen.max_readers().await > 1, "readers shared");
    // nothing left: every lost grant was cancelled or expires with its lease
    let left = support::eventually(Duration::from_secs(8), || async {
        let mut conn = raw(&server).await;
        let hash: i64 = cmd(&mut conn, &["EXISTS", "rw:faults"]).await;
        let keys: Vec<String> = cmd(&mut conn, &["KEYS", "{rw:faults}:*"]).await;
        hash == 0 && keys.is_empty()
    })
    .await;
    assert!(left.is_some(), "the lock and its timeout keys are gone");
}
