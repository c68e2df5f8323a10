//! Clocks and the arithmetic of the figures: percentiles, Jain's index,
//! hand-offs and overlaps over recorded cycles, CPU time.

use nix::sys::resource::{getrusage, UsageWho};
use nix::time::{clock_gettime, ClockId};

/// Nanoseconds on `CLOCK_MONOTONIC`: one clock for every process on the
/// machine, so the W3 children's timestamps can be compared with each other.
pub(crate) fn mono_ns() -> u64 {
    match clock_gettime(ClockId::CLOCK_MONOTONIC) {
        Ok(t) => (t.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec() as u64),
        // CLOCK_MONOTONIC is always there on Linux; 0 would only shrink the window.
        Err(_) => 0,
    }
}

/// User + system CPU time of this process so far, in nanoseconds.
pub(crate) fn cpu_ns() -> Option<u64> {
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let tv =
        |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000_000 + t.tv_usec() as u64 * 1000;
    Some(tv(usage.user_time()) + tv(usage.system_time()))
}

/// The measurement window of a workload, on [`mono_ns`]: warm-up from
/// `start` to `from`, measured from `from` to `to`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub(crate) start: u64,
    pub(crate) from: u64,
    pub(crate) to: u64,
}

impl Window {
    /// A window whose warm-up starts at `start`.
    pub(crate) fn new(
        start: u64,
        warmup: std::time::Duration,
        duration: std::time::Duration,
    ) -> Self {
        let from = start + warmup.as_nanos() as u64;
        Window {
            start,
            from,
            to: from + duration.as_nanos() as u64,
        }
    }

    /// Whether a cycle that ended at `end` is counted.
    pub(crate) fn contains(&self, end: u64) -> bool {
        (self.from..=self.to).contains(&end)
    }

    /// Length of the measured part, in seconds.
    pub(crate) fn secs(&self) -> f64 {
        (self.to - self.from) as f64 / 1e9
    }
}

/// One lock cycle as a task saw it (timestamps from [`mono_ns`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cycle {
    /// Global task number (unique across processes).
    pub(crate) task: usize,
    /// What `INCR counter` answered inside the critical section (0 where the
    /// workload has no counter).
    pub(crate) seq: u64,
    /// Acquire called.
    pub(crate) start: u64,
    /// Acquire returned: the critical section begins.
    pub(crate) enter: u64,
    /// Last instant inside the critical section, before release is sent.
    pub(crate) exit: u64,
    /// Release returned.
    pub(crate) end: u64,
}

impl Cycle {
    pub(crate) fn wait_ns(&self) -> u64 {
        self.enter.saturating_sub(self.start)
    }

    pub(crate) fn latency_ns(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

/// Nearest-rank percentile (`p` in 0..=100) of sorted values.
pub(crate) fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Jain's fairness index `(Σx)² / (n·Σx²)`: 1.0 when every task did the
/// same number of cycles, 1/n when one task did them all.
pub(crate) fn jain(counts: &[u64]) -> Option<f64> {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    if counts.is_empty() || squares == 0.0 {
        return None;
    }
    Some(sum * sum / (counts.len() as f64 * squares))
}

/// Figures of a contended workload, from every cycle of the run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Contended {
    /// Cycles that ended inside the window.
    pub(crate) measured: u64,
    pub(crate) cycles_per_s: f64,
    /// Sorted acquire waits of the measured cycles (ns).
    pub(crate) waits: Vec<u64>,
    /// Sorted cycle latencies (acquire start → release end) of the measured cycles (ns).
    pub(crate) latencies: Vec<u64>,
    pub(crate) jain: Option<f64>,
    /// Share of measured cycles whose holder differs from the previous
    /// holder (in counter order), in percent.
    pub(crate) handoff_pct: Option<f64>,
    /// Critical sections that began before an earlier one (in counter
    /// order) had ended.
    pub(crate) overlaps: u64,
    /// The counter answers are exactly 1..=N, once each.
    pub(crate) seq_ok: bool,
    /// Share of measured cycles that jumped the queue, in percent: their
    /// task called acquire after another task that entered later (in
    /// counter order), so it overtook a waiter. A fair lock keeps it near
    /// zero (only arrivals closer together than the way to Redis swap).
    pub(crate) jumped_pct: Option<f64>,
}

/// Analyses the cycles of a contended run with `tasks` tasks: every cycle
/// incremented one counter inside its critical section, so ordering by the
/// counter's answer orders the critical sections as Redis saw them.
pub(crate) fn contended(mut cycles: Vec<Cycle>, tasks: usize, window: &Window) -> Contended {
    cycles.sort_by_key(|c| c.seq);
    let seq_ok = cycles
        .iter()
        .enumerate()
        .all(|(i, c)| c.seq == i as u64 + 1);

    // Overlaps: each critical section must begin after every earlier one ended.
    let mut overlaps = 0;
    let mut latest_exit = 0;
    for c in &cycles {
        if c.enter < latest_exit {
            overlaps += 1;
        }
        latest_exit = latest_exit.max(c.exit);
    }

    // Jumps: a section whose acquire began after the acquire of a later
    // section (the smallest start among the sections after it).
    let mut later_min_start = vec![u64::MAX; cycles.len()];
    for i in (0..cycles.len().saturating_sub(1)).rev() {
        later_min_start[i] = later_min_start[i + 1].min(cycles[i + 1].start);
    }
    let mut jumped = 0u64;

    let mut per_task = vec![0u64; tasks];
    let mut handoffs = 0u64;
    let mut measured = 0u64;
    let mut waits = Vec::new();
    let mut latencies = Vec::new();
    let mut previous: Option<usize> = None;
    for (c, later) in cycles.iter().zip(&later_min_start) {
        if window.contains(c.end) {
            measured += 1;
            if c.start > *later {
                jumped += 1;
            }
            if let Some(n) = per_task.get_mut(c.task) {
                *n += 1;
            }
            if previous.is_some_and(|p| p != c.task) {
                handoffs += 1;
            }
            waits.push(c.wait_ns());
            latencies.push(c.latency_ns());
        }
        previous = Some(c.task);
    }
    waits.sort_unstable();
    latencies.sort_unstable();
    Contended {
        measured,
        cycles_per_s: measured as f64 / window.secs(),
        waits,
        latencies,
        jain: jain(&per_task),
        handoff_pct: (measured > 0).then(|| handoffs as f64 * 100.0 / measured as f64),
        overlaps,
        seq_ok,
        jumped_pct: (measured > 0).then(|| jumped as f64 * 100.0 / measured as f64),
    }
}

/// Fairness between the processes of a cross-process workload (W3,
/// W3NP), from the cycles in counter (INCR) order: figures that a fair
/// Jain's index over per-task totals cannot hide starvation behind.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ByProcess {
    /// Measured sections of each process.
    pub(crate) sections: Vec<u64>,
    /// Jain's index over [`ByProcess::sections`].
    pub(crate) jain: Option<f64>,
    /// Smallest share of the measured sections that one process got, in percent.
    pub(crate) min_share_pct: Option<f64>,
    /// Longest run of consecutive sections (in counter order) by one process,
    /// counted at measured sections (a run that began in the warm-up counts
    /// whole).
    pub(crate) longest_run: u64,
    /// Hand-overs into measured sections: pairs of consecutive sections in
    /// counter order whose second section is measured.
    pub(crate) handovers: u64,
    /// Share of [`ByProcess::handovers`] whose two sections belong to
    /// different processes, in percent.
    pub(crate) cross_pct: Option<f64>,
}

/// Per-process figures of a contended run with `processes` processes of
/// `per_process` tasks each (task `t` belongs to process `t / per_process`);
/// `cycles` in any order.
pub(crate) fn by_process(
    cycles: &[Cycle],
    processes: usize,
    per_process: usize,
    window: &Window,
) -> ByProcess {
    let mut order: Vec<&Cycle> = cycles.iter().collect();
    order.sort_by_key(|c| c.seq);
    let per_process = per_process.max(1);
    let mut sections = vec![0u64; processes];
    let (mut run, mut longest_run) = (0u64, 0u64);
    let (mut handovers, mut cross) = (0u64, 0u64);
    let mut previous: Option<usize> = None;
    for c in order {
        let process = c.task / per_process;
        run = if previous == Some(process) {
            run + 1
        } else {
            1
        };
        if window.contains(c.end) {
            if let Some(n) = sections.get_mut(process) {
                *n += 1;
            }
            longest_run = longest_run.max(run);
            if let Some(p) = previous {
                handovers += 1;
                if p != process {
                    cross += 1;
                }
            }
        }
        previous = Some(process);
    }
    let total: u64 = sections.iter().sum();
    ByProcess {
        jain: jain(&sections),
        min_share_pct: (total > 0)
            .then(|| sections.iter().copied().min().unwrap_or(0) as f64 * 100.0 / total as f64),
        longest_run,
        handovers,
        cross_pct: (handovers > 0).then(|| cross as f64 * 100.0 / handovers as f64),
        sections,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycle(task: usize, seq: u64, enter: u64, exit: u64) -> Cycle {
        Cycle {
            task,
            seq,
            start: enter.saturating_sub(5),
            enter,
            exit,
            end: exit + 1,
        }
    }

    fn window() -> Window {
        Window {
            start: 0,
            from: 0,
            to: 1_000_000_000,
        }
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&[7], 50.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn jain_is_one_when_fair_and_one_over_n_when_not() {
        assert_eq!(jain(&[5, 5, 5, 5]), Some(1.0));
        assert_eq!(jain(&[8, 0, 0, 0]), Some(0.25));
        assert_eq!(jain(&[0, 0]), None);
    }

    #[test]
    fn handoffs_follow_counter_order() {
        // Holders in counter order: 0, 1, 1, 0 → two changes out of 4 cycles.
        let cycles = vec![
            cycle(1, 3, 30, 39),
            cycle(0, 1, 10, 19),
            cycle(0, 4, 40, 49),
            cycle(1, 2, 20, 29),
        ];
        let c = contended(cycles, 2, &window());
        assert_eq!(c.measured, 4);
        assert_eq!(c.handoff_pct, Some(50.0));
        assert_eq!(c.overlaps, 0);
        assert!(c.seq_ok);
        assert_eq!(c.jain, Some(1.0));
    }

    #[test]
    fn a_section_whose_holder_arrived_after_a_later_served_waiter_jumped_the_queue() {
        let at = |task, seq, start, enter| Cycle {
            task,
            seq,
            start,
            enter,
            exit: enter + 1,
            end: enter + 2,
        };
        // Served in arrival order: task 0 (asked at 0), 1 (at 1), 2 (at 2).
        let fair = vec![at(0, 1, 0, 10), at(1, 2, 1, 20), at(2, 3, 2, 30)];
        assert_eq!(contended(fair, 3, &window()).jumped_pct, Some(0.0));
        // Task 2 asked at 5, after task 1 (at 1), and got in first; task 1's
        // section did not jump (nobody after it asked before it).
        let barged = vec![at(0, 1, 0, 10), at(2, 2, 5, 20), at(1, 3, 1, 30)];
        let c = contended(barged, 3, &window());
        assert_eq!(c.jumped_pct, Some(100.0 / 3.0));
        // Only measured sections count, but every later section is a waiter
        // that may have been overtaken (here a tail section after the window).
        let w = Window {
            start: 0,
            from: 0,
            to: 25,
        };
        let tail = vec![at(0, 1, 3, 10), at(1, 2, 0, 40)];
        let c = contended(tail, 2, &w);
        assert_eq!((c.measured, c.jumped_pct), (1, Some(100.0)));
        assert_eq!(contended(Vec::new(), 1, &window()).jumped_pct, None);
    }

    #[test]
    fn overlapping_critical_sections_are_counted() {
        // Cycle 3 enters before cycle 1 (a long one) has left.
        let cycles = vec![
            cycle(0, 1, 10, 100),
            cycle(1, 2, 101, 110),
            cycle(2, 3, 50, 60),
        ];
        let c = contended(cycles, 3, &window());
        assert_eq!(c.overlaps, 1);
    }

    #[test]
    fn a_missing_or_repeated_counter_value_is_noticed() {
        let c = contended(vec![cycle(0, 1, 1, 2), cycle(0, 3, 3, 4)], 1, &window());
        assert!(!c.seq_ok);
        let c = contended(vec![cycle(0, 1, 1, 2), cycle(0, 1, 3, 4)], 1, &window());
        assert!(!c.seq_ok);
    }

    #[test]
    fn cycles_outside_the_window_are_not_measured() {
        let w = Window {
            start: 0,
            from: 20,
            to: 40,
        };
        let c = contended(
            vec![cycle(0, 1, 5, 9), cycle(0, 2, 25, 29), cycle(0, 3, 45, 49)],
            1,
            &w,
        );
        assert_eq!(c.measured, 1);
        assert!(
            c.seq_ok,
            "warm-up and tail cycles still count for the counter"
        );
    }

    #[test]
    fn runs_and_cross_process_handovers_follow_counter_order() {
        // Two processes of two tasks (tasks 0, 1 → process 0; 2, 3 → process 1).
        // Processes in counter order: 0 0 0 1 0 1 1 → runs 3, 1, 1, 2;
        // hand-overs 6, of which 3 cross processes.
        let tasks = [0, 1, 0, 2, 1, 3, 2];
        let cycles: Vec<Cycle> = tasks
            .iter()
            .enumerate()
            .rev()
            .map(|(i, &t)| cycle(t, i as u64 + 1, 10 * i as u64 + 10, 10 * i as u64 + 15))
            .collect();
        let p = by_process(&cycles, 2, 2, &window());
        assert_eq!(p.sections, vec![4, 3]);
        assert_eq!(p.longest_run, 3);
        assert_eq!(p.handovers, 6);
        assert_eq!(p.cross_pct, Some(50.0));
        assert_eq!(p.min_share_pct, Some(300.0 / 7.0));
        assert_eq!(p.jain, jain(&[4, 3]));
    }

    #[test]
    fn a_starved_process_shows_in_share_and_runs_but_not_in_task_jain_alone() {
        // One task per process; process 2 never gets the lock.
        let cycles: Vec<Cycle> = (0..8)
            .map(|i| cycle(i % 2, i as u64 + 1, 10 * i as u64 + 10, 10 * i as u64 + 15))
            .collect();
        let p = by_process(&cycles, 3, 1, &window());
        assert_eq!(p.sections, vec![4, 4, 0]);
        assert_eq!(p.min_share_pct, Some(0.0));
        assert_eq!(p.longest_run, 1);
        assert_eq!(p.cross_pct, Some(100.0));
    }

    #[test]
    fn a_run_that_began_in_the_warm_up_counts_whole() {
        let w = Window {
            start: 0,
            from: 30,
            to: 1000,
        };
        // Process 0 (task 0) holds sections 1..=4, ending at 16, 26, 36, 46.
        let cycles: Vec<Cycle> = (0..4)
            .map(|i| cycle(0, i + 1, 10 * i + 10, 10 * i + 15))
            .chain([cycle(1, 5, 60, 65)])
            .collect();
        let p = by_process(&cycles, 2, 1, &w);
        assert_eq!(p.sections, vec![2, 1]);
        assert_eq!(p.longest_run, 4);
        assert_eq!(p.handovers, 3);
        assert_eq!(p.cross_pct, Some(100.0 / 3.0));
    }
}
