//! Connections to an in-memory server of this process (feature `memory`):
//! each command is handed to the server as Redis would receive it, and its
//! reply comes back as redis-rs would have parsed it off the wire, so every
//! layer above sees the same values as with a real Redis.
//!
//! On a server with a simulated network (`memory/interpose.rs`) a link
//! behaves like one TCP connection through that network: its commands go
//! to a queue of their own, reach the server in order after the delays the
//! network decides, and may run twice, go unanswered (the caller's reply
//! time-out answers, as redis-rs's does) or end in a reset. A command once
//! sent reaches the server even if its caller stops waiting, as on a real
//! connection.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::memory::interpose::{CommandFate, Interposer};
use crate::memory::Server;

/// Where `memory://<name>` connects: the server registered under `name`,
/// and that name (a simulated network tells links apart by it).
#[derive(Clone, Debug)]
pub(crate) struct MemoryEndpoint {
    pub(crate) server: Arc<Server>,
    pub(crate) name: Arc<str>,
}

impl MemoryEndpoint {
    /// The endpoint of `memory://<name>`.
    pub(crate) fn new(name: &str) -> Self {
        MemoryEndpoint {
            server: crate::memory::registry::named(name),
            name: Arc::from(name),
        }
    }

    /// A new connection; `response_timeout` bounds each reply on a
    /// simulated network (without one, replies are immediate).
    pub(crate) fn connect(&self, response_timeout: Option<Duration>) -> MemoryLink {
        let network = self.server.interposer().map(|interposer| {
            let (queue, jobs) = mpsc::unbounded_channel();
            let name: Arc<str> = Arc::from(format!("{}#{}", self.name, self.server.next_link()));
            tokio::spawn(carry(
                self.server.clone(),
                name.clone(),
                interposer.clone(),
                jobs,
            ));
            Arc::new(Network {
                interposer,
                name,
                queue,
                next_arrival: Mutex::new(Instant::now()),
                response_timeout,
            })
        });
        MemoryLink {
            server: self.server.clone(),
            network,
        }
    }
}

/// A connection to an in-memory server: cheap to clone (clones are the
/// same connection).
#[derive(Clone)]
pub(crate) struct MemoryLink {
    server: Arc<Server>,
    /// The simulated network, when the server has one.
    network: Option<Arc<Network>>,
}

/// One link's way through a simulated network.
struct Network {
    interposer: Arc<dyn Interposer>,
    name: Arc<str>,
    /// The link's commands, in the order sent, to its carrier task.
    queue: mpsc::UnboundedSender<Job>,
    /// When the last command sent reaches the server (arrivals keep order).
    next_arrival: Mutex<Instant>,
    response_timeout: Option<Duration>,
}

/// What a command (or a pipeline) asks of the server.
enum Work {
    One(Vec<Vec<u8>>),
    Pipeline {
        commands: Vec<Vec<Vec<u8>>>,
        transaction: bool,
        offset: usize,
        count: usize,
    },
}

/// A reply, and when it reaches the client.
type Delivery = (RedisResult<Vec<Value>>, Instant);

/// One command on its way.
struct Job {
    arrival: Instant,
    fate: CommandFate,
    work: Work,
    reply: oneshot::Sender<Delivery>,
}

/// The arguments of `cmd` as Redis receives them.
fn args_of(cmd: &Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|arg| match arg {
            Arg::Simple(bytes) => bytes.to_vec(),
            // Only redis-rs's scan iterators write a cursor argument (this
            // crate passes cursors as plain arguments): a first scan.
            _ => b"0".to_vec(),
        })
        .collect()
}

/// Runs `work` on `server`: one reply per command asked for.
fn run(
    server: &Server,
    interposer: Option<(&dyn Interposer, &str)>,
    work: &Work,
) -> RedisResult<Vec<Value>> {
    let args = |command: &Vec<Vec<u8>>| match interposer {
        Some((interposer, name)) => interposer.rewrite(name, command.clone()),
        None => command.clone(),
    };
    match work {
        Work::One(command) => server.call(&args(command)).map(|v| vec![v]),
        Work::Pipeline {
            commands,
            transaction: true,
            ..
        } => {
            // MULTI ... EXEC (redis-rs asks for one reply at offset len + 1):
            // every command at once, errors in their places.
            let commands: Vec<Vec<Vec<u8>>> = commands.iter().map(args).collect();
            server
                .call_all(&commands)
                .into_iter()
                .map(exec_entry)
                .collect::<RedisResult<Vec<Value>>>()
                .map(|entries| vec![Value::Array(entries)])
        }
        Work::Pipeline {
            commands,
            offset,
            count,
            ..
        } => commands
            .iter()
            .map(|command| server.call(&args(command)))
            .collect::<RedisResult<Vec<Value>>>()
            .map(|replies| replies.into_iter().skip(*offset).take(*count).collect()),
    }
}

fn reset() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "connection reset (simulated network)",
    ))
}

fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no reply in time (simulated network)",
    ))
}

/// The link's state on the network, as its carrier sees it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Line {
    Open,
    Silent,
    Reset,
}

/// Carries a link's commands to the server in order, each at its arrival
/// time, and their replies back, each no earlier than the one before.
async fn carry(
    server: Arc<Server>,
    name: Arc<str>,
    interposer: Arc<dyn Interposer>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) {
    let epoch = server.epoch();
    let mut line = Line::Open;
    let mut last_reply = Instant::now();
    while let Some(job) = jobs.recv().await {
        tokio::time::sleep_until(job.arrival).await;
        let now = Instant::now();
        if line == Line::Open && (server.epoch() != epoch || server.is_down(now)) {
            // The server restarted under the link (or refuses it).
            line = Line::Reset;
        }
        match line {
            Line::Silent => continue,
            Line::Reset => {
                let _ = job.reply.send((Err(reset()), now));
                continue;
            }
            Line::Open => {}
        }
        let hook = Some((&*interposer, &*name));
        let (out, after) = match job.fate {
            CommandFate::Deliver { after, .. } => (run(&server, hook, &job.work), after),
            CommandFate::Twice { again, after, .. } => {
                let _ = run(&server, hook, &job.work);
                tokio::time::sleep(again).await;
                (run(&server, hook, &job.work), after)
            }
            CommandFate::Silence { runs } => {
                if runs {
                    let _ = run(&server, hook, &job.work);
                }
                line = Line::Silent;
                continue;
            }
            CommandFate::Reset { runs, after } => {
                if runs {
                    let _ = run(&server, hook, &job.work);
                }
                line = Line::Reset;
                (Err(reset()), after)
            }
        };
        let at = (Instant::now() + after).max(last_reply);
        last_reply = at;
        let _ = job.reply.send((out, at));
    }
}

impl MemoryLink {
    /// Sends `work`: at once without a simulated network, else through it.
    fn send(&self, work: Work) -> RedisFuture<'static, Vec<Value>> {
        let Some(network) = &self.network else {
            let out = run(&self.server, None, &work);
            return Box::pin(async move { out });
        };
        let commands: Vec<Vec<Vec<u8>>> = match &work {
            Work::One(command) => vec![command.clone()],
            Work::Pipeline { commands, .. } => commands.clone(),
        };
        let fate = network.interposer.command(&network.name, &commands);
        let before = match fate {
            CommandFate::Deliver { before, .. } | CommandFate::Twice { before, .. } => before,
            CommandFate::Silence { .. } | CommandFate::Reset { .. } => Duration::ZERO,
        };
        let now = Instant::now();
        let arrival = {
            let mut next = network
                .next_arrival
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            *next = (now + before).max(*next);
            *next
        };
        let (reply, delivery) = oneshot::channel();
        let sent = network.queue.send(Job {
            arrival,
            fate,
            work,
            reply,
        });
        let deadline = network.response_timeout.map(|t| now + t);
        Box::pin(async move {
            if sent.is_err() {
                return Err(reset());
            }
            let arrive = async {
                match delivery.await {
                    Ok((out, at)) => {
                        tokio::time::sleep_until(at).await;
                        out
                    }
                    // Never answered (a silent link): only the reply
                    // time-out ends the wait.
                    Err(_) => std::future::pending().await,
                }
            };
            match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, arrive)
                    .await
                    .unwrap_or_else(|_| Err(timed_out())),
                None => arrive.await,
            }
        })
    }
}

impl ConnectionLike for MemoryLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let reply = self.send(Work::One(args_of(cmd)));
        Box::pin(async move {
            reply
                .await?
                .pop()
                .ok_or_else(|| RedisError::from((redis::ErrorKind::Client, "no reply")))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.send(Work::Pipeline {
            commands: pipeline.cmd_iter().map(args_of).collect(),
            transaction: pipeline.is_transaction(),
            offset,
            count,
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// One command's reply inside an `EXEC` array: a server error stays in its
/// place, as Redis answers it.
fn exec_entry(reply: RedisResult<Value>) -> RedisResult<Value> {
    match reply {
        Ok(value) => Ok(value),
        Err(e) => redis::ServerError::try_from(e).map(Value::ServerError),
    }
}
