//! What each simulated task does, round after round until the run ends:
//! take a lock in one of several ways, rely on it for a while, give it
//! back (or drop the guard), pause. Every step goes through the observer.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{in_context, AcquireOptions, Error, Lock, LockClient, LockGuard, LockMode};
use tokio::time::Instant;

use crate::observer::Observer;

/// Rounds per task at most (the run's virtual duration ends them first).
pub(crate) const MAX_ROUNDS: usize = 10_000;

/// What one task needs.
pub(crate) struct Task {
    pub(crate) who: String,
    pub(crate) client: Arc<LockClient>,
    pub(crate) observer: Arc<Observer>,
    pub(crate) keys: Vec<String>,
    /// Read-write locks: each round takes the read side (seven in ten) or
    /// the write side.
    pub(crate) rw: bool,
    /// A semaphore seed's semaphores (empty: locks).
    pub(crate) semaphores: Vec<crate::scenario::SemSpec>,
    pub(crate) lease: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) until: Instant,
    pub(crate) rng: fastrand::Rng,
}

pub(crate) fn up_to(rng: &mut fastrand::Rng, max: Duration) -> Duration {
    let max = u64::try_from(max.as_micros()).unwrap_or(u64::MAX).max(1);
    Duration::from_micros(rng.u64(0..=max))
}

impl Task {
    /// Runs rounds until the run's end.
    pub(crate) async fn run(mut self) {
        if !self.semaphores.is_empty() {
            return self.run_semaphores().await;
        }
        for _ in 0..MAX_ROUNDS {
            if Instant::now() >= self.until {
                break;
            }
            let key = self.keys[self.rng.usize(0..self.keys.len())].clone();
            let lock = match self.handle(&key) {
                Ok(lock) => lock,
                Err(err) => {
                    self.failed("lock", &key, &err);
                    continue;
                }
            };
            match self.rng.u32(0..100) {
                0..=39 => {
                    let wait = self.wait();
                    self.bounded(&lock, wait).await
                }
                40..=44 => {
                    // A long wait: several holders' turns.
                    let wait = up_to(&mut self.rng, self.lease * 4);
                    self.bounded(&lock, wait).await
                }
                45..=59 => self.try_once(&lock).await,
                60..=74 => self.reentrant(&lock).await,
                75..=84 => self.with_lease(&lock).await,
                _ => self.cancelled(&lock).await,
            }
            let gap = up_to(&mut self.rng, Duration::from_millis(30));
            tokio::time::sleep(gap).await;
        }
    }

    /// The lock `key` (a side of it, drawn, for a read-write lock).
    fn handle(&mut self, key: &str) -> Result<Lock, Error> {
        if !self.rw {
            return self.client.lock(key);
        }
        let rw = self.client.rw_lock(key)?;
        Ok(if self.rng.u32(0..10) < 7 {
            rw.read()
        } else {
            rw.write()
        })
    }

    /// `c<n>` of `c<n>.t<m>`.
    pub(crate) fn client_name(&self) -> &str {
        self.who.split('.').next().unwrap_or(&self.who)
    }

    pub(crate) fn failed(&self, what: &str, key: &str, err: &Error) {
        if err.is_wait_timeout() {
            self.observer.count(|a| a.timeouts += 1);
        } else {
            self.observer.count(|a| a.errors += 1);
        }
        self.observer
            .event(format!("{} {what} {key}: {err}", self.who));
    }

    /// How long to wait for a lock: up to a lease and a half.
    pub(crate) fn wait(&mut self) -> Duration {
        up_to(&mut self.rng, self.lease * 3 / 2)
    }

    /// Relies on `guard` for a while, then releases it or drops it.
    async fn hold(&mut self, guard: LockGuard, asked: Instant, who: &str) {
        let inside = self.observer.enter(who, &guard, asked);
        let for_ = up_to(&mut self.rng, self.lease * 3 / 2);
        tokio::time::sleep(for_).await;
        self.end(guard, inside, who).await;
    }

    async fn end(&mut self, guard: LockGuard, inside: crate::observer::Inside, who: &str) {
        if !guard.is_held() {
            self.observer.count(|a| a.lost += 1);
        }
        drop(inside);
        let owner = guard.owner_id().to_owned();
        if self.rng.u32(0..10) < 7 {
            let key = guard.name().to_owned();
            match guard.release().await {
                Ok(()) => self.observer.event(format!("{who} released {key}")),
                Err(err) => {
                    self.observer.release_failed(&owner);
                    self.failed("release", &key, &err);
                }
            }
        } else {
            self.observer
                .event(format!("{who} dropped its guard of {}", guard.name()));
            self.observer.dropped(self.client_name(), &owner);
            drop(guard);
        }
    }

    /// `acquire_timeout(wait)`.
    async fn bounded(&mut self, lock: &Lock, wait: Duration) {
        let asked = Instant::now();
        let waiting = self.observer.waiting(lock.name(), Some(wait));
        let got = lock.acquire_timeout(wait).await;
        waiting.returned(if got.is_ok() { "a guard" } else { "an error" });
        match got {
            Ok(guard) => {
                let who = self.who.clone();
                self.hold(guard, asked, &who).await;
            }
            Err(err) => self.failed("acquire", lock.name(), &err),
        }
    }

    /// `try_acquire`: one attempt, bounded by the connect and command
    /// time-outs.
    async fn try_once(&mut self, lock: &Lock) {
        let asked = Instant::now();
        let waiting = self
            .observer
            .waiting(lock.name(), Some(self.command_timeout * 2));
        let got = lock.try_acquire().await;
        waiting.returned(if matches!(got, Ok(Some(_))) {
            "a guard"
        } else {
            "nothing"
        });
        match got {
            Ok(Some(guard)) => {
                let who = self.who.clone();
                self.hold(guard, asked, &who).await;
            }
            Ok(None) => self.observer.count(|a| a.timeouts += 1),
            Err(err) => self.failed("try_acquire", lock.name(), &err),
        }
    }

    /// An explicit lease: no watchdog; the guard stops being valid when
    /// the lease (less the drift margin) has run out.
    async fn with_lease(&mut self, lock: &Lock) {
        let lease = self.lease / 2 + up_to(&mut self.rng, self.lease);
        let wait = self.wait();
        let asked = Instant::now();
        let waiting = self.observer.waiting(lock.name(), Some(wait));
        let got = lock
            .acquire_with(AcquireOptions::new().lease(lease).wait(wait))
            .await;
        waiting.returned(if got.is_ok() { "a guard" } else { "an error" });
        match got {
            Ok(guard) => {
                let who = format!("{}/lease", self.who);
                self.hold(guard, asked, &who).await;
            }
            Err(err) => self.failed("acquire_with_lease", lock.name(), &err),
        }
    }

    /// An acquisition dropped at an await point (its caller gave up).
    async fn cancelled(&mut self, lock: &Lock) {
        let patience = up_to(&mut self.rng, self.command_timeout * 3);
        let asked = Instant::now();
        let waiting = self.observer.waiting(lock.name(), None);
        let got = tokio::select! {
            biased;
            got = lock.acquire() => Some(got),
            _ = tokio::time::sleep(patience) => None,
        };
        match got {
            Some(got) => {
                waiting.returned("");
                match got {
                    Ok(guard) => {
                        let who = self.who.clone();
                        self.hold(guard, asked, &who).await;
                    }
                    Err(err) => self.failed("acquire", lock.name(), &err),
                }
            }
            None => {
                drop(waiting);
                self.observer.event(format!(
                    "{} gave up acquiring {} after {patience:?}",
                    self.who,
                    lock.name()
                ));
            }
        }
    }

    /// An outer hold, re-entered once or twice inside a lock context; the
    /// inner guards are released first (the late-release bug's ground).
    async fn reentrant(&mut self, lock: &Lock) {
        let wait = self.wait();
        let who = self.who.clone();
        let lock = lock.clone();
        // Under a write hold, the inner acquisitions may be reads: a
        // downgrade (the read stays valid beside the write).
        let inner_lock = match lock.mode() {
            LockMode::Write if self.rng.bool() => self
                .client
                .rw_lock(lock.name())
                .map(|rw| rw.read())
                .unwrap_or_else(|_| lock.clone()),
            _ => lock.clone(),
        };
        let mut me = std::mem::replace(&mut self.rng, fastrand::Rng::with_seed(0));
        let this = &*self;
        in_context(async {
            let asked = Instant::now();
            let waiting = this.observer.waiting(lock.name(), Some(wait));
            let outer = lock.acquire_timeout(wait).await;
            waiting.returned(if outer.is_ok() { "a guard" } else { "an error" });
            let outer = match outer {
                Ok(guard) => guard,
                Err(err) => return this.failed("acquire (outer)", lock.name(), &err),
            };
            let in_outer = this.observer.enter(&who, &outer, asked);
            tokio::time::sleep(up_to(&mut me, this.lease / 2)).await;
            for round in 0..me.usize(1..=2) {
                let inner_who = format!("{who}/inner{round}");
                let asked = Instant::now();
                let waiting = this.observer.waiting(lock.name(), Some(wait));
                let inner = inner_lock.acquire_timeout(wait).await;
                waiting.returned("");
                match inner {
                    Ok(inner) => {
                        let inside = this.observer.enter(&inner_who, &inner, asked);
                        tokio::time::sleep(up_to(&mut me, this.lease / 2)).await;
                        drop(inside);
                        let owner = inner.owner_id().to_owned();
                        match inner.release().await {
                            Ok(()) => this.observer.event(format!("{inner_who} released")),
                            Err(err) => {
                                this.observer.release_failed(&owner);
                                this.failed("release (inner)", lock.name(), &err);
                            }
                        }
                    }
                    Err(err) => this.failed("acquire (inner)", lock.name(), &err),
                }
            }
            // Stay a while: a late copy of an inner release lands now.
            tokio::time::sleep(up_to(&mut me, this.command_timeout * 4)).await;
            if !outer.is_held() {
                this.observer.count(|a| a.lost += 1);
            }
            drop(in_outer);
            let key = outer.name().to_owned();
            let owner = outer.owner_id().to_owned();
            match outer.release().await {
                Ok(()) => this.observer.event(format!("{who} released {key} (outer)")),
                Err(err) => {
                    this.observer.release_failed(&owner);
                    this.failed("release (outer)", &key, &err);
                }
            }
        })
        .await;
        self.rng = me;
    }
}
