//! Local per-lock queues: one client's waiters for the same lock line up in
//! arrival order and only the one at the front (the head) contends in Redis.
//!
//! When a holder of this client releases while others of this client wait,
//! the release hands the lock straight to the head in the same round trip
//! (the `handoff` script): the lock never becomes free in Redis, no unlock
//! message is published, and the head does not have to ask again. A
//! contended lock therefore costs one round trip per change of holder, and
//! waiters of one process are served first come, first served.
//!
//! Fairness between clients: a streak of local hand-offs lasts one round of
//! the waiters that were queued when the lock was taken from Redis, or, when
//! longer, the client's hand-off window (`ClientConfig::hand_off_window`)
//! from that moment (Go's `sync.Mutex`: the running process keeps the lock
//! while nobody has waited too long; here "too long" is the window, which
//! bounds what another client waits for one streak). Then the lock is
//! released in Redis (its channel is told, as usual), the turn goes to the
//! client that waited longest, and the head contends like every other
//! client's head.
//!
//! While a local holder holds the lock, the head does not poll Redis: it
//! waits for the hand-off, for the holder's release, or for the holder's
//! lease to run out or its loss (found by the watchdog), whichever is first.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::hold::Hold;
use crate::protocol::acquire::Line;
use crate::transport::pubsub::Subscription;

static NEXT_WAITER: AtomicU64 = AtomicU64::new(1);

/// The hold of a lock this client has, as far as this client knows.
#[derive(Clone, Debug)]
pub(crate) struct Holding {
    pub(crate) hold: Arc<Hold>,
    /// A plain release of it is failing and being retried.
    pub(crate) releasing: bool,
}

impl Holding {
    pub(crate) fn new(hold: Arc<Hold>) -> Self {
        Holding {
            hold,
            releasing: false,
        }
    }

    fn is_live(&self) -> bool {
        !self.releasing && self.hold.is_valid()
    }

    fn is(&self, owner: &str) -> bool {
        &*self.hold.owner == owner
    }
}

/// A waiter in a local queue.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) id: u64,
    /// The lease it asked for (`None`: watchdog).
    pub(crate) lease: Option<Duration>,
    /// The context a hold handed to it belongs to (see `Hold::context`).
    pub(crate) context: Option<u64>,
    /// Woken whenever its turn may have changed.
    pub(crate) notify: Notify,
}

#[derive(Debug)]
struct Queued {
    waiter: Arc<Waiter>,
    /// A hand-off to this waiter is in flight.
    offered: bool,
    /// The waiter stopped waiting while a hand-off to it was in flight.
    abandoned: bool,
}

#[derive(Debug, Default)]
struct KeyState {
    holding: Option<Holding>,
    queue: VecDeque<Queued>,
    /// Hand-offs done but not yet picked up by their waiter.
    grants: Vec<(u64, Arc<Hold>)>,
    /// Hand-offs left in the current streak.
    budget: usize,
    /// Until when the current streak may go on past its budget (the
    /// hand-off window from the moment the lock was taken from Redis).
    streak_until: Option<Instant>,
    /// The lock channel subscription the heads share while the queue lasts.
    subscription: Option<Arc<Subscription>>,
    /// This client just released the lock while other clients wait: its
    /// head lets them go first until then.
    step_back_until: Option<Instant>,
    /// Unlock messages of this client's own releases that its subscription
    /// will hear: a step-back does not end on them.
    own_unlocks: u32,
    /// The last step-back ran out on its timer (no other client's unlock
    /// message ended it).
    stepped_back_in_vain: bool,
    /// This client has a place among the clients waiting for the lock in
    /// Redis (`lockcore_waiters`): an attempt of its head found it held.
    in_redis_line: bool,
    /// Consecutive step-backs after which this client took the lock again
    /// at once: the other clients' waiters were too slow for the window,
    /// which doubles with each miss.
    misses: u32,
}

/// Longest step-back, however often other clients missed their turn.
const STEP_BACK_CEILING: Duration = Duration::from_millis(200);
/// Doublings of the step-back window at most (base × 2^6).
const MAX_MISSES: u32 = 6;
/// How long a key's fairness memory outlives its last use.
const FAIRNESS_MEMORY: Duration = Duration::from_secs(1);

impl KeyState {
    /// Nothing local is going on (no holding, waiter or pending grant).
    fn is_quiet(&self) -> bool {
        self.holding.is_none() && self.queue.is_empty() && self.grants.is_empty()
    }

    /// Nothing to remember either: the state can go.
    fn is_idle(&self) -> bool {
        self.is_quiet()
            && self.misses == 0
            && self.step_back_until.is_none_or(|t| Instant::now() >= t)
    }

    fn notify_head(&self) {
        if let Some(head) = self.queue.front() {
            head.waiter.notify.notify_one();
        }
    }

    fn position(&self, waiter_id: u64) -> Option<usize> {
        self.queue.iter().position(|q| q.waiter.id == waiter_id)
    }
}

/// What the waiter should do now.
#[derive(Debug)]
pub(crate) enum Turn {
    /// The lock was handed to it: this is its hold.
    Granted(Arc<Hold>),
    /// Not its turn: wait to be notified.
    Wait,
    /// It is the head, and a live local hold is in the way: wait to be
    /// notified, or for the hold's loss or deadline.
    HeldLocally { hold: Arc<Hold> },
    /// It is the head, but its client just released the lock that other
    /// clients wait for: let them go first, until `until` or the next unlock
    /// message.
    StepBack {
        until: Instant,
        subscription: Option<Arc<Subscription>>,
    },
    /// It is the head: ask Redis.
    Contend {
        subscription: Option<Arc<Subscription>>,
    },
}

impl KeyState {
    /// The waiter `id` is no longer waiting for a hand-off: back in line,
    /// or out of the queue when it gave up meanwhile.
    fn un_offer(&mut self, id: u64) {
        if let Some(i) = self.position(id) {
            if self.queue[i].abandoned {
                self.queue.remove(i);
            } else {
                self.queue[i].offered = false;
            }
        }
    }

    /// The current streak of local hand-offs allows one more.
    fn streak_goes_on(&self) -> bool {
        self.budget > 0
            || self
                .streak_until
                .is_some_and(|until| Instant::now() < until)
    }
}

/// The local queues of one client, keyed by lock key.
#[derive(Debug, Default)]
pub(crate) struct LocalQueues {
    map: Mutex<HashMap<String, KeyState>>,
    /// Keys kept only for their fairness memory, and until when.
    remembered: Mutex<VecDeque<(Instant, String)>>,
    /// How long a streak of local hand-offs may last (see the module doc).
    hand_off_window: Duration,
}

impl LocalQueues {
    /// Queues whose streaks of local hand-offs may last `hand_off_window`.
    pub(crate) fn with_hand_off_window(hand_off_window: Duration) -> Self {
        LocalQueues {
            hand_off_window,
            ..LocalQueues::default()
        }
    }

    fn locked(&self) -> MutexGuard<'_, HashMap<String, KeyState>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The valid hold of the lock that the context `context` re-enters.
    pub(crate) fn context_hold(&self, key: &str, context: u64) -> Option<Arc<Hold>> {
        self.locked()
            .get(key)
            .and_then(|s| s.holding.as_ref())
            .filter(|h| h.hold.context == Some(context) && h.hold.is_valid() && h.hold.counts() > 0)
            .map(|h| h.hold.clone())
    }

    /// Puts a waiter at the end of the lock's queue.
    pub(crate) fn join(
        &self,
        key: &str,
        lease: Option<Duration>,
        context: Option<u64>,
    ) -> Arc<Waiter> {
        self.forget_old_memories();
        let waiter = Arc::new(Waiter {
            id: NEXT_WAITER.fetch_add(1, Ordering::Relaxed),
            lease,
            context,
            notify: Notify::new(),
        });
        let mut map = self.locked();
        let state = map.entry(key.to_string()).or_default();
        state.queue.push_back(Queued {
            waiter: waiter.clone(),
            offered: false,
            abandoned: false,
        });
        waiter
    }

    /// What `waiter` should do now.
    pub(crate) fn turn(&self, key: &str, waiter: &Waiter) -> Turn {
        let mut map = self.locked();
        let Some(state) = map.get_mut(key) else {
            return Turn::Contend { subscription: None };
        };
        if let Some(i) = state.grants.iter().position(|(id, _)| *id == waiter.id) {
            let (_, grant) = state.grants.swap_remove(i);
            return Turn::Granted(grant);
        }
        match state.queue.front() {
            Some(head) if head.waiter.id == waiter.id && !head.offered => {}
            _ => return Turn::Wait,
        }
        match &state.holding {
            Some(h) if h.is_live() => Turn::HeldLocally {
                hold: h.hold.clone(),
            },
            None => match state.step_back_until.filter(|t| Instant::now() < *t) {
                Some(until) => Turn::StepBack {
                    until,
                    subscription: state.subscription.clone(),
                },
                None => Turn::Contend {
                    subscription: state.subscription.clone(),
                },
            },
            _ => Turn::Contend {
                subscription: state.subscription.clone(),
            },
        }
    }

    /// Whether this client's waiters are subscribed to the lock's channel.
    pub(crate) fn is_subscribed(&self, key: &str) -> bool {
        self.locked()
            .get(key)
            .is_some_and(|s| s.subscription.is_some())
    }

    /// An unlock message woke the head during a step-back. Another
    /// client's release ends the step-back (contend now); this client's own
    /// release, heard by its own subscription, does not.
    pub(crate) fn unlock_heard_in_step_back(&self, key: &str) {
        if let Some(state) = self.locked().get_mut(key) {
            if state.own_unlocks > 0 {
                state.own_unlocks -= 1;
            } else {
                state.step_back_until = None;
                state.stepped_back_in_vain = false;
            }
        }
    }

    /// The step-back ran out without another client's unlock message.
    pub(crate) fn step_back_ran_out(&self, key: &str) {
        if let Some(state) = self.locked().get_mut(key) {
            state.step_back_until = None;
            state.stepped_back_in_vain = true;
            state.own_unlocks = 0;
        }
    }

    /// The head found the lock held by another client: other clients do
    /// get their turns, the step-back window goes back to its base.
    pub(crate) fn held_elsewhere(&self, key: &str) {
        if let Some(state) = self.locked().get_mut(key) {
            state.misses = 0;
            state.stepped_back_in_vain = false;
            state.in_redis_line = true;
        }
    }

    /// How the head's attempt stands in the line of waiting clients (see
    /// `acquire.lua`): `"2"` when this client has its place already, else
    /// `"1"`.
    pub(crate) fn line_mode(&self, key: &str) -> Line {
        if self.locked().get(key).is_some_and(|s| s.in_redis_line) {
            Line::PlaceKept
        } else {
            Line::Head
        }
    }

    /// Keeps the head's new subscription for the heads after it.
    pub(crate) fn share_subscription(&self, key: &str, subscription: Arc<Subscription>) {
        if let Some(state) = self.locked().get_mut(key) {
            if !state.queue.is_empty() {
                state.subscription = Some(subscription);
            }
        }
    }

    /// A fresh acquisition in Redis: records the holding; the waiter that
    /// made it (if it was queued) leaves the queue. Starts a new streak of
    /// one hand-off per waiter queued now, or more within the hand-off
    /// window from now.
    pub(crate) fn acquired(&self, key: &str, holding: Holding, waiter_id: Option<u64>) {
        let mut map = self.locked();
        let state = map.entry(key.to_string()).or_default();
        if let Some(i) = waiter_id.and_then(|id| state.position(id)) {
            state.queue.remove(i);
        }
        state.budget = state.queue.len();
        state.streak_until =
            (!self.hand_off_window.is_zero()).then(|| Instant::now() + self.hand_off_window);
        if let Some(previous) = state.holding.replace(holding) {
            previous.hold.end();
        }
        state.step_back_until = None;
        // Taken from Redis: the script took this client out of the line.
        state.in_redis_line = false;
        state.own_unlocks = 0;
        if std::mem::take(&mut state.stepped_back_in_vain) {
            // Taken again right after a step-back that nobody used.
            state.misses = (state.misses + 1).min(MAX_MISSES);
        }
        if state.queue.is_empty() {
            state.subscription = None; // nobody left to wake
        }
        state.notify_head();
    }

    /// A fair lock's grant (`hold/fair.rs`): the client's holding of the
    /// name, for re-entry in a context and the release's bookkeeping. The
    /// plain lock's line state is left alone: a fair grant never takes the
    /// client out of Redis' line of waiting clients.
    pub(crate) fn held_fairly(&self, key: &str, holding: Holding) {
        let mut map = self.locked();
        let state = map.entry(key.to_string()).or_default();
        if let Some(previous) = state.holding.replace(holding) {
            previous.hold.end();
        }
        state.notify_head();
    }

    /// The waiter stops waiting (acquired, gave up, or was dropped). Returns
    /// a grant it had not picked up: the caller must release it.
    ///
    /// Also returns whether this waiter gave up (it was still queued), was
    /// the client's last one, and the client has a place in the lock's line
    /// of waiting clients in Redis: the client then leaves it.
    pub(crate) fn leave(&self, key: &str, waiter_id: u64) -> (Option<Arc<Hold>>, bool) {
        let mut map = self.locked();
        let Some(state) = map.get_mut(key) else {
            return (None, false);
        };
        let mut gave_up_last = false;
        if let Some(i) = state.position(waiter_id) {
            if state.queue[i].offered {
                // The releaser in flight finds out and passes the lock on.
                state.queue[i].abandoned = true;
            } else {
                state.queue.remove(i);
                if i == 0 {
                    state.notify_head();
                }
                if state.queue.is_empty() {
                    state.subscription = None;
                    gave_up_last = std::mem::take(&mut state.in_redis_line);
                }
            }
        }
        let grant = state
            .grants
            .iter()
            .position(|(id, _)| *id == waiter_id)
            .map(|i| state.grants.swap_remove(i).1);
        if state.is_idle() {
            map.remove(key);
        }
        (grant, gave_up_last)
    }

    /// Puts `waiter` back at the front of the lock's line (a hand-off to it
    /// came too late to be used, and took it out of the line).
    pub(crate) fn requeue_front(&self, key: &str, waiter: &Arc<Waiter>) {
        let mut map = self.locked();
        let state = map.entry(key.to_string()).or_default();
        if state.position(waiter.id).is_none() {
            state.queue.push_front(Queued {
                waiter: waiter.clone(),
                offered: false,
                abandoned: false,
            });
        }
    }

    /// Picks the head as the target of a hand-off from the hold `owner`,
    /// when that hold is the current one and the streak allows another
    /// hand-off (its budget, or its window).
    pub(crate) fn offer(&self, key: &str, owner: &str) -> Option<Arc<Waiter>> {
        let mut map = self.locked();
        let state = map.get_mut(key)?;
        if !state.holding.as_ref()?.is(owner) {
            return None;
        }
        let goes_on = state.streak_goes_on();
        let target = match state.queue.front_mut() {
            Some(head) if goes_on && !head.offered && !head.abandoned => {
                head.offered = true;
                Some(head.waiter.clone())
            }
            _ => None,
        };
        target
    }

    /// A plain release of `owner`'s holding is failing and being retried:
    /// the head asks Redis rather than wait for it (Redis may be down, and
    /// the release may take its whole retry window).
    pub(crate) fn release_stalled(&self, key: &str, owner: &str) {
        let mut map = self.locked();
        let Some(state) = map.get_mut(key) else {
            return;
        };
        if let Some(h) = state.holding.as_mut().filter(|h| h.is(owner)) {
            h.releasing = true;
            state.notify_head();
        }
    }

    /// The hand-off to `waiter` happened. Returns true when the waiter had
    /// abandoned: the caller now holds the lock on its behalf and must
    /// release it (and may hand it on).
    pub(crate) fn handed_off(&self, key: &str, waiter: &Waiter, hold: Arc<Hold>) -> bool {
        let mut map = self.locked();
        let state = map.entry(key.to_string()).or_default();
        let abandoned = match state.position(waiter.id) {
            Some(i) => state.queue.remove(i).is_some_and(|q| q.abandoned),
            None => true,
        };
        state.budget = state.budget.saturating_sub(1);
        if abandoned {
            // No guard will ever count on it: the releaser ends it. Taken
            // before it is seen as the context's holding, so that no
            // re-entry of the waiter's context joins a hold being ended
            // (lock-sim, seed 117630: it did, and was freed under it).
            hold.take_count();
        }
        if let Some(previous) = state.holding.replace(Holding::new(hold.clone())) {
            previous.hold.end(); // handed on
        }
        if !abandoned {
            state.grants.push((waiter.id, hold));
            waiter.notify.notify_one();
        }
        state.notify_head();
        abandoned
    }

    /// A hand-off from the hold `owner` to `waiter` is failing and being
    /// retried (Redis may be down, and the retries may take their whole
    /// window): the waiter stops waiting for it and asks Redis, as after
    /// [`release_stalled`](Self::release_stalled). Should the hand-off still
    /// happen, its grant is picked up as usual (or, the waiter gone, ended
    /// by the releaser).
    pub(crate) fn hand_off_stalled(&self, key: &str, waiter: &Waiter, owner: &str) {
        let mut map = self.locked();
        let Some(state) = map.get_mut(key) else {
            return;
        };
        // (a waiter gone already leaves the way of those behind it; should
        // the hand-off land, the releaser ends its hold)
        state.un_offer(waiter.id);
        if let Some(h) = state.holding.as_mut().filter(|h| h.is(owner)) {
            h.releasing = true;
        }
        state.notify_head();
    }

    /// After a hand-off: whether this client has a place in the lock's
    /// line of waiting clients in Redis with no waiter left to use it (the
    /// waiter that got the hand-off had asked Redis meanwhile, see
    /// [`hand_off_stalled`](Self::hand_off_stalled)). Clears it: the caller
    /// then takes the client out of the line (`ReleaseJob::StopWaiting`).
    pub(crate) fn take_unused_place(&self, key: &str) -> bool {
        let mut map = self.locked();
        match map.get_mut(key) {
            Some(state) if state.queue.is_empty() => std::mem::take(&mut state.in_redis_line),
            _ => false,
        }
    }

    /// The hand-off to `waiter` did not happen.
    pub(crate) fn withdraw(&self, key: &str, waiter: &Waiter) {
        let mut map = self.locked();
        let Some(state) = map.get_mut(key) else {
            return;
        };
        state.un_offer(waiter.id);
        state.notify_head();
        if state.is_idle() {
            map.remove(key);
        }
    }

    /// Every hold this client has now, by lock key (for shutdown).
    pub(crate) fn holdings(&self) -> Vec<(String, Arc<Hold>)> {
        self.locked()
            .iter()
            .filter_map(|(key, state)| {
                state
                    .holding
                    .as_ref()
                    .map(|h| (key.clone(), h.hold.clone()))
            })
            .collect()
    }

    /// The hold `owner` ended: released in Redis, found not held, or lost.
    /// The head is told, so it can contend.
    pub(crate) fn ended(&self, key: &str, owner: &str) {
        self.ended_stepping_back(key, owner, None);
    }

    /// Like [`ended`](Self::ended), after a release that other clients'
    /// waiters were told about: every acquisition of this client waits for
    /// a window (`base` doubled for each recent miss, see `KeyState`), or
    /// until another client's unlock message, so that the lock goes round
    /// the clients. The step-back is remembered even when nobody of this
    /// client waits now: its next acquisition steps back too.
    pub(crate) fn ended_stepping_back(&self, key: &str, owner: &str, base: Option<Duration>) {
        let mut map = self.locked();
        let Some(state) = map.get_mut(key) else {
            return;
        };
        if state.holding.as_ref().is_some_and(|h| h.is(owner)) {
            if let Some(holding) = state.holding.take() {
                holding.hold.end();
            }
            if let Some(base) = base {
                let window = (base * (1u32 << state.misses)).min(STEP_BACK_CEILING.max(base));
                state.step_back_until = Some(Instant::now() + window);
                // This client's own subscription hears its own unlock.
                state.own_unlocks = u32::from(state.subscription.is_some());
                state.stepped_back_in_vain = false;
            }
            state.notify_head();
        }
        if state.is_idle() {
            map.remove(key);
        } else if state.is_quiet() {
            self.remember(key);
        }
    }

    /// Keeps the fairness memory of a quiet key for a while; forgets the
    /// memories that have run out (so idle keys cost nothing for long).
    fn remember(&self, key: &str) {
        let mut remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        remembered.push_back((Instant::now() + FAIRNESS_MEMORY, key.to_string()));
    }

    /// Drops the fairness memory of keys quiet for longer than
    /// `FAIRNESS_MEMORY`.
    fn forget_old_memories(&self) {
        let now = Instant::now();
        let expired: Vec<String> = {
            let mut remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
            let mut out = Vec::new();
            while remembered.front().is_some_and(|(t, _)| *t <= now) {
                if let Some((_, key)) = remembered.pop_front() {
                    out.push(key);
                }
            }
            out
        };
        if expired.is_empty() {
            return;
        }
        let mut map = self.locked();
        for key in expired {
            if map
                .get(&key)
                .is_some_and(|s| s.is_quiet() && s.step_back_until.is_none_or(|t| now >= t))
            {
                map.remove(&key);
            }
        }
    }

    /// Number of locks with local state (holdings or waiters).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.locked().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static NEXT: AtomicU64 = AtomicU64::new(1);

    fn keys() -> Arc<crate::protocol::keys::LockKeys> {
        Arc::new(crate::protocol::keys::LockKeys::new("", "k", 100).expect("name"))
    }

    fn hold() -> Arc<Hold> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Hold::granted(
            keys(),
            Arc::from(format!("c:{n}")),
            7,
            None,
            Instant::now(),
            Duration::from_secs(30),
        )
        .expect("valid")
    }

    #[tokio::test]
    async fn only_the_head_contends_and_waits_for_a_local_holder() {
        let q = LocalQueues::default();
        let a = q.join("k", None, None);
        let b = q.join("k", None, None);
        assert!(matches!(q.turn("k", &a), Turn::Contend { .. }));
        assert!(matches!(q.turn("k", &b), Turn::Wait));
        let h = hold();
        q.acquired("k", Holding::new(h.clone()), Some(a.id));
        assert!(matches!(q.turn("k", &b), Turn::HeldLocally { .. }));
        h.mark_lost("test");
        assert!(matches!(q.turn("k", &b), Turn::Contend { .. }));
    }

    #[tokio::test]
    async fn a_hand_off_goes_to_the_head_and_is_picked_up_once() {
        let q = LocalQueues::default();
        let h = hold();
        q.acquired("k", Holding::new(h.clone()), None);
        let b = q.join("k", None, None);
        // the streak was set when the lock was taken: nobody waited then
        assert!(q.offer("k", &h.owner).is_none());
        q.acquired("k", Holding::new(h.clone()), None); // a new streak with b queued
        let target = q.offer("k", &h.owner).expect("offer");
        assert_eq!(target.id, b.id);
        assert!(
            matches!(q.turn("k", &b), Turn::Wait),
            "offered: do not contend"
        );
        let next = hold();
        assert!(!q.handed_off("k", &target, next.clone()));
        assert!(matches!(q.turn("k", &b), Turn::Granted(_)));
        assert!(q.leave("k", b.id).0.is_none());
        q.ended("k", &next.owner);
        assert_eq!(q.len(), 0, "idle state is dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn the_hand_off_window_lets_a_streak_go_on_until_it_ends() {
        let q = LocalQueues::with_hand_off_window(Duration::from_millis(5));
        let h = hold();
        // taken from Redis with nobody queued: no budget, but the window
        q.acquired("k", Holding::new(h.clone()), None);
        let b = q.join("k", None, None);
        let target = q.offer("k", &h.owner).expect("within the window");
        assert_eq!(target.id, b.id);
        let next = hold();
        assert!(!q.handed_off("k", &target, next.clone()));
        assert!(matches!(q.turn("k", &b), Turn::Granted(_)));
        let c = q.join("k", None, None);
        tokio::time::advance(Duration::from_millis(4)).await;
        let target = q.offer("k", &next.owner).expect("still within it");
        assert_eq!(target.id, c.id);
        let last = hold();
        assert!(!q.handed_off("k", &target, last.clone()));
        assert!(matches!(q.turn("k", &c), Turn::Granted(_)));
        let _d = q.join("k", None, None);
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(
            q.offer("k", &last.owner).is_none(),
            "past the window (and the budget): released in Redis"
        );
        // without a window, the same start gives no hand-off at all
        let q = LocalQueues::default();
        q.acquired("k", Holding::new(h.clone()), None);
        let _b = q.join("k", None, None);
        assert!(q.offer("k", &h.owner).is_none());
    }

    #[tokio::test]
    async fn a_stalled_hand_off_lets_its_waiter_ask_redis_and_its_place_in_line_is_given_up() {
        let q = LocalQueues::default();
        let h = hold();
        let b = q.join("k", None, None);
        q.acquired("k", Holding::new(h.clone()), None);
        let target = q.offer("k", &h.owner).expect("offer");
        assert!(matches!(q.turn("k", &b), Turn::Wait), "offered: waits");
        q.hand_off_stalled("k", &target, &h.owner);
        assert!(
            matches!(q.turn("k", &b), Turn::Contend { .. }),
            "the hand-off is failing: asks Redis"
        );
        // its attempt found the lock held: the client took a place in line
        q.held_elsewhere("k");
        assert!(!q.handed_off("k", &target, hold()), "landed after all");
        assert!(matches!(q.turn("k", &b), Turn::Granted(_)));
        assert!(q.take_unused_place("k"), "nobody left to use the place");
        assert!(!q.take_unused_place("k"), "given up once");
    }

    #[tokio::test]
    async fn a_stalled_hand_off_to_a_waiter_gone_frees_the_waiters_behind_it() {
        let q = LocalQueues::default();
        let h = hold();
        let b = q.join("k", None, None);
        let c = q.join("k", None, None);
        q.acquired("k", Holding::new(h.clone()), None);
        let target = q.offer("k", &h.owner).expect("offer");
        let _ = q.leave("k", b.id); // gone while offered: abandoned
        assert!(matches!(q.turn("k", &c), Turn::Wait), "behind the offer");
        q.hand_off_stalled("k", &target, &h.owner);
        assert!(
            matches!(q.turn("k", &c), Turn::Contend { .. }),
            "the next waiter asks Redis"
        );
        assert!(
            q.handed_off("k", &target, hold()),
            "landed: the releaser ends it"
        );
    }

    #[tokio::test]
    async fn a_hand_off_picked_up_too_late_puts_its_waiter_back_in_line() {
        let q = LocalQueues::default();
        let h = hold();
        let b = q.join("k", None, None);
        q.acquired("k", Holding::new(h.clone()), None);
        let target = q.offer("k", &h.owner).expect("offer");
        assert!(!q.handed_off("k", &target, hold()));
        // The waiter picks the grant up after its validity: it may not use
        // it, and must not be left out of the line (it would wait forever).
        assert!(matches!(q.turn("k", &b), Turn::Granted(_)));
        assert!(matches!(q.turn("k", &b), Turn::Wait), "out of the line");
        q.requeue_front("k", &b);
        assert!(matches!(
            q.turn("k", &b),
            Turn::HeldLocally { .. } | Turn::Contend { .. }
        ));
    }

    #[tokio::test]
    async fn a_waiter_that_leaves_during_a_hand_off_is_reported_abandoned() {
        let q = LocalQueues::default();
        let h = hold();
        let b = q.join("k", None, None);
        q.acquired("k", Holding::new(h.clone()), None);
        let target = q.offer("k", &h.owner).expect("offer");
        assert!(q.leave("k", b.id).0.is_none());
        let next = hold();
        assert!(q.handed_off("k", &target, next.clone()));
        q.ended("k", &next.owner);
        assert_eq!(q.len(), 0);
    }

    #[tokio::test]
    async fn a_stale_hold_does_not_end_the_current_one() {
        let q = LocalQueues::default();
        let old = hold();
        let new = hold();
        q.acquired("k", Holding::new(old.clone()), None);
        q.acquired("k", Holding::new(new.clone()), None);
        q.ended("k", &old.owner);
        assert_eq!(q.len(), 1, "the newer hold is still recorded");
        q.ended("k", &new.owner);
        assert_eq!(q.len(), 0);
    }

    #[tokio::test]
    async fn only_the_context_of_a_hold_re_enters_it() {
        let q = LocalQueues::default();
        let h = Hold::granted(
            keys(),
            Arc::from("c:x"),
            1,
            Some(42),
            Instant::now(),
            Duration::from_secs(30),
        )
        .expect("valid");
        q.acquired("k", Holding::new(h.clone()), None);
        assert!(q.context_hold("k", 42).is_some());
        assert!(q.context_hold("k", 43).is_none());
        h.mark_lost("test");
        assert!(
            q.context_hold("k", 42).is_none(),
            "a lost hold is not re-entered"
        );
    }
}
