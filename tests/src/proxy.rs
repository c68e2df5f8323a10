//! A RESP-aware TCP fault proxy to put between a client and a test
//! `redis-server`: black holes, latency, and one-shot faults aimed at one
//! command or at its reply (delay, cut after N bytes with FIN or RST, drop).
//!
//! Each accepted client connection gets its own upstream connection and two
//! threads, one per direction. The client→server direction is cut into whole
//! commands (RESP arrays, or inline commands), the server→client direction
//! into whole replies (RESP2, and RESP3 types), and each reply is paired with
//! the command it answers through a FIFO of pending commands, so pipelining
//! is fine.
//!
//! Pairing is exact for ordinary request/reply connections only. Once a
//! connection sends `SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE` or `MONITOR` (or
//! something that is not RESP), its later replies are not paired with
//! commands: they flow through unchanged, and faults aimed at replies no
//! longer match commands on that connection. RESP3 push messages (`>`) are
//! never paired. `CLIENT REPLY OFF|SKIP` is not understood and breaks pairing.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use socket2::SockRef;

use crate::resp::Connection;
use crate::{HarnessError, RespValue};

/// Longest a pump thread blocks in a read before it looks at its flags again.
const POLL: Duration = Duration::from_millis(10);
/// Shortest read timeout (zero would mean "block forever").
const MIN_POLL: Duration = Duration::from_millis(1);
/// How often the accept thread polls its non-blocking listener.
const ACCEPT_POLL: Duration = Duration::from_millis(2);
/// Write timeout on every proxied socket; a full send buffer is retried later.
const WRITE_TIMEOUT: Duration = Duration::from_millis(10);
/// Longest time spent writing the bytes a cut lets through.
const CUT_WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// Connect timeout for the upstream connection of each client connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Connect timeout of [`FaultProxy::command`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Read/write timeout of [`FaultProxy::command`].
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Client connections beyond this many are closed right after accept.
const MAX_CONNECTIONS: usize = 256;
/// A direction stops reading while this many bytes are held back.
const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;
/// Size of one read.
const READ_CHUNK: usize = 64 * 1024;
/// Deepest nesting of aggregates the parser accepts.
const MAX_DEPTH: usize = 64;
/// Longest header line (or inline command) the parser accepts.
const MAX_LINE: usize = 64 * 1024;
/// Largest bulk or aggregate length the parser accepts.
const MAX_LEN: i64 = 512 * 1024 * 1024;

/// One direction of traffic through a [`FaultProxy`].
///
/// ```
/// use lock_tests::Direction;
///
/// assert_ne!(Direction::ToServer, Direction::ToClient);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Commands, from the client to the server.
    ToServer,
    /// Replies and push messages, from the server to the client.
    ToClient,
}

impl Direction {
    fn index(self) -> usize {
        match self {
            Direction::ToServer => 0,
            Direction::ToClient => 1,
        }
    }
}

/// How the proxy closes a connection it cuts.
///
/// ```
/// use lock_tests::CutKind;
///
/// let how = CutKind::Rst;
/// assert_ne!(how, CutKind::Fin);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CutKind {
    /// An orderly close: the peer reads EOF after the bytes already sent.
    Fin,
    /// An abortive close (`SO_LINGER` 0): the peer gets a TCP RST
    /// (`ECONNRESET`), after the bytes it had already received.
    Rst,
}

/// A one-shot fault aimed at one command, armed with
/// [`FaultProxy::fault_next`].
///
/// Lengths (`after`) count bytes of the command's or reply's RESP encoding;
/// [`FaultHandle::command_len`] and [`FaultHandle::reply_len`] tell how many
/// there are. An `after` at or beyond the full length sends everything and
/// then closes; nothing the other side sends after the cut started is
/// forwarded (a command cut after its last byte is applied, but its reply
/// never reaches the client).
///
/// ```
/// use lock_tests::{CutKind, Fault};
/// use std::time::Duration;
///
/// let faults = [
///     Fault::DelayReply(Duration::from_millis(100)),
///     Fault::DelayCommand(Duration::from_millis(100)),
///     Fault::CutCommand { after: 3, how: CutKind::Fin },
///     Fault::CutReply { after: 0, how: CutKind::Rst },
///     Fault::DropReply,
/// ];
/// assert_eq!(faults.len(), 5);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The command is applied; its reply, and everything after it on that
    /// connection, is held back this long, then delivered in order.
    DelayReply(Duration),
    /// The command, and everything after it on that connection, is held back
    /// this long before it goes to the server.
    DelayCommand(Duration),
    /// The first `after` bytes of the command go to the server, then both
    /// sides of the connection are closed: a partial command is not applied.
    CutCommand {
        /// How many bytes of the command's encoding to forward.
        after: usize,
        /// How both sides are closed.
        how: CutKind,
    },
    /// The command is applied, the first `after` bytes of its reply reach the
    /// client, then both sides of the connection are closed.
    CutReply {
        /// How many bytes of the reply's encoding to deliver (may be 0).
        after: usize,
        /// How both sides are closed.
        how: CutKind,
    },
    /// The command is applied, but its reply and everything after it on that
    /// connection is swallowed: the connection stays open and silent (the
    /// "lost reply" case) until either end closes it or the proxy is dropped.
    DropReply,
}

/// Which command a one-shot rule targets: by name (the first word,
/// case-insensitive) and optionally by a byte string contained in one of
/// its arguments (a key, a script SHA, an owner id).
///
/// ```
/// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
///
/// let server = RedisServer::start()?;
/// let proxy = FaultProxy::start(server.addr())?;
/// let h = proxy.observe_next(CommandMatch::name("set").with_arg("lock:"));
/// proxy.command(&["SET", "other", "1"])?;
/// assert!(!h.matched());
/// proxy.command(&["SET", "lock:orders", "1"])?;
/// assert!(h.matched());
/// # Ok::<(), lock_tests::HarnessError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandMatch {
    name: Option<String>,
    /// Each must be a substring of some argument.
    contains: Vec<Vec<u8>>,
    /// Each must equal some argument.
    exact: Vec<Vec<u8>>,
}

impl CommandMatch {
    /// Matches every command.
    ///
    /// ```
    /// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let h = proxy.observe_next(CommandMatch::any());
    /// proxy.command(&["PING"])?;
    /// assert!(h.matched());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn any() -> CommandMatch {
        CommandMatch {
            name: None,
            contains: Vec::new(),
            exact: Vec::new(),
        }
    }

    /// Matches commands whose first word is `name`, ignoring ASCII case.
    ///
    /// ```
    /// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let h = proxy.observe_next(CommandMatch::name("EVALSHA"));
    /// proxy.command(&["evalsha", "0000", "0"])?; // an error reply (no such script), still matched
    /// assert!(h.matched());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn name(name: &str) -> CommandMatch {
        CommandMatch {
            name: Some(name.to_owned()),
            contains: Vec::new(),
            exact: Vec::new(),
        }
    }

    /// Also requires one of the arguments after the name to contain `needle`
    /// (a byte substring, case-sensitive). Several calls all must hold.
    ///
    /// ```
    /// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let h = proxy.observe_next(CommandMatch::name("GET").with_arg("ord"));
    /// proxy.command(&["GET", "lock:orders"])?;
    /// assert!(h.matched());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    #[must_use]
    pub fn with_arg(mut self, needle: impl AsRef<[u8]>) -> CommandMatch {
        self.contains.push(needle.as_ref().to_vec());
        self
    }

    /// Also requires one of the arguments after the name to equal `arg`
    /// exactly. Several calls (and [`with_arg`](Self::with_arg)) all must hold.
    ///
    /// ```
    /// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let h = proxy.observe_next(CommandMatch::name("SET").with_exact_arg("v").with_arg("ord"));
    /// proxy.command(&["SET", "lock:orders", "value"])?; // "value" is not "v"
    /// assert!(!h.matched());
    /// proxy.command(&["SET", "lock:orders", "v"])?;
    /// assert!(h.matched());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    #[must_use]
    pub fn with_exact_arg(mut self, arg: impl AsRef<[u8]>) -> CommandMatch {
        self.exact.push(arg.as_ref().to_vec());
        self
    }

    fn matches(&self, args: &[Vec<u8>]) -> bool {
        let Some((first, rest)) = args.split_first() else {
            return false;
        };
        if let Some(name) = &self.name {
            if !first.eq_ignore_ascii_case(name.as_bytes()) {
                return false;
            }
        }
        self.contains
            .iter()
            .all(|needle| rest.iter().any(|a| contains(a, needle)))
            && self.exact.iter().all(|want| rest.iter().any(|a| a == want))
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// What a one-shot rule does to the command it claims.
#[derive(Debug, Clone)]
enum Action {
    /// Nothing: only record the lengths.
    Observe,
    Fault(Fault),
}

impl Action {
    /// True if the action needs the reply to be paired with the command.
    fn needs_reply(&self) -> bool {
        matches!(
            self,
            Action::Observe
                | Action::Fault(Fault::DelayReply(_) | Fault::CutReply { .. } | Fault::DropReply)
        )
    }
}

/// What the server→client side does to a paired reply.
#[derive(Debug, Clone, Copy)]
enum ReplyAction {
    /// Only record the reply's length.
    Record,
    /// Record the length and mark the rule fired.
    Observe,
    Delay(Duration),
    Cut {
        after: usize,
        how: CutKind,
    },
    Drop,
}

#[derive(Debug, Default)]
struct RuleData {
    matched: bool,
    fired: bool,
    command_len: Option<usize>,
    reply_len: Option<usize>,
}

#[derive(Debug)]
struct RuleState {
    data: Mutex<RuleData>,
    changed: Condvar,
    /// The proxy's count of fired rules.
    fired_total: Arc<AtomicUsize>,
}

impl RuleState {
    fn matched(&self, command_len: usize) {
        let mut data = lock(&self.data);
        data.matched = true;
        data.command_len = Some(command_len);
        self.changed.notify_all();
    }

    fn record_reply(&self, reply_len: usize) {
        lock(&self.data).reply_len = Some(reply_len);
        self.changed.notify_all();
    }

    fn fire(&self) {
        let mut data = lock(&self.data);
        if !data.fired {
            data.fired = true;
            self.fired_total.fetch_add(1, Ordering::SeqCst);
        }
        self.changed.notify_all();
    }
}

/// Follows one rule armed with [`FaultProxy::fault_next`] or
/// [`FaultProxy::observe_next`]: whether it matched a command and fired, and
/// the byte lengths of that command and of its reply.
///
/// Cheap to clone; all clones see the same rule.
///
/// ```
/// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
///
/// let server = RedisServer::start()?;
/// let proxy = FaultProxy::start(server.addr())?;
/// let seen = proxy.observe_next(CommandMatch::name("SET"));
/// proxy.command(&["SET", "k", "v"])?;
/// assert!(seen.fired());
/// assert_eq!(seen.command_len(), Some(27)); // *3 $3 SET $1 k $1 v
/// assert_eq!(seen.reply_len(), Some(5)); // +OK\r\n
/// # Ok::<(), lock_tests::HarnessError>(())
/// ```
#[derive(Clone)]
pub struct FaultHandle {
    state: Arc<RuleState>,
}

impl fmt::Debug for FaultHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let data = lock(&self.state.data);
        f.debug_struct("FaultHandle")
            .field("matched", &data.matched)
            .field("fired", &data.fired)
            .field("command_len", &data.command_len)
            .field("reply_len", &data.reply_len)
            .finish()
    }
}

impl FaultHandle {
    /// True once a command matched the rule (the rule is then used up).
    ///
    /// ```
    /// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let h = proxy.observe_next(CommandMatch::name("GET"));
    /// proxy.command(&["PING"])?;
    /// assert!(!h.matched());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn matched(&self) -> bool {
        lock(&self.state.data).matched
    }

    /// True once the fault took effect: a delay started holding bytes back,
    /// a cut closed the connection, a reply was swallowed, or (for
    /// [`FaultProxy::observe_next`]) the reply was seen.
    ///
    /// ```
    /// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let h = proxy.observe_next(CommandMatch::name("PING"));
    /// proxy.command(&["PING"])?;
    /// assert!(h.fired());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn fired(&self) -> bool {
        lock(&self.state.data).fired
    }

    /// Waits up to `timeout` for the rule to fire; returns [`fired`](Self::fired).
    ///
    /// ```
    /// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
    /// use std::time::Duration;
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let h = proxy.observe_next(CommandMatch::name("GET"));
    /// assert!(!h.wait_fired(Duration::from_millis(10)));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn wait_fired(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut data = lock(&self.state.data);
        while !data.fired {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            data = self
                .state
                .changed
                .wait_timeout(data, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        data.fired
    }

    /// The length in bytes of the matched command's encoding, once matched.
    ///
    /// ```
    /// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let h = proxy.observe_next(CommandMatch::name("PING"));
    /// proxy.command(&["PING"])?;
    /// assert_eq!(h.command_len(), Some(14)); // *1\r\n$4\r\nPING\r\n
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn command_len(&self) -> Option<usize> {
        lock(&self.state.data).command_len
    }

    /// The length in bytes of the reply to the matched command, once the
    /// proxy has read all of it from the server (also for cut, delayed and
    /// dropped replies; never for [`Fault::CutCommand`], nor on connections
    /// whose replies are not paired).
    ///
    /// ```
    /// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let h = proxy.observe_next(CommandMatch::name("PING"));
    /// proxy.command(&["PING"])?;
    /// assert_eq!(h.reply_len(), Some(7)); // +PONG\r\n
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn reply_len(&self) -> Option<usize> {
        lock(&self.state.data).reply_len
    }
}

/// An armed one-shot rule.
#[derive(Debug)]
struct Rule {
    matcher: CommandMatch,
    action: Action,
    state: Arc<RuleState>,
}

/// State shared by the proxy handle, its accept thread and its pump threads.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    shutdown: AtomicBool,
    black_hole: AtomicBool,
    /// Extra latency per direction, indexed by [`Direction::index`].
    delays: Mutex<[Duration; 2]>,
    rules: Mutex<Vec<Rule>>,
    conns: Mutex<Vec<Weak<Conn>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    seen: Mutex<HashMap<String, usize>>,
    fired_total: Arc<AtomicUsize>,
}

impl Shared {
    fn delay(&self, dir: Direction) -> Duration {
        lock(&self.delays)[dir.index()]
    }

    /// Removes and returns the first armed rule that matches; rules that need
    /// the reply are skipped on connections whose replies are not paired.
    fn take_rule(&self, args: &[Vec<u8>], paired: bool) -> Option<Rule> {
        let mut rules = lock(&self.rules);
        let pos = rules
            .iter()
            .position(|r| (paired || !r.action.needs_reply()) && r.matcher.matches(args))?;
        Some(rules.remove(pos))
    }

    /// Live connections that are not being closed; forgets dead ones.
    fn live_conns(&self) -> Vec<Arc<Conn>> {
        let mut conns = lock(&self.conns);
        conns.retain(|w| w.strong_count() > 0);
        conns
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| !c.closing.load(Ordering::SeqCst))
            .collect()
    }
}

/// One proxied connection: the client's socket and its upstream socket.
/// Both pump threads hold it; the sockets close when the last one exits.
#[derive(Debug)]
struct Conn {
    client: TcpStream,
    server: TcpStream,
    closing: AtomicBool,
    /// Set by the client→server side once replies can no longer be paired.
    commands_unpaired: AtomicBool,
    /// Commands sent and not yet answered, oldest first.
    pending: Mutex<VecDeque<Pending>>,
}

impl Conn {
    /// Marks the connection as closing; true for the first caller only.
    fn begin_close(&self) -> bool {
        !self.closing.swap(true, Ordering::SeqCst)
    }

    /// Closes both sides: FIN at once, or RST (`SO_LINGER` 0) when the pump
    /// threads let go of the sockets a moment later.
    fn finish_close(&self, how: CutKind) {
        for stream in [&self.client, &self.server] {
            // Errors only mean the socket is already gone.
            match how {
                CutKind::Fin => {
                    let _ = stream.shutdown(Shutdown::Both);
                }
                CutKind::Rst => {
                    let _ = SockRef::from(stream).set_linger(Some(Duration::ZERO));
                }
            }
        }
    }

    fn close(&self, how: CutKind) {
        if self.begin_close() {
            self.finish_close(how);
        }
    }
}

/// A command waiting for its reply.
#[derive(Debug)]
struct Pending {
    /// Replies after this command's first one are not paired (SUBSCRIBE...).
    unpairs: bool,
    rule: Option<(Arc<RuleState>, ReplyAction)>,
}

/// A TCP proxy on `127.0.0.1` that forwards to one upstream server and
/// injects faults on demand (black hole, latency, one-shot faults aimed at a
/// command or its reply, cutting every connection).
///
/// Faults can be changed at any time from any thread. Dropping the proxy
/// closes its listener and every connection and joins its threads (within
/// a few tens of milliseconds).
///
/// ```
/// use lock_tests::{CommandMatch, CutKind, Fault, FaultProxy, RedisServer};
///
/// let server = RedisServer::start()?;
/// let proxy = FaultProxy::start(server.addr())?;
/// // A client would connect to proxy.url() instead of server.url().
/// assert_eq!(proxy.command(&["SET", "k", "v"])?.as_string().as_deref(), Some("OK"));
///
/// // The next INCR is applied, but its reply never arrives: the connection is reset.
/// let cut = proxy.fault_next(CommandMatch::name("incr"), Fault::CutReply { after: 0, how: CutKind::Rst });
/// assert!(proxy.command(&["INCR", "n"]).is_err());
/// assert!(cut.fired());
/// assert_eq!(server.command(&["GET", "n"])?.as_i64(), Some(1));
/// # Ok::<(), lock_tests::HarnessError>(())
/// ```
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("black_hole", &self.is_black_holed())
            .field("connections", &self.connections())
            .finish()
    }
}

impl FaultProxy {
    /// Listens on a free port of `127.0.0.1` and forwards every accepted
    /// connection to `upstream` over a connection of its own. A client whose
    /// upstream connection fails is closed at once.
    ///
    /// ```
    /// use lock_tests::{FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// assert_ne!(proxy.port(), server.port());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn start(upstream: SocketAddr) -> Result<FaultProxy, HarnessError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            shutdown: AtomicBool::new(false),
            black_hole: AtomicBool::new(false),
            delays: Mutex::new([Duration::ZERO; 2]),
            rules: Mutex::new(Vec::new()),
            conns: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            seen: Mutex::new(HashMap::new()),
            fired_total: Arc::new(AtomicUsize::new(0)),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("fault-proxy-accept".into())
            .spawn(move || accept_loop(&listener, &accept_shared))?;
        Ok(FaultProxy {
            shared,
            addr,
            accept: Some(accept),
        })
    }

    /// `127.0.0.1:PORT`, the address clients connect to.
    ///
    /// ```
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// assert!(proxy.addr().ip().is_loopback());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port the proxy listens on.
    ///
    /// ```
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// assert_eq!(proxy.port(), proxy.addr().port());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://127.0.0.1:PORT`, for clients that take a URL.
    ///
    /// ```
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.addr.port())
    }

    /// The server the proxy forwards to.
    ///
    /// ```
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// assert_eq!(proxy.upstream(), server.addr());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// Holds back every byte in both directions, on every connection (new
    /// ones are still accepted, and held too): nothing is forwarded, nothing
    /// is dropped, connections stay open. [`heal`](Self::heal) delivers it all.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// proxy.black_hole();
    /// let err = proxy.command_with_timeout(&["PING"], Duration::from_millis(100)).unwrap_err();
    /// assert!(err.is_timeout());
    /// proxy.heal();
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn black_hole(&self) {
        self.shared.black_hole.store(true, Ordering::SeqCst);
    }

    /// Ends a [`black_hole`](Self::black_hole): what was held back is
    /// delivered, in order.
    ///
    /// ```
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// proxy.black_hole();
    /// proxy.heal();
    /// assert!(proxy.command(&["PING"]).is_ok());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn heal(&self) {
        self.shared.black_hole.store(false, Ordering::SeqCst);
    }

    /// True between [`black_hole`](Self::black_hole) and [`heal`](Self::heal).
    ///
    /// ```
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// assert!(!proxy.is_black_holed());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn is_black_holed(&self) -> bool {
        self.shared.black_hole.load(Ordering::SeqCst)
    }

    /// Adds `by` of latency to every command (or reply) in one direction:
    /// each is delivered `by` after the proxy received it. Takes effect for
    /// bytes still held back too; replaces an earlier delay in that direction.
    ///
    /// ```
    /// use lock_tests::Direction;
    /// use std::time::{Duration, Instant};
    ///
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// proxy.delay(Direction::ToClient, Duration::from_millis(50));
    /// let started = Instant::now();
    /// proxy.command(&["PING"])?;
    /// assert!(started.elapsed() >= Duration::from_millis(50));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn delay(&self, direction: Direction, by: Duration) {
        lock(&self.shared.delays)[direction.index()] = by;
    }

    /// Removes the latency of [`delay`](Self::delay) in both directions.
    ///
    /// ```
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// proxy.delay(lock_tests::Direction::ToServer, std::time::Duration::from_secs(60));
    /// proxy.clear_delay();
    /// assert!(proxy.command(&["PING"]).is_ok());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn clear_delay(&self) {
        *lock(&self.shared.delays) = [Duration::ZERO; 2];
    }

    /// Arms a one-shot rule: the first command matching `matcher` from now
    /// on, on any connection, gets `fault`. Rules are tried in the order they
    /// were armed and at most one applies to a command. Faults aimed at the
    /// reply skip connections whose replies are not paired (see the module
    /// docs); a rule is used up even if its connection dies before it fires.
    ///
    /// ```
    /// use lock_tests::{CommandMatch, Fault, FaultProxy, RedisServer};
    /// use std::time::{Duration, Instant};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let slow = proxy.fault_next(CommandMatch::name("GET").with_arg("slow"), Fault::DelayReply(Duration::from_millis(50)));
    /// let started = Instant::now();
    /// proxy.command(&["GET", "fast"])?;
    /// assert!(!slow.matched());
    /// proxy.command(&["GET", "slow"])?;
    /// assert!(slow.fired() && started.elapsed() >= Duration::from_millis(50));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn fault_next(&self, matcher: CommandMatch, fault: Fault) -> FaultHandle {
        self.arm(matcher, Action::Fault(fault))
    }

    /// Arms a one-shot rule that changes nothing but records the byte lengths
    /// of the next command matching `matcher` and of its reply (to know how
    /// many offsets a cut can take); it fires when the reply is seen.
    ///
    /// ```
    /// use lock_tests::{CommandMatch, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let h = proxy.observe_next(CommandMatch::name("GET"));
    /// proxy.command(&["GET", "missing"])?;
    /// assert_eq!(h.reply_len(), Some(5)); // $-1\r\n
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn observe_next(&self, matcher: CommandMatch) -> FaultHandle {
        self.arm(matcher, Action::Observe)
    }

    fn arm(&self, matcher: CommandMatch, action: Action) -> FaultHandle {
        let state = Arc::new(RuleState {
            data: Mutex::new(RuleData::default()),
            changed: Condvar::new(),
            fired_total: Arc::clone(&self.shared.fired_total),
        });
        lock(&self.shared.rules).push(Rule {
            matcher,
            action,
            state: Arc::clone(&state),
        });
        FaultHandle { state }
    }

    /// Disarms every rule that has not matched a command yet.
    ///
    /// ```
    /// use lock_tests::{CommandMatch, Fault, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let h = proxy.fault_next(CommandMatch::any(), Fault::DropReply);
    /// proxy.clear_rules();
    /// assert!(proxy.command(&["PING"]).is_ok());
    /// assert!(!h.matched());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn clear_rules(&self) {
        lock(&self.shared.rules).clear();
    }

    /// How many rules have fired so far.
    ///
    /// ```
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// assert_eq!(proxy.fired(), 0);
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn fired(&self) -> usize {
        self.shared.fired_total.load(Ordering::SeqCst)
    }

    /// Closes every current connection, both sides, with FIN or RST.
    ///
    /// ```
    /// use lock_tests::CutKind;
    ///
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// proxy.cut_all(CutKind::Rst);
    /// assert_eq!(proxy.connections(), 0);
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn cut_all(&self, how: CutKind) {
        for conn in self.shared.live_conns() {
            conn.close(how);
        }
    }

    /// The number of open client connections (accepted, with an upstream
    /// connection, and not closed yet).
    ///
    /// ```
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// assert_eq!(proxy.connections(), 0);
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn connections(&self) -> usize {
        self.shared.live_conns().len()
    }

    /// Waits up to `timeout` until [`connections`](Self::connections) is `n`;
    /// returns whether it is.
    ///
    /// ```
    /// use std::net::TcpStream;
    /// use std::time::Duration;
    ///
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// let client = TcpStream::connect(proxy.addr())?;
    /// assert!(proxy.wait_connections(1, Duration::from_secs(2)));
    /// drop(client);
    /// assert!(proxy.wait_connections(0, Duration::from_secs(2)));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn wait_connections(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.connections() == n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(ACCEPT_POLL);
        }
    }

    /// How many commands named `name` (case-insensitive) clients have sent
    /// through the proxy so far, including held-back and cut ones.
    ///
    /// ```
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// proxy.command(&["ping"])?;
    /// assert_eq!(proxy.commands_seen("PING"), 1);
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn commands_seen(&self, name: &str) -> usize {
        lock(&self.shared.seen)
            .get(&name.to_ascii_uppercase())
            .copied()
            .unwrap_or(0)
    }

    /// Sends one command through the proxy on a fresh connection and reads
    /// the reply (no `AUTH` is sent). Connect timeout 2 s, read/write timeout
    /// 5 s. An error *reply* is `Ok(RespValue::Error(..))`; a cut connection
    /// is an `Err`.
    ///
    /// ```
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// assert_eq!(proxy.command(&["PING"])?.as_string().as_deref(), Some("PONG"));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn command(&self, args: &[&str]) -> Result<RespValue, HarnessError> {
        Connection::open(self.addr, CONNECT_TIMEOUT, IO_TIMEOUT)?.call(args)
    }

    /// Like [`command`](Self::command), with `timeout` as the read/write
    /// timeout (and as the connect timeout, if below 2 s).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # let server = lock_tests::RedisServer::start()?;
    /// let proxy = lock_tests::FaultProxy::start(server.addr())?;
    /// assert!(proxy.command_with_timeout(&["PING"], Duration::from_millis(500)).is_ok());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn command_with_timeout(
        &self,
        args: &[&str],
        timeout: Duration,
    ) -> Result<RespValue, HarnessError> {
        Connection::open(self.addr, timeout.min(CONNECT_TIMEOUT), timeout)?.call(args)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // The accept thread owns the listener: joining it closes the port
        // and guarantees no more pump threads are started.
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for conn in self.shared.live_conns() {
            conn.close(CutKind::Fin);
        }
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for handle in threads {
            // Every pump loop checks the shutdown flag at least every POLL + WRITE_TIMEOUT.
            let _ = handle.join();
        }
    }
}

/// Locks a mutex, ignoring poisoning (a panicked pump thread must not take
/// the test thread down with it).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.shutdown.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                reap_finished(shared);
                // Errors here only concern this connection: dropping `client` closes it.
                let _ = start_connection(client, shared);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // WouldBlock, or a transient error such as EMFILE: wait a little.
            Err(_) => thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Joins the pump threads that have ended, so the list stays short.
fn reap_finished(shared: &Shared) {
    let mut threads = lock(&shared.threads);
    let (done, running): (Vec<_>, Vec<_>) = threads.drain(..).partition(JoinHandle::is_finished);
    *threads = running;
    drop(threads);
    for handle in done {
        let _ = handle.join();
    }
}

fn start_connection(client: TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
    if shared.live_conns().len() >= MAX_CONNECTIONS {
        return Err(io::Error::other("too many proxied connections"));
    }
    // Accepted sockets may inherit the listener's non-blocking mode.
    client.set_nonblocking(false)?;
    let server = TcpStream::connect_timeout(&shared.upstream, UPSTREAM_CONNECT_TIMEOUT)?;
    for stream in [&client, &server] {
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        stream.set_read_timeout(Some(POLL))?;
    }
    let conn = Arc::new(Conn {
        client,
        server,
        closing: AtomicBool::new(false),
        commands_unpaired: AtomicBool::new(false),
        pending: Mutex::new(VecDeque::new()),
    });
    lock(&shared.conns).push(Arc::downgrade(&conn));
    for dir in [Direction::ToServer, Direction::ToClient] {
        let pump = Pump::new(dir, Arc::clone(shared), Arc::clone(&conn));
        let name = match dir {
            Direction::ToServer => "fault-proxy-to-server",
            Direction::ToClient => "fault-proxy-to-client",
        };
        match thread::Builder::new()
            .name(name.into())
            .spawn(move || pump.run())
        {
            Ok(handle) => lock(&shared.threads).push(handle),
            Err(e) => {
                conn.close(CutKind::Fin);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Bytes waiting to be forwarded in one direction.
#[derive(Debug)]
struct Item {
    bytes: Vec<u8>,
    written: usize,
    arrived: Instant,
    /// Held back at least until then (a one-shot delay).
    not_before: Option<Instant>,
    /// Close the connection once these bytes are out.
    cut: Option<(CutKind, Arc<RuleState>)>,
}

impl Item {
    fn new(bytes: Vec<u8>) -> Item {
        Item {
            bytes,
            written: 0,
            arrived: Instant::now(),
            not_before: None,
            cut: None,
        }
    }

    fn ready_at(&self, delay: Duration) -> Instant {
        let at = self.arrived + delay;
        self.not_before.map_or(at, |t| t.max(at))
    }
}

/// What the pump loop does after a flush.
enum Flow {
    Continue,
    Stop,
}

/// One direction of one connection: reads, cuts the stream into commands
/// or replies, applies faults, and forwards in order.
struct Pump {
    dir: Direction,
    shared: Arc<Shared>,
    conn: Arc<Conn>,
    /// Bytes read but not yet a whole command or reply.
    inbuf: Vec<u8>,
    /// The stream could not be parsed: forward it as it comes.
    raw: bool,
    /// (Replies only) stop pairing replies with commands.
    unpaired: bool,
    queue: VecDeque<Item>,
    queued: usize,
    eof: bool,
    /// A cut is queued or replies are swallowed: later input is discarded.
    sealed: bool,
}

impl Pump {
    fn new(dir: Direction, shared: Arc<Shared>, conn: Arc<Conn>) -> Pump {
        Pump {
            dir,
            shared,
            conn,
            inbuf: Vec::new(),
            raw: false,
            unpaired: false,
            queue: VecDeque::new(),
            queued: 0,
            eof: false,
            sealed: false,
        }
    }

    fn src(&self) -> &TcpStream {
        match self.dir {
            Direction::ToServer => &self.conn.client,
            Direction::ToClient => &self.conn.server,
        }
    }

    fn sink(&self) -> &TcpStream {
        match self.dir {
            Direction::ToServer => &self.conn.server,
            Direction::ToClient => &self.conn.client,
        }
    }

    fn run(mut self) {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            if self.shared.shutdown.load(Ordering::SeqCst)
                || self.conn.closing.load(Ordering::SeqCst)
            {
                break;
            }
            match self.flush() {
                Ok(Flow::Continue) => {}
                Ok(Flow::Stop) => break,
                Err(_) => {
                    self.conn.close(CutKind::Fin);
                    break;
                }
            }
            if self.eof {
                if self.queue.is_empty() {
                    // Pass the half-close on; the other direction carries on.
                    let _ = self.sink().shutdown(Shutdown::Write);
                    break;
                }
                thread::sleep(self.wait_time());
                continue;
            }
            if self.queued >= MAX_QUEUED_BYTES {
                thread::sleep(self.wait_time());
                continue;
            }
            if self.src().set_read_timeout(Some(self.wait_time())).is_err() {
                self.conn.close(CutKind::Fin);
                break;
            }
            match self.src().read(&mut buf) {
                Ok(0) => self.on_eof(),
                Ok(n) => {
                    if !self.sealed {
                        self.inbuf.extend_from_slice(&buf[..n]);
                        self.parse();
                    }
                }
                Err(e) if is_retry(&e) => {}
                Err(_) => {
                    self.conn.close(CutKind::Fin);
                    break;
                }
            }
        }
    }

    /// How long to block before the front item may become deliverable.
    fn wait_time(&self) -> Duration {
        let wait = match self.queue.front() {
            Some(item) if item.written > 0 => MIN_POLL,
            Some(item) if !self.shared.black_hole.load(Ordering::SeqCst) => item
                .ready_at(self.shared.delay(self.dir))
                .saturating_duration_since(Instant::now())
                .min(POLL),
            _ => POLL,
        };
        wait.max(MIN_POLL)
    }

    /// Writes out the deliverable items at the front of the queue.
    fn flush(&mut self) -> io::Result<Flow> {
        loop {
            let delay = self.shared.delay(self.dir);
            let black_hole = self.shared.black_hole.load(Ordering::SeqCst);
            let sink = match self.dir {
                Direction::ToServer => &self.conn.server,
                Direction::ToClient => &self.conn.client,
            };
            let Some(item) = self.queue.front_mut() else {
                return Ok(Flow::Continue);
            };
            // An item is held back only before its first byte goes out.
            if item.written == 0 && (black_hole || Instant::now() < item.ready_at(delay)) {
                return Ok(Flow::Continue);
            }
            if item.cut.is_some() {
                return Ok(self.cut_front());
            }
            while item.written < item.bytes.len() {
                match (&*sink).write(&item.bytes[item.written..]) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => item.written += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if is_retry(&e) => return Ok(Flow::Continue),
                    Err(e) => return Err(e),
                }
            }
            if let Some(item) = self.queue.pop_front() {
                self.queued -= item.bytes.len();
            }
        }
    }

    /// Sends the front item (a cut's prefix) and closes the connection.
    ///
    /// The connection is marked closing *before* the prefix goes out, so the
    /// other direction forwards nothing that the prefix provokes (the reply
    /// to a command cut after its last byte never reaches the client).
    fn cut_front(&mut self) -> Flow {
        let Some(item) = self.queue.pop_front() else {
            return Flow::Continue;
        };
        self.queued -= item.bytes.len();
        let Some((how, rule)) = item.cut else {
            return Flow::Continue;
        };
        if !self.conn.begin_close() {
            // Closed meanwhile (cut_all, the peer, the proxy's drop).
            return Flow::Stop;
        }
        let deadline = Instant::now() + CUT_WRITE_TIMEOUT;
        let mut rest = &item.bytes[item.written..];
        while !rest.is_empty() && Instant::now() < deadline {
            match self.sink().write(rest) {
                Ok(0) => break,
                Ok(n) => rest = &rest[n..],
                Err(e) if is_retry(&e) => {}
                Err(_) => break,
            }
        }
        rule.fire();
        self.conn.finish_close(how);
        Flow::Stop
    }

    fn enqueue(&mut self, item: Item) {
        self.queued += item.bytes.len();
        self.queue.push_back(item);
    }

    fn on_eof(&mut self) {
        self.eof = true;
        if !self.sealed && !self.inbuf.is_empty() {
            // A partial command or reply: pass it on as it is.
            let rest = std::mem::take(&mut self.inbuf);
            self.enqueue(Item::new(rest));
        }
    }

    fn parse(&mut self) {
        while !self.sealed && !self.inbuf.is_empty() {
            if self.raw {
                let rest = std::mem::take(&mut self.inbuf);
                self.enqueue(Item::new(rest));
                return;
            }
            match self.dir {
                Direction::ToServer => match command_frame(&self.inbuf) {
                    Ok(None) => return,
                    Ok(Some((len, args))) => {
                        let frame: Vec<u8> = self.inbuf.drain(..len).collect();
                        self.on_command(frame, &args);
                    }
                    Err(Malformed) => {
                        self.raw = true;
                        self.conn.commands_unpaired.store(true, Ordering::SeqCst);
                        lock(&self.conn.pending).push_back(Pending {
                            unpairs: true,
                            rule: None,
                        });
                    }
                },
                Direction::ToClient => match value_end(&self.inbuf, 0, 0) {
                    Ok(None) => return,
                    Ok(Some(len)) => {
                        let frame: Vec<u8> = self.inbuf.drain(..len).collect();
                        self.on_reply(frame);
                    }
                    Err(Malformed) => {
                        self.raw = true;
                        self.unpaired = true;
                    }
                },
            }
        }
        if self.sealed {
            self.inbuf.clear();
        }
    }

    fn on_command(&mut self, frame: Vec<u8>, args: &[Vec<u8>]) {
        let name = args
            .first()
            .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase());
        if let Some(name) = &name {
            *lock(&self.shared.seen).entry(name.clone()).or_insert(0) += 1;
        }
        let unpairs = matches!(
            name.as_deref(),
            Some("SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE" | "MONITOR")
        );
        let paired = !self.conn.commands_unpaired.load(Ordering::SeqCst);
        if unpairs {
            self.conn.commands_unpaired.store(true, Ordering::SeqCst);
        }
        let rule = self.shared.take_rule(args, paired);
        if let Some(rule) = &rule {
            rule.state.matched(frame.len());
        }
        // An empty inline command gets no reply.
        if !args.is_empty() {
            let reply_rule = rule.as_ref().filter(|_| paired).and_then(|r| {
                let action = match &r.action {
                    Action::Observe => ReplyAction::Observe,
                    Action::Fault(Fault::DelayReply(d)) => ReplyAction::Delay(*d),
                    Action::Fault(Fault::CutReply { after, how }) => ReplyAction::Cut {
                        after: *after,
                        how: *how,
                    },
                    Action::Fault(Fault::DropReply) => ReplyAction::Drop,
                    Action::Fault(Fault::DelayCommand(_)) => ReplyAction::Record,
                    Action::Fault(Fault::CutCommand { .. }) => return None,
                };
                Some((Arc::clone(&r.state), action))
            });
            lock(&self.conn.pending).push_back(Pending {
                unpairs,
                rule: reply_rule,
            });
        }
        let mut item = Item::new(frame);
        if let Some(rule) = rule {
            match rule.action {
                Action::Fault(Fault::DelayCommand(by)) => {
                    item.not_before = Some(item.arrived + by);
                    rule.state.fire();
                }
                Action::Fault(Fault::CutCommand { after, how }) => {
                    item.bytes.truncate(after);
                    item.cut = Some((how, rule.state));
                    self.sealed = true;
                }
                _ => {}
            }
        }
        self.enqueue(item);
    }

    fn on_reply(&mut self, frame: Vec<u8>) {
        let is_push = frame.first() == Some(&b'>');
        let mut rule = None;
        if !is_push && !self.unpaired {
            if let Some(pending) = lock(&self.conn.pending).pop_front() {
                self.unpaired = pending.unpairs;
                rule = pending.rule;
            }
        }
        let mut item = Item::new(frame);
        if let Some((state, action)) = rule {
            state.record_reply(item.bytes.len());
            match action {
                ReplyAction::Record => {}
                ReplyAction::Observe => state.fire(),
                ReplyAction::Delay(by) => {
                    item.not_before = Some(item.arrived + by);
                    state.fire();
                }
                ReplyAction::Cut { after, how } => {
                    item.bytes.truncate(after);
                    item.cut = Some((how, state));
                    self.sealed = true;
                }
                ReplyAction::Drop => {
                    // This reply and everything after it is discarded.
                    self.sealed = true;
                    state.fire();
                    return;
                }
            }
        }
        self.enqueue(item);
    }
}

/// Read/write timeouts and interrupted calls: try again later.
fn is_retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// The bytes are not RESP (or exceed the parser's limits).
#[derive(Debug, PartialEq, Eq)]
struct Malformed;

/// Where the CRLF ending the line that starts at `from` is; `None` if it has
/// not arrived yet.
fn find_crlf(buf: &[u8], from: usize) -> Result<Option<usize>, Malformed> {
    let rest = buf.get(from..).unwrap_or_default();
    // Look no further than the longest line allowed.
    let rest = &rest[..rest.len().min(MAX_LINE + 2)];
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(i) if i <= MAX_LINE => Ok(Some(from + i)),
        Some(_) => Err(Malformed),
        None if rest.len() > MAX_LINE => Err(Malformed),
        None => Ok(None),
    }
}

/// Parses a length header: `None` for -1 (null), an error for other negatives.
fn parse_len(header: &[u8]) -> Result<Option<usize>, Malformed> {
    let n: i64 = std::str::from_utf8(header)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(Malformed)?;
    match n {
        -1 => Ok(None),
        0..=MAX_LEN => usize::try_from(n).map(Some).map_err(|_| Malformed),
        _ => Err(Malformed),
    }
}

/// The end of the RESP2/RESP3 value starting at `start`, `None` if it is not
/// complete yet. An attribute (`|`) includes the value it annotates.
fn value_end(buf: &[u8], start: usize, depth: usize) -> Result<Option<usize>, Malformed> {
    if depth > MAX_DEPTH {
        return Err(Malformed);
    }
    let Some(&kind) = buf.get(start) else {
        return Ok(None);
    };
    let Some(line_end) = find_crlf(buf, start + 1)? else {
        return Ok(None);
    };
    let header = &buf[start + 1..line_end];
    let body = line_end + 2;
    match kind {
        // Simple string, error, integer; RESP3 null, boolean, double, big number.
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(Some(body)),
        // Bulk string; RESP3 blob error, verbatim string.
        b'$' | b'!' | b'=' => {
            let Some(len) = parse_len(header)? else {
                return if kind == b'$' {
                    Ok(Some(body))
                } else {
                    Err(Malformed)
                };
            };
            let end = body + len;
            match buf.get(end..end + 2) {
                None => Ok(None),
                Some(b"\r\n") => Ok(Some(end + 2)),
                Some(_) => Err(Malformed),
            }
        }
        // Array; RESP3 set, push, map, attribute.
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let Some(len) = parse_len(header)? else {
                return if kind == b'*' {
                    Ok(Some(body))
                } else {
                    Err(Malformed)
                };
            };
            let count = if matches!(kind, b'%' | b'|') {
                len * 2
            } else {
                len
            };
            let mut pos = body;
            for _ in 0..count {
                match value_end(buf, pos, depth + 1)? {
                    Some(end) => pos = end,
                    None => return Ok(None),
                }
            }
            if kind == b'|' {
                value_end(buf, pos, depth + 1)
            } else {
                Ok(Some(pos))
            }
        }
        _ => Err(Malformed),
    }
}

/// A parsed command: its length in bytes and its arguments (the name first).
type Command = (usize, Vec<Vec<u8>>);

/// A whole command at the front of `buf`: its length and its arguments.
/// Commands are RESP arrays or inline commands (a line of words).
fn command_frame(buf: &[u8]) -> Result<Option<Command>, Malformed> {
    if buf.first() == Some(&b'*') {
        let Some(len) = value_end(buf, 0, 0)? else {
            return Ok(None);
        };
        return Ok(Some((len, array_args(&buf[..len]))));
    }
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > MAX_LINE {
            Err(Malformed)
        } else {
            Ok(None)
        };
    };
    let line = &buf[..nl];
    let args = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    Ok(Some((nl + 1, args)))
}

/// The elements of a complete array: bulk strings by their content, other
/// simple values by their text, nested aggregates by their raw encoding.
fn array_args(frame: &[u8]) -> Vec<Vec<u8>> {
    let mut args = Vec::new();
    let Ok(Some(line_end)) = find_crlf(frame, 1) else {
        return args;
    };
    let Ok(Some(count)) = parse_len(&frame[1..line_end]) else {
        return args;
    };
    let mut pos = line_end + 2;
    for _ in 0..count {
        let Ok(Some(end)) = value_end(frame, pos, 1) else {
            break;
        };
        let elem = &frame[pos..end];
        let arg = match (elem.first(), find_crlf(elem, 1)) {
            (Some(b'$'), Ok(Some(hdr))) if end - pos >= hdr + 4 => &elem[hdr + 2..elem.len() - 2],
            (Some(b'+' | b':'), Ok(Some(hdr))) => &elem[1..hdr],
            _ => elem,
        };
        args.push(arg.to_vec());
        pos = end;
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{encode_command, read_value, ReadError};
    use crate::RedisServer;
    use std::io::BufReader;

    type TestResult = Result<(), HarnessError>;

    /// A persistent raw connection through the proxy.
    struct Client {
        writer: TcpStream,
        reader: BufReader<TcpStream>,
    }

    impl Client {
        fn connect(proxy: &FaultProxy) -> Result<Client, HarnessError> {
            let writer = TcpStream::connect_timeout(&proxy.addr(), CONNECT_TIMEOUT)?;
            writer.set_read_timeout(Some(Duration::from_secs(2)))?;
            writer.set_write_timeout(Some(Duration::from_secs(2)))?;
            let reader = BufReader::new(writer.try_clone()?);
            Ok(Client { writer, reader })
        }

        fn send(&mut self, commands: &[&[&str]]) -> TestResult {
            let bytes: Vec<u8> = commands.iter().flat_map(|c| encode_command(c)).collect();
            self.writer.write_all(&bytes)?;
            Ok(())
        }

        fn read_with_timeout(&mut self, timeout: Duration) -> Result<RespValue, HarnessError> {
            self.writer.set_read_timeout(Some(timeout))?;
            match read_value(&mut self.reader) {
                Ok(v) => Ok(v),
                Err(ReadError::Io(e)) if is_retry(&e) => {
                    Err(HarnessError::Timeout { after: timeout })
                }
                Err(ReadError::Io(e)) => Err(HarnessError::Io(e)),
                Err(ReadError::Protocol(m)) => Err(HarnessError::Protocol(m)),
            }
        }

        fn read(&mut self) -> Result<RespValue, HarnessError> {
            self.read_with_timeout(Duration::from_secs(2))
        }

        fn call(&mut self, args: &[&str]) -> Result<RespValue, HarnessError> {
            self.send(&[args])?;
            self.read()
        }

        /// Reads until the connection ends: the bytes received and how it ended
        /// (`None` for EOF, else the error kind).
        fn read_to_close(&mut self) -> (Vec<u8>, Option<io::ErrorKind>) {
            let _ = self.writer.set_read_timeout(Some(Duration::from_secs(2)));
            let mut got = Vec::new();
            let mut buf = [0u8; 256];
            loop {
                match self.reader.read(&mut buf) {
                    Ok(0) => return (got, None),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return (got, Some(e.kind())),
                }
            }
        }
    }

    fn setup() -> Result<(RedisServer, FaultProxy), HarnessError> {
        let server = RedisServer::start()?;
        let proxy = FaultProxy::start(server.addr())?;
        Ok((server, proxy))
    }

    fn ok() -> RespValue {
        RespValue::Simple("OK".into())
    }

    fn bulk(s: &str) -> RespValue {
        RespValue::Bulk(Some(s.as_bytes().to_vec()))
    }

    /// Polls the server until `key` holds `value` (the server may still be
    /// applying a command whose reply the client never saw).
    fn wait_for_value(server: &RedisServer, key: &str, value: &str) -> Result<bool, HarnessError> {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            if server.command(&["GET", key])? == bulk(value) {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn forwards_commands_and_replies_unchanged() -> TestResult {
        let (server, proxy) = setup()?;
        assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
        assert_eq!(proxy.upstream(), server.addr());
        assert_eq!(proxy.command(&["SET", "k", "héllo\r\nworld"])?, ok());
        assert_eq!(server.command(&["GET", "k"])?, bulk("héllo\r\nworld"));
        let mut client = Client::connect(&proxy)?;
        assert_eq!(client.call(&["GET", "k"])?, bulk("héllo\r\nworld"));
        assert_eq!(client.call(&["GET", "missing"])?, RespValue::Bulk(None));
        assert_eq!(client.call(&["INCRBY", "n", "-5"])?, RespValue::Integer(-5));
        client.call(&["RPUSH", "l", "a", "b"])?;
        assert_eq!(
            client.call(&["LRANGE", "l", "0", "-1"])?,
            RespValue::Array(Some(vec![bulk("a"), bulk("b")]))
        );
        assert!(client.call(&["INCR", "k"])?.as_error().is_some());
        // A big value crosses many reads in both directions.
        let big = "x".repeat(3 * READ_CHUNK + 7);
        assert_eq!(client.call(&["SET", "big", &big])?, ok());
        assert_eq!(client.call(&["GET", "big"])?, bulk(&big));
        // Inline commands work too.
        client.writer.write_all(b"PING\r\n")?;
        assert_eq!(client.read()?, RespValue::Simple("PONG".into()));
        assert_eq!(proxy.connections(), 1);
        assert_eq!(proxy.commands_seen("get"), 3);
        assert_eq!(proxy.commands_seen("PING"), 1);
        drop(client);
        assert!(proxy.wait_connections(0, Duration::from_secs(2)));
        Ok(())
    }

    #[test]
    fn pipelined_replies_are_paired_with_their_commands() -> TestResult {
        let (_server, proxy) = setup()?;
        let set = proxy.observe_next(CommandMatch::name("SET"));
        let incr = proxy.observe_next(CommandMatch::name("incr"));
        let get = proxy.observe_next(CommandMatch::name("GET").with_arg("a"));
        let mut client = Client::connect(&proxy)?;
        client.send(&[
            &["SET", "a", "9"],
            &["INCR", "a"],
            &["LRANGE", "none", "0", "-1"],
            &["GET", "a"],
        ])?;
        assert_eq!(client.read()?, ok());
        assert_eq!(client.read()?, RespValue::Integer(10));
        assert_eq!(client.read()?, RespValue::Array(Some(Vec::new())));
        assert_eq!(client.read()?, bulk("10"));
        assert!(get.wait_fired(Duration::from_secs(2)));
        assert_eq!(
            set.command_len(),
            Some(encode_command(&["SET", "a", "9"]).len())
        );
        assert_eq!(set.reply_len(), Some(b"+OK\r\n".len()));
        assert_eq!(incr.reply_len(), Some(b":10\r\n".len()));
        assert_eq!(get.reply_len(), Some(b"$2\r\n10\r\n".len()));
        assert_eq!(proxy.fired(), 3);
        Ok(())
    }

    #[test]
    fn a_fault_in_the_middle_of_a_pipeline_hits_the_right_reply() -> TestResult {
        let (server, proxy) = setup()?;
        proxy.fault_next(
            CommandMatch::name("SET").with_arg("second"),
            Fault::CutReply {
                after: 0,
                how: CutKind::Fin,
            },
        );
        let mut client = Client::connect(&proxy)?;
        client.send(&[
            &["SET", "first", "1"],
            &["SET", "second", "2"],
            &["SET", "third", "3"],
        ])?;
        let (got, how) = client.read_to_close();
        assert_eq!(got, b"+OK\r\n".to_vec());
        assert_eq!(how, None);
        assert!(wait_for_value(&server, "second", "2")?);
        Ok(())
    }

    #[test]
    fn black_hole_holds_traffic_until_heal() -> TestResult {
        let (server, proxy) = setup()?;
        let mut early = Client::connect(&proxy)?;
        assert_eq!(early.call(&["PING"])?, RespValue::Simple("PONG".into()));
        proxy.black_hole();
        assert!(proxy.is_black_holed());
        early.send(&[&["SET", "k", "v"]])?;
        // A connection made during the black hole is accepted, and held too.
        let mut late = Client::connect(&proxy)?;
        late.send(&[&["PING"]])?;
        assert!(proxy.wait_connections(2, Duration::from_secs(2)));
        let held = early.read_with_timeout(Duration::from_millis(150));
        assert!(
            held.as_ref().is_err_and(HarnessError::is_timeout),
            "{held:?}"
        );
        assert!(late.read_with_timeout(Duration::from_millis(50)).is_err());
        assert_eq!(server.command(&["GET", "k"])?, RespValue::Bulk(None));
        proxy.heal();
        assert_eq!(early.read()?, ok());
        assert_eq!(late.read()?, RespValue::Simple("PONG".into()));
        assert_eq!(server.command(&["GET", "k"])?, bulk("v"));
        Ok(())
    }

    #[test]
    fn delay_reply_holds_that_reply_and_what_follows_it() -> TestResult {
        let (_server, proxy) = setup()?;
        let by = Duration::from_millis(200);
        let slow = proxy.fault_next(
            CommandMatch::name("GET").with_arg("slow"),
            Fault::DelayReply(by),
        );
        let mut a = Client::connect(&proxy)?;
        let mut b = Client::connect(&proxy)?;
        let started = Instant::now();
        a.send(&[&["GET", "fast"], &["GET", "slow"], &["PING"]])?;
        assert_eq!(a.read()?, RespValue::Bulk(None));
        assert!(started.elapsed() < by);
        assert!(slow.wait_fired(Duration::from_secs(2)));
        // Another connection is not slowed down.
        assert_eq!(b.call(&["PING"])?, RespValue::Simple("PONG".into()));
        assert!(started.elapsed() < by);
        assert_eq!(a.read()?, RespValue::Bulk(None));
        assert!(started.elapsed() >= by);
        assert_eq!(a.read()?, RespValue::Simple("PONG".into()));
        // One shot: the next match is not delayed.
        let again = Instant::now();
        assert_eq!(a.call(&["GET", "slow"])?, RespValue::Bulk(None));
        assert!(again.elapsed() < by);
        Ok(())
    }

    #[test]
    fn delay_command_holds_the_command_before_the_server() -> TestResult {
        let (server, proxy) = setup()?;
        let by = Duration::from_millis(200);
        let h = proxy.fault_next(CommandMatch::name("SET"), Fault::DelayCommand(by));
        let mut client = Client::connect(&proxy)?;
        let started = Instant::now();
        client.send(&[&["SET", "k", "v"]])?;
        assert!(h.wait_fired(Duration::from_secs(2)));
        assert_eq!(server.command(&["GET", "k"])?, RespValue::Bulk(None));
        assert!(started.elapsed() < by);
        assert_eq!(client.read()?, ok());
        assert!(started.elapsed() >= by);
        assert_eq!(h.reply_len(), Some(5));
        Ok(())
    }

    #[test]
    fn direction_delay_adds_latency_until_cleared() -> TestResult {
        let (_server, proxy) = setup()?;
        let mut client = Client::connect(&proxy)?;
        for dir in [Direction::ToServer, Direction::ToClient] {
            proxy.delay(dir, Duration::from_millis(100));
            let started = Instant::now();
            assert_eq!(client.call(&["PING"])?, RespValue::Simple("PONG".into()));
            assert!(started.elapsed() >= Duration::from_millis(100), "{dir:?}");
            proxy.clear_delay();
        }
        // Latency, not throughput: pipelined commands are not delayed one after another.
        proxy.delay(Direction::ToServer, Duration::from_millis(100));
        let started = Instant::now();
        client.send(&[&["PING"], &["PING"], &["PING"]])?;
        for _ in 0..3 {
            client.read()?;
        }
        assert!(started.elapsed() < Duration::from_millis(250));
        proxy.clear_delay();
        let started = Instant::now();
        client.call(&["PING"])?;
        assert!(started.elapsed() < Duration::from_millis(90));
        Ok(())
    }

    #[test]
    fn cut_reply_after_every_offset_applies_the_command_and_closes() -> TestResult {
        let (server, proxy) = setup()?;
        let full = b"+OK\r\n";
        let mut round = 0;
        for how in [CutKind::Fin, CutKind::Rst] {
            for after in 0..=full.len() {
                round += 1;
                let value = format!("v{round}");
                let h = proxy.fault_next(CommandMatch::name("SET"), Fault::CutReply { after, how });
                let mut client = Client::connect(&proxy)?;
                client.send(&[&["SET", "k", &value]])?;
                let (got, end) = client.read_to_close();
                assert_eq!(got, full[..after].to_vec(), "{how:?} after {after}");
                match how {
                    CutKind::Fin => assert_eq!(end, None, "after {after}"),
                    CutKind::Rst => {
                        assert_eq!(end, Some(io::ErrorKind::ConnectionReset), "after {after}")
                    }
                }
                assert!(h.fired());
                assert_eq!(h.reply_len(), Some(full.len()));
                assert_eq!(server.command(&["GET", "k"])?, bulk(&value));
            }
        }
        assert!(proxy.wait_connections(0, Duration::from_secs(2)));
        Ok(())
    }

    #[test]
    fn cut_command_before_its_end_is_not_applied() -> TestResult {
        let (server, proxy) = setup()?;
        let cmd: &[&str] = &["SET", "k", "value"];
        let len = encode_command(cmd).len();
        for how in [CutKind::Fin, CutKind::Rst] {
            for after in 0..len {
                let h =
                    proxy.fault_next(CommandMatch::name("SET"), Fault::CutCommand { after, how });
                let mut client = Client::connect(&proxy)?;
                client.send(&[cmd])?;
                let (got, end) = client.read_to_close();
                assert!(got.is_empty());
                match how {
                    CutKind::Fin => assert_eq!(end, None),
                    CutKind::Rst => assert_eq!(end, Some(io::ErrorKind::ConnectionReset)),
                }
                assert!(h.fired());
                assert_eq!(h.command_len(), Some(len));
                assert_eq!(h.reply_len(), None);
            }
        }
        assert!(proxy.wait_connections(0, Duration::from_secs(2)));
        assert_eq!(server.command(&["GET", "k"])?, RespValue::Bulk(None));
        // The whole command goes through: applied, then the connection is closed.
        proxy.fault_next(
            CommandMatch::name("SET"),
            Fault::CutCommand {
                after: len,
                how: CutKind::Fin,
            },
        );
        let mut client = Client::connect(&proxy)?;
        client.send(&[cmd])?;
        let (got, end) = client.read_to_close();
        assert!(got.is_empty() && end.is_none());
        assert!(wait_for_value(&server, "k", "value")?);
        Ok(())
    }

    #[test]
    fn drop_reply_applies_the_command_and_leaves_the_connection_silent() -> TestResult {
        let (server, proxy) = setup()?;
        let h = proxy.fault_next(CommandMatch::name("SET"), Fault::DropReply);
        let mut client = Client::connect(&proxy)?;
        client.send(&[&["SET", "k", "v"]])?;
        assert!(h.wait_fired(Duration::from_secs(2)));
        assert_eq!(h.reply_len(), Some(5));
        let lost = client.read_with_timeout(Duration::from_millis(100));
        assert!(
            lost.as_ref().is_err_and(HarnessError::is_timeout),
            "{lost:?}"
        );
        assert_eq!(server.command(&["GET", "k"])?, bulk("v"));
        // Later replies on that connection are swallowed too; its commands still apply.
        client.send(&[&["SET", "k", "w"]])?;
        assert!(wait_for_value(&server, "k", "w")?);
        assert!(client.read_with_timeout(Duration::from_millis(50)).is_err());
        assert_eq!(proxy.connections(), 1);
        // Other connections are fine.
        assert_eq!(proxy.command(&["GET", "k"])?, bulk("w"));
        Ok(())
    }

    #[test]
    fn cut_all_closes_every_connection() -> TestResult {
        let (_server, proxy) = setup()?;
        for (how, end) in [
            (CutKind::Fin, None),
            (CutKind::Rst, Some(io::ErrorKind::ConnectionReset)),
        ] {
            let mut a = Client::connect(&proxy)?;
            let mut b = Client::connect(&proxy)?;
            a.call(&["PING"])?;
            b.call(&["PING"])?;
            assert_eq!(proxy.connections(), 2);
            proxy.cut_all(how);
            assert_eq!(proxy.connections(), 0);
            assert_eq!(a.read_to_close(), (Vec::new(), end));
            assert_eq!(b.read_to_close(), (Vec::new(), end));
        }
        // New connections work as before.
        assert_eq!(proxy.command(&["PING"])?, RespValue::Simple("PONG".into()));
        Ok(())
    }

    #[test]
    fn subscribed_connections_pass_messages_through_unpaired() -> TestResult {
        let (server, proxy) = setup()?;
        let mut sub = Client::connect(&proxy)?;
        let confirm = sub.call(&["SUBSCRIBE", "ch"])?;
        assert_eq!(confirm.as_array().map(<[RespValue]>::len), Some(3));
        let ping_rule = proxy.fault_next(CommandMatch::name("PING"), Fault::DropReply);
        sub.send(&[&["PING"]])?;
        // The PING reply in subscribe mode flows through: the rule did not match.
        assert!(sub.read()?.as_array().is_some());
        assert!(!ping_rule.matched());
        assert_eq!(
            server.command(&["PUBLISH", "ch", "hello"])?,
            RespValue::Integer(1)
        );
        let message = sub.read()?;
        assert_eq!(
            message,
            RespValue::Array(Some(vec![bulk("message"), bulk("ch"), bulk("hello")]))
        );
        // The rule still applies to an ordinary connection.
        let err = proxy.command_with_timeout(&["PING"], Duration::from_millis(100));
        assert!(err.is_err_and(|e| e.is_timeout()));
        assert!(ping_rule.fired());
        Ok(())
    }

    #[test]
    fn drop_closes_the_listener_and_every_connection_quickly() -> TestResult {
        let (_server, proxy) = setup()?;
        let mut client = Client::connect(&proxy)?;
        client.call(&["PING"])?;
        proxy.black_hole();
        client.send(&[&["PING"]])?;
        let addr = proxy.addr();
        let started = Instant::now();
        drop(proxy);
        assert!(started.elapsed() < Duration::from_secs(1));
        let (got, _) = client.read_to_close();
        assert!(got.is_empty());
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
        Ok(())
    }

    #[test]
    fn an_unreachable_upstream_closes_the_client() -> TestResult {
        let port = crate::free_port()?;
        let proxy = FaultProxy::start(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))?;
        let mut client = Client::connect(&proxy)?;
        let (got, _) = client.read_to_close();
        assert!(got.is_empty());
        assert_eq!(proxy.connections(), 0);
        Ok(())
    }

    #[test]
    fn parses_whole_resp2_and_resp3_values() {
        let values: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR bad\r\n",
            b":-42\r\n",
            b"$5\r\na\r\nbc\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*2\r\n:1\r\n*1\r\n$1\r\nx\r\n",
            b"_\r\n",
            b"#t\r\n",
            b",3.14\r\n",
            b"(123456789012345678901234567890\r\n",
            b"!3\r\nERR\r\n",
            b"=7\r\ntxt:abc\r\n",
            b"%1\r\n+k\r\n:1\r\n",
            b"~2\r\n+a\r\n+b\r\n",
            b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n",
            b"|1\r\n+ttl\r\n:3\r\n+OK\r\n",
        ];
        for v in values {
            assert_eq!(
                value_end(v, 0, 0),
                Ok(Some(v.len())),
                "{:?}",
                String::from_utf8_lossy(v)
            );
            for cut in 0..v.len() {
                assert_eq!(
                    value_end(&v[..cut], 0, 0),
                    Ok(None),
                    "{:?} cut at {cut}",
                    String::from_utf8_lossy(v)
                );
            }
            let mut two = v.to_vec();
            two.extend_from_slice(b"+next\r\n");
            assert_eq!(value_end(&two, 0, 0), Ok(Some(v.len())));
        }
        for bad in [
            &b"?x\r\n"[..],
            b"$-2\r\n",
            b"$3\r\nfooXY",
            b"1\r\n",
            b"%-1\r\n",
            b"*x\r\n",
        ] {
            assert_eq!(
                value_end(bad, 0, 0),
                Err(Malformed),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2);
        assert_eq!(value_end(deep.as_bytes(), 0, 0), Err(Malformed));
        assert_eq!(value_end(&vec![b'+'; MAX_LINE + 10], 0, 0), Err(Malformed));
    }

    #[test]
    fn parses_commands_and_their_arguments() {
        let cmd = encode_command(&["EVALSHA", "abc123", "1", "lock:x"]);
        let (len, args) = command_frame(&cmd).ok().flatten().unwrap_or_default();
        assert_eq!(len, cmd.len());
        assert_eq!(
            args,
            [&b"EVALSHA"[..], b"abc123", b"1", b"lock:x"].map(<[u8]>::to_vec)
        );
        assert_eq!(command_frame(&cmd[..cmd.len() - 1]), Ok(None));
        assert_eq!(command_frame(b""), Ok(None));
        let (len, args) = command_frame(b"get  k\r\nPING\r\n")
            .ok()
            .flatten()
            .unwrap_or_default();
        assert_eq!(len, 8);
        assert_eq!(args, [b"get".to_vec(), b"k".to_vec()]);
        assert_eq!(
            command_frame(b"\r\n")
                .ok()
                .flatten()
                .map(|(l, a)| (l, a.len())),
            Some((2, 0))
        );
        assert_eq!(command_frame(b"PIN"), Ok(None));
        let m = CommandMatch::name("evalsha").with_arg("lock:");
        assert!(m.matches(&args_of(&["EVALSHA", "abc", "1", "lock:x"])));
        assert!(!m.matches(&args_of(&["EVALSHA"])));
        assert!(!m.matches(&args_of(&["EVAL", "lock:x"])));
        assert!(CommandMatch::any().matches(&args_of(&["PING"])));
        assert!(!CommandMatch::any().matches(&[]));
        assert!(CommandMatch::name("EVALSHA")
            .with_arg("c1")
            .matches(&args_of(&["evalsha", "abc123"])));
    }

    fn args_of(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }
}
