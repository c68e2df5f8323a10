//! Where the client's connections go: one server at a fixed address
//! (`redis://`, `rediss://`, `redis+unix://`), or the primary that Redis
//! Sentinel names (`redis+sentinel://`, `rediss+sentinel://`).
//!
//! With Sentinel, every new connection (a command connection after the
//! last one broke, the pub/sub connection, an exclusive connection) asks
//! the sentinels for the primary's address, connects there and checks with
//! `ROLE` that the node is a primary. A reply that says the node is no
//! longer the primary (`READONLY`), or a broken connection, makes the next
//! command connect again, so the client follows a failover; when the
//! address changes, the pub/sub connection moves to the new primary too
//! ([`Endpoint::switches`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::url::{ClusterUrl, MemoryUrl, SentinelUrl};
use crate::config::{ClientConfig, TlsConfig};
use crate::error::{Error, Result};

/// Where connections go.
#[derive(Debug)]
pub(crate) enum Endpoint {
    /// One server at a fixed address.
    Direct(redis::Client),
    /// The primary that the sentinels name.
    Sentinel(SentinelPrimary),
    /// A Redis Cluster, found from seed nodes.
    Cluster(Box<ClusterNodes>),
    /// An in-memory server of this process (feature `memory`).
    #[cfg(feature = "memory")]
    Memory(crate::transport::memory_link::MemoryEndpoint),
}

impl Endpoint {
    /// The endpoint of `config.url` (TLS files are read here).
    pub(crate) fn new(config: &ClientConfig) -> Result<Endpoint> {
        if let Some(url) = ClusterUrl::parse(&config.url)? {
            return Ok(Endpoint::Cluster(Box::new(ClusterNodes::new(url, config)?)));
        }
        if let Some(url) = MemoryUrl::parse(&config.url)? {
            #[cfg(feature = "memory")]
            return Ok(Endpoint::Memory(
                crate::transport::memory_link::MemoryEndpoint::new(&url.name),
            ));
            #[cfg(not(feature = "memory"))]
            return Err(Error::InvalidArgument(format!(
                "{} (memory://{})",
                crate::config::url::MEMORY_FEATURE_MISSING,
                url.name
            )));
        }
        match SentinelUrl::parse(&config.url)? {
            Some(url) => Ok(Endpoint::Sentinel(SentinelPrimary::new(url, config)?)),
            None => Ok(Endpoint::Direct(crate::transport::tls::redis_client(
                config.connection_info()?,
                &config.tls,
            )?)),
        }
    }

    /// A client for the server to connect to now: the fixed one, or the
    /// primary the sentinels name at this moment.
    pub(crate) async fn client(&self) -> RedisResult<redis::Client> {
        match self {
            Endpoint::Direct(client) => Ok(client.clone()),
            Endpoint::Sentinel(sentinel) => sentinel.primary_client().await,
            Endpoint::Cluster(_) => Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "a cluster has no single node to connect to",
            ))),
            #[cfg(feature = "memory")]
            Endpoint::Memory(_) => Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "an in-memory server has no address to connect to",
            ))),
        }
    }

    /// Whether this is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Endpoint::Cluster(_))
    }

    /// Checks a fresh connection: with Sentinel, that the node is the
    /// primary (a failover may have demoted it since the sentinels answered).
    pub(crate) async fn check(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
    ) -> RedisResult<()> {
        match self {
            Endpoint::Direct(_) | Endpoint::Cluster(_) => Ok(()),
            #[cfg(feature = "memory")]
            Endpoint::Memory(_) => Ok(()),
            Endpoint::Sentinel(sentinel) => sentinel.check_primary(conn).await,
        }
    }

    /// Changes of the primary (Sentinel only): the pub/sub connection
    /// reconnects when it changes.
    pub(crate) fn switches(&self) -> Option<watch::Receiver<u64>> {
        match self {
            Endpoint::Direct(_) | Endpoint::Cluster(_) => None,
            #[cfg(feature = "memory")]
            Endpoint::Memory(_) => None,
            Endpoint::Sentinel(sentinel) => Some(sentinel.switches.subscribe()),
        }
    }

    /// How many times the primary changed so far (always 0 without
    /// Sentinel): a connection opened under an older count goes to a
    /// node that may no longer be the primary, and is not used again.
    pub(crate) fn generation(&self) -> u64 {
        match self {
            Endpoint::Direct(_) | Endpoint::Cluster(_) => 0,
            #[cfg(feature = "memory")]
            Endpoint::Memory(_) => 0,
            Endpoint::Sentinel(sentinel) => *sentinel.switches.borrow(),
        }
    }

    /// With Sentinel: starts listening for the sentinels' `+switch-master`
    /// announcements (until `shutdown`), so that the client moves to a new
    /// primary as soon as the sentinels name it, not only when the old one
    /// refuses a write or stops answering.
    pub(crate) fn watch_switches(self: &Arc<Self>, shutdown: CancellationToken) {
        if let Endpoint::Sentinel(_) = **self {
            tokio::spawn(watch_sentinels(self.clone(), shutdown));
        }
    }
}

/// Listens on one sentinel at a time for `+switch-master <service> ...`;
/// moves to the next sentinel when the connection ends.
async fn watch_sentinels(endpoint: Arc<Endpoint>, shutdown: CancellationToken) {
    let Endpoint::Sentinel(sentinel) = &*endpoint else {
        return;
    };
    let mut backoff = Duration::from_millis(50);
    for index in (0..sentinel.sentinels.len()).cycle() {
        let client = &sentinel.sentinels[index];
        let connect = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(SWITCH_CHANNEL).await?;
            Ok::<_, RedisError>(pubsub)
        };
        let connected = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            r = tokio::time::timeout(sentinel.connect_timeout + sentinel.command_timeout, connect) => r,
        };
        let mut pubsub = match connected {
            Ok(Ok(p)) => p,
            _ => {
                tracing::debug!(sentinel = %sentinel.sentinel_addrs[index], "cannot listen for failovers on this sentinel; trying the next");
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        // A switch while nobody listened: compare with the sentinels now.
        if let Err(e) = sentinel.primary_client().await {
            tracing::debug!(error = %e, "sentinel lookup after (re)subscribing failed");
        }
        let mut messages = pubsub.on_message();
        loop {
            let message = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                m = messages.next() => m,
            };
            let Some(message) = message else { break };
            let payload = String::from_utf8_lossy(message.get_payload_bytes()).into_owned();
            let mut words = payload.split_whitespace();
            if words.next() != Some(sentinel.service.as_str()) {
                continue;
            }
            let new_primary = words.skip(2).take(2).collect::<Vec<_>>().join(":");
            tracing::warn!(service = %sentinel.service, primary = %new_primary, "sentinel announced a new primary; following it");
            sentinel.switched();
        }
    }
}

/// The sentinels' channel for "a failover chose a new primary".
const SWITCH_CHANNEL: &str = "+switch-master";

/// A Redis Cluster: redis-rs cluster connections (topology from `CLUSTER
/// SLOTS`, `MOVED` / `ASK` followed, one connection per node).
pub(crate) struct ClusterNodes {
    /// For the shared command connections.
    commands: ClusterClient,
    /// For connections of blocking commands (`WAIT`): no reply time-out
    /// of redis-rs's own.
    blocking: ClusterClient,
    url: ClusterUrl,
    tls_config: TlsConfig,
    connect_timeout: Duration,
}

impl std::fmt::Debug for ClusterNodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNodes")
            .field("seeds", &self.url.seeds)
            .finish_non_exhaustive()
    }
}

impl ClusterNodes {
    fn new(url: ClusterUrl, config: &ClientConfig) -> Result<ClusterNodes> {
        let commands = cluster_builder(&url, config)?
            .response_timeout(config.command_timeout)
            .build()
            .map_err(bad_cluster)?;
        let blocking = cluster_builder(&url, config)?
            .build()
            .map_err(bad_cluster)?;
        Ok(ClusterNodes {
            commands,
            blocking,
            url,
            tls_config: config.tls.clone(),
            connect_timeout: config.connect_timeout,
        })
    }

    /// A builder for more clients of this cluster (the pub/sub hub's).
    pub(crate) fn builder(&self) -> Result<ClusterClientBuilder> {
        cluster_builder_for(&self.url, &self.tls_config, self.connect_timeout)
    }

    /// A connection to the whole cluster (one per node, opened as needed).
    pub(crate) async fn connect(&self, blocking: bool) -> RedisResult<ClusterConnection> {
        let client = if blocking {
            &self.blocking
        } else {
            &self.commands
        };
        client
            .get_async_connection()
            .await
            .map_err(|e| cannot_connect_to(&self.seeds(), e))
    }

    /// The seed nodes, for messages: `the cluster at h1:p1, h2:p2`.
    pub(crate) fn seeds(&self) -> String {
        let seeds: Vec<String> = self
            .url
            .seeds
            .iter()
            .map(|(host, port)| addr_text(host, *port))
            .collect();
        format!("the cluster at {}", seeds.join(", "))
    }
}

/// A failed connect to the node of `client`, made to say where it went:
/// see [`cannot_connect_to`].
pub(crate) fn cannot_connect(client: &redis::Client, err: RedisError) -> RedisError {
    let addr = match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            addr_text(host, *port)
        }
        other => other.to_string(),
    };
    cannot_connect_to(&addr, err)
}

/// A failed connect, made to say where it went. An I/O failure (refused,
/// timed out, unknown host, …) becomes `cannot connect to <what>: <cause>`,
/// an I/O error of the same kind, so that `is_connection_refusal()`,
/// `is_timeout()` and the retry rules read it as before; a TLS failure is
/// explained ([`crate::transport::tls::explain`]); other errors (a refused password, a
/// server error) pass unchanged.
pub(crate) fn cannot_connect_to(what: &str, err: RedisError) -> RedisError {
    let err = crate::transport::tls::explain(err);
    if !err.is_io_error() {
        return err;
    }
    // redis-rs's own I/O failures of a cluster are no `io::Error` inside
    let kind = io_error(&err).map_or(std::io::ErrorKind::Other, std::io::Error::kind);
    RedisError::from(std::io::Error::new(
        kind,
        format!("cannot connect to {what}: {err}"),
    ))
}

/// The `io::Error` inside a redis-rs error, if there is one (redis-rs
/// keeps it in an `Arc`, which is the error's source).
fn io_error(err: &RedisError) -> Option<&std::io::Error> {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    let source = std::error::Error::source(err)?;
    match source.downcast_ref::<Shared>() {
        Some(shared) => shared.downcast_ref(),
        None => source.downcast_ref(),
    }
}

/// `host:port`, or `[v6]:port`.
fn addr_text(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn cluster_builder(url: &ClusterUrl, config: &ClientConfig) -> Result<ClusterClientBuilder> {
    cluster_builder_for(url, &config.tls, config.connect_timeout)
}

/// A builder with the seeds, credentials, TLS and connect time-out;
/// retries of `TRYAGAIN` / `CLUSTERDOWN` short and few (the client bounds
/// every call with its own time-outs). Redirections are followed at once.
fn cluster_builder_for(
    url: &ClusterUrl,
    tls: &TlsConfig,
    connect_timeout: Duration,
) -> Result<ClusterClientBuilder> {
    let mut seeds = Vec::with_capacity(url.seeds.len());
    for (host, port) in &url.seeds {
        seeds.push(node_info(url.tls, host, *port)?);
    }
    let mut builder = ClusterClientBuilder::new(seeds)
        .connection_timeout(connect_timeout)
        .retries(8)
        .min_retry_wait(10)
        .max_retry_wait(500)
        .retry_wait_formula(10, 2);
    if let Some(u) = &url.username {
        builder = builder.username(u);
    }
    if let Some(p) = &url.password {
        builder = builder.password(p);
    }
    if url.tls {
        builder = with_tls(builder, tls)?;
    }
    Ok(builder)
}

fn bad_cluster(e: RedisError) -> Error {
    Error::InvalidArgument(format!("invalid cluster url: {e}"))
}

#[cfg(feature = "tls")]
fn with_tls(builder: ClusterClientBuilder, tls: &TlsConfig) -> Result<ClusterClientBuilder> {
    crate::transport::tls::install_crypto_provider();
    let mut builder = builder.tls(if tls.danger_accept_invalid_certificates {
        redis::TlsMode::Insecure
    } else {
        redis::TlsMode::Secure
    });
    if let Some(certs) = crate::transport::tls::certificates(tls)? {
        builder = builder.certs(certs);
    }
    Ok(builder)
}

#[cfg(not(feature = "tls"))]
fn with_tls(_builder: ClusterClientBuilder, _tls: &TlsConfig) -> Result<ClusterClientBuilder> {
    Err(Error::InvalidArgument(
        crate::config::FEATURE_MISSING.into(),
    ))
}

/// The primary that a set of sentinels names for one service.
pub(crate) struct SentinelPrimary {
    service: String,
    sentinels: Vec<redis::Client>,
    /// Addresses of `sentinels`, for messages.
    sentinel_addrs: Vec<String>,
    tls: bool,
    node_settings: redis::RedisConnectionInfo,
    tls_config: TlsConfig,
    connect_timeout: Duration,
    command_timeout: Duration,
    /// The primary's address as last resolved.
    current: Mutex<Option<(String, u16)>>,
    /// Bumped when the resolved address changes.
    switches: watch::Sender<u64>,
}

impl std::fmt::Debug for SentinelPrimary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelPrimary")
            .field("service", &self.service)
            .field("sentinels", &self.sentinel_addrs)
            .finish_non_exhaustive()
    }
}

impl SentinelPrimary {
    fn new(url: SentinelUrl, config: &ClientConfig) -> Result<SentinelPrimary> {
        let mut sentinel_settings = redis::RedisConnectionInfo::default();
        if let Some(u) = &url.sentinel_username {
            sentinel_settings = sentinel_settings.set_username(u);
        }
        if let Some(p) = &url.sentinel_password {
            sentinel_settings = sentinel_settings.set_password(p);
        }
        let mut sentinels = Vec::with_capacity(url.sentinels.len());
        let mut sentinel_addrs = Vec::with_capacity(url.sentinels.len());
        for (host, port) in &url.sentinels {
            let info =
                node_info(url.tls, host, *port)?.set_redis_settings(sentinel_settings.clone());
            sentinels.push(crate::transport::tls::redis_client(info, &config.tls)?);
            sentinel_addrs.push(format!("{host}:{port}"));
        }
        let mut node_settings = redis::RedisConnectionInfo::default().set_db(url.db);
        if let Some(u) = &url.username {
            node_settings = node_settings.set_username(u);
        }
        if let Some(p) = &url.password {
            node_settings = node_settings.set_password(p);
        }
        Ok(SentinelPrimary {
            service: url.service,
            sentinels,
            sentinel_addrs,
            tls: url.tls,
            node_settings,
            tls_config: config.tls.clone(),
            connect_timeout: config.connect_timeout,
            command_timeout: config.command_timeout,
            current: Mutex::new(None),
            switches: watch::channel(0).0,
        })
    }

    /// Asks the sentinels in turn for the primary's address; a client for it.
    async fn primary_client(&self) -> RedisResult<redis::Client> {
        let (host, port) = self.resolve().await?;
        let info = node_info(self.tls, &host, port)
            .map_err(|e| failed("the primary's address", e.to_string()))?
            .set_redis_settings(self.node_settings.clone());
        let client = crate::transport::tls::redis_client(info, &self.tls_config)
            .map_err(|e| failed("the primary's address", e.to_string()))?;
        let changed = {
            let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            let changed = current.as_ref().is_some_and(|c| *c != (host.clone(), port));
            *current = Some((host.clone(), port));
            changed
        };
        if changed {
            tracing::warn!(service = %self.service, primary = %format!("{host}:{port}"), "sentinel names a new primary; following it");
            self.switched();
        }
        Ok(client)
    }

    /// The primary changed: connections opened before are not used again,
    /// and the pub/sub connection moves.
    fn switched(&self) {
        self.switches.send_modify(|n| *n += 1);
    }

    async fn resolve(&self) -> RedisResult<(String, u16)> {
        let mut failures = Vec::new();
        let mut all_refused_credentials = true;
        for (sentinel, addr) in self.sentinels.iter().zip(&self.sentinel_addrs) {
            let asked = tokio::time::timeout(
                self.connect_timeout + self.command_timeout,
                self.ask(sentinel),
            )
            .await;
            let refused =
                matches!(&asked, Ok(Err(e)) if e.kind() == ErrorKind::AuthenticationFailed);
            all_refused_credentials &= refused;
            match asked {
                Ok(Ok(Some(found))) => return Ok(found),
                Ok(Ok(None)) => {
                    failures.push(format!("{addr}: no primary named `{}`", self.service))
                }
                Ok(Err(e)) => failures.push(format!("{addr}: {e}")),
                Err(_) => failures.push(format!("{addr}: timed out")),
            }
        }
        let detail = format!("service `{}`: {}", self.service, failures.join("; "));
        if all_refused_credentials {
            return Err(RedisError::from((
                ErrorKind::AuthenticationFailed,
                "no sentinel named the primary: every sentinel refused the credentials (sentinel_username / sentinel_password)",
                detail,
            )));
        }
        Err(failed("no sentinel named the primary", detail))
    }

    async fn ask(&self, sentinel: &redis::Client) -> RedisResult<Option<(String, u16)>> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.command_timeout));
        let mut conn = sentinel
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(crate::transport::tls::explain)?;
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(&self.service);
        match conn.send_packed_command(&cmd).await? {
            Value::Array(items) => match items.as_slice() {
                [host, port] => {
                    let host = text(host);
                    let port = text(port).and_then(|p| p.parse::<u16>().ok());
                    match (host, port) {
                        (Some(h), Some(p)) => Ok(Some((h, p))),
                        _ => Err(failed("sentinel reply", format!("{items:?}"))),
                    }
                }
                _ => Err(failed("sentinel reply", format!("{items:?}"))),
            },
            Value::Nil => Ok(None),
            other => Err(failed("sentinel reply", format!("{other:?}"))),
        }
    }

    async fn check_primary(&self, conn: &mut redis::aio::MultiplexedConnection) -> RedisResult<()> {
        let reply = conn.send_packed_command(&redis::cmd("ROLE")).await?;
        let role = match &reply {
            Value::Array(items) => items.first().and_then(text),
            _ => None,
        };
        match role.as_deref() {
            Some("master") => Ok(()),
            _ => Err(RedisError::from((
                ErrorKind::Server(ServerErrorKind::MasterDown),
                "the node the sentinels named is not a primary (a failover is under way)",
                format!("service `{}`, ROLE {reply:?}", self.service),
            ))),
        }
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// The connection info of a node at `host:port` (TLS or not), default settings.
fn node_info(tls: bool, host: &str, port: u16) -> Result<redis::ConnectionInfo> {
    use redis::IntoConnectionInfo;
    let addr = if tls {
        ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host.to_owned(), port)
    };
    addr.into_connection_info()
        .map_err(|e| Error::InvalidArgument(format!("invalid sentinel url: {host}:{port}: {e}")))
}

fn failed(what: &'static str, detail: String) -> RedisError {
    RedisError::from((ErrorKind::Io, what, detail))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port on 127.0.0.1 that nothing listens on (just freed).
    fn free_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    }

    #[tokio::test]
    async fn a_refused_connect_names_the_address() {
        let port = free_port();
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("url");
        let err = match client.get_multiplexed_async_connection().await {
            Err(e) => cannot_connect(&client, e),
            Ok(_) => panic!("something listens on {port}"),
        };
        // still a refused connect to redis-rs and to the retry rules
        assert!(err.is_connection_refusal() && err.is_io_error(), "{err:?}");
        let text = err.to_string();
        let expected = format!("cannot connect to 127.0.0.1:{port}: ");
        assert!(text.starts_with(&expected), "{text}");
        #[cfg(target_os = "linux")]
        assert_eq!(text, format!("{expected}Connection refused (os error 111)"));
        let err = Error::from(err);
        assert!(err.is_connection_refused() && err.is_transient(), "{err:?}");
        assert!(!err.is_stale_connection(), "{err:?}");
        assert_eq!(err.to_string(), format!("redis error: {text}"));
    }

    #[test]
    fn connect_failures_keep_their_kind_and_others_pass_unchanged() {
        let timed_out = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connection timed out",
        ));
        let err = cannot_connect_to("[::1]:7000", timed_out);
        assert!(err.is_timeout(), "{err:?}");
        assert_eq!(
            err.to_string(),
            "cannot connect to [::1]:7000: connection timed out"
        );
        // redis-rs's cluster says so without an `io::Error` inside
        let cluster = RedisError::from((
            ErrorKind::Io,
            "Failed to create initial connections",
            "Connection refused (os error 111)".to_owned(),
        ));
        let err = cannot_connect_to("the cluster at 127.0.0.1:7000", cluster);
        assert!(err.is_io_error());
        assert_eq!(
            err.to_string(),
            "cannot connect to the cluster at 127.0.0.1:7000: Failed to create initial \
             connections - Io: Connection refused (os error 111)"
        );
        assert!(Error::from(err).is_connection_refused());
        // the server answered: nothing to add
        let denied = RedisError::from((ErrorKind::AuthenticationFailed, "WRONGPASS"));
        let err = cannot_connect_to("127.0.0.1:1", denied);
        assert_eq!(err.kind(), ErrorKind::AuthenticationFailed);
        assert!(!err.to_string().contains("cannot connect"), "{err}");
    }
}
