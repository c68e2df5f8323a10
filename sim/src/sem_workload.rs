//! What a task of a semaphore seed does, round after round until the run
//! ends: take 1 (or 2) permits of one of the seed's semaphores in one of
//! several ways, rely on them for a while, give them back (or drop the
//! guard), pause; now and then look at the permits available or set the
//! permits (a restart loses the counter: someone sets it again). Every
//! step goes through the observer.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, Error, PermitSemaphore, Permits, Semaphore};
use tokio::time::Instant;

use crate::scenario::SemSpec;
use crate::workload::{up_to, Task, MAX_ROUNDS};

/// One semaphore of either kind.
#[derive(Clone)]
enum Sem {
    Plain(Semaphore),
    Expirable(PermitSemaphore),
}

impl Sem {
    fn name(&self) -> &str {
        match self {
            Sem::Plain(s) => s.name(),
            Sem::Expirable(s) => s.name(),
        }
    }

    async fn acquire_with(&self, n: u32, options: AcquireOptions) -> Result<Permits, Error> {
        match self {
            Sem::Plain(s) => s.acquire_with(n, options).await,
            Sem::Expirable(s) => s.acquire_with(n, options).await,
        }
    }

    async fn acquire(&self, n: u32) -> Result<Permits, Error> {
        match self {
            Sem::Plain(s) => s.acquire(n).await,
            Sem::Expirable(s) => s.acquire(n).await,
        }
    }

    async fn try_acquire(&self, n: u32) -> Result<Option<Permits>, Error> {
        match self {
            Sem::Plain(s) => s.try_acquire(n).await,
            Sem::Expirable(s) => s.try_acquire(n).await,
        }
    }

    async fn available(&self) -> Result<u64, Error> {
        match self {
            Sem::Plain(s) => s.available().await,
            Sem::Expirable(s) => s.available().await,
        }
    }

    async fn try_set_permits(&self, n: u64) -> Result<bool, Error> {
        match self {
            Sem::Plain(s) => s.try_set_permits(n).await,
            Sem::Expirable(s) => s.try_set_permits(n).await,
        }
    }
}

impl Task {
    /// The rounds of a semaphore seed.
    pub(crate) async fn run_semaphores(mut self) {
        let sems: Vec<(SemSpec, Sem)> = self
            .semaphores
            .iter()
            .filter_map(|spec| {
                let sem = if spec.expirable {
                    self.client.permit_semaphore(&spec.name).map(Sem::Expirable)
                } else {
                    self.client.semaphore(&spec.name).map(Sem::Plain)
                };
                match sem {
                    Ok(sem) => Some((spec.clone(), sem)),
                    Err(err) => {
                        self.failed("semaphore", &spec.name, &err);
                        None
                    }
                }
            })
            .collect();
        if sems.is_empty() {
            return;
        }
        // Whether this task has seen each semaphore set (a try_set_permits
        // answered): until then, each round on it asks first.
        let mut set = vec![false; sems.len()];
        for _ in 0..MAX_ROUNDS {
            if Instant::now() >= self.until {
                break;
            }
            let pick = self.rng.usize(0..sems.len());
            let (spec, sem) = &sems[pick];
            if !set[pick] {
                set[pick] = self.set_permits(spec, sem).await;
            }
            let n = if spec.permits > 2 && self.rng.u32(0..4) == 0 {
                2
            } else {
                1
            };
            match self.rng.u32(0..100) {
                0..=34 => {
                    let wait = self.wait();
                    self.bounded_permits(spec, sem, n, wait).await
                }
                35..=39 => {
                    let wait = up_to(&mut self.rng, self.lease * 4);
                    self.bounded_permits(spec, sem, n, wait).await
                }
                40..=54 => self.try_permits(spec, sem, n).await,
                55..=69 => self.permits_with_lease(spec, sem, n).await,
                70..=84 => self.cancelled_permits(spec, sem, n).await,
                85..=92 => self.look(sem).await,
                _ => {
                    self.set_permits(spec, sem).await;
                }
            }
            let gap = up_to(&mut self.rng, Duration::from_millis(30));
            tokio::time::sleep(gap).await;
        }
    }

    /// `try_set_permits(N)`: sets the counter when it is not there (at the
    /// start, after a restart lost it); whether it answered (the counter
    /// is there now).
    async fn set_permits(&mut self, spec: &SemSpec, sem: &Sem) -> bool {
        match sem.try_set_permits(u64::from(spec.permits)).await {
            Ok(set) => {
                if set {
                    self.observer.event(format!(
                        "{} set {} permits of {}",
                        self.who, spec.permits, spec.name
                    ));
                }
                self.observer.permits_there(&spec.name);
                true
            }
            Err(err) => {
                self.failed("try_set_permits", &spec.name, &err);
                false
            }
        }
    }

    /// `available()`: never above N.
    async fn look(&mut self, sem: &Sem) {
        match sem.available().await {
            Ok(n) => self.observer.available_seen(&self.who, sem.name(), n),
            Err(err) => self.failed("available", sem.name(), &err),
        }
    }

    /// `acquire_timeout(n, wait)` (as `acquire_with` with a wait bound).
    async fn bounded_permits(&mut self, spec: &SemSpec, sem: &Sem, n: u32, wait: Duration) {
        let asked = Instant::now();
        let waiting = self.observer.waiting(sem.name(), Some(wait));
        let got = sem.acquire_with(n, AcquireOptions::new().wait(wait)).await;
        waiting.returned(if got.is_ok() { "permits" } else { "an error" });
        match got {
            Ok(permits) => {
                let who = self.who.clone();
                self.hold_permits(spec, permits, asked, &who).await;
            }
            Err(err) => self.failed("acquire permits", sem.name(), &err),
        }
    }

    /// `try_acquire(n)`: one attempt.
    async fn try_permits(&mut self, spec: &SemSpec, sem: &Sem, n: u32) {
        let asked = Instant::now();
        let waiting = self
            .observer
            .waiting(sem.name(), Some(self.command_timeout * 2));
        let got = sem.try_acquire(n).await;
        waiting.returned(if matches!(got, Ok(Some(_))) {
            "permits"
        } else {
            "nothing"
        });
        match got {
            Ok(Some(permits)) => {
                let who = self.who.clone();
                self.hold_permits(spec, permits, asked, &who).await;
            }
            Ok(None) => self.observer.count(|a| a.timeouts += 1),
            Err(err) => self.failed("try_acquire permits", sem.name(), &err),
        }
    }

    /// The expirable kind with a fixed lease (no watchdog: the permits
    /// stop being valid when it runs out); the plain kind, which has no
    /// lease, waits as [`Task::bounded_permits`].
    async fn permits_with_lease(&mut self, spec: &SemSpec, sem: &Sem, n: u32) {
        let wait = self.wait();
        if !spec.expirable {
            return self.bounded_permits(spec, sem, n, wait).await;
        }
        let lease = self.lease / 2 + up_to(&mut self.rng, self.lease);
        let asked = Instant::now();
        let waiting = self.observer.waiting(sem.name(), Some(wait));
        let got = sem
            .acquire_with(n, AcquireOptions::new().lease(lease).wait(wait))
            .await;
        waiting.returned(if got.is_ok() { "permits" } else { "an error" });
        match got {
            Ok(permits) => {
                let who = format!("{}/lease", self.who);
                self.hold_permits(spec, permits, asked, &who).await;
            }
            Err(err) => self.failed("acquire permits with a lease", sem.name(), &err),
        }
    }

    /// `acquire(n)` dropped at an await point (its caller gave up): what
    /// it took comes back.
    async fn cancelled_permits(&mut self, spec: &SemSpec, sem: &Sem, n: u32) {
        let patience = up_to(&mut self.rng, self.command_timeout * 3);
        let asked = Instant::now();
        let waiting = self.observer.waiting(sem.name(), None);
        let got = tokio::select! {
            biased;
            got = sem.acquire(n) => Some(got),
            _ = tokio::time::sleep(patience) => None,
        };
        drop(waiting);
        match got {
            Some(Ok(permits)) => {
                let who = self.who.clone();
                self.hold_permits(spec, permits, asked, &who).await;
            }
            Some(Err(err)) => self.failed("acquire permits", sem.name(), &err),
            None => self.observer.event(format!(
                "{} gave up acquiring {n} permit(s) of {} after {patience:?}",
                self.who,
                sem.name()
            )),
        }
    }

    /// Relies on `permits` for a while, then releases them or drops them.
    async fn hold_permits(&mut self, spec: &SemSpec, permits: Permits, asked: Instant, who: &str) {
        let permits = Arc::new(permits);
        let client = self.client_name().to_owned();
        let inside = self
            .observer
            .enter_permits(who, &spec.name, &client, &permits, asked);
        let for_ = up_to(&mut self.rng, self.lease * 3 / 2);
        tokio::time::sleep(for_).await;
        if !permits.is_held() {
            self.observer.count(|a| a.lost += 1);
        }
        drop(inside);
        let Ok(permits) = Arc::try_unwrap(permits) else {
            self.observer
                .event(format!("{who}'s permits still shared; dropped"));
            return;
        };
        // the hold's owner as the watchdog knows it: the ids, or none
        let owner = permits.ids().join(",");
        if self.rng.u32(0..10) < 7 {
            match permits.release().await {
                Ok(()) => self
                    .observer
                    .event(format!("{who} released its permits of {}", spec.name)),
                Err(err) => {
                    self.observer.release_failed(&owner);
                    self.failed("release permits", &spec.name, &err);
                }
            }
        } else {
            self.observer
                .event(format!("{who} dropped its permits of {}", spec.name));
            self.observer.dropped(&client, &owner);
            drop(permits);
        }
    }
}
