//! `lock-sim`: runs seeds of the simulation and prints, for any seed that
//! broke an invariant, what broke and the command that replays it.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lock_sim::{run, Options, Outcome, Plant};

/// Seeded deterministic simulation of lock-core's protocol.
#[derive(Parser, Debug)]
#[command(name = "lock-sim", version)]
struct Args {
    /// How many seeds to run.
    #[arg(long, default_value_t = 200)]
    seeds: u64,
    /// The first seed (default: drawn from the clock, printed).
    #[arg(long)]
    from: Option<u64>,
    /// Replay one seed and print its trace.
    #[arg(long)]
    seed: Option<u64>,
    /// Virtual time each seed's workload runs, in ms.
    #[arg(long, default_value_t = 4000)]
    duration_ms: u64,
    /// Plant a known bug back: late-release, fast-clock, lost-unlocks,
    /// shared-writer, generous-release.
    #[arg(long)]
    plant: Option<Plant>,
    /// Stop after this many minutes of real time.
    #[arg(long)]
    minutes: Option<f64>,
    /// Stop at the first failing seed.
    #[arg(long)]
    stop_at_first: bool,
}

fn replay_command(seed: u64, args: &Args) -> String {
    let mut cmd = format!(
        "cargo run --release -p lock-sim -- --seed {seed} --duration-ms {}",
        args.duration_ms
    );
    if let Some(plant) = args.plant {
        cmd.push_str(&format!(" --plant {plant}"));
    }
    cmd
}

fn report(outcome: &Outcome, args: &Args) {
    let seed = outcome.scenario.seed;
    let mut kinds: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for v in &outcome.violations {
        *kinds.entry(v.invariant.to_string()).or_default() += 1;
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!(
        "seed {seed} FAILED: {} violation(s) ({})",
        outcome.violations.len(),
        kinds.join(", ")
    );
    for v in outcome.violations.iter().take(5) {
        println!("  {v}");
    }
    println!("  replay: {}", replay_command(seed, args));
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = Options {
        duration: Duration::from_millis(args.duration_ms),
        plant: args.plant,
        trace: args.seed.is_some(),
        ..Options::default()
    };
    if let Some(seed) = args.seed {
        let outcome = match run(seed, &options) {
            Ok(outcome) => outcome,
            Err(err) => {
                eprintln!("no runtime: {err}");
                return ExitCode::from(2);
            }
        };
        for line in &outcome.trace {
            println!("{line}");
        }
        println!("{:?}", outcome.activity);
        println!("{:?}", outcome.network);
        println!("digest {:016x}", outcome.digest);
        if outcome.passed() {
            println!("seed {seed} passed");
            return ExitCode::SUCCESS;
        }
        report(&outcome, &args);
        return ExitCode::FAILURE;
    }
    let from = args.from.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() * 1000)
            .unwrap_or(0)
    });
    println!(
        "seeds {from}..{} (plant: {:?})",
        from + args.seeds,
        args.plant
    );
    let began = std::time::Instant::now();
    let budget = args.minutes.map(|m| Duration::from_secs_f64(m * 60.0));
    let (mut ran, mut failed, mut virtual_time) = (0u64, 0u64, Duration::ZERO);
    let mut holds = 0;
    for seed in from..from.saturating_add(args.seeds) {
        if budget.is_some_and(|b| began.elapsed() > b) {
            break;
        }
        let outcome = match run(seed, &options) {
            Ok(outcome) => outcome,
            Err(err) => {
                eprintln!("no runtime: {err}");
                return ExitCode::from(2);
            }
        };
        ran += 1;
        virtual_time += outcome.virtual_time;
        holds += outcome.activity.holds;
        if !outcome.passed() {
            failed += 1;
            report(&outcome, &args);
            if args.stop_at_first {
                break;
            }
        }
    }
    let elapsed = began.elapsed();
    println!(
        "{ran} seeds, {failed} failed, {holds} holds, {:.1} s virtual in {:.1} s real: {:.0} seeds/minute",
        virtual_time.as_secs_f64(),
        elapsed.as_secs_f64(),
        ran as f64 * 60.0 / elapsed.as_secs_f64().max(1e-9)
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
