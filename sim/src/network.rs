//! The simulated network between the clients and the in-memory server:
//! every command and every pub/sub message draws its fate from the seed
//! (see [`Faults`]), a crashed client's traffic vanishes, and a planted
//! bug may rewrite what reaches the server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::__private::{CommandFate, Interposer, MemoryServerForTests, MessageFate};

use crate::plant::Plant;

/// How often each fault happens in one seed's run (chances per command or
/// per message, between 0 and 1).
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// A command (or its reply) held up past the caller's reply time-out.
    pub late: f64,
    /// A command run twice (a copy retried under the caller).
    pub twice: f64,
    /// A link gone silent (a black hole): no reply, nothing more through.
    pub silence: f64,
    /// A connection reset.
    pub reset: f64,
    /// A pub/sub message lost.
    pub message_lost: f64,
    /// The usual delay of a command, a reply or a message: up to this.
    pub jitter: Duration,
    /// How late a late command or reply is: up to this.
    pub late_by: Duration,
}

impl Faults {
    /// No fault at all, no delay.
    pub fn none() -> Self {
        Faults {
            late: 0.0,
            twice: 0.0,
            silence: 0.0,
            reset: 0.0,
            message_lost: 0.0,
            jitter: Duration::ZERO,
            late_by: Duration::ZERO,
        }
    }
}

/// Counts of what the network did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetworkTally {
    /// Commands (and pipelines) sent.
    pub commands: u64,
    /// Held up past a reply time-out.
    pub late: u64,
    /// Run twice.
    pub twice: u64,
    /// Links silenced.
    pub silenced: u64,
    /// Connections reset.
    pub reset: u64,
    /// Pub/sub messages sent to subscribers.
    pub messages: u64,
    /// Pub/sub messages lost.
    pub messages_lost: u64,
}

struct State {
    rng: fastrand::Rng,
    faults: Faults,
    /// Calm: no faults and no delays (the end of a run).
    calm: bool,
    /// Link names of crashed clients.
    crashed: Vec<String>,
    tally: NetworkTally,
}

/// The network (an [`Interposer`] on the server).
pub(crate) struct Network {
    state: Mutex<State>,
    /// Where faults are written down (the run's trace).
    log: std::sync::OnceLock<Arc<crate::observer::Observer>>,
    plant: Option<Plant>,
    server: MemoryServerForTests,
}

impl Network {
    /// A network drawing from `seed` with `faults`; `plant` rewrites
    /// commands as an older protocol would have sent them.
    pub(crate) fn new(
        seed: u64,
        faults: Faults,
        plant: Option<Plant>,
        server: MemoryServerForTests,
    ) -> Arc<Self> {
        Arc::new(Network {
            state: Mutex::new(State {
                rng: fastrand::Rng::with_seed(seed),
                faults,
                calm: false,
                crashed: Vec::new(),
                tally: NetworkTally::default(),
            }),
            plant,
            server,
            log: std::sync::OnceLock::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the faults down in `observer`'s trace.
    pub(crate) fn log_to(&self, observer: Arc<crate::observer::Observer>) {
        let _ = self.log.set(observer);
    }

    fn note(&self, link: &str, commands: &[Vec<Vec<u8>>], fate: &CommandFate) {
        if let Some(log) = self.log.get() {
            log.event(format!(
                "net {}: {} {fate:?}",
                client_of(link),
                describe(commands)
            ));
        }
    }

    /// From now on, no faults and no delays.
    pub(crate) fn calm(&self) {
        self.state().calm = true;
    }

    /// The client connected by `link` crashed: nothing of it gets through
    /// any more (as after SIGKILL: its releases never reach the server).
    pub(crate) fn crash(&self, link: &str) {
        self.state().crashed.push(link.to_owned());
    }

    /// What the network did so far.
    pub(crate) fn tally(&self) -> NetworkTally {
        self.state().tally
    }
}

fn up_to(rng: &mut fastrand::Rng, max: Duration) -> Duration {
    let max = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(if max == 0 { 0 } else { rng.u64(0..=max) })
}

/// A link as the trace names it: `sim<run>-c<n>#<link>` as `c<n>#<link>`
/// (the run's number differs between runs of one process; the trace must
/// not).
fn client_of(link: &str) -> &str {
    link.rsplit('-').next().unwrap_or(link)
}

/// The client name of a link (`sim<run>-c<n>#<link>` → `sim<run>-c<n>`).
fn name_of(link: &str) -> &str {
    link.split('#').next().unwrap_or(link)
}

/// A short description of `commands` for the trace: names, and the
/// script SHA's first characters and the keys of a script call.
fn describe(commands: &[Vec<Vec<u8>>]) -> String {
    commands
        .iter()
        .map(|args| {
            let text: Vec<String> = args
                .iter()
                .take(16)
                .map(|a| {
                    let s = String::from_utf8_lossy(a);
                    // A script SHA is 40 hex characters; anything else
                    // (raw permit ids among them) is shown whole.
                    if s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
                        s[..8].to_string()
                    } else {
                        s.into_owned()
                    }
                })
                .collect();
            text.join(" ")
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

impl Interposer for Network {
    fn command(&self, link: &str, commands: &[Vec<Vec<u8>>]) -> CommandFate {
        let fate = self.decide(link);
        if !matches!(fate, CommandFate::Deliver { .. }) || self.is_late(&fate) {
            self.note(link, commands, &fate);
        } else if let Some(log) = self.log.get() {
            log.detail(format!(
                "net {}: {} {fate:?}",
                client_of(link),
                describe(commands)
            ));
        }
        fate
    }

    fn message(&self, link: &str, channel: &[u8]) -> MessageFate {
        let fate = self.decide_message(link);
        if fate == MessageFate::Drop {
            if let Some(log) = self.log.get() {
                log.event(format!(
                    "net {}: message on {} lost",
                    client_of(link),
                    String::from_utf8_lossy(channel)
                ));
            }
        }
        fate
    }

    fn rewrite(&self, link: &str, args: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        if let Some(log) = self.log.get() {
            log.detail(format!(
                "ran {}: {}",
                client_of(link),
                describe(std::slice::from_ref(&args))
            ));
        }
        match &self.plant {
            Some(plant) => plant.rewrite(&self.server, args),
            None => args,
        }
    }
}

impl Network {
    /// Whether a delivery is late (past the usual jitter).
    fn is_late(&self, fate: &CommandFate) -> bool {
        let jitter = self.state().faults.jitter;
        matches!(fate, CommandFate::Deliver { before, after } if *before > jitter || *after > jitter)
    }

    fn decide(&self, link: &str) -> CommandFate {
        let mut state = self.state();
        state.tally.commands += 1;
        if state.crashed.iter().any(|c| c == name_of(link)) {
            return CommandFate::Silence { runs: false };
        }
        if state.calm {
            return CommandFate::Deliver {
                before: Duration::ZERO,
                after: Duration::ZERO,
            };
        }
        let State {
            rng, faults, tally, ..
        } = &mut *state;
        let roll = rng.f64();
        let mut at = 0.0;
        let mut hit = |p: f64| {
            at += p;
            roll < at
        };
        if hit(faults.silence) {
            tally.silenced += 1;
            return CommandFate::Silence { runs: rng.bool() };
        }
        if hit(faults.reset) {
            tally.reset += 1;
            return CommandFate::Reset {
                runs: rng.bool(),
                after: up_to(rng, faults.jitter),
            };
        }
        if hit(faults.twice) {
            tally.twice += 1;
            return CommandFate::Twice {
                before: up_to(rng, faults.jitter),
                again: up_to(rng, faults.late_by),
                after: up_to(rng, faults.jitter),
            };
        }
        let mut before = up_to(rng, faults.jitter);
        let mut after = up_to(rng, faults.jitter);
        if hit(faults.late) {
            tally.late += 1;
            if rng.bool() {
                before += up_to(rng, faults.late_by);
            } else {
                after += up_to(rng, faults.late_by);
            }
        }
        CommandFate::Deliver { before, after }
    }

    fn decide_message(&self, link: &str) -> MessageFate {
        let mut state = self.state();
        state.tally.messages += 1;
        if state.crashed.iter().any(|c| c == link) {
            return MessageFate::Drop;
        }
        if state.calm {
            return MessageFate::Deliver {
                after: Duration::ZERO,
            };
        }
        let State {
            rng, faults, tally, ..
        } = &mut *state;
        if self.plant == Some(Plant::LostUnlocks) || rng.f64() < faults.message_lost {
            tally.messages_lost += 1;
            return MessageFate::Drop;
        }
        MessageFate::Deliver {
            after: up_to(rng, faults.jitter),
        }
    }
}
