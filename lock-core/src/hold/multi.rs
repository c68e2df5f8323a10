//! The multi-lock's wait loop: several locks taken as one, each a normal
//! hold of its own.
//!
//! The names are deduplicated and sorted; on a Redis Cluster they are cut
//! into groups of one hash slot, taken in ascending slot order (on one
//! server, all of them form one group). Each group is taken by one call of
//! `multi_acquire.lua`, all or nothing. A round takes the groups in order;
//! the first group found held ends the round: every group taken in it is
//! released (the normal release path), and the round is tried again when
//! the lock that blocked it is unlocked (its unlock channel), its PTTL has
//! passed, or the wait bound ends it. Nothing is held while waiting, so
//! two multi-locks (or a multi-lock and single locks) can never deadlock;
//! the common order keeps them from taking turns at blocking each other.
//!
//! Each lock taken is a normal hold (`Hold::granted`, its own owner id,
//! fencing token and watchdog entry, recorded as the client's holding of
//! that lock in its local queue): renewal, loss, release, hand-off to a
//! local waiter and shutdown treat it as any lock's hold.
//!
//! A group call whose reply is lost is cancelled lock by lock with
//! `cancel.lua`, each with the latch the call named for that lock: the
//! script refuses a request any of whose latches exists, and a cancel
//! undoes its lock's hold if the request was applied, so every order of a
//! late request and the cancels ends with none of the group's holds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::ReplicaAck;
use crate::error::{Error, Result};
use crate::hold::acquire::{limit_until, subscribe_denied, Running};
use crate::hold::count::OwnedCount;
use crate::hold::engine::Engine;
use crate::hold::lease_ms;
use crate::hold::queue::Holding;
use crate::hold::release::ReleaseJob;
use crate::hold::run_to_end::RunToEnd;
use crate::hold::slot_owners::key_slot;
use crate::hold::target::Target;
use crate::hold::Hold;
use crate::options::{AcquireOptions, Wait};
use crate::protocol::cancel::CancelMode;
use crate::protocol::keys::LockKeys;
use crate::protocol::multi_acquire::{MultiAcquireCall, MultiAcquireReply, MultiPart};
use crate::transport::pubsub::{Status, Subscription};

/// Several locks of one client, as the engine sees them.
#[derive(Clone)]
pub(crate) struct MultiTarget {
    pub(crate) engine: Arc<Engine>,
    /// The locks in groups of one Cluster slot (one group on a single
    /// server), in the order they are taken.
    groups: Arc<Vec<Vec<Arc<LockKeys>>>>,
}

impl std::fmt::Debug for MultiTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiTarget")
            .field("keys", &self.keys().map(|k| &k.lock).collect::<Vec<_>>())
            .finish()
    }
}

/// How one group call ended without an error.
enum GroupAttempt {
    Acquired(Vec<OwnedCount>),
    /// `blocker` is held (or another client's turn) for `pttl_ms`.
    Held {
        blocker: Arc<LockKeys>,
        pttl_ms: i64,
    },
    /// Granted after the grant's validity: undone, nobody holds it.
    Expired,
}

/// How one round over every group ended without an error.
enum Round {
    Acquired(Vec<OwnedCount>),
    Held {
        blocker: Arc<LockKeys>,
        pttl_ms: i64,
    },
    Expired,
}

/// The order the locks are taken in: deduplicated by key; by name on one
/// server; by (hash slot, name) in groups of one slot on a cluster.
pub(crate) fn groups_of(mut keys: Vec<Arc<LockKeys>>, cluster: bool) -> Vec<Vec<Arc<LockKeys>>> {
    keys.sort_by(|a, b| a.lock.cmp(&b.lock));
    keys.dedup_by(|a, b| a.lock == b.lock);
    if !cluster {
        return if keys.is_empty() {
            Vec::new()
        } else {
            vec![keys]
        };
    }
    let mut by_slot: BTreeMap<u16, Vec<Arc<LockKeys>>> = BTreeMap::new();
    for k in keys {
        by_slot
            .entry(key_slot(k.lock.as_bytes()))
            .or_default()
            .push(k);
    }
    by_slot.into_values().collect()
}

impl MultiTarget {
    /// The locks `keys` of the client of `engine` (see [`groups_of`]).
    pub(crate) fn new(engine: Arc<Engine>, keys: Vec<Arc<LockKeys>>) -> Self {
        let groups = groups_of(keys, engine.core.cluster);
        MultiTarget {
            engine,
            groups: Arc::new(groups),
        }
    }

    /// Every lock, in the order they are taken.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &Arc<LockKeys>> {
        self.groups.iter().flatten()
    }

    /// How many groups of one slot the locks form.
    pub(crate) fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Takes every lock: `Some` one count of each lock's new hold, in the
    /// order of [`keys`](Self::keys); `None` when a single attempt found
    /// one held or the wait bound passed. Nothing stays held on `None` or
    /// an error.
    pub(crate) async fn acquire(&self, options: AcquireOptions) -> Result<Option<Vec<OwnedCount>>> {
        let span = tracing::debug_span!(
            "lock.multi_acquire",
            locks = self.keys().count(),
            groups = self.groups.len()
        );
        let started = Instant::now();
        async move {
            let out = self.acquire_checked(options, started).await;
            let waited_ms = started.elapsed().as_millis() as u64;
            match &out {
                Ok(Some(_)) => tracing::debug!(waited_ms, "multi-lock acquired"),
                Ok(None) => tracing::debug!(waited_ms, "multi-lock busy or wait bound passed"),
                Err(e) => tracing::debug!(error = %e, "multi-lock acquire failed"),
            }
            out
        }
        .instrument(span)
        .await
    }

    async fn acquire_checked(
        &self,
        options: AcquireOptions,
        started: Instant,
    ) -> Result<Option<Vec<OwnedCount>>> {
        options.validate()?;
        let core = &self.engine.core;
        let _running = Running::new(core);
        if core.closed.is_cancelled() {
            return Err(Error::Closed);
        }
        // No Redis call past `until`; waiting ends at `deadline`.
        let (until, deadline) = match options.wait {
            Wait::Bounded(w) => (Some(started + w), Some(started + w)),
            Wait::Never => (Some(started + core.command_bound()), None),
            Wait::Forever => (None, None),
        };
        let single = options.wait == Wait::Never;
        let mut subscriptions: BTreeMap<String, Subscription> = BTreeMap::new();
        let mut outage: Option<Instant> = None;
        loop {
            if core.closed.is_cancelled() {
                return Err(Error::Closed);
            }
            let (blocker, pttl_ms) = match self.round(until, options.lease).await {
                Ok(Round::Acquired(counts)) => {
                    return match options.replica_ack(core.config.wait_for_replicas) {
                        Some(ack) => confirm_on_replicas(counts, ack).await.map(Some),
                        None => Ok(Some(counts)),
                    };
                }
                Ok(Round::Expired) => {
                    tokio::time::sleep(core.race_jitter()).await;
                    continue;
                }
                Ok(Round::Held { blocker, pttl_ms }) => {
                    outage = None;
                    (blocker, pttl_ms)
                }
                Err(e) => {
                    let now = Instant::now();
                    // The wait bound passed while a round was in flight
                    // (its calls were cut to what was left of the bound):
                    // the wait timed out, as a single lock's does, unless
                    // Redis had already stopped answering.
                    if matches!(e, Error::CommandTimeout)
                        && outage.is_none()
                        && deadline.is_some_and(|d| now >= d)
                    {
                        return Ok(None);
                    }
                    // Rides out a short outage (a restart, a failover) like
                    // a single lock's wait, within the command bound from
                    // its first failure and the caller's bound.
                    let began = *outage.get_or_insert(now);
                    if !single
                        && e.is_transient()
                        && core.has_reached_redis()
                        && now < began + core.command_bound()
                        && deadline.is_none_or(|d| now < d)
                    {
                        tracing::debug!(error = %e, "multi-lock acquire failed; retrying");
                        tokio::time::sleep(Duration::from_millis(20) + core.race_jitter()).await;
                        continue;
                    }
                    return Err(e);
                }
            };
            if single || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            if !subscriptions.contains_key(&blocker.channel) {
                // Subscribe first, then try again: an unlock after that
                // attempt wakes the wait.
                let mut sub = self.engine.pubsub.subscribe_shared(&blocker.channel);
                let mut ready_bound = core.config.command_timeout;
                if pttl_ms >= 0 {
                    ready_bound = ready_bound.min(Duration::from_millis(pttl_ms as u64));
                }
                if let Some(d) = deadline {
                    ready_bound = ready_bound.min(d.saturating_duration_since(Instant::now()));
                }
                if let Status::Denied(why) = sub.ready(ready_bound).await {
                    return Err(subscribe_denied(&why));
                }
                subscriptions.insert(blocker.channel.clone(), sub);
                continue;
            }
            let sleep = match pttl_ms {
                ms if ms > 0 => Duration::from_millis(ms as u64),
                -1 => core.config.watchdog_timeout,
                _ => Duration::from_millis(1),
            } + core.race_jitter();
            let until_deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let woken = futures_util::future::select_all(
                subscriptions.values().map(|s| Box::pin(s.woken())),
            );
            tokio::select! {
                biased;
                _ = core.closed.cancelled() => return Err(Error::Closed),
                _ = woken => {
                    // Several multi-locks woken by one unlock: a random
                    // pause spreads their attempts.
                    tokio::time::sleep(core.race_jitter()).await;
                }
                _ = tokio::time::sleep(sleep) => {}
                _ = until_deadline => {}
            }
            // The last round found a lock held and the wait bound has
            // passed since: no round past it (its calls would have no time
            // left), the wait timed out.
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
        }
    }

    /// One attempt at every group, in order; the groups taken are released
    /// when a later one is found held or fails.
    async fn round(&self, until: Option<Instant>, lease: Option<Duration>) -> Result<Round> {
        let mut taken: Vec<OwnedCount> = Vec::new();
        for index in 0..self.groups.len() {
            let attempt = self.attempt_group(index, until, lease).await;
            let out = match attempt {
                Ok(GroupAttempt::Acquired(counts)) => {
                    taken.extend(counts);
                    continue;
                }
                Ok(GroupAttempt::Held { blocker, pttl_ms }) => Ok(Round::Held { blocker, pttl_ms }),
                Ok(GroupAttempt::Expired) => Ok(Round::Expired),
                Err(e) => Err(e),
            };
            release_all(taken).await;
            return out;
        }
        Ok(Round::Acquired(taken))
    }

    /// One call of `multi_acquire.lua` for the group `index`; runs to its
    /// end even when the caller stops waiting (a grant nobody receives is
    /// released by its dropped counts).
    async fn attempt_group(
        &self,
        index: usize,
        until: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<GroupAttempt> {
        let core = &self.engine.core;
        let Some(limit) = limit_until(core.command_bound(), [until, None]) else {
            return Err(Error::CommandTimeout);
        };
        let this = self.clone();
        RunToEnd::new(
            async move { this.attempt_group_now(index, lease, limit).await }
                .instrument(tracing::Span::current()),
            &core.background,
            &core.runtime,
        )
        .await
    }

    async fn attempt_group_now(
        &self,
        index: usize,
        lease: Option<Duration>,
        limit: Duration,
    ) -> Result<GroupAttempt> {
        let Some(group) = self.groups.get(index) else {
            return Ok(GroupAttempt::Acquired(Vec::new()));
        };
        let core = &self.engine.core;
        let lease_time = lease.unwrap_or(core.config.watchdog_timeout);
        let lease_ms = lease_ms(lease, core.config.watchdog_timeout);
        // A new owner id per lock and attempt: each hold's identity, and
        // (through its latch) the request id a cancellation refers to.
        let owners: Vec<Arc<str>> = group.iter().map(|_| core.new_owner()).collect();
        let latches: Vec<String> = group
            .iter()
            .zip(&owners)
            .map(|(keys, owner)| keys.latch(owner))
            .collect();
        let parts: Vec<MultiPart<'_>> = group
            .iter()
            .zip(&owners)
            .zip(&latches)
            .map(|((keys, owner), latch)| MultiPart { keys, owner, latch })
            .collect();
        let cmd = MultiAcquireCall {
            parts: &parts,
            lease_ms,
            token_retention_ms: core.token_retention_ms(),
            client_id: &core.client_id,
        }
        .cmd(&core.scripts.multi_acquire);
        let cancel_all = || {
            for ((keys, owner), latch) in group.iter().zip(&owners).zip(&latches) {
                core.spawn_job(ReleaseJob::Cancel {
                    keys: keys.clone(),
                    owner: owner.clone(),
                    mode: CancelMode::New,
                    latch: latch.clone(),
                    lease_ms,
                });
            }
        };
        let sent_at = Instant::now();
        let reply = match core
            .run_script_within(&core.scripts.multi_acquire, &cmd, limit)
            .await
        {
            Ok(reply) => {
                core.record_round_trip(sent_at.elapsed());
                reply
            }
            Err(e) => {
                if e.is_transient() {
                    // The script may have run and its reply been lost (or
                    // the request may still arrive): undone lock by lock,
                    // or refused.
                    cancel_all();
                }
                return Err(e);
            }
        };
        let tokens = match MultiAcquireReply::parse(&reply, group.len()) {
            Ok(MultiAcquireReply::Acquired { tokens }) => tokens,
            Ok(MultiAcquireReply::Held { pttl_ms, index }) => {
                return Ok(match group.get(index) {
                    Some(blocker) => GroupAttempt::Held {
                        blocker: blocker.clone(),
                        pttl_ms,
                    },
                    None => GroupAttempt::Expired,
                })
            }
            Ok(MultiAcquireReply::Cancelled) => {
                return Err(Error::Protocol(
                    "the multi-acquire script answered `cancelled` to a fresh request".into(),
                ))
            }
            Err(e) => {
                cancel_all();
                return Err(e);
            }
        };
        let mut holds = Vec::with_capacity(group.len());
        for ((keys, owner), token) in group.iter().zip(&owners).zip(tokens) {
            match Hold::granted(
                keys.clone(),
                owner.clone(),
                token,
                None,
                sent_at,
                lease_time,
            ) {
                Some(hold) => holds.push(hold),
                None => {
                    tracing::debug!(
                        rtt_ms = sent_at.elapsed().as_millis() as u64,
                        "multi-lock granted after the grant's validity; undoing it"
                    );
                    let undo =
                        group
                            .iter()
                            .zip(&owners)
                            .zip(&latches)
                            .map(|((keys, owner), latch)| {
                                core.cancel(keys, owner, CancelMode::New, latch, lease_ms)
                            });
                    for result in join_all(undo).await {
                        if let Err(e) = result {
                            tracing::warn!(error = %e, "undoing a late multi-lock grant failed; it expires with its lease");
                        }
                    }
                    return Ok(GroupAttempt::Expired);
                }
            }
        }
        let counts = group
            .iter()
            .zip(holds)
            .map(|(keys, hold)| {
                core.queues
                    .acquired(&keys.local, Holding::new(hold.clone()), None);
                OwnedCount::new(
                    Target {
                        engine: self.engine.clone(),
                        keys: keys.clone(),
                    },
                    hold,
                    lease,
                )
            })
            .collect();
        Ok(GroupAttempt::Acquired(counts))
    }
}

/// Hands out the new holds only once `ack.replicas` replicas have each of
/// them (see `Target::confirm_on_replicas`); otherwise releases them all and
/// fails with the first lock's error.
async fn confirm_on_replicas(counts: Vec<OwnedCount>, ack: ReplicaAck) -> Result<Vec<OwnedCount>> {
    let confirmed = join_all(counts.into_iter().map(|count| {
        let target = count.count().target.clone();
        async move { target.confirm_on_replicas(count, ack).await }
    }))
    .await;
    let mut kept = Vec::with_capacity(confirmed.len());
    let mut first_err = None;
    for result in confirmed {
        match result {
            Ok(count) => kept.push(count),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        None => Ok(kept),
        Some(e) => {
            release_all(kept).await;
            Err(e)
        }
    }
}

/// Releases `counts` together (each by the normal release path); a failure
/// is logged (the lock then expires with its lease).
pub(crate) async fn release_all(counts: Vec<OwnedCount>) -> Vec<Result<()>> {
    let results = join_all(counts.into_iter().map(OwnedCount::release)).await;
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        tracing::debug!(error = %e, "releasing a lock of a multi-lock failed");
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<Arc<LockKeys>> {
        names
            .iter()
            .map(|n| Arc::new(LockKeys::new("", n, 100).expect("name")))
            .collect()
    }

    fn names(groups: &[Vec<Arc<LockKeys>>]) -> Vec<Vec<String>> {
        groups
            .iter()
            .map(|g| g.iter().map(|k| k.lock.clone()).collect())
            .collect()
    }

    #[test]
    fn one_server_takes_every_name_at_once_sorted_and_deduplicated() {
        let g = groups_of(keys(&["b", "a", "c", "a"]), false);
        assert_eq!(names(&g), [["a", "b", "c"]]);
        assert!(groups_of(Vec::new(), false).is_empty());
    }

    #[test]
    fn a_cluster_takes_one_group_per_slot_in_slot_order() {
        // `{x}:1` and `{x}:2` share a slot; `a` and `b` have their own.
        let g = groups_of(keys(&["{x}:2", "b", "a", "{x}:1"]), true);
        let mut expected = vec![
            (key_slot(b"a"), vec!["a".to_string()]),
            (key_slot(b"b"), vec!["b".to_string()]),
            (
                key_slot(b"{x}:1"),
                vec!["{x}:1".to_string(), "{x}:2".to_string()],
            ),
        ];
        expected.sort();
        assert_eq!(
            names(&g),
            expected.into_iter().map(|(_, n)| n).collect::<Vec<_>>()
        );
    }
}
