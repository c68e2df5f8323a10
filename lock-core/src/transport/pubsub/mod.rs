//! One shared pub/sub connection per client that wakes waiting acquirers.
//!
//! Waiters register on a lock's channel (reference counted: the first waiter
//! subscribes, the last one unsubscribes). An unlock message `0` wakes one
//! local waiter of that channel, the longest-waiting one that is not already
//! awake; any other message wakes them all. When the connection drops, every
//! waiter is woken and falls back to retries bounded by the holder's PTTL
//! while the task reconnects; after the reconnect every channel is
//! subscribed again and every waiter is woken once more, so no unlock that
//! happened in between is missed for longer than one retry.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::transport::endpoint::Endpoint;
use crate::transport::pubsub::sharding::Sharding;

mod cluster;
#[cfg(feature = "memory")]
mod memory;
pub(crate) mod sharding;

/// The unlock message that wakes one waiter per client (a mutex was
/// released: Redisson's `UNLOCK_MESSAGE`); any other message wakes every
/// waiter of the channel.
pub(crate) const WAKE_ONE: &str = "0";

const MIN_BACKOFF: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How often an idle pub/sub connection is checked with PING, so that a
/// silently dropped connection is noticed and replaced.
const HEALTH_CHECK_EVERY: Duration = Duration::from_secs(3);

/// The client's pub/sub hub.
#[derive(Debug)]
pub(crate) struct PubSub {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    commands: mpsc::UnboundedSender<Command>,
    /// Told (once) when Redis refuses a subscription (ACL).
    on_denied: Box<dyn Fn(&redis::RedisError) + Send + Sync>,
    denial_reported: AtomicBool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// Whether unlock messages of a channel reach its waiters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Not (or no longer) confirmed by Redis: waiters rely on PTTL-bounded
    /// retries meanwhile.
    Pending,
    /// Subscribed on the live connection.
    Live,
    /// Redis refused the subscription (ACL): its error text.
    Denied(Arc<str>),
}

#[derive(Debug, Default)]
struct State {
    /// By name, in order: waking every channel (a lost connection) wakes
    /// them in the same order each time (a seeded simulation replays).
    channels: BTreeMap<String, Channel>,
    next_generation: u64,
}

/// The local waiters of one channel, in arrival order.
#[derive(Debug)]
struct Channel {
    /// Changes each time the channel is created anew, so that a late
    /// confirmation of an older subscription does not mark this one live.
    generation: u64,
    waiters: VecDeque<Arc<Slot>>,
    /// Every message wakes every waiter (a channel where several waiters
    /// of one client may proceed at once: a read-write lock's readers).
    wake_every: bool,
    /// Whether Redis confirmed (or refused) the subscription on the live
    /// connection.
    live: watch::Sender<Status>,
}

#[derive(Debug, Default)]
struct Slot {
    notify: Notify,
    /// Woken and not yet consumed by the waiter.
    pending: AtomicBool,
}

impl Slot {
    fn wake(&self) {
        self.pending.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }
}

#[derive(Debug)]
enum Command {
    Subscribe { channel: String, generation: u64 },
    Unsubscribe { channel: String },
}

impl Channel {
    /// Wakes the longest-waiting waiter that is not awake already.
    fn wake_one(&self) {
        if let Some(slot) = self.waiters.iter().find(|s| !s.is_pending()) {
            slot.wake();
        }
    }

    fn wake_all(&self) {
        for slot in &self.waiters {
            slot.wake();
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the state half-updated
        // in a way that matters more than losing wake-ups, so carry on.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn dispatch(&self, channel: &str, payload: &[u8]) {
        let state = self.state();
        if let Some(ch) = state.channels.get(channel) {
            if payload == WAKE_ONE.as_bytes() && !ch.wake_every {
                ch.wake_one();
            } else {
                ch.wake_all();
            }
        }
    }

    /// Marks every channel not live and wakes every waiter so it falls back
    /// to PTTL-bounded retries.
    fn disconnected(&self) {
        let state = self.state();
        for ch in state.channels.values() {
            ch.live.send_replace(Status::Pending);
            ch.wake_all();
        }
    }

    /// Redis refused to subscribe `channel`: its waiters are told (their
    /// acquisitions fail with the error), and the error is reported once.
    fn deny(&self, channel: &str, generation: u64, err: &redis::RedisError) {
        if let Some(ch) = self.state().channels.get(channel) {
            if ch.generation == generation {
                ch.live
                    .send_replace(Status::Denied(Arc::from(err.to_string())));
                ch.wake_all();
            }
        }
        if !self.denial_reported.swap(true, Ordering::AcqRel) {
            tracing::warn!(channel, error = %err, "lock pub/sub subscription refused by Redis (ACL): waiting acquisitions fail until the user may subscribe to the lock channels");
            (self.on_denied)(err);
        }
    }

    fn wants(&self, channel: &str, generation: u64) -> bool {
        self.state()
            .channels
            .get(channel)
            .is_some_and(|c| c.generation == generation)
    }

    /// The generation of `channel` while it has waiters.
    fn generation_of(&self, channel: &str) -> Option<u64> {
        self.state().channels.get(channel).map(|c| c.generation)
    }

    /// Every channel with waiters, and its generation.
    fn channels(&self) -> Vec<(String, u64)> {
        self.state()
            .channels
            .iter()
            .map(|(name, ch)| (name.clone(), ch.generation))
            .collect()
    }

    /// The server ended `channel`'s subscription (its slot moved): not
    /// live until subscribed again, and its waiters retry once (an unlock
    /// may have been published meanwhile).
    fn moved(&self, channel: &str) {
        if let Some(ch) = self.state().channels.get(channel) {
            ch.live.send_replace(Status::Pending);
            ch.wake_all();
        }
    }

    fn mark_live(&self, channel: &str, generation: u64) {
        if let Some(ch) = self.state().channels.get(channel) {
            if ch.generation == generation {
                ch.live.send_replace(Status::Live);
            }
        }
    }
}

impl PubSub {
    /// Starts the hub's task on the current runtime.
    pub(crate) fn start(
        endpoint: Arc<Endpoint>,
        sharding: Arc<Sharding>,
        connect_timeout: Duration,
        command_timeout: Duration,
        shutdown: CancellationToken,
        on_denied: Box<dyn Fn(&redis::RedisError) + Send + Sync>,
    ) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            commands,
            on_denied,
            denial_reported: AtomicBool::new(false),
        });
        tokio::spawn(run(
            shared.clone(),
            rx,
            endpoint,
            sharding,
            connect_timeout,
            command_timeout,
            shutdown,
        ));
        PubSub { shared }
    }

    /// Registers a waiter on `channel`, subscribing when it is the first one.
    /// Wait for [`Subscription::ready`] before the retry that follows, so an
    /// unlock between the retry and the wait is not missed.
    pub(crate) fn subscribe(&self, channel: &str) -> Subscription {
        self.subscribe_waking(channel, false)
    }

    /// Like [`subscribe`](Self::subscribe), for a channel on which every
    /// message wakes every local waiter (Redisson's `0` included): the
    /// readers of a read-write lock may all proceed at once.
    pub(crate) fn subscribe_shared(&self, channel: &str) -> Subscription {
        self.subscribe_waking(channel, true)
    }

    fn subscribe_waking(&self, channel: &str, wake_every: bool) -> Subscription {
        let slot = Arc::new(Slot::default());
        let mut state = self.shared.state();
        let live = match state.channels.get_mut(channel) {
            Some(ch) => {
                ch.wake_every |= wake_every;
                ch.waiters.push_back(slot.clone());
                ch.live.subscribe()
            }
            None => {
                state.next_generation += 1;
                let generation = state.next_generation;
                let (live, rx) = watch::channel(Status::Pending);
                state.channels.insert(
                    channel.to_string(),
                    Channel {
                        generation,
                        waiters: VecDeque::from([slot.clone()]),
                        wake_every,
                        live,
                    },
                );
                // The task outlives every subscription unless the client is
                // shutting down, in which case nobody waits for the answer.
                let _ = self.shared.commands.send(Command::Subscribe {
                    channel: channel.to_string(),
                    generation,
                });
                rx
            }
        };
        drop(state);
        Subscription {
            shared: self.shared.clone(),
            channel: channel.to_string(),
            slot,
            live,
        }
    }

    /// Number of channels with local waiters (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn channel_count(&self) -> usize {
        self.shared.state().channels.len()
    }
}

/// One waiter's registration on a channel; unregisters on drop.
#[derive(Debug)]
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    slot: Arc<Slot>,
    live: watch::Receiver<Status>,
}

impl Subscription {
    /// Waits (at most `timeout`) until Redis confirmed or refused the
    /// subscription. `Pending` when it did neither: the caller then relies
    /// on PTTL-bounded retries meanwhile.
    pub(crate) async fn ready(&mut self, timeout: Duration) -> Status {
        match tokio::time::timeout(timeout, self.live.wait_for(|s| *s != Status::Pending)).await {
            Ok(Ok(status)) => status.clone(),
            _ => Status::Pending,
        }
    }

    /// The subscription's status now.
    pub(crate) fn status(&self) -> Status {
        self.live.borrow().clone()
    }

    /// Whether unlock messages currently reach this waiter.
    #[cfg(test)]
    pub(crate) fn is_live(&self) -> bool {
        *self.live.borrow() == Status::Live
    }

    /// Resolves when this waiter is woken (unlock message, reconnect).
    pub(crate) async fn woken(&self) {
        self.slot.notify.notified().await;
        self.slot.pending.store(false, Ordering::Release);
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        let Some(ch) = state.channels.get_mut(&self.channel) else {
            return;
        };
        ch.waiters.retain(|s| !Arc::ptr_eq(s, &self.slot));
        if self.slot.is_pending() {
            // This waiter was woken for an unlock it will not use: pass it on.
            ch.wake_one();
        }
        if ch.waiters.is_empty() {
            state.channels.remove(&self.channel);
            let _ = self.shared.commands.send(Command::Unsubscribe {
                channel: std::mem::take(&mut self.channel),
            });
        }
    }
}

async fn run(
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    endpoint: Arc<Endpoint>,
    sharding: Arc<Sharding>,
    connect_timeout: Duration,
    command_timeout: Duration,
    shutdown: CancellationToken,
) {
    #[cfg(feature = "memory")]
    if let Endpoint::Memory(server) = &*endpoint {
        return memory::run(shared, commands, server.clone(), shutdown).await;
    }
    if let Endpoint::Cluster(nodes) = &*endpoint {
        return cluster::run(
            shared,
            commands,
            nodes,
            sharding,
            connect_timeout,
            command_timeout,
            shutdown,
        )
        .await;
    }
    let mut backoff = MIN_BACKOFF;
    // With Sentinel: a new primary moves this connection there.
    let mut switches = endpoint.switches();
    loop {
        let connect = async {
            let client = endpoint.client().await?;
            client
                .get_async_pubsub()
                .await
                .map_err(|e| crate::transport::endpoint::cannot_connect(&client, e))
        };
        let connected = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            r = tokio::time::timeout(connect_timeout, connect) => r,
        };
        if let Some(switches) = &mut switches {
            switches.mark_unchanged();
        }
        let pubsub = match after_connect(connected, &shutdown, &mut backoff).await {
            Step::Ready(p) => p,
            Step::Retry => continue,
            Step::Stop => return,
        };
        let (mut sink, mut stream) = pubsub.split();

        // Subscribe again to every channel that has waiters.
        let wanted = shared.channels();
        if !wanted.is_empty() {
            let names: Vec<&str> = wanted.iter().map(|(n, _)| n.as_str()).collect();
            match tokio::time::timeout(command_timeout, sink.subscribe(&names)).await {
                Ok(Ok(())) => {
                    for (name, generation) in &wanted {
                        shared.mark_live(name, *generation);
                    }
                    // Unlocks published while we were away were missed: let
                    // every waiter retry once.
                    let state = shared.state();
                    for ch in state.channels.values() {
                        ch.wake_all();
                    }
                }
                Ok(Err(e)) if is_denied(&e) => {
                    for (name, generation) in &wanted {
                        shared.deny(name, *generation, &e);
                    }
                }
                _ => {
                    if sleep_or_shutdown(&shutdown, backoff).await {
                        return;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        backoff = MIN_BACKOFF;
        tracing::debug!(channels = wanted.len(), "lock pub/sub connected");

        let mut health = tokio::time::interval(HEALTH_CHECK_EVERY);
        health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        health.reset();
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = primary_switched(&mut switches) => {
                    tracing::debug!("lock pub/sub moves to the new primary");
                    break;
                }
                _ = health.tick() => {
                    // Any reply will do: a subscribed RESP2 connection
                    // answers ["pong", ""], RESP3 and an idle one "PONG".
                    let pong = tokio::time::timeout(command_timeout, sink.ping::<redis::Value>()).await;
                    if !matches!(pong, Ok(Ok(_))) {
                        break;
                    }
                }
                command = commands.recv() => {
                    let ok = match command {
                        None => return,
                        Some(Command::Subscribe { channel, generation }) => {
                            if !shared.wants(&channel, generation) {
                                continue;
                            }
                            let r = tokio::time::timeout(command_timeout, sink.subscribe(&channel)).await;
                            match r {
                                Ok(Ok(())) => {
                                    shared.mark_live(&channel, generation);
                                    true
                                }
                                // Refused, not broken: the connection stays.
                                Ok(Err(e)) if is_denied(&e) => {
                                    shared.deny(&channel, generation, &e);
                                    true
                                }
                                _ => false,
                            }
                        }
                        Some(Command::Unsubscribe { channel }) => {
                            if shared.state().channels.contains_key(&channel) {
                                // New waiters came back meanwhile: stay subscribed.
                                continue;
                            }
                            let r = tokio::time::timeout(command_timeout, sink.unsubscribe(&channel)).await;
                            matches!(r, Ok(Ok(())))
                        }
                    };
                    if !ok {
                        break;
                    }
                }
                message = stream.next() => match message {
                    Some(msg) => shared.dispatch(msg.get_channel_name(), msg.get_payload_bytes()),
                    None => break,
                },
            }
        }
        tracing::warn!("lock pub/sub connection lost; waiters fall back to TTL-bounded retries while it reconnects");
        shared.disconnected();
    }
}

/// What follows a connect attempt.
enum Step<T> {
    Ready(T),
    /// Failed: try again (after the back-off pause, for a refusal).
    Retry,
    /// The client shut down.
    Stop,
}

/// Logs a failed connect and pauses (a refused connect waits out the
/// back-off; a timed-out one has waited already); doubles the back-off.
async fn after_connect<T>(
    attempt: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
    shutdown: &CancellationToken,
    backoff: &mut Duration,
) -> Step<T> {
    match attempt {
        Ok(Ok(conn)) => return Step::Ready(conn),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "lock pub/sub connect failed; retrying");
            if sleep_or_shutdown(shutdown, *backoff).await {
                return Step::Stop;
            }
        }
        Err(_) => tracing::debug!("lock pub/sub connect timed out; retrying"),
    }
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
    Step::Retry
}

/// Resolves when the endpoint names a new primary; never without Sentinel.
async fn primary_switched(switches: &mut Option<watch::Receiver<u64>>) {
    match switches {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// A refusal by the server's ACL (not a broken connection).
fn is_denied(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
        || e.to_string().contains("NOPERM")
}

/// Sleeps for `d`; returns true when the client shut down meanwhile.
async fn sleep_or_shutdown(shutdown: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        biased;
        _ = shutdown.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub_without_server() -> (PubSub, CancellationToken) {
        // Port 1 on loopback: nothing listens, so the hub never connects and
        // the tests exercise only the local registry.
        let client = redis::Client::open("redis://127.0.0.1:1").expect("static url");
        let shutdown = CancellationToken::new();
        let hub = PubSub::start(
            Arc::new(Endpoint::Direct(client)),
            Arc::new(Sharding::new(crate::config::PubSubMode::Auto, false)),
            Duration::from_millis(50),
            Duration::from_millis(50),
            shutdown.clone(),
            Box::new(|_| {}),
        );
        (hub, shutdown)
    }

    async fn is_woken(sub: &Subscription) -> bool {
        tokio::time::timeout(Duration::from_millis(20), sub.woken())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn unlock_message_wakes_exactly_one_waiter_in_arrival_order() {
        let (hub, shutdown) = hub_without_server();
        let a = hub.subscribe("ch");
        let b = hub.subscribe("ch");
        hub.shared.dispatch("ch", b"0");
        assert!(is_woken(&a).await);
        assert!(!is_woken(&b).await);
        hub.shared.dispatch("ch", b"0");
        hub.shared.dispatch("ch", b"0");
        // a consumed its wake-up, so the next goes to a again (front of the
        // queue), and the one after that finds a pending and goes to b
        assert!(is_woken(&a).await);
        assert!(is_woken(&b).await);
        shutdown.cancel();
    }

    #[tokio::test]
    async fn other_messages_wake_every_waiter() {
        let (hub, shutdown) = hub_without_server();
        let subs: Vec<_> = (0..3).map(|_| hub.subscribe("ch")).collect();
        hub.shared.dispatch("ch", b"1");
        for s in &subs {
            assert!(is_woken(s).await);
        }
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_dropped_woken_waiter_passes_its_wake_up_on() {
        let (hub, shutdown) = hub_without_server();
        let a = hub.subscribe("ch");
        let b = hub.subscribe("ch");
        hub.shared.dispatch("ch", b"0");
        drop(a);
        assert!(is_woken(&b).await);
        shutdown.cancel();
    }

    #[tokio::test]
    async fn channels_are_reference_counted() {
        let (hub, shutdown) = hub_without_server();
        let a = hub.subscribe("x");
        let b = hub.subscribe("x");
        let c = hub.subscribe("y");
        assert_eq!(hub.channel_count(), 2);
        drop(a);
        assert_eq!(hub.channel_count(), 2);
        drop(b);
        assert_eq!(hub.channel_count(), 1);
        drop(c);
        assert_eq!(hub.channel_count(), 0);
        shutdown.cancel();
    }

    #[tokio::test]
    async fn not_ready_without_a_server() {
        let (hub, shutdown) = hub_without_server();
        let mut a = hub.subscribe("x");
        assert_eq!(a.ready(Duration::from_millis(30)).await, Status::Pending);
        assert!(!a.is_live());
        shutdown.cancel();
    }
}
