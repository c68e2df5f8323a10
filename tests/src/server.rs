//! Starting, pausing, killing and restarting private `redis-server` processes.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::resp::Connection;
use crate::{HarnessError, RespValue};

/// Environment variable naming the `redis-server` binary to run
/// (read by [`RedisServerBuilder::start`] unless [`RedisServerBuilder::binary`] was called).
///
/// ```
/// assert_eq!(lock_tests::REDIS_SERVER_BIN_ENV, "REDIS_SERVER_BIN");
/// ```
pub const REDIS_SERVER_BIN_ENV: &str = "REDIS_SERVER_BIN";

/// How long to wait for a fresh server to answer, unless the builder says otherwise.
const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often to probe a starting server.
const READY_POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Connect timeout of [`RedisServer::command`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Read/write timeout of [`RedisServer::command`].
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How many fresh ports [`RedisServerBuilder::start`] tries.
const START_ATTEMPTS: usize = 5;
/// How many times [`RedisServer::restart`] tries to rebind the same port.
const RESTART_ATTEMPTS: usize = 50;
/// Pause between two restart attempts.
const RESTART_BACKOFF: Duration = Duration::from_millis(100);
/// How many log lines go into error messages.
const LOG_TAIL_LINES: usize = 20;
/// The server's own log file, inside its temp dir.
const LOG_FILE: &str = "redis.log";
/// Where the server's stdout/stderr go (config errors are printed there, not to the log).
const CONSOLE_FILE: &str = "console.log";
/// The configuration file of a server built with `config_text`.
const CONFIG_FILE: &str = "redis.conf";

/// Returns a loopback port that was free a moment ago: binds `127.0.0.1:0`,
/// reads the port the OS picked, and drops the listener.
///
/// Another process may grab the port before you use it; [`RedisServer::start`]
/// retries with a new port when that happens.
///
/// ```
/// let port = lock_tests::free_port()?;
/// assert_ne!(port, 0);
/// # Ok::<(), lock_tests::HarnessError>(())
/// ```
pub fn free_port() -> Result<u16, HarnessError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Credentials the harness sends (`AUTH`) on each of its own connections.
#[derive(Debug, Clone)]
struct Credentials {
    user: Option<String>,
    password: String,
}

/// The files and client-certificate mode of a TLS listener.
#[derive(Debug, Clone)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    auth_clients: String,
}

/// Configures and starts a [`RedisServer`]; see [`RedisServer::builder`].
///
/// ```
/// use lock_tests::RedisServer;
///
/// let server = RedisServer::builder()
///     .arg("--requirepass")
///     .arg("secret")
///     .start()?;
/// assert_eq!(server.command(&["PING"])?.as_string().as_deref(), Some("PONG"));
/// # Ok::<(), lock_tests::HarnessError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RedisServerBuilder {
    binary: Option<PathBuf>,
    config: Option<String>,
    args: Vec<OsString>,
    ready_timeout: Duration,
    credentials: Option<Credentials>,
    tls: Option<TlsFiles>,
}

impl RedisServerBuilder {
    /// Runs this binary instead of `$REDIS_SERVER_BIN` or `redis-server` on `PATH`.
    ///
    /// ```
    /// use lock_tests::{HarnessError, RedisServer};
    ///
    /// let err = RedisServer::builder().binary("/no/such/redis-server").start().unwrap_err();
    /// assert!(matches!(err, HarnessError::BinaryNotFound { .. }));
    /// ```
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// A configuration file for the server, written to its temp dir at
    /// start and passed as the first argument (Sentinel needs one: it
    /// rewrites it; `--sentinel` then goes in [`arg`](Self::arg)). Kept
    /// across [`RedisServer::restart`], as the server left it.
    ///
    /// ```
    /// use lock_tests::RedisServer;
    ///
    /// let server = RedisServer::builder().config_text("maxmemory 20mb\n").start()?;
    /// let reply = server.command(&["CONFIG", "GET", "maxmemory"])?;
    /// assert_eq!(reply.as_array().and_then(|a| a[1].as_i64()), Some(20 * 1024 * 1024));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn config_text(mut self, text: impl Into<String>) -> Self {
        self.config = Some(text.into());
        self
    }

    /// Appends one extra command-line argument for `redis-server`.
    ///
    /// Extra arguments come after the harness's own (`--port`, `--bind`,
    /// `--dir`, ...), so don't override `--port`, `--bind` or `--dir`.
    /// `--requirepass X` is noticed, and the harness then sends `AUTH X`
    /// on its own connections.
    ///
    /// ```
    /// use lock_tests::RedisServer;
    ///
    /// let server = RedisServer::builder().arg("--maxmemory").arg("10mb").start()?;
    /// let reply = server.command(&["CONFIG", "GET", "maxmemory"])?;
    /// assert_eq!(reply.as_array().and_then(|a| a[1].as_i64()), Some(10 * 1024 * 1024));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Appends several extra command-line arguments; see [`arg`](Self::arg).
    ///
    /// Each word of a multi-word directive is its own argument:
    ///
    /// ```
    /// use lock_tests::RedisServer;
    ///
    /// let server = RedisServer::builder()
    ///     .args(["--user", "alice", "on", ">pw", "~*", "&*", "+@all"])
    ///     .start()?;
    /// let users = server.command(&["ACL", "USERS"])?;
    /// assert!(users.as_array().is_some_and(|u| u.iter().any(|v| v.as_string().as_deref() == Some("alice"))));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// How long to wait for the server to answer after each (re)start
    /// (default 10 s).
    ///
    /// ```
    /// use lock_tests::RedisServer;
    /// use std::time::Duration;
    ///
    /// let server = RedisServer::builder().ready_timeout(Duration::from_secs(30)).start()?;
    /// assert!(server.command(&["PING"]).is_ok());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Makes the harness log in as `user` with `password` (`AUTH user password`)
    /// on its own connections: for servers whose default user is disabled.
    /// Takes precedence over a `--requirepass` argument.
    ///
    /// ```
    /// use lock_tests::RedisServer;
    ///
    /// let server = RedisServer::builder()
    ///     .args(["--user", "default", "off"])
    ///     .args(["--user", "alice", "on", ">pw", "~*", "&*", "+@all"])
    ///     .client_auth("alice", "pw")
    ///     .start()?;
    /// assert_eq!(server.command(&["ACL", "WHOAMI"])?.as_string().as_deref(), Some("alice"));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn client_auth(mut self, user: &str, password: &str) -> Self {
        self.credentials = Some(Credentials {
            user: Some(user.to_owned()),
            password: password.to_owned(),
        });
        self
    }

    /// Adds a TLS listener on a second free loopback port
    /// ([`tls_port`](RedisServer::tls_port)): `--tls-port <port>
    /// --tls-cert-file <cert> --tls-key-file <key> --tls-ca-cert-file <ca>
    /// --tls-auth-clients no` (see [`tls_auth_clients`](Self::tls_auth_clients)).
    /// The plain port stays open on loopback for the harness itself
    /// (readiness probe, [`command`](RedisServer::command)), which speaks
    /// no TLS; clients under test use the TLS port. Needs a redis-server
    /// built with TLS (Debian's is).
    ///
    /// ```no_run
    /// use lock_tests::RedisServer;
    ///
    /// let server = RedisServer::builder()
    ///     .tls("server.crt", "server.key", "ca.crt")
    ///     .start()?;
    /// println!("rediss://localhost:{}", server.tls_port().unwrap_or(0));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn tls(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
        ca: impl Into<PathBuf>,
    ) -> Self {
        let auth_clients = self
            .tls
            .take()
            .map_or_else(|| "no".to_owned(), |t| t.auth_clients);
        self.tls = Some(TlsFiles {
            cert: cert.into(),
            key: key.into(),
            ca: ca.into(),
            auth_clients,
        });
        self
    }

    /// Whether the TLS listener asks clients for a certificate signed by
    /// its CA: `"no"` (the default), `"optional"` or `"yes"`
    /// (`--tls-auth-clients`). Only with [`tls`](Self::tls).
    ///
    /// ```no_run
    /// let server = lock_tests::RedisServer::builder()
    ///     .tls("server.crt", "server.key", "ca.crt")
    ///     .tls_auth_clients("yes")
    ///     .start()?;
    /// # let _ = server;
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn tls_auth_clients(mut self, mode: &str) -> Self {
        if let Some(tls) = self.tls.as_mut() {
            tls.auth_clients = mode.to_owned();
        }
        self
    }

    /// Starts the server on a free loopback port and waits until it answers.
    ///
    /// Tries up to 5 fresh ports if the server exits early (for example
    /// because another process took the port first).
    ///
    /// ```
    /// use lock_tests::RedisServer;
    ///
    /// let server = RedisServer::builder().start()?;
    /// assert!(server.port() > 0);
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn start(self) -> Result<RedisServer, HarnessError> {
        let binary = self
            .binary
            .or_else(|| {
                std::env::var_os(REDIS_SERVER_BIN_ENV)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| PathBuf::from("redis-server"));
        let credentials = self.credentials.or_else(|| requirepass(&self.args));
        let dir = tempfile::Builder::new()
            .prefix("lock-tests-redis-")
            .tempdir()?;
        let mut server = RedisServer {
            child: None,
            port: 0,
            tls_port: 0,
            tls: self.tls,
            binary,
            config: self.config,
            args: self.args,
            credentials,
            ready_timeout: self.ready_timeout,
            dir,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            server.port = free_port()?;
            if server.tls.is_some() {
                server.tls_port = free_port()?;
            }
            match server.spawn_and_wait() {
                Ok(()) => return Ok(server),
                Err(HarnessError::ServerExited { .. }) if attempt < START_ATTEMPTS => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Finds the value of a `--requirepass X` argument pair.
fn requirepass(args: &[OsString]) -> Option<Credentials> {
    let pos = args.iter().rposition(|a| a == "--requirepass")?;
    let password = args.get(pos + 1)?.to_str()?.to_owned();
    Some(Credentials {
        user: None,
        password,
    })
}

/// One private `redis-server` process listening on `127.0.0.1`, with
/// persistence off and its own temp dir. Killed and reaped on drop.
///
/// ```
/// use lock_tests::{RedisServer, RespValue};
///
/// let server = RedisServer::start()?;
/// server.command(&["SET", "k", "v"])?;
/// assert_eq!(server.command(&["GET", "k"])?, RespValue::Bulk(Some(b"v".to_vec())));
/// # Ok::<(), lock_tests::HarnessError>(())
/// ```
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// The TLS listener's port (0: none).
    tls_port: u16,
    tls: Option<TlsFiles>,
    binary: PathBuf,
    /// Written to `CONFIG_FILE` in `dir` at the first start, when set.
    config: Option<String>,
    args: Vec<OsString>,
    credentials: Option<Credentials>,
    ready_timeout: Duration,
    // Dropped after `Drop::drop` has killed the process.
    dir: TempDir,
}

impl RedisServer {
    /// Starts a server with default settings; same as `RedisServer::builder().start()`.
    ///
    /// The binary is `$REDIS_SERVER_BIN` if set, else `redis-server` on `PATH`.
    ///
    /// ```
    /// use lock_tests::RedisServer;
    ///
    /// let server = RedisServer::start()?;
    /// assert_eq!(server.command(&["PING"])?.as_string().as_deref(), Some("PONG"));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn start() -> Result<RedisServer, HarnessError> {
        RedisServer::builder().start()
    }

    /// A builder for servers with extra arguments, credentials or another binary.
    ///
    /// ```
    /// use lock_tests::RedisServer;
    ///
    /// let server = RedisServer::builder().arg("--requirepass").arg("secret").start()?;
    /// assert!(server.command(&["PING"]).is_ok());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder {
            binary: None,
            config: None,
            args: Vec::new(),
            ready_timeout: DEFAULT_READY_TIMEOUT,
            credentials: None,
            tls: None,
        }
    }

    /// `redis://127.0.0.1:PORT`, without credentials.
    ///
    /// ```
    /// let server = lock_tests::RedisServer::start()?;
    /// assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Like [`url`](Self::url) but with the harness's credentials in it
    /// (`redis://:secret@127.0.0.1:PORT`, `redis://alice:pw@127.0.0.1:PORT`),
    /// percent-encoded; the same as `url()` when the server needs no password.
    ///
    /// ```
    /// let server = lock_tests::RedisServer::builder().arg("--requirepass").arg("s3cr3t").start()?;
    /// assert_eq!(server.url_with_auth(), format!("redis://:s3cr3t@127.0.0.1:{}", server.port()));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn url_with_auth(&self) -> String {
        match &self.credentials {
            None => self.url(),
            Some(c) => format!(
                "redis://{}:{}@127.0.0.1:{}",
                percent_encode(c.user.as_deref().unwrap_or("")),
                percent_encode(&c.password),
                self.port
            ),
        }
    }

    /// The loopback port the server listens on (unchanged by [`restart`](Self::restart)).
    ///
    /// ```
    /// let server = lock_tests::RedisServer::start()?;
    /// assert_eq!(server.addr().port(), server.port());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS listener's loopback port, for servers started with
    /// [`RedisServerBuilder::tls`]; `None` otherwise. Unchanged by
    /// [`restart`](Self::restart).
    ///
    /// ```
    /// let server = lock_tests::RedisServer::start()?;
    /// assert_eq!(server.tls_port(), None);
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn tls_port(&self) -> Option<u16> {
        self.tls.as_ref().map(|_| self.tls_port)
    }

    /// `127.0.0.1:PORT`.
    ///
    /// ```
    /// let server = lock_tests::RedisServer::start()?;
    /// assert!(server.addr().ip().is_loopback());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The process id of the current server process, `None` once it was killed
    /// (or found dead by [`is_running`](Self::is_running)).
    ///
    /// ```
    /// let mut server = lock_tests::RedisServer::start()?;
    /// assert!(server.pid().is_some());
    /// server.kill();
    /// assert_eq!(server.pid(), None);
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's private temp dir (its `--dir`; removed on drop).
    ///
    /// ```
    /// let server = lock_tests::RedisServer::start()?;
    /// assert!(server.dir().is_dir());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file (`--logfile`), kept across restarts.
    ///
    /// ```
    /// let server = lock_tests::RedisServer::start()?;
    /// let log = std::fs::read_to_string(server.log_path())?;
    /// assert!(log.contains("Ready to accept connections"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    /// Kills the server with SIGKILL and reaps it; does nothing if it is not
    /// running. Works on a paused server too.
    ///
    /// ```
    /// let mut server = lock_tests::RedisServer::start()?;
    /// server.kill();
    /// server.kill(); // idempotent
    /// assert!(std::net::TcpStream::connect(server.addr()).is_err());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL also ends a SIGSTOPped process; errors only mean it is already gone.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server with SIGSTOP: connections are still accepted by the
    /// kernel, but nothing is answered until [`resume`](Self::resume).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let server = lock_tests::RedisServer::start()?;
    /// server.pause()?;
    /// let err = server.command_with_timeout(&["PING"], Duration::from_millis(100)).unwrap_err();
    /// assert!(err.is_timeout());
    /// server.resume()?;
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn pause(&self) -> Result<(), HarnessError> {
        self.signal(Signal::SIGSTOP)
    }

    /// Lets a [`pause`](Self::pause)d server run again (SIGCONT).
    ///
    /// ```
    /// let server = lock_tests::RedisServer::start()?;
    /// server.pause()?;
    /// server.resume()?;
    /// assert!(server.command(&["PING"]).is_ok());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn resume(&self) -> Result<(), HarnessError> {
        self.signal(Signal::SIGCONT)
    }

    fn signal(&self, sig: Signal) -> Result<(), HarnessError> {
        let child = self.child.as_ref().ok_or(HarnessError::NotRunning)?;
        let pid = i32::try_from(child.id())
            .map_err(|_| HarnessError::Io(io::Error::other("process id out of range")))?;
        signal::kill(Pid::from_raw(pid), sig).map_err(|e| HarnessError::Io(e.into()))
    }

    /// Kills the server if it runs, then starts a new, empty one on the same
    /// port with the same arguments and waits until it answers. Retries
    /// (bounded) while the port is briefly still busy.
    ///
    /// ```
    /// let mut server = lock_tests::RedisServer::start()?;
    /// server.command(&["SET", "k", "v"])?;
    /// server.restart()?;
    /// assert!(server.command(&["GET", "k"])?.is_nil());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.kill();
        self.clear_data_files()?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.spawn_and_wait() {
                Ok(()) => return Ok(()),
                Err(HarnessError::ServerExited { .. }) if attempt < RESTART_ATTEMPTS => {
                    thread::sleep(RESTART_BACKOFF);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// True while the process is alive (a paused server counts as running).
    /// Reaps the process if it has exited.
    ///
    /// ```
    /// let mut server = lock_tests::RedisServer::start()?;
    /// assert!(server.is_running());
    /// server.kill();
    /// assert!(!server.is_running());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn is_running(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(_)) | Err(_) => {
                self.child = None;
                false
            }
        }
    }

    /// Sends one command on a fresh connection (after `AUTH` if the server
    /// has a password) and returns the reply. Connect timeout 2 s,
    /// read/write timeout 5 s. An error *reply* is `Ok(RespValue::Error(..))`.
    ///
    /// ```
    /// use lock_tests::RespValue;
    ///
    /// let server = lock_tests::RedisServer::start()?;
    /// assert_eq!(server.command(&["INCR", "n"])?, RespValue::Integer(1));
    /// assert!(server.command(&["NOSUCHCOMMAND"])?.as_error().is_some());
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn command(&self, args: &[&str]) -> Result<RespValue, HarnessError> {
        self.command_inner(args, CONNECT_TIMEOUT, IO_TIMEOUT)
    }

    /// Like [`command`](Self::command), with `timeout` as the read/write
    /// timeout (and as the connect timeout, if below 2 s). A server that does
    /// not answer in time gives [`HarnessError::Timeout`].
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let server = lock_tests::RedisServer::start()?;
    /// let reply = server.command_with_timeout(&["PING"], Duration::from_millis(500))?;
    /// assert_eq!(reply.as_string().as_deref(), Some("PONG"));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn command_with_timeout(
        &self,
        args: &[&str],
        timeout: Duration,
    ) -> Result<RespValue, HarnessError> {
        self.command_inner(args, timeout.min(CONNECT_TIMEOUT), timeout)
    }

    /// Sends `commands` one after another on one connection (where that
    /// matters: `WAIT` counts the writes of its own connection); one reply
    /// each.
    ///
    /// ```
    /// let server = lock_tests::RedisServer::start()?;
    /// let replies = server.commands(&[&["SET", "k", "v"], &["GET", "k"]])?;
    /// assert_eq!(replies[1].as_string().as_deref(), Some("v"));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn commands(&self, commands: &[&[&str]]) -> Result<Vec<RespValue>, HarnessError> {
        let mut conn = self.connect(CONNECT_TIMEOUT, IO_TIMEOUT)?;
        commands.iter().map(|args| conn.call(args)).collect()
    }

    fn command_inner(
        &self,
        args: &[&str],
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> Result<RespValue, HarnessError> {
        let mut conn = self.connect(connect_timeout, io_timeout)?;
        conn.call(args)
    }

    fn connect(
        &self,
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> Result<Connection, HarnessError> {
        let mut conn = Connection::open(self.addr(), connect_timeout, io_timeout)?;
        if let Some(c) = &self.credentials {
            conn.auth(c.user.as_deref(), &c.password)?;
        }
        Ok(conn)
    }

    /// The server's replication role, the first element of `ROLE`:
    /// `master`, `slave` or `sentinel`.
    ///
    /// ```
    /// let server = lock_tests::RedisServer::start()?;
    /// assert_eq!(server.role()?, "master");
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn role(&self) -> Result<String, HarnessError> {
        let reply = self.command(&["ROLE"])?;
        reply
            .as_array()
            .and_then(|a| a.first())
            .and_then(RespValue::as_string)
            .ok_or_else(|| HarnessError::Protocol(format!("ROLE: {reply:?}")))
    }

    /// Runs `INFO commandstats` and returns the number of calls per command,
    /// keyed by lowercase command name (`"evalsha"`, `"set"`,
    /// `"client|setname"`). Commands never called are absent. The harness's
    /// own commands (`AUTH`, `PING`, `INFO`) are counted too.
    ///
    /// ```
    /// let server = lock_tests::RedisServer::start()?;
    /// server.command(&["SET", "k", "v"])?;
    /// server.command(&["SET", "k", "w"])?;
    /// assert_eq!(server.info_commandstats()?.get("set"), Some(&2));
    /// # Ok::<(), lock_tests::HarnessError>(())
    /// ```
    pub fn info_commandstats(&self) -> Result<HashMap<String, u64>, HarnessError> {
        let reply = self.command(&["INFO", "commandstats"])?;
        let text = match reply {
            RespValue::Error(e) => return Err(HarnessError::ServerError(e)),
            other => other.as_string().ok_or_else(|| {
                HarnessError::Protocol(format!("unexpected reply to INFO: {other:?}"))
            })?,
        };
        parse_commandstats(&text)
    }

    /// Spawns the process on `self.port` and waits until it answers; on
    /// failure the process is killed and reaped.
    fn spawn_and_wait(&mut self) -> Result<(), HarnessError> {
        let child = self.spawn()?;
        self.child = Some(child);
        let result = self.wait_ready();
        if result.is_err() {
            self.kill();
        }
        result
    }

    fn spawn(&self) -> Result<Child, HarnessError> {
        let dir = self.dir.path();
        let console = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(CONSOLE_FILE))?;
        let console_err = console.try_clone()?;
        let mut tls_args: Vec<OsString> = Vec::new();
        if let Some(tls) = &self.tls {
            tls_args.extend([
                OsString::from("--tls-port"),
                OsString::from(self.tls_port.to_string()),
                OsString::from("--tls-cert-file"),
                tls.cert.clone().into_os_string(),
                OsString::from("--tls-key-file"),
                tls.key.clone().into_os_string(),
                OsString::from("--tls-ca-cert-file"),
                tls.ca.clone().into_os_string(),
                OsString::from("--tls-auth-clients"),
                OsString::from(&tls.auth_clients),
            ]);
        }
        let mut command = Command::new(&self.binary);
        if let Some(text) = &self.config {
            let path = dir.join(CONFIG_FILE);
            if !path.exists() {
                fs::write(&path, text)?;
            }
            command.arg(path);
        }
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(dir.join(LOG_FILE))
            .args(&tls_args)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(console)
            .stderr(console_err)
            .spawn()
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => HarnessError::BinaryNotFound {
                    tried: self.binary.clone(),
                },
                _ => HarnessError::Io(e),
            })
    }

    /// Polls every 10 ms until the server answers PING (and is really our
    /// process), exits, or the ready timeout passes.
    fn wait_ready(&mut self) -> Result<(), HarnessError> {
        let started = Instant::now();
        let deadline = started + self.ready_timeout;
        loop {
            let child = self.child.as_mut().ok_or(HarnessError::NotRunning)?;
            let pid = child.id();
            if let Some(status) = child.try_wait()? {
                return Err(HarnessError::ServerExited {
                    port: self.port,
                    status: status.to_string(),
                    log_tail: self.log_tail(),
                });
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let last_error = match self.probe(pid, remaining) {
                Ok(()) => return Ok(()),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(HarnessError::NotReady {
                    port: self.port,
                    waited: started.elapsed(),
                    last_error,
                    log_tail: self.log_tail(),
                });
            }
            thread::sleep(READY_POLL_INTERVAL);
        }
    }

    /// One readiness probe: PING must answer PONG, and `INFO server` must
    /// show our pid (so a stranger on the same port is not mistaken for us).
    fn probe(&self, pid: u32, remaining: Duration) -> Result<(), HarnessError> {
        let connect_timeout = remaining.min(Duration::from_millis(200));
        let io_timeout = remaining.min(Duration::from_secs(1));
        let mut conn = self.connect(connect_timeout, io_timeout)?;
        match conn.call(&["PING"])? {
            RespValue::Simple(s) if s == "PONG" => {}
            other => {
                return Err(HarnessError::Protocol(format!(
                    "unexpected reply to PING: {other:?}"
                )))
            }
        }
        let info = conn.call(&["INFO", "server"])?;
        let info = info
            .as_string()
            .ok_or_else(|| HarnessError::Protocol(format!("unexpected reply to INFO: {info:?}")))?;
        let server_pid = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse::<u32>().ok());
        if server_pid == Some(pid) {
            Ok(())
        } else {
            Err(HarnessError::Protocol(format!(
                "port {} is answered by process {server_pid:?}, not by our redis-server {pid}",
                self.port
            )))
        }
    }

    /// Removes everything in the temp dir except the log files, so a restart
    /// starts empty even if extra arguments turned persistence on.
    fn clear_data_files(&self) -> Result<(), HarnessError> {
        for entry in fs::read_dir(self.dir.path())? {
            let entry = entry?;
            let name = entry.file_name();
            if name == LOG_FILE || name == CONSOLE_FILE {
                continue;
            }
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                fs::remove_dir_all(&path)?;
            } else {
                fs::remove_file(&path)?;
            }
        }
        Ok(())
    }

    /// The last lines of the console output (config errors) and of the log file.
    fn log_tail(&self) -> String {
        let mut out = String::new();
        for name in [CONSOLE_FILE, LOG_FILE] {
            let Ok(text) = read_lossy(&self.dir.path().join(name)) else {
                continue;
            };
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            let start = lines.len().saturating_sub(LOG_TAIL_LINES);
            for line in &lines[start..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        if out.is_empty() {
            out.push_str("(no log output)\n");
        }
        out
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn read_lossy(path: &Path) -> io::Result<String> {
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut File::open(path)?, &mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Parses `cmdstat_<name>:calls=N,usec=...` lines.
fn parse_commandstats(text: &str) -> Result<HashMap<String, u64>, HarnessError> {
    let mut stats = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("cmdstat_") else {
            continue;
        };
        let (name, fields) = rest
            .split_once(':')
            .ok_or_else(|| HarnessError::Protocol(format!("bad commandstats line {line:?}")))?;
        let calls = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| HarnessError::Protocol(format!("no calls= in {line:?}")))?;
        stats.insert(name.to_ascii_lowercase(), calls);
    }
    Ok(stats)
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    type TestResult = Result<(), HarnessError>;

    fn pong(server: &RedisServer) -> Result<bool, HarnessError> {
        Ok(server.command(&["PING"])? == RespValue::Simple("PONG".into()))
    }

    /// True once `pid` no longer names a process (not even a zombie).
    fn process_gone(pid: u32) -> bool {
        let Ok(pid) = i32::try_from(pid) else {
            return false;
        };
        matches!(
            signal::kill(Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        )
    }

    #[test]
    fn starts_and_answers_ping() -> TestResult {
        let mut server = RedisServer::start()?;
        assert!(pong(&server)?);
        assert!(server.is_running());
        assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
        assert_eq!(server.url_with_auth(), server.url());
        assert_eq!(
            server.addr(),
            SocketAddr::from(([127, 0, 0, 1], server.port()))
        );
        // The reported pid really is the process behind the port.
        let info = server
            .command(&["INFO", "server"])?
            .as_string()
            .unwrap_or_default();
        let pid = server.pid().map(|p| format!("process_id:{p}"));
        assert!(pid.is_some_and(|p| info.contains(&p)));
        // Persistence is off.
        let save = server.command(&["CONFIG", "GET", "save"])?;
        assert_eq!(
            save.as_array()
                .and_then(|a| a.get(1))
                .and_then(RespValue::as_string)
                .as_deref(),
            Some("")
        );
        Ok(())
    }

    #[test]
    fn two_servers_run_side_by_side() -> TestResult {
        let a = RedisServer::start()?;
        let b = RedisServer::start()?;
        assert_ne!(a.port(), b.port());
        assert_ne!(a.pid(), b.pid());
        a.command(&["SET", "who", "a"])?;
        b.command(&["SET", "who", "b"])?;
        assert_eq!(
            a.command(&["GET", "who"])?.as_string().as_deref(),
            Some("a")
        );
        assert_eq!(
            b.command(&["GET", "who"])?.as_string().as_deref(),
            Some("b")
        );
        Ok(())
    }

    #[test]
    fn set_get_round_trip() -> TestResult {
        let server = RedisServer::start()?;
        assert_eq!(
            server.command(&["SET", "key", "héllo wörld\r\n"])?,
            RespValue::Simple("OK".into())
        );
        assert_eq!(
            server.command(&["GET", "key"])?,
            RespValue::Bulk(Some("héllo wörld\r\n".as_bytes().to_vec()))
        );
        assert_eq!(server.command(&["GET", "nope"])?, RespValue::Bulk(None));
        assert_eq!(
            server.command(&["INCRBY", "n", "5"])?,
            RespValue::Integer(5)
        );
        server.command(&["RPUSH", "list", "x", "y"])?;
        assert_eq!(
            server.command(&["LRANGE", "list", "0", "-1"])?,
            RespValue::Array(Some(vec![
                RespValue::Bulk(Some(b"x".to_vec())),
                RespValue::Bulk(Some(b"y".to_vec())),
            ]))
        );
        let err = server.command(&["INCR", "key"])?;
        assert!(err.as_error().is_some_and(|e| e.starts_with("ERR")));
        Ok(())
    }

    #[test]
    fn pause_stops_answers_and_resume_brings_them_back() -> TestResult {
        let mut server = RedisServer::start()?;
        server.pause()?;
        let started = Instant::now();
        let err = server
            .command_with_timeout(&["PING"], Duration::from_millis(300))
            .err();
        assert!(
            err.as_ref().is_some_and(HarnessError::is_timeout),
            "{err:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        // Paused is still running.
        assert!(server.is_running());
        server.resume()?;
        assert!(pong(&server)?);
        Ok(())
    }

    #[test]
    fn kill_makes_connect_fail() -> TestResult {
        let mut server = RedisServer::start()?;
        let pid = server.pid();
        server.kill();
        assert!(!server.is_running());
        assert_eq!(server.pid(), None);
        assert!(pid.is_some_and(process_gone));
        assert!(TcpStream::connect(server.addr()).is_err());
        let err = server.command(&["PING"]).err();
        assert!(
            matches!(&err, Some(HarnessError::Io(e)) if e.kind() == io::ErrorKind::ConnectionRefused),
            "{err:?}"
        );
        server.kill(); // idempotent
        assert!(matches!(server.pause(), Err(HarnessError::NotRunning)));
        assert!(matches!(server.resume(), Err(HarnessError::NotRunning)));
        Ok(())
    }

    #[test]
    fn restart_brings_back_an_empty_server_on_the_same_port() -> TestResult {
        let mut server = RedisServer::start()?;
        let port = server.port();
        let old_pid = server.pid();
        server.command(&["SET", "k", "v"])?;
        server.restart()?;
        assert_eq!(server.port(), port);
        assert_ne!(server.pid(), old_pid);
        assert!(server.is_running());
        assert_eq!(server.command(&["GET", "k"])?, RespValue::Bulk(None));
        assert_eq!(server.command(&["DBSIZE"])?, RespValue::Integer(0));
        // Restart also works from the killed state, and while paused.
        server.kill();
        server.restart()?;
        server.pause()?;
        server.restart()?;
        assert_eq!(server.port(), port);
        assert!(pong(&server)?);
        Ok(())
    }

    #[test]
    fn drop_kills_and_reaps_even_a_paused_server() -> TestResult {
        let running = RedisServer::start()?;
        let paused = RedisServer::start()?;
        paused.pause()?;
        let pids = [running.pid(), paused.pid()];
        let addrs = [running.addr(), paused.addr()];
        drop(running);
        drop(paused);
        for (pid, addr) in pids.into_iter().zip(addrs) {
            assert!(pid.is_some_and(process_gone), "{pid:?} still exists");
            assert!(TcpStream::connect(addr).is_err());
        }
        Ok(())
    }

    #[test]
    fn requirepass_is_sent_as_auth() -> TestResult {
        let server = RedisServer::builder()
            .arg("--requirepass")
            .arg("s3cret:/@")
            .start()?;
        assert!(pong(&server)?);
        assert_eq!(
            server.url_with_auth(),
            format!("redis://:s3cret%3A%2F%40@127.0.0.1:{}", server.port())
        );
        // Without AUTH the server refuses.
        let mut raw = Connection::open(server.addr(), CONNECT_TIMEOUT, IO_TIMEOUT)?;
        let reply = raw.call(&["PING"])?;
        assert!(
            reply.as_error().is_some_and(|e| e.starts_with("NOAUTH")),
            "{reply:?}"
        );
        let wrong = raw.auth(None, "wrong").err();
        assert!(
            matches!(&wrong, Some(HarnessError::ServerError(e)) if e.starts_with("WRONGPASS")),
            "{wrong:?}"
        );
        Ok(())
    }

    #[test]
    fn acl_user_with_client_auth() -> TestResult {
        let server = RedisServer::builder()
            .args(["--user", "default", "off"])
            .args(["--user", "alice", "on", ">pw", "~*", "&*", "+@all"])
            .client_auth("alice", "pw")
            .start()?;
        assert_eq!(
            server.command(&["ACL", "WHOAMI"])?.as_string().as_deref(),
            Some("alice")
        );
        assert_eq!(
            server.url_with_auth(),
            format!("redis://alice:pw@127.0.0.1:{}", server.port())
        );
        Ok(())
    }

    #[test]
    fn missing_binary_says_how_to_install() {
        let err = RedisServer::builder()
            .binary("/nonexistent/dir/redis-server")
            .start()
            .err();
        assert!(
            matches!(&err, Some(HarnessError::BinaryNotFound { tried }) if tried == Path::new("/nonexistent/dir/redis-server")),
            "{err:?}"
        );
        assert_eq!(
            err.map(|e| e.to_string()).unwrap_or_default(),
            "redis-server was not found on PATH (set REDIS_SERVER_BIN to its path, or install it: \
             apt-get install redis-server on Debian/Ubuntu, brew install redis on macOS)"
        );
    }

    #[test]
    fn bad_argument_reports_exit_and_log_tail() {
        let err = RedisServer::builder()
            .arg("--no-such-directive")
            .arg("x")
            .start()
            .err();
        match &err {
            Some(HarnessError::ServerExited { log_tail, .. }) => {
                assert!(log_tail.contains("no-such-directive"), "{log_tail}");
            }
            other => panic!("expected ServerExited, got {other:?}"),
        }
    }

    #[test]
    fn not_ready_in_time_is_reported_and_the_process_killed() {
        let err = RedisServer::builder()
            .ready_timeout(Duration::ZERO)
            .start()
            .err();
        match &err {
            Some(HarnessError::NotReady {
                waited, last_error, ..
            }) => {
                assert!(*waited < Duration::from_secs(2));
                assert!(!last_error.is_empty());
            }
            other => panic!("expected NotReady, got {other:?}"),
        }
    }

    #[test]
    fn info_commandstats_counts_calls() -> TestResult {
        let server = RedisServer::start()?;
        let before = server.info_commandstats()?;
        assert_eq!(before.get("set"), None);
        assert!(before.get("ping").is_some_and(|&n| n >= 1));
        for i in 0..3 {
            server.command(&["SET", "k", &i.to_string()])?;
        }
        server.command(&["CLIENT", "SETNAME", "x"])?;
        let after = server.info_commandstats()?;
        assert_eq!(after.get("set"), Some(&3));
        assert_eq!(after.get("client|setname"), Some(&1));
        assert_eq!(
            after.get("info").copied(),
            before.get("info").map(|n| n + 1)
        );
        Ok(())
    }

    #[test]
    fn parses_commandstats_text() -> TestResult {
        let text = "# Commandstats\r\n\
                    cmdstat_EVALSHA:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=1\r\n\
                    cmdstat_get:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n";
        let stats = parse_commandstats(text)?;
        assert_eq!(stats.len(), 2);
        assert_eq!(stats.get("evalsha"), Some(&12));
        assert_eq!(stats.get("get"), Some(&1));
        assert!(parse_commandstats("cmdstat_x:usec=1\r\n").is_err());
        Ok(())
    }

    #[test]
    fn free_port_is_bindable() -> TestResult {
        let port = free_port()?;
        assert_ne!(port, 0);
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
        assert_eq!(listener.local_addr()?.port(), port);
        Ok(())
    }
}
