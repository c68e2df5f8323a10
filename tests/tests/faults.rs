//! What faults do to a lock, through the harness's fault proxy and with
//! stopped, paused or stalled redis-servers: connections cut at every byte
//! offset, late and lost replies, releases applied once, a guard's
//! validity, wait bounds, traffic lanes, fast and clear failures, and the
//! fault proxy itself under a real client.
//!
//! The semaphores and the count-down latch: `sem_cut_faults`, each of
//! their scripts cut at every byte offset (never a permit created or lost,
//! a count-down applied at most once); `sem_faults`, both kinds under a
//! load while replies are lost or late, connections cut and proxies black
//! holed (never more than N inside, every permit back at the end);
//! `sem_shutdown`, a client's shutdown gives every permit back once and
//! ends its waiters with `Error::Closed`; `sem_kill`, child processes
//! killed (SIGKILL) while holding permits: never more than N inside, the
//! expirable kind's permits back after one lease, the plain kind's lost;
//! `sem_cancellation`, acquisitions dropped at every await (by time and
//! by polls) give every permit back; `sem_line`, places in the line that
//! outlive their acquisitions (ignored: they fail on lock-core as it is).
//!
//! The fair lock: `fair_kill`, child processes killed (SIGKILL) holding it
//! or waiting at the queue's head, and a Redisson waiter that stops at the
//! head, beside waiters of other processes and of Redisson's protocol:
//! never two inside, the live served in arrival order, the next one in
//! after one lease (a dead holder), a lapsed liveness mark (~3 s, a dead
//! waiter of ours) or the dead head's deadline (Redisson's), the queue
//! empty at the end; `fair_faults`, waiters of three clients and two
//! Redisson waiters while replies are lost or late, connections cut and
//! proxies black holed: never two inside, every waiter served within its
//! bound, Redisson's never dropped while alive, nothing left in Redis at
//! the end, and a waiter cut off past the cancellation's retry window
//! leaving at most one lease of orphan hold; `fair_cut_faults`, its four scripts cut at every byte
//! (each offset once, FIN and RST alternating): a release frees once and
//! its head gets in, a waiter giving up leaves the queue, its deadline and
//! its liveness mark, a join or a head's grant leaves no stale entry and
//! no hold without a guard, a free lock wakes its unaware head, a
//! force-unlock deletes at most once.
//!
//! Elections: `election_cut_faults`, the fenced write and the campaign's
//! record write cut at every byte; `election_overlap`, three processes
//! campaigning while the leader is killed, partitioned, paused and Redis
//! restarted: never two terms' fenced writes interleaved, fail-over times
//! measured.
//!
//! Redlock: `redlock`, five servers with two and three killed, one
//! partitioned, the holder cut off and SIGSTOPped past its validity,
//! simultaneous attempts: never two inside, stale writes fenced off,
//! acquire latency against one server.

mod support;

/// The suites, one module per file in `faults/`.
mod faults {
    mod cut_faults;
    mod election_cut_faults;
    mod election_overlap;
    mod failures;
    mod fair_cut_faults;
    mod fair_faults;
    mod fair_kill;
    mod fault_proxy;
    mod group_cut_faults;
    mod lanes;
    mod multi_cut_faults;
    mod no_wedge;
    mod redlock;
    mod release_once;
    mod rw_cut_faults;
    mod rw_faults;
    mod sem_cancellation;
    mod sem_cut_faults;
    mod sem_faults;
    mod sem_kill;
    mod sem_line;
    mod sem_shutdown;
    mod validity;
    mod wait_bounds;
}
