//! The simulation in CI: a bounded number of seeds must keep every
//! invariant; a seed replays exactly; and the observer finds the bugs
//! planted back (the round-3 late release, a server clock beyond the
//! drift, a writer granted as a reader, a semaphore release that gives
//! back too much), so a silent run means something.
//!
//! More seeds: `cargo run --release -p lock-sim -- --seeds 10000`.

use std::time::{Duration, Instant};

use lock_sim::{run, Invariant, Options, Outcome, Plant};

/// Seeds CI runs, in two halves (the two tests run side by side).
const CI_SEEDS: u64 = 800;

fn options() -> Options {
    Options::default()
}

/// Runs `seeds`; panics with each failing seed and its replay command.
fn all_pass(seeds: std::ops::Range<u64>) {
    let started = Instant::now();
    let (mut failures, mut holds, mut faults) = (Vec::new(), 0, 0);
    let (mut sem_seeds, mut sem_holds, mut at_limit) = (0, 0, 0);
    let count = seeds.end - seeds.start;
    for seed in seeds {
        let outcome = run(seed, &options()).expect("a runtime");
        holds += outcome.activity.holds;
        if !outcome.scenario.semaphores.is_empty() {
            sem_seeds += 1;
            sem_holds += outcome.activity.holds;
            at_limit += outcome.activity.at_limit;
        }
        let n = outcome.network;
        faults += n.late + n.twice + n.silenced + n.reset + n.messages_lost;
        if !outcome.passed() {
            failures.push(describe(&outcome));
        }
    }
    let took = started.elapsed();
    eprintln!(
        "{count} seeds in {took:?} ({:.0} seeds/minute): {holds} holds, {faults} faults, {} failed",
        count as f64 * 60.0 / took.as_secs_f64(),
        failures.len()
    );
    eprintln!("{sem_seeds} semaphore seeds: {sem_holds} permit holds, {at_limit} that filled their semaphore");
    assert!(holds > count * 5, "the seeds took locks: {holds}");
    assert!(faults > count, "the network misbehaved: {faults}");
    assert!(
        sem_holds > sem_seeds * 5 && at_limit > sem_seeds,
        "the semaphore seeds took permits up to their N: {sem_holds} holds, {at_limit} at N in {sem_seeds} seeds"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn describe(outcome: &Outcome) -> String {
    let seed = outcome.scenario.seed;
    let first: Vec<String> = outcome
        .violations
        .iter()
        .take(3)
        .map(|v| v.to_string())
        .collect();
    format!(
        "seed {seed}: {}\n  replay: cargo run --release -p lock-sim -- --seed {seed}",
        first.join("\n  ")
    )
}

#[test]
fn ci_seeds_first_half_keep_every_invariant() {
    all_pass(0..CI_SEEDS / 2);
}

#[test]
fn ci_seeds_second_half_keep_every_invariant() {
    all_pass(CI_SEEDS / 2..CI_SEEDS);
}

#[test]
fn a_seed_replays_exactly() {
    let options = Options {
        trace: true,
        ..options()
    };
    // A seed with faults, a restart and re-entries.
    let first = run(258, &options).expect("a runtime");
    let again = run(258, &options).expect("a runtime");
    assert!(
        first.trace.len() > 100,
        "a real trace: {}",
        first.trace.len()
    );
    assert_eq!(first.digest, again.digest);
    assert_eq!(first.trace, again.trace);
    let other = run(259, &options).expect("a runtime");
    assert_ne!(first.digest, other.digest, "another seed, another run");
}

/// Seeds from 0 on until one breaks `wanted`; at most `limit`.
fn first_failing(plant: Plant, wanted: Invariant, limit: u64) -> Option<(u64, Outcome)> {
    let options = Options {
        plant: Some(plant),
        ..options()
    };
    (0..limit).find_map(|seed| {
        let outcome = run(seed, &options).expect("a runtime");
        outcome
            .violations
            .iter()
            .any(|v| v.invariant == wanted)
            .then_some((seed, outcome))
    })
}

#[test]
fn the_round_3_late_release_bug_planted_back_is_found() {
    let (seed, outcome) = first_failing(Plant::LateRelease, Invariant::CountsMatchGuards, 200)
        .expect("the planted late release is found within 200 seeds");
    eprintln!("late-release found by seed {seed}: {}", describe(&outcome));
    // The hold was gone from Redis under a valid outer guard.
    assert!(outcome.violations[0].detail.contains("does not have it"));
    // The same seed without the plant keeps every invariant.
    let clean = run(seed, &options()).expect("a runtime");
    assert!(clean.passed(), "{}", describe(&clean));
    // And the gone hold lets another client in while the guard is valid.
    let (seed, _) = first_failing(Plant::LateRelease, Invariant::MutualExclusion, 200)
        .expect("two holders within 200 seeds");
    eprintln!("late-release: two holders with seed {seed}");
}

#[test]
fn a_server_clock_beyond_the_drift_margin_is_found() {
    let (seed, outcome) = first_failing(Plant::FastClock, Invariant::MutualExclusion, 100)
        .expect("a 5 % fast server clock gives two holders within 100 seeds");
    eprintln!("fast-clock found by seed {seed}: {}", describe(&outcome));
    let clean = run(seed, &options()).expect("a runtime");
    assert!(clean.passed(), "{}", describe(&clean));
}

#[test]
fn a_run_is_bounded_in_virtual_time() {
    let options = Options {
        duration: Duration::from_millis(800),
        ..options()
    };
    let outcome = run(3, &options).expect("a runtime");
    // The workload, its last rounds (8 leases at most), the settling.
    let bound = options.duration + outcome.scenario.lease * 10;
    assert!(
        outcome.virtual_time <= bound,
        "{:?} > {bound:?}",
        outcome.virtual_time
    );
}

#[test]
fn a_waiter_sleeping_on_a_free_lock_is_found() {
    let (seed, outcome) = first_failing(Plant::LostUnlocks, Invariant::NoWaitWhileFree, 200)
        .expect("lost unlock messages on 5x leases keep a waiter waiting on a free lock");
    eprintln!("lost-unlocks found by seed {seed}: {}", describe(&outcome));
    let clean = run(seed, &options()).expect("a runtime");
    assert!(clean.passed(), "{}", describe(&clean));
}

/// Seeds that found a bug no real-Redis test of this session reproduced:
/// an undone re-entry ended its whole hold in the client (its outer guard
/// read "lost", a shutdown forgot to release it; seeds 406929 and 406655
/// with a client shut down mid-run). A seed names a run of this version of
/// the workload; should the workload change, find them again with
/// `lock-sim --seeds 10000 --from 400000`.
#[test]
fn the_seeds_of_the_undone_re_entry_keep_every_invariant() {
    for seed in [406_929, 406_655] {
        let outcome = run(seed, &options()).expect("a runtime");
        assert!(outcome.passed(), "{}", describe(&outcome));
    }
}

/// Read-write seeds: a writer granted as a reader (the plant rewrites the
/// write script's mode) is seen beside readers and writers, and the same
/// seed without the plant keeps every invariant.
#[test]
fn a_writer_granted_as_a_reader_is_found() {
    let (seed, outcome) = first_failing(Plant::SharedWriter, Invariant::MutualExclusion, 50)
        .expect("a writer beside others within 50 seeds");
    assert!(outcome.scenario.rw, "found on a read-write seed");
    eprintln!("shared-writer found by seed {seed}: {}", describe(&outcome));
    let clean = run(seed, &options()).expect("a runtime");
    assert!(clean.passed(), "{}", describe(&clean));
    assert!(clean.activity.holds > 5, "it took locks");
}

/// About three seeds in ten run read-write locks, and they take holds of
/// both sides.
#[test]
fn read_write_seeds_are_in_the_ci_range() {
    let rw: Vec<u64> = (0..CI_SEEDS)
        .filter(|s| lock_sim::Scenario::of(*s, &options()).rw)
        .collect();
    let share = rw.len() as f64 / CI_SEEDS as f64;
    assert!((0.2..0.4).contains(&share), "{share}");
}

/// Semaphore seeds: releases that give back one permit more than they
/// took (the plant) are seen as more than N inside and as permits not
/// conserved; the same seed without the plant keeps every invariant.
#[test]
fn a_release_that_gives_back_too_much_is_found() {
    let (seed, outcome) = first_failing(Plant::GenerousRelease, Invariant::PermitsWithinLimit, 50)
        .expect("more than N inside within 50 seeds");
    assert!(
        !outcome.scenario.semaphores.is_empty(),
        "found on a semaphore seed"
    );
    eprintln!(
        "generous-release found by seed {seed}: {}",
        describe(&outcome)
    );
    let clean = run(seed, &options()).expect("a runtime");
    assert!(clean.passed(), "{}", describe(&clean));
    assert!(clean.activity.holds > 5, "it took permits");
    let (seed, _) = first_failing(Plant::GenerousRelease, Invariant::PermitsConserved, 50)
        .expect("permits not conserved within 50 seeds");
    eprintln!("generous-release: permits not conserved with seed {seed}");
}

/// About three seeds in ten of those that are not read-write seeds are
/// semaphore seeds, with both kinds; the read-write seeds are as before.
#[test]
fn semaphore_seeds_are_in_the_ci_range() {
    let scenarios: Vec<lock_sim::Scenario> = (0..CI_SEEDS)
        .map(|s| lock_sim::Scenario::of(s, &options()))
        .collect();
    let sem: Vec<&lock_sim::Scenario> = scenarios
        .iter()
        .filter(|s| !s.semaphores.is_empty())
        .collect();
    assert!(sem.iter().all(|s| !s.rw));
    let share = sem.len() as f64 / CI_SEEDS as f64;
    assert!((0.12..0.3).contains(&share), "{share}");
    let kinds = |expirable: bool| {
        sem.iter()
            .filter(|s| s.semaphores.iter().any(|k| k.expirable == expirable))
            .count()
    };
    assert!(
        kinds(true) > 40 && kinds(false) > 20,
        "both kinds: {} {}",
        kinds(true),
        kinds(false)
    );
    assert!(sem
        .iter()
        .flat_map(|s| &s.semaphores)
        .all(|k| (1..=4).contains(&k.permits)));
}

/// Seeds of the semaphore sweep whose violations were the observer's, not
/// the library's: 2001573, a semaphore seed whose every try_set_permits
/// failed, so its counter never existed (now each task asks until one
/// answers, and an absent counter nobody saw is not a lost one);
/// 1003516 and 2000080, a complete shutdown with a hold of its client
/// left in Redis whose release (resp. the cancellation of an acquisition
/// whose reply was lost: NOSCRIPT, then late replies) had failed and
/// been reported before. Found with `lock-sim --seeds 10000 --from
/// 1000000` (and `--from 2000000`); a seed names a run of this version of
/// the workload.
#[test]
fn the_seeds_of_the_semaphore_sweep_keep_every_invariant() {
    for seed in [1_003_516, 2_000_080, 2_001_573] {
        let outcome = run(seed, &options()).expect("a runtime");
        assert!(outcome.passed(), "{}", describe(&outcome));
    }
}
