//! The URLs a client takes, parsed: one server's (redis-rs parses it; a
//! failure is explained here), Sentinel's and Cluster's (parsed here), and
//! the password-free form that errors and `Debug` output show. Plain
//! parsing, no I/O: the transport layer connects to what these name.

use redis::RedisError;

use crate::error::{Error, Result};

/// The port of a sentinel given without one.
pub(crate) const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// Every form of URL the client takes, for the message of one that it
/// does not (`ClientConfig::url` documents them).
pub(crate) const URL_FORMS: &str = "redis://[user[:password]@]host[:port][/db], \
     rediss://... (TLS), valkey://..., valkeys://... (TLS), \
     redis+unix:///path/to/socket (or unix://, valkey+unix://), \
     redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/service[/db], \
     rediss+sentinel://... (TLS), \
     redis+cluster://[user[:password]@]host[:port][,host[:port]...], \
     rediss+cluster://... (TLS), \
     memory://name (an in-memory server of this process, feature `memory`)";

/// The schemes of one server's URL that redis-rs parses.
const DIRECT_SCHEMES: [&str; 7] = [
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis+unix",
    "valkey+unix",
    "unix",
];

/// Why a one-server URL did not parse, given redis-rs's error `err`: a
/// missing or unknown scheme is named as such, anything else in
/// redis-rs's words. Followed by [`URL_FORMS`].
pub(crate) fn unparsed_url(url: &str, err: &RedisError) -> String {
    let why = match url.trim().split_once("://") {
        None => "no `<scheme>://` at its start".to_owned(),
        Some((scheme, _))
            if !DIRECT_SCHEMES
                .iter()
                .any(|known| scheme.eq_ignore_ascii_case(known)) =>
        {
            format!("unknown scheme `{scheme}`")
        }
        Some(_) => err.to_string(),
    };
    format!("it did not parse ({why}); the accepted forms are {URL_FORMS}")
}

/// The message for a `memory://` URL in a build without the `memory` feature.
pub(crate) const MEMORY_FEATURE_MISSING: &str = "memory:// URLs need lock-core's `memory` feature \
     (lock-core = { version = \"0.1\", features = [\"memory\"] }, usually in [dev-dependencies])";

/// A `memory://<name>` URL: the in-memory server of this process registered
/// under `name` (see `MemoryServer`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MemoryUrl {
    pub(crate) name: String,
}

impl MemoryUrl {
    /// `None` for a URL of another scheme; an error for a `memory://` URL
    /// without a name, or with a path, query or credentials.
    pub(crate) fn parse(url: &str) -> Result<Option<MemoryUrl>> {
        let Some((scheme, name)) = url.trim().split_once("://") else {
            return Ok(None);
        };
        if !scheme.eq_ignore_ascii_case("memory") {
            return Ok(None);
        }
        if name.is_empty() {
            return Err(Error::InvalidArgument(
                "invalid memory url: no server name (memory://<name>)".into(),
            ));
        }
        if let Some(c) = name
            .chars()
            .find(|c| matches!(c, '/' | '?' | '#' | '@' | ':'))
        {
            return Err(Error::InvalidArgument(format!(
                "invalid memory url: `{c}` in the server name (memory://<name>: no port, path, query or credentials)"
            )));
        }
        Ok(Some(MemoryUrl {
            name: name.to_owned(),
        }))
    }
}

/// The port of a cluster node given without one.
pub(crate) const DEFAULT_REDIS_PORT: u16 = 6379;

/// The parts of a `redis+cluster://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClusterUrl {
    pub(crate) tls: bool,
    pub(crate) seeds: Vec<(String, u16)>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl ClusterUrl {
    /// `redis+cluster://[user[:password]@]host[:port][,host[:port]...]`
    /// (`rediss+cluster://` for TLS); `None` for a URL of another scheme.
    pub(crate) fn parse(url: &str) -> Result<Option<ClusterUrl>> {
        let Some((tls, rest)) = scheme(url, "redis+cluster", "rediss+cluster") else {
            return Ok(None);
        };
        let parts = UrlParts::split(rest, DEFAULT_REDIS_PORT, "cluster")?;
        if !parts.path.is_empty() {
            return Err(Error::InvalidArgument(
                "invalid cluster url: no path (a cluster has database 0 only)".into(),
            ));
        }
        if let Some((name, _)) = query_pairs(parts.query).next() {
            return Err(Error::InvalidArgument(format!(
                "invalid cluster url: unknown parameter `{name}`"
            )));
        }
        let (username, password) = parts.credentials();
        Ok(Some(ClusterUrl {
            tls,
            seeds: parts.hosts,
            username,
            password,
        }))
    }
}

/// The parts of a `redis+sentinel://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    pub(crate) tls: bool,
    pub(crate) sentinels: Vec<(String, u16)>,
    pub(crate) service: String,
    pub(crate) db: i64,
    /// Credentials of the data nodes (the URL's userinfo).
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    /// Credentials of the sentinels (`sentinel_username`, `sentinel_password`).
    pub(crate) sentinel_username: Option<String>,
    pub(crate) sentinel_password: Option<String>,
}

impl SentinelUrl {
    /// `None` for a URL of another scheme; an error names what is wrong
    /// with a Sentinel URL (passwords never appear in it).
    ///
    /// `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/service[/db]
    /// [?sentinel_username=..&sentinel_password=..]`, `rediss+sentinel://` for TLS.
    pub(crate) fn parse(url: &str) -> Result<Option<SentinelUrl>> {
        let Some((tls, rest)) = scheme(url, "redis+sentinel", "rediss+sentinel") else {
            return Ok(None);
        };
        let bad = |why: &str| Error::InvalidArgument(format!("invalid sentinel url: {why}"));
        let parts = UrlParts::split(rest, DEFAULT_SENTINEL_PORT, "sentinel")?;
        let mut path = parts.path.split('/').filter(|p| !p.is_empty());
        let service = path
            .next()
            .map(decode)
            .ok_or_else(|| bad("no service name (redis+sentinel://host:26379/<service>)"))?;
        let db = match path.next() {
            Some(db) => db
                .parse::<i64>()
                .ok()
                .filter(|d| *d >= 0)
                .ok_or_else(|| bad(&format!("database `{db}` is not a number")))?,
            None => 0,
        };
        if path.next().is_some() {
            return Err(bad("the path is /<service>[/<db>]"));
        }
        let (username, password) = parts.credentials();
        let mut parsed = SentinelUrl {
            tls,
            sentinels: parts.hosts,
            service,
            db,
            username,
            password,
            sentinel_username: None,
            sentinel_password: None,
        };
        for (name, value) in query_pairs(parts.query) {
            match name {
                "sentinel_username" => parsed.sentinel_username = Some(decode(value)),
                "sentinel_password" => parsed.sentinel_password = Some(decode(value)),
                other => {
                    return Err(bad(&format!(
                        "unknown parameter `{other}` (known: sentinel_username, sentinel_password)"
                    )))
                }
            }
        }
        Ok(Some(parsed))
    }
}

/// `Some((tls, rest after "://"))` when `url` has the plain or the TLS scheme.
fn scheme<'a>(url: &'a str, plain: &str, tls: &str) -> Option<(bool, &'a str)> {
    let (scheme, rest) = url.trim().split_once("://")?;
    if scheme.eq_ignore_ascii_case(plain) {
        Some((false, rest))
    } else if scheme.eq_ignore_ascii_case(tls) {
        Some((true, rest))
    } else {
        None
    }
}

/// `name=value` pairs of a query string (a bare name has an empty value).
fn query_pairs(query: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
}

/// The pieces of `[userinfo@]host[:port][,host[:port]...][/path][?query]`.
struct UrlParts<'a> {
    userinfo: Option<&'a str>,
    hosts: Vec<(String, u16)>,
    path: &'a str,
    query: Option<&'a str>,
}

impl<'a> UrlParts<'a> {
    fn split(rest: &'a str, default_port: u16, kind: &str) -> Result<UrlParts<'a>> {
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        // The userinfo ends at the last `@` (a password may hold `@`).
        let (userinfo, rest) = match rest.rfind('@') {
            Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
            None => (None, rest),
        };
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let mut parsed = Vec::new();
        for host in hosts.split(',') {
            parsed.push(host_port(host, default_port).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "invalid {kind} url: `{host}` is not host[:port] (list nodes as host1:port,host2:port)"
                ))
            })?);
        }
        Ok(UrlParts {
            userinfo,
            hosts: parsed,
            path,
            query,
        })
    }

    /// The userinfo's user name and password, percent-decoded.
    fn credentials(&self) -> (Option<String>, Option<String>) {
        match self.userinfo {
            Some(info) => match info.split_once(':') {
                Some((u, p)) => (non_empty(decode(u)), Some(decode(p))),
                None => (non_empty(decode(info)), None),
            },
            None => (None, None),
        }
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// `host[:port]` or `[v6]:port`; the port defaults to `default_port`.
fn host_port(s: &str, default_port: u16) -> Option<(String, u16)> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        return Some((host.to_owned(), port));
    }
    match s.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && !host.contains(':') => {
            Some((host.to_owned(), port.parse().ok()?))
        }
        Some(_) => None,
        None => Some((s.to_owned(), default_port)),
    }
}

/// Percent-decodes a URL part (`%40` → `@`); invalid escapes stay as written.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the URL's scheme asks for TLS (`rediss://`, `valkeys://`).
pub(crate) fn is_tls_url(url: &str) -> bool {
    url.trim_start()
        .split_once("://")
        .is_some_and(|(scheme, _)| {
            scheme.eq_ignore_ascii_case("rediss")
                || scheme.eq_ignore_ascii_case("valkeys")
                || scheme.eq_ignore_ascii_case("rediss+sentinel")
                || scheme.eq_ignore_ascii_case("rediss+cluster")
        })
}

/// The URL with any password replaced by `***`, for error messages and
/// `Debug` output: the userinfo's password (`redis://user:pass@host`,
/// `redis://:pass@host`) and a `pass=` / `password=` query parameter
/// (`redis+unix:///run/redis.sock?pass=...`). The user name, host, port,
/// database and other parameters stay.
pub(crate) fn redact(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        // Not a URL: whatever comes before an `@` may hold a password.
        return match url.rfind('@') {
            Some(i) => format!("***{}", &url[i..]),
            None => url.to_string(),
        };
    };
    let (scheme, rest) = url.split_at(start);
    // The userinfo ends at the last `@`: a password may hold any character
    // (`@`, `/`, `?` included), so this errs towards hiding too much.
    let (userinfo, host) = rest.split_at(rest.rfind('@').unwrap_or(0));
    let user = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => userinfo.to_string(),
    };
    let host = match host.split_once('?') {
        Some((path, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _))
                        if name == "pass" || name == "password" || name == "sentinel_password" =>
                    {
                        format!("{name}=***")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", pairs.join("&"))
        }
        None => host.to_string(),
    };
    format!("{scheme}{user}{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> SentinelUrl {
        match SentinelUrl::parse(url) {
            Ok(Some(u)) => u,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn other_schemes_are_not_sentinel_urls() {
        for url in ["redis://h", "rediss://h:1", "redis+unix:///s", "nonsense"] {
            assert!(matches!(SentinelUrl::parse(url), Ok(None)), "{url}");
        }
    }

    #[test]
    fn hosts_service_db_and_credentials() {
        let u = parse("redis+sentinel://app:p%40ss@10.0.0.1,10.0.0.2:26380,[::1]:5/locks/3?sentinel_password=s3&sentinel_username=sen");
        assert!(!u.tls);
        assert_eq!(
            u.sentinels,
            [
                ("10.0.0.1".to_owned(), 26379),
                ("10.0.0.2".to_owned(), 26380),
                ("::1".to_owned(), 5)
            ]
        );
        assert_eq!((u.service.as_str(), u.db), ("locks", 3));
        assert_eq!(u.username.as_deref(), Some("app"));
        assert_eq!(u.password.as_deref(), Some("p@ss"));
        assert_eq!(u.sentinel_username.as_deref(), Some("sen"));
        assert_eq!(u.sentinel_password.as_deref(), Some("s3"));
        let t = parse("rediss+sentinel://:pw@h/svc");
        assert!(t.tls);
        assert_eq!((t.username, t.password.as_deref()), (None, Some("pw")));
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("redis+sentinel://h:26379", "no service name"),
            ("redis+sentinel://h:x/svc", "is not host[:port]"),
            ("redis+sentinel://h,,g/svc", "is not host[:port]"),
            ("redis+sentinel://h/svc/x", "database `x`"),
            ("redis+sentinel://h/svc/0/more", "the path is"),
            ("redis+sentinel://h/svc?tls=1", "unknown parameter `tls`"),
        ];
        for (url, want) in cases {
            match SentinelUrl::parse(url) {
                Err(e) => assert!(e.to_string().contains(want), "{url}: {e}"),
                Ok(u) => panic!("{url} accepted: {u:?}"),
            }
        }
    }

    #[test]
    fn cluster_urls_name_seeds_and_credentials() {
        let u = match ClusterUrl::parse("redis+cluster://app:s%3Acret@10.0.0.1:7000,10.0.0.2") {
            Ok(Some(u)) => u,
            other => panic!("{other:?}"),
        };
        assert!(!u.tls);
        assert_eq!(
            u.seeds,
            [("10.0.0.1".to_owned(), 7000), ("10.0.0.2".to_owned(), 6379)]
        );
        assert_eq!(
            (u.username.as_deref(), u.password.as_deref()),
            (Some("app"), Some("s:cret"))
        );
        assert!(matches!(
            ClusterUrl::parse("rediss+cluster://h"),
            Ok(Some(ClusterUrl { tls: true, .. }))
        ));
        assert!(matches!(ClusterUrl::parse("redis://h"), Ok(None)));
        for (url, want) in [
            ("redis+cluster://h/0", "no path"),
            ("redis+cluster://h?x=1", "unknown parameter `x`"),
            ("redis+cluster://h:port", "is not host[:port]"),
        ] {
            match ClusterUrl::parse(url) {
                Err(e) => assert!(e.to_string().contains(want), "{url}: {e}"),
                Ok(u) => panic!("{url} accepted: {u:?}"),
            }
        }
    }

    #[test]
    fn escapes_decode_and_bad_ones_stay() {
        assert_eq!(decode("a%2Fb%3a"), "a/b:");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz"), "%zz");
    }

    #[test]
    fn memory_urls_name_a_server() {
        assert_eq!(
            MemoryUrl::parse("memory://orders-test").ok().flatten(),
            Some(MemoryUrl {
                name: "orders-test".into()
            })
        );
        assert!(matches!(MemoryUrl::parse("MEMORY://x"), Ok(Some(_))));
        for other in ["redis://h", "redis+cluster://h:1", "nonsense"] {
            assert!(matches!(MemoryUrl::parse(other), Ok(None)), "{other}");
        }
        for (bad, why) in [
            ("memory://", "no server name"),
            ("memory://a/b", "`/`"),
            ("memory://h:6379", "`:`"),
            ("memory://u@h", "`@`"),
        ] {
            let err = MemoryUrl::parse(bad).expect_err(bad);
            assert!(
                err.is_invalid_input() && err.to_string().contains(why),
                "{bad}: {err}"
            );
        }
    }
}
