//! One watchdog per client: renews every watchdog-leased lock it holds.
//!
//! All such locks share one lease (the client's watchdog timeout) and one
//! renewal period (a third of it), so the schedule is a FIFO queue ordered by
//! due time (`cadence`); the few entries that must come earlier (a retry
//! after a failed renewal, a hold registered with little validity left) wait
//! in a small heap beside it (`early`). When the first of them is due, the
//! watchdog takes every entry due within the next tenth of a period (half a
//! period on a cluster, see `run`) and renews them in pipelined batches, one
//! script call per batch.
//!
//! Entries live in a slab: a renewal finds its entry by index (no hashing);
//! a generation per slot tells a queued due time from one of an entry that
//! has gone meanwhile. The hold's address maps to its slot for `register`
//! and `unregister` only.
//!
//! Entries are holds (see `hold`): a confirmed renewal pushes the hold's
//! deadline to the call's send time plus the lease (minus the drift
//! margin). A renewal that answers 0 marks the hold lost at once. A failed
//! renewal is retried well before the deadline; a hold whose deadline
//! passes is lost whatever the watchdog does (its guards compare with the
//! clock). Several guards of one hold (re-entry) share one entry. The slab
//! caches each hold's deadline (`Entry::valid_until`, a lower bound: only
//! renewals and re-entries move a deadline, and only later) so that
//! building a pass need not read every hold; whether a deadline has passed
//! is decided by the hold's own deadline whenever the cache says it is
//! less than a period away (a re-entry with a longer lease may have pushed
//! it back).
//!
//! Calls are settled one by one as their answers come, not pass by pass:
//! each call has its own deadline, counted from when it is sent — a period
//! at most, and never past the earliest deadline of its holds (a call whose
//! holds have all run out before it could be sent is not sent; they are
//! lost by their deadline). A pass's calls never wait for another pass's.
//!
//! On a Redis Cluster a pass makes one call per hash slot (a script may only
//! touch keys of one slot), thousands of them, which would swamp the
//! cluster connection's request queue all at once. They wait in lanes, one
//! per primary, with [`NODE_CALLS_IN_FLIGHT`] in flight per lane: a primary
//! that stops answering (stalled, SIGSTOPped, partitioned) fills only its
//! own lane, so it costs its own holds (reported lost by their deadlines)
//! and never a healthy primary's. (One ordered window for all primaries
//! with one deadline per pass, as before, let a stalled primary's calls
//! hold back every later call until they all started past the deadline.)
//! The lane of a slot comes from the cluster's slot map (`CLUSTER SLOTS`,
//! see `slot_owners.rs`), read in the background, never by a renewal:
//! every call is still routed by its key, so a map that is out of date
//! only mixes two nodes' calls in one lane until the next reading (every
//! 10 s, and after a failed call). NodeLanes keyed by node, each call with its
//! own deadline, is the simplest shape that isolates nodes: per-node
//! pipelines would need the map to be right (a moved slot's call inside
//! another node's pipeline answers `MOVED`, which redis-rs would follow
//! with the whole pipeline), and per-call deadlines alone with one shared
//! window would still let the stalled node's calls fill the window.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::hold::shared::Core;
use crate::hold::slot_owners::{key_slot, SlotMap, SlotOwners};
use crate::hold::Hold;
use crate::metrics::RenewalFailure;
use crate::protocol::renew::parse_renewals;
use crate::transport::connection::Lane as ConnLane;

/// Renewals per script call (one round trip).
const BATCH: usize = 512;

/// Identifies a hold: the address of its `Hold` (unique while the entry,
/// which keeps the `Arc`, exists).
type HoldAddr = usize;

fn hold_addr(hold: &Arc<Hold>) -> HoldAddr {
    Arc::as_ptr(hold) as usize
}

#[derive(Debug)]
struct Entry {
    /// Watchdog-leased guards of this hold.
    guards: usize,
    hold: Arc<Hold>,
    /// The renewal's arguments, built once: the lock key, then the owner.
    args: RenewArgs,
    /// The hold's deadline as of its last renewal here: a lower bound
    /// (others only extend it), read instead of the hold itself when
    /// batches are built while it is far off; near it, the hold's own
    /// deadline decides (see `next_batches`).
    valid_until: Instant,
    /// The hash slot of the lock key (used on a Redis Cluster only).
    hash_slot: u16,
}

impl Entry {
    /// Whether the hold's deadline is still ahead at `now`. The cached
    /// bound answers while it is at or past `near`; before that, the hold's
    /// own deadline (which the cache then takes).
    fn still_valid(&mut self, now: Instant, near: Instant) -> bool {
        if self.valid_until < near {
            self.valid_until = self.valid_until.max(self.hold.deadline());
        }
        self.valid_until > now
    }
}

/// The lock key and the owner id of a hold, side by side: inside the slab
/// entry when they fit (one sequential read per renewal, no pointer to
/// follow), else in one allocation.
#[derive(Debug)]
struct RenewArgs {
    bytes: ArgBytes,
    key_len: usize,
}

/// Room for a typical key and owner id (an owner id is ~45 bytes).
const INLINE_ARGS: usize = 112;

#[derive(Debug)]
enum ArgBytes {
    Inline { len: u8, buf: [u8; INLINE_ARGS] },
    Heap(Box<[u8]>),
}

impl RenewArgs {
    fn new(hold: &Hold) -> Self {
        let key = hold.keys.lock.as_bytes();
        let field = hold.keys.renewal_arg(&hold.owner);
        let owner = field.as_bytes();
        let len = key.len() + owner.len();
        let bytes = match u8::try_from(len) {
            Ok(short) if len <= INLINE_ARGS => {
                let mut buf = [0u8; INLINE_ARGS];
                buf[..key.len()].copy_from_slice(key);
                buf[key.len()..len].copy_from_slice(owner);
                ArgBytes::Inline { len: short, buf }
            }
            _ => ArgBytes::Heap([key, owner].concat().into_boxed_slice()),
        };
        RenewArgs {
            bytes,
            key_len: key.len(),
        }
    }

    fn all(&self) -> &[u8] {
        match &self.bytes {
            ArgBytes::Inline { len, buf } => buf.get(..usize::from(*len)).unwrap_or_default(),
            ArgBytes::Heap(bytes) => bytes,
        }
    }

    fn len(&self) -> usize {
        self.all().len()
    }

    fn key(&self) -> &[u8] {
        self.all().get(..self.key_len).unwrap_or_default()
    }

    fn owner(&self) -> &[u8] {
        self.all().get(self.key_len..).unwrap_or_default()
    }
}

#[derive(Debug, Default)]
struct Slot {
    /// Changes every time the slot gets a new entry.
    generation: u64,
    entry: Option<Entry>,
}

/// When the entry in `slot` (of `generation`) is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    at: Instant,
    slot: u32,
    generation: u64,
}

#[derive(Debug, Default)]
struct Schedule {
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_hold: HashMap<HoldAddr, u32>,
    /// Due times in order: every renewal and most registrations are a
    /// period from now, so they arrive in order (see [`Schedule::push`]).
    cadence: VecDeque<Due>,
    /// Due times earlier than the back of `cadence`: retries, holds with
    /// little validity left.
    early: BinaryHeap<Reverse<Due>>,
}

/// The entry of `slot` if it is still the one `generation` was for.
fn live_in(slots: &[Slot], slot: u32, generation: u64) -> Option<&Entry> {
    let s = slots.get(slot as usize)?;
    if s.generation == generation {
        s.entry.as_ref()
    } else {
        None
    }
}

/// [`live_in`], to update the entry.
fn live_mut(slots: &mut [Slot], slot: u32, generation: u64) -> Option<&mut Entry> {
    let s = slots.get_mut(slot as usize)?;
    if s.generation == generation {
        s.entry.as_mut()
    } else {
        None
    }
}

impl Schedule {
    /// The hold in `slot` if it is still the entry `generation` was for.
    fn live(&self, slot: u32, generation: u64) -> Option<&Entry> {
        live_in(&self.slots, slot, generation)
    }

    /// Drops the due times of entries that have gone, once they outnumber
    /// the live ones (guards released within a period leave theirs behind
    /// until they come up): memory stays proportional to the held locks.
    fn compact_if_stale(&mut self) {
        if self.cadence.len() + self.early.len() <= 2 * self.by_hold.len() + 1024 {
            return;
        }
        let slots = &self.slots;
        self.cadence
            .retain(|d| live_in(slots, d.slot, d.generation).is_some());
        self.early
            .retain(|Reverse(d)| live_in(slots, d.slot, d.generation).is_some());
    }

    /// Queues `due`; `exact`: it must not come later than asked (a retry,
    /// a short validity), else it may follow the cadence's last due time
    /// (at most one pass later: renewals of one pass share their send time).
    fn push(&mut self, due: Due, exact: bool) {
        match self.cadence.back() {
            Some(last) if last.at > due.at => {
                if exact {
                    self.early.push(Reverse(due));
                } else {
                    let at = last.at;
                    self.cadence.push_back(Due { at, ..due });
                }
            }
            _ => self.cadence.push_back(due),
        }
    }

    /// The first due time of a live entry; stale ones are dropped.
    fn next_due(&mut self) -> Option<Instant> {
        while let Some(d) = self.cadence.front() {
            if self.live(d.slot, d.generation).is_some() {
                break;
            }
            self.cadence.pop_front();
        }
        while let Some(Reverse(d)) = self.early.peek() {
            if self.live(d.slot, d.generation).is_some() {
                break;
            }
            self.early.pop();
        }
        match (self.cadence.front(), self.early.peek()) {
            (Some(a), Some(Reverse(b))) => Some(a.at.min(b.at)),
            (Some(a), None) => Some(a.at),
            (None, Some(Reverse(b))) => Some(b.at),
            (None, None) => None,
        }
    }

    /// Pops the next due time not later than `horizon`.
    fn pop_due(&mut self, horizon: Instant) -> Option<Due> {
        let from_cadence = self.cadence.front().filter(|d| d.at <= horizon).copied();
        let from_early = self.early.peek().map(|r| r.0).filter(|d| d.at <= horizon);
        match (from_cadence, from_early) {
            (Some(a), Some(b)) if b.at < a.at => self.early.pop().map(|r| r.0),
            (Some(_), _) => self.cadence.pop_front(),
            (None, Some(_)) => self.early.pop().map(|r| r.0),
            (None, None) => None,
        }
    }

    /// Removes the entry in `slot` (of `generation`) and frees the slot.
    fn remove(&mut self, slot: u32, generation: u64) -> Option<Entry> {
        let s = self.slots.get_mut(slot as usize)?;
        if s.generation != generation {
            return None;
        }
        let entry = s.entry.take()?;
        self.by_hold.remove(&hold_addr(&entry.hold));
        self.free.push(slot);
        Some(entry)
    }
}

/// Handle to the client's watchdog task.
#[derive(Debug)]
pub(crate) struct Watchdog {
    schedule: Arc<Mutex<Schedule>>,
    wake: Arc<Notify>,
    period: Duration,
}

fn locked(schedule: &Mutex<Schedule>) -> MutexGuard<'_, Schedule> {
    schedule.lock().unwrap_or_else(|p| p.into_inner())
}

impl Watchdog {
    /// Starts the watchdog task on the current runtime.
    pub(crate) fn start(core: Arc<Core>, shutdown: CancellationToken) -> Self {
        let schedule = Arc::new(Mutex::new(Schedule::default()));
        let wake = Arc::new(Notify::new());
        let period = core.config.watchdog_timeout / 3;
        tokio::spawn(run(core, schedule.clone(), wake.clone(), period, shutdown));
        Watchdog {
            schedule,
            wake,
            period,
        }
    }

    /// Starts renewing `hold` for one more guard.
    pub(crate) fn register(&self, hold: Arc<Hold>) {
        let mut s = locked(&self.schedule);
        let addr = hold_addr(&hold);
        if let Some(&slot) = s.by_hold.get(&addr) {
            if let Some(entry) = s
                .slots
                .get_mut(slot as usize)
                .and_then(|s| s.entry.as_mut())
            {
                entry.guards += 1;
                return;
            }
        }
        let was_empty = s.by_hold.is_empty();
        // Renewed a period from now, or sooner when the hold has less than
        // two periods of validity left (picked up late, a slow round trip).
        let wait = self.period.min(hold.remaining() / 2);
        let slot = match s.free.pop() {
            Some(slot) => slot,
            None => {
                s.slots.push(Slot::default());
                // More than 4 billion held locks cannot be: each has a
                // guard in memory.
                u32::try_from(s.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let Some(place) = s.slots.get_mut(slot as usize) else {
            return;
        };
        place.generation += 1;
        let args = RenewArgs::new(&hold);
        let valid_until = hold.deadline();
        let hash_slot = key_slot(args.key());
        place.entry = Some(Entry {
            guards: 1,
            hold,
            args,
            valid_until,
            hash_slot,
        });
        let generation = place.generation;
        s.by_hold.insert(addr, slot);
        let due = Due {
            at: Instant::now() + wait,
            slot,
            generation,
        };
        s.push(due, wait < self.period);
        s.compact_if_stale();
        drop(s);
        if was_empty {
            self.wake.notify_one();
        }
    }

    /// One guard of `hold` stops renewing; the entry goes with its last
    /// guard.
    pub(crate) fn unregister(&self, hold: &Arc<Hold>) {
        let mut s = locked(&self.schedule);
        let Some(&slot) = s.by_hold.get(&hold_addr(hold)) else {
            return;
        };
        let Some(place) = s.slots.get_mut(slot as usize) else {
            return;
        };
        let generation = place.generation;
        if let Some(entry) = place.entry.as_mut() {
            entry.guards = entry.guards.saturating_sub(1);
            if entry.guards == 0 {
                s.remove(slot, generation);
            }
        }
    }

    /// Number of holds being renewed.
    pub(crate) fn len(&self) -> usize {
        locked(&self.schedule).by_hold.len()
    }
}

/// Renewal calls in flight at once per Redis Cluster primary. Each primary
/// has its own places, so the calls to a stalled one hold up only its own
/// later calls, never another primary's.
const NODE_CALLS_IN_FLIGHT: usize = 32;

/// The lane of calls whose slot the cluster's slot map does not know (yet).
const UNKNOWN_NODE: NodeLane = NodeLane::MAX;

/// Where a call waits for a place in flight: on a Redis Cluster the index of
/// the slot's primary in the current slot map (see `slot_owners.rs`); on a
/// single server, one lane without a limit.
type NodeLane = u16;

/// One renewal of a pass: where its entry is. The hold is looked up again
/// in the slab when the answer comes (no reference counting per renewal).
#[derive(Clone, Copy, Debug)]
struct Renewal {
    slot: u32,
    generation: u64,
}

/// One script call: its renewals, its command, its time bound.
#[derive(Debug)]
struct Batch {
    renewals: Vec<Renewal>,
    cmd: redis::Cmd,
    /// An answer after this is of no use: the earliest deadline of its
    /// holds when they were taken (a lower bound of each).
    deadline: Instant,
    /// The hash slot of its keys, on a Redis Cluster.
    hash_slot: Option<u16>,
    /// When the pass took its entries; the pass's number.
    taken: Instant,
    pass: u64,
}

/// Takes up to [`BATCH`] entries due by `horizon` and builds their script
/// call into `out`; on a Redis Cluster, every entry due by `horizon`, in
/// one call per hash slot (a script may only touch keys of one slot; at
/// most [`BATCH`] locks per call). Holds whose deadline has passed are
/// lost, not renewed: the slab's cached bound decides while it is a
/// period or more away, the hold's own deadline when it is nearer (a
/// re-entry with a longer lease may have pushed it back). False when
/// nothing was due. Runs under the schedule's lock; on a single server
/// one batch at a time, so that acquisitions and releases never wait for
/// a whole pass (on a cluster they wait while the whole pass is taken and
/// grouped).
#[allow(clippy::too_many_arguments)]
fn next_batches(
    s: &mut Schedule,
    core: &Core,
    now: Instant,
    near: Instant,
    horizon: Instant,
    lease_ms: u64,
    pass: u64,
    out: &mut Vec<Batch>,
) -> bool {
    let mut renewals = Vec::with_capacity(BATCH);
    let mut bounds: Vec<(Instant, u16)> = Vec::with_capacity(BATCH);
    // On a cluster the whole pass is taken at once, so that the locks of
    // one hash slot share a call however many slots there are.
    while core.cluster || renewals.len() < BATCH {
        let Some(d) = s.pop_due(horizon) else {
            break;
        };
        let Some(entry) = live_mut(&mut s.slots, d.slot, d.generation) else {
            continue;
        };
        // A hold that is already lost is renewed all the same (its guard
        // drops it soon): Redis answers for it, and a renewal never revives
        // a hold locally (see `Hold::extend`).
        if !entry.still_valid(now, near) {
            if let Some(entry) = s.remove(d.slot, d.generation) {
                entry
                    .hold
                    .mark_lost("its deadline passed before it could be renewed");
            }
            continue;
        }
        bounds.push((entry.valid_until, entry.hash_slot));
        renewals.push(Renewal {
            slot: d.slot,
            generation: d.generation,
        });
    }
    if renewals.is_empty() {
        return false;
    }
    if !core.cluster {
        let deadline = bounds.iter().map(|b| b.0).min().unwrap_or(now);
        out.push(build_batch(
            s, core, renewals, deadline, None, now, pass, lease_ms,
        ));
        return true;
    }
    let mut by_slot: HashMap<u16, (Vec<Renewal>, Instant)> = HashMap::new();
    for (r, (until, hash_slot)) in renewals.into_iter().zip(bounds) {
        let group = by_slot
            .entry(hash_slot)
            .or_insert_with(|| (Vec::new(), until));
        group.0.push(r);
        group.1 = group.1.min(until);
    }
    for (hash_slot, (renewals, deadline)) in by_slot {
        for chunk in renewals.chunks(BATCH) {
            out.push(build_batch(
                s,
                core,
                chunk.to_vec(),
                deadline,
                Some(hash_slot),
                now,
                pass,
                lease_ms,
            ));
        }
    }
    true
}

/// The renew script call for `renewals`.
#[allow(clippy::too_many_arguments)]
fn build_batch(
    s: &Schedule,
    core: &Core,
    renewals: Vec<Renewal>,
    deadline: Instant,
    hash_slot: Option<u16>,
    taken: Instant,
    pass: u64,
    lease_ms: u64,
) -> Batch {
    let args = |r: &Renewal| s.live(r.slot, r.generation).map(|e| &e.args);
    let bytes: usize = renewals.iter().filter_map(args).map(RenewArgs::len).sum();
    let script = &core.scripts.renew;
    let mut cmd = script.evalsha_prefix(renewals.len(), 2 * renewals.len() + 1, bytes + 24);
    for args in renewals.iter().filter_map(args) {
        cmd.arg(args.key());
    }
    cmd.arg(lease_ms);
    for args in renewals.iter().filter_map(args) {
        cmd.arg(args.owner());
    }
    Batch {
        renewals,
        cmd,
        deadline,
        hash_slot,
        taken,
        pass,
    }
}

/// A finished call: its batch, its lane, when it was sent, what came back.
struct Done {
    batch: Batch,
    lane: NodeLane,
    sent: Instant,
    result: Result<Vec<Option<bool>>, Error>,
}

/// Sends one batch when polled first. Its deadline runs from then: a
/// period at most, and never past the earliest deadline of its holds (a
/// call whose holds have run out by then is not sent at all).
async fn call(core: Arc<Core>, batch: Batch, lane: NodeLane, period: Duration) -> Done {
    let sent = Instant::now();
    let deadline = (sent + period).min(batch.deadline);
    let result = if deadline <= sent {
        Err(Error::CommandTimeout)
    } else {
        renew_batch(&core, &batch, deadline).await
    };
    Done {
        batch,
        lane,
        sent,
        result,
    }
}

/// The calls waiting for a place in flight, and the places taken, per lane.
#[derive(Debug, Default)]
struct NodeLanes {
    waiting: HashMap<NodeLane, VecDeque<Batch>>,
    in_flight: HashMap<NodeLane, usize>,
}

impl NodeLanes {
    /// Queues `batch` on `lane`.
    fn push(&mut self, lane: NodeLane, batch: Batch) {
        self.waiting.entry(lane).or_default().push_back(batch);
    }

    /// The next batch of `lane` if it has a place free (`limit` in flight
    /// at most); takes the place.
    fn next(&mut self, lane: NodeLane, limit: usize) -> Option<Batch> {
        let busy = self.in_flight.entry(lane).or_default();
        if *busy >= limit {
            return None;
        }
        let waiting = self.waiting.get_mut(&lane)?;
        let batch = waiting.pop_front()?;
        if waiting.is_empty() {
            self.waiting.remove(&lane);
        }
        *busy += 1;
        Some(batch)
    }

    /// A call of `lane` finished: its place is free.
    fn finished(&mut self, lane: NodeLane) {
        if let Some(busy) = self.in_flight.get_mut(&lane) {
            *busy = busy.saturating_sub(1);
            if *busy == 0 && !self.waiting.contains_key(&lane) {
                self.in_flight.remove(&lane);
            }
        }
    }

    /// NodeLanes with calls waiting.
    fn with_waiting(&self) -> Vec<NodeLane> {
        self.waiting.keys().copied().collect()
    }
}

/// What a pass did, reported once its last call is settled.
#[derive(Debug)]
struct Tally {
    calls: usize,
    locks: usize,
    renewed: usize,
    lost: usize,
    started: Instant,
}

/// What woke the watchdog.
enum Woke {
    Shutdown,
    Settle(Box<Done>),
    Registered,
    Due,
}

async fn run(
    core: Arc<Core>,
    schedule: Arc<Mutex<Schedule>>,
    wake: Arc<Notify>,
    period: Duration,
    shutdown: CancellationToken,
) {
    // How early an entry may be renewed with the pass before it. On a
    // cluster a pass makes one call per hash slot: renewing up to half a
    // period early brings the due times of one slot's locks together (they
    // are then due together), so a period costs about one call per slot
    // with locks instead of one per lock, for at most one extra renewal of
    // a lock per period.
    let slack = if core.cluster {
        period / 2
    } else {
        period / 10
    };
    let retry_delay = (period / 4).max(Duration::from_millis(10));
    let lease = core.config.watchdog_timeout;
    let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
    let validity = crate::hold::validity(lease);
    let limit = if core.cluster {
        NODE_CALLS_IN_FLIGHT
    } else {
        usize::MAX
    };
    // Each node asked for the slot map gets this long to answer.
    let map_bound = core
        .config
        .command_timeout
        .min(period)
        .max(Duration::from_millis(10));
    let slot_map = Arc::new(SlotMap::default());
    let mut lanes = NodeLanes::default();
    let mut calls = FuturesUnordered::new();
    let mut passes: HashMap<u64, Tally> = HashMap::new();
    let mut pass: u64 = 0;
    loop {
        let next_due = locked(&schedule).next_due();
        if core.cluster && next_due.is_some() {
            slot_map.refresh_if_due(&core, period, map_bound, &shutdown);
        }
        let woke = tokio::select! {
            biased;
            _ = shutdown.cancelled() => Woke::Shutdown,
            Some(done) = calls.next(), if !calls.is_empty() => Woke::Settle(Box::new(done)),
            _ = wake.notified(), if next_due.is_none() => Woke::Registered,
            _ = tokio::time::sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => Woke::Due,
        };
        match woke {
            Woke::Shutdown => return,
            Woke::Registered => continue,
            Woke::Settle(done) => {
                lanes.finished(done.lane);
                if core.cluster && done.lane != UNKNOWN_NODE {
                    slot_map.note_call(done.lane, done.result.is_ok());
                }
                let (renewed, lost) = settle(
                    &mut locked(&schedule),
                    &core,
                    &done,
                    period,
                    lease,
                    validity,
                    retry_delay,
                );
                if let Some(tally) = passes.get_mut(&done.batch.pass) {
                    tally.calls = tally.calls.saturating_sub(1);
                    tally.renewed += renewed;
                    tally.lost += lost;
                    if tally.calls == 0 {
                        crate::metrics::renewed_many(tally.renewed);
                        tracing::trace!(
                            locks = tally.locks,
                            lost = tally.lost,
                            elapsed_us = tally.started.elapsed().as_micros() as u64,
                            "lock watchdog pass"
                        );
                        passes.remove(&done.batch.pass);
                    }
                }
                while let Some(batch) = lanes.next(done.lane, limit) {
                    calls.push(call(core.clone(), batch, done.lane, period));
                }
                continue;
            }
            Woke::Due => {}
        }

        // Everything due now or within the slack, in batches.
        let now = Instant::now();
        let horizon = now + slack;
        pass += 1;
        let mut batches = Vec::new();
        while next_batches(
            &mut locked(&schedule),
            &core,
            now,
            now + period,
            horizon,
            lease_ms,
            pass,
            &mut batches,
        ) {}
        if batches.is_empty() {
            continue;
        }
        passes.insert(
            pass,
            Tally {
                calls: batches.len(),
                locks: batches.iter().map(|b| b.renewals.len()).sum(),
                renewed: 0,
                lost: 0,
                started: now,
            },
        );
        // Each call goes to its lane (the primary of its slot) and is sent
        // when the lane has a place: the calls of one node wait for that
        // node's answers only.
        let owners: Option<Arc<SlotOwners>> = if core.cluster {
            slot_map.current()
        } else {
            None
        };
        for batch in batches {
            let lane = match (&owners, batch.hash_slot) {
                (Some(owners), Some(slot)) => owners.node_of(slot).unwrap_or(UNKNOWN_NODE),
                (None, Some(_)) => UNKNOWN_NODE,
                (_, None) => 0,
            };
            lanes.push(lane, batch);
        }
        for lane in lanes.with_waiting() {
            while let Some(batch) = lanes.next(lane, limit) {
                calls.push(call(core.clone(), batch, lane, period));
            }
        }
    }
}

/// Applies the answers of one call to its entries: a renewed hold is due
/// again a period after its pass, one that Redis says is gone or whose
/// deadline passed is lost, one without an answer is retried before its
/// deadline. Returns how many were renewed and how many lost.
fn settle(
    s: &mut Schedule,
    core: &Core,
    done: &Done,
    period: Duration,
    lease: Duration,
    validity: Duration,
    retry_delay: Duration,
) -> (usize, usize) {
    let batch = &done.batch;
    let sent = done.sent;
    if let Err(err) = &done.result {
        log_failed_batch(s, batch, err);
        core.report(err);
    }
    let after = Instant::now();
    let mut renewed = 0usize;
    let mut lost = 0usize;
    for (i, r) in batch.renewals.iter().enumerate() {
        let outcome = match &done.result {
            Ok(values) => values.get(i).copied().flatten(),
            Err(_) => None,
        };
        let Some(entry) = live_mut(&mut s.slots, r.slot, r.generation) else {
            continue;
        };
        let next_due = match outcome {
            // The lease runs from when the call was sent; the period from
            // when the pass began (a slow call must not stretch the
            // cadence).
            Some(true) if entry.hold.extend(sent, lease) => {
                entry.valid_until = entry.valid_until.max(sent + validity);
                renewed += 1;
                Ok((batch.taken + period, false))
            }
            Some(true) => Err("its deadline passed while it was being renewed"),
            Some(false) => {
                crate::metrics::renewal_failed(RenewalFailure::Gone);
                Err("the lock is gone (expired, deleted or force-unlocked)")
            }
            None => {
                crate::metrics::renewal_failed(RenewalFailure::Error);
                match entry.hold.remaining() {
                    left if left.is_zero() => Err("renewals failed until its deadline"),
                    // Retry soon enough to have another go before the deadline.
                    left => Ok((
                        after + retry_delay.min(left / 3).max(Duration::from_millis(1)),
                        true,
                    )),
                }
            }
        };
        match next_due {
            Ok((at, exact)) => s.push(
                Due {
                    at,
                    slot: r.slot,
                    generation: r.generation,
                },
                exact,
            ),
            Err(why) => {
                if let Some(entry) = s.remove(r.slot, r.generation) {
                    if outcome == Some(false) {
                        entry.hold.mark_gone(why);
                    } else {
                        entry.hold.mark_lost(why);
                    }
                }
                lost += 1;
            }
        }
    }
    (renewed, lost)
}

/// One event per failed batch; with a single hold, its lock.
fn log_failed_batch(s: &Schedule, batch: &Batch, err: &Error) {
    let one = match batch.renewals.as_slice() {
        [r] => s.live(r.slot, r.generation),
        _ => None,
    };
    match one {
        Some(entry) => tracing::warn!(
            lock = %entry.hold.keys.name,
            key = %entry.hold.keys.lock,
            error = %err,
            "lock renewal failed; retrying before the lock's deadline"
        ),
        None => tracing::warn!(
            locks = batch.renewals.len(),
            error = %err,
            "lock renewal failed; retrying before the locks' deadlines"
        ),
    }
}

/// Renews one batch with one script call (one command, one round trip).
/// Per entry: Some(true) renewed, Some(false) gone, None unknown (retry
/// later).
///
/// Runs on the renewal lane (its own connection: lock commands and
/// inspection never hold renewals up), until `deadline`; a batch given up
/// at its deadline marks the connection suspect, so the retry opens a new
/// one (a stalled connection is replaced within the period, whatever the
/// command time-out).
///
/// On a Redis Cluster every key of a batch is in one hash slot (see
/// `next_batches`): the call goes to the slot's primary.
async fn renew_batch(
    core: &Core,
    batch: &Batch,
    deadline: Instant,
) -> Result<Vec<Option<bool>>, Error> {
    let script = &core.scripts.renew;
    let limit = deadline.saturating_duration_since(Instant::now());
    let reply = core
        .on_lane(ConnLane::Renewals, limit, |mut conn| async move {
            Ok(script.run(&mut conn, &batch.cmd).await?)
        })
        .await?;
    parse_renewals(&reply, batch.renewals.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(at: Instant, slot: u32) -> Due {
        Due {
            at,
            slot,
            generation: 1,
        }
    }

    /// A schedule whose slots 0..n hold entries of generation 1 (the holds
    /// are never looked at: `Entry` needs one, any will do).
    fn schedule(n: u32, hold: &Arc<Hold>) -> Schedule {
        let mut s = Schedule::default();
        for slot in 0..n {
            s.slots.push(Slot {
                generation: 1,
                entry: Some(Entry {
                    guards: 1,
                    hold: hold.clone(),
                    args: RenewArgs::new(hold),
                    valid_until: hold.deadline(),
                    hash_slot: 0,
                }),
            });
            s.by_hold.insert(slot as usize, slot);
        }
        s
    }

    fn a_hold() -> Arc<Hold> {
        hold_named("wd-test", "o:1")
    }

    fn hold_named(name: &str, owner: &str) -> Arc<Hold> {
        let keys = Arc::new(
            crate::protocol::keys::LockKeys::new("", name, 1024).unwrap_or_else(|e| panic!("{e}")),
        );
        let fresh = Hold::granted(
            keys,
            owner.into(),
            1,
            None,
            Instant::now(),
            Duration::from_secs(30),
        );
        fresh.unwrap_or_else(|| panic!("a fresh grant is valid"))
    }

    fn entry_of(hold: &Arc<Hold>, valid_until: Instant) -> Entry {
        Entry {
            guards: 1,
            hold: hold.clone(),
            args: RenewArgs::new(hold),
            valid_until,
            hash_slot: 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_holds_own_deadline_decides_when_the_cache_says_it_passed() {
        let period = Duration::from_secs(10);
        // The cache is behind: a re-entry with a longer lease pushed the
        // hold's deadline (30 s lease) past it.
        let hold = a_hold();
        let now = Instant::now();
        let mut stale = entry_of(&hold, now - Duration::from_millis(1));
        assert!(stale.still_valid(now, now + period), "not lost early");
        assert_eq!(stale.valid_until, hold.deadline(), "cache caught up");
        // A cached bound a period or more away answers alone.
        let far = now + 2 * period;
        let mut cached = entry_of(&hold, far);
        assert!(cached.still_valid(now, now + period));
        assert_eq!(cached.valid_until, far);
        // A hold whose own deadline passed is not valid.
        let keys = Arc::new(
            crate::protocol::keys::LockKeys::new("", "short", 1024)
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let short = Hold::granted(keys, "o:2".into(), 1, None, now, Duration::from_millis(50))
            .unwrap_or_else(|| panic!("a fresh grant is valid"));
        let mut passed = entry_of(&short, short.deadline());
        tokio::time::sleep(Duration::from_millis(60)).await;
        let later = Instant::now();
        assert!(!passed.still_valid(later, later + period));
    }

    fn batch() -> Batch {
        Batch {
            renewals: Vec::new(),
            cmd: redis::cmd("PING"),
            deadline: Instant::now(),
            hash_slot: None,
            taken: Instant::now(),
            pass: 0,
        }
    }

    #[tokio::test]
    async fn a_full_lane_holds_back_only_its_own_calls() {
        let mut lanes = NodeLanes::default();
        for _ in 0..3 {
            lanes.push(0, batch());
        }
        lanes.push(1, batch());
        // lane 0 (a stalled node) takes its two places ...
        assert!(lanes.next(0, 2).is_some());
        assert!(lanes.next(0, 2).is_some());
        assert!(lanes.next(0, 2).is_none(), "lane 0 is full");
        // ... lane 1 still sends
        assert!(lanes.next(1, 2).is_some());
        assert!(lanes.next(1, 2).is_none(), "nothing left in lane 1");
        lanes.finished(0);
        assert!(lanes.next(0, 2).is_some(), "a place of lane 0 came free");
        assert!(lanes.with_waiting().is_empty());
    }

    #[tokio::test]
    async fn due_times_come_out_in_order_from_both_queues() {
        let hold = a_hold();
        let mut s = schedule(4, &hold);
        let t = Instant::now();
        s.push(due(t + Duration::from_millis(30), 0), false);
        s.push(due(t + Duration::from_millis(40), 1), false);
        // earlier than the cadence's back: an exact one waits in `early`
        s.push(due(t + Duration::from_millis(10), 2), true);
        // a late renewal joins the cadence at its back's time
        s.push(due(t + Duration::from_millis(20), 3), false);
        assert_eq!(s.next_due(), Some(t + Duration::from_millis(10)));
        let order: Vec<(u32, Instant)> =
            std::iter::from_fn(|| s.pop_due(t + Duration::from_secs(1)))
                .map(|d| (d.slot, d.at))
                .collect();
        assert_eq!(
            order,
            vec![
                (2, t + Duration::from_millis(10)),
                (0, t + Duration::from_millis(30)),
                (1, t + Duration::from_millis(40)),
                (3, t + Duration::from_millis(40)),
            ]
        );
    }

    #[tokio::test]
    async fn renewal_arguments_split_back_into_key_and_owner() {
        let short = a_hold();
        let args = RenewArgs::new(&short);
        assert!(matches!(args.bytes, ArgBytes::Inline { .. }));
        assert_eq!(args.key(), short.keys.lock.as_bytes());
        assert_eq!(args.owner(), short.owner.as_bytes());
        let long_name = "n".repeat(300);
        let long = hold_named(&long_name, "owner:7");
        let args = RenewArgs::new(&long);
        assert!(matches!(args.bytes, ArgBytes::Heap(_)));
        assert_eq!(args.key(), long_name.as_bytes());
        assert_eq!(args.owner(), b"owner:7");
    }

    #[tokio::test]
    async fn nothing_after_the_horizon_is_taken() {
        let hold = a_hold();
        let mut s = schedule(2, &hold);
        let t = Instant::now();
        s.push(due(t + Duration::from_millis(5), 0), false);
        s.push(due(t + Duration::from_millis(50), 1), false);
        assert_eq!(
            s.pop_due(t + Duration::from_millis(10)).map(|d| d.slot),
            Some(0)
        );
        assert_eq!(s.pop_due(t + Duration::from_millis(10)), None);
    }

    #[tokio::test]
    async fn gone_entries_are_skipped_and_compacted_away() {
        let hold = a_hold();
        let mut s = schedule(2, &hold);
        let t = Instant::now();
        // 5000 due times of slot 1's old generation, one live of slot 0
        for i in 0..5000u64 {
            s.cadence.push_back(Due {
                at: t + Duration::from_micros(i),
                slot: 1,
                generation: 0,
            });
        }
        s.push(due(t + Duration::from_secs(1), 0), false);
        assert_eq!(
            s.next_due(),
            Some(t + Duration::from_secs(1)),
            "stale fronts dropped"
        );
        for i in 0..5000u64 {
            s.cadence.push_back(Due {
                at: t + Duration::from_secs(2) + Duration::from_micros(i),
                slot: 1,
                generation: 0,
            });
        }
        s.compact_if_stale();
        assert_eq!(s.cadence.len(), 1, "only the live due time is left");
    }
}
