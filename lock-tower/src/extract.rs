//! Ready-made key extractors for HTTP (and gRPC) requests.
//!
//! Each one reads one part of an [`http::Request`] and prepends an
//! optional prefix; a request without that part maps to no key (it passes
//! through unlocked). Values are turned into keys so that requests that
//! mean the same resource share a key: path segments and query values are
//! percent-decoded, and bytes that are not UTF-8 are replaced (which can
//! only merge keys, never split them: merging serializes more, splitting
//! would let two requests for one resource run together).

use std::borrow::Cow;

use http::header::HeaderName;
use http::Request;
use percent_encoding::percent_decode_str;

use crate::key::MakeLockKey;

fn keyed(prefix: &str, value: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + value.len());
    key.push_str(prefix);
    key.push_str(value);
    key
}

fn decode(raw: &str) -> Cow<'_, str> {
    percent_decode_str(raw).decode_utf8_lossy()
}

/// The key is the value of a request header (the first one when it is
/// repeated), after an optional prefix. No header, no key.
///
/// ```
/// use lock_tower::{HeaderKey, MakeLockKey};
///
/// let key = HeaderKey::from_static("x-account-id").prefix("account:");
/// let req = http::Request::builder().header("x-account-id", "42").body(()).unwrap();
/// assert_eq!(key.make_lock_key(&req).as_deref(), Some("account:42"));
/// assert_eq!(key.make_lock_key(&http::Request::new(())), None);
/// ```
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
    prefix: String,
}

impl HeaderKey {
    /// Keys from the header `name`.
    ///
    /// ```
    /// let key = lock_tower::HeaderKey::new(http::header::AUTHORIZATION);
    /// # let _ = key;
    /// ```
    pub fn new(name: HeaderName) -> Self {
        HeaderKey {
            name,
            prefix: String::new(),
        }
    }

    /// Keys from the header `name`, given as a string literal.
    ///
    /// # Panics
    ///
    /// When `name` is not a valid lowercase header name (as
    /// [`HeaderName::from_static`]); this is a programming error caught by
    /// the first test that builds the layer.
    ///
    /// ```
    /// let key = lock_tower::HeaderKey::from_static("x-tenant");
    /// # let _ = key;
    /// ```
    pub fn from_static(name: &'static str) -> Self {
        Self::new(HeaderName::from_static(name))
    }

    /// Puts `prefix` before the value (`"account:"` + `"42"`).
    ///
    /// ```
    /// let key = lock_tower::HeaderKey::from_static("x-tenant").prefix("tenant:");
    /// # let _ = key;
    /// ```
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

impl<B> MakeLockKey<Request<B>> for HeaderKey {
    fn make_lock_key(&self, req: &Request<B>) -> Option<String> {
        let value = req.headers().get(&self.name)?;
        Some(keyed(
            &self.prefix,
            &String::from_utf8_lossy(value.as_bytes()),
        ))
    }
}

/// The key is a gRPC metadata entry. Through `tonic`'s
/// `Server::builder().layer(..)` requests are plain `http::Request`s and
/// ASCII metadata entries are their HTTP/2 headers, so this reads the
/// header of that name (a `-bin` entry gives its base64 text).
///
/// ```
/// use lock_tower::{MakeLockKey, MetadataKey};
///
/// let key = MetadataKey::from_static("x-account-id").prefix("account:");
/// let req = http::Request::builder().header("x-account-id", "7").body(()).unwrap();
/// assert_eq!(key.make_lock_key(&req).as_deref(), Some("account:7"));
/// ```
#[derive(Clone, Debug)]
pub struct MetadataKey(HeaderKey);

impl MetadataKey {
    /// Keys from the metadata entry `name` (lowercase, as gRPC requires).
    ///
    /// ```
    /// let key = lock_tower::MetadataKey::new(http::HeaderName::from_static("x-user"));
    /// # let _ = key;
    /// ```
    pub fn new(name: HeaderName) -> Self {
        MetadataKey(HeaderKey::new(name))
    }

    /// Keys from the metadata entry `name`, given as a string literal.
    ///
    /// # Panics
    ///
    /// When `name` is not a valid lowercase metadata key (as
    /// [`HeaderName::from_static`]).
    ///
    /// ```
    /// let key = lock_tower::MetadataKey::from_static("x-user");
    /// # let _ = key;
    /// ```
    pub fn from_static(name: &'static str) -> Self {
        MetadataKey(HeaderKey::from_static(name))
    }

    /// Puts `prefix` before the value.
    ///
    /// ```
    /// let key = lock_tower::MetadataKey::from_static("x-user").prefix("user:");
    /// # let _ = key;
    /// ```
    #[must_use]
    pub fn prefix(self, prefix: impl Into<String>) -> Self {
        MetadataKey(self.0.prefix(prefix))
    }
}

impl<B> MakeLockKey<Request<B>> for MetadataKey {
    fn make_lock_key(&self, req: &Request<B>) -> Option<String> {
        self.0.make_lock_key(req)
    }
}

#[derive(Clone, Debug)]
enum Segment {
    Index(usize),
    After(String),
}

/// The key is one segment of the request path, percent-decoded, after an
/// optional prefix. Empty segments (`//`) are skipped when counting. No
/// such segment, no key.
///
/// ```
/// use lock_tower::{MakeLockKey, PathSegment};
///
/// let req = http::Request::post("/accounts/42/withdraw").body(()).unwrap();
/// let by_index = PathSegment::new(1).prefix("account:");
/// let by_name = PathSegment::after("accounts").prefix("account:");
/// assert_eq!(by_index.make_lock_key(&req).as_deref(), Some("account:42"));
/// assert_eq!(by_name.make_lock_key(&req).as_deref(), Some("account:42"));
/// assert_eq!(by_name.make_lock_key(&http::Request::get("/health").body(()).unwrap()), None);
/// ```
#[derive(Clone, Debug)]
pub struct PathSegment {
    segment: Segment,
    prefix: String,
}

impl PathSegment {
    /// The segment at `index` (0-based: in `/accounts/42`, `accounts` is 0).
    ///
    /// ```
    /// let key = lock_tower::PathSegment::new(0);
    /// # let _ = key;
    /// ```
    pub fn new(index: usize) -> Self {
        PathSegment {
            segment: Segment::Index(index),
            prefix: String::new(),
        }
    }

    /// The segment that follows the first segment equal to `literal` (in
    /// `/v1/accounts/42`, `after("accounts")` is `42`).
    ///
    /// ```
    /// let key = lock_tower::PathSegment::after("orders");
    /// # let _ = key;
    /// ```
    pub fn after(literal: impl Into<String>) -> Self {
        PathSegment {
            segment: Segment::After(literal.into()),
            prefix: String::new(),
        }
    }

    /// Puts `prefix` before the segment.
    ///
    /// ```
    /// let key = lock_tower::PathSegment::new(1).prefix("account:");
    /// # let _ = key;
    /// ```
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

impl<B> MakeLockKey<Request<B>> for PathSegment {
    fn make_lock_key(&self, req: &Request<B>) -> Option<String> {
        let mut segments = req.uri().path().split('/').filter(|s| !s.is_empty());
        let raw = match &self.segment {
            Segment::Index(i) => segments.nth(*i)?,
            Segment::After(literal) => {
                segments.find(|s| decode(s) == literal.as_str())?;
                segments.next()?
            }
        };
        Some(keyed(&self.prefix, &decode(raw)))
    }
}

/// The key is the value of a query parameter (the first one when it is
/// repeated), decoded as a form value (`+` is a space, `%XX` a byte), after
/// an optional prefix. No such parameter, no key.
///
/// ```
/// use lock_tower::{MakeLockKey, QueryParam};
///
/// let key = QueryParam::new("account").prefix("account:");
/// let req = http::Request::get("/withdraw?amount=5&account=a%2042").body(()).unwrap();
/// assert_eq!(key.make_lock_key(&req).as_deref(), Some("account:a 42"));
/// assert_eq!(key.make_lock_key(&http::Request::get("/withdraw").body(()).unwrap()), None);
/// ```
#[derive(Clone, Debug)]
pub struct QueryParam {
    name: String,
    prefix: String,
}

impl QueryParam {
    /// Keys from the query parameter `name`.
    ///
    /// ```
    /// let key = lock_tower::QueryParam::new("order");
    /// # let _ = key;
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        QueryParam {
            name: name.into(),
            prefix: String::new(),
        }
    }

    /// Puts `prefix` before the value.
    ///
    /// ```
    /// let key = lock_tower::QueryParam::new("order").prefix("order:");
    /// # let _ = key;
    /// ```
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

fn form_decode(raw: &str) -> Cow<'_, str> {
    if raw.contains('+') {
        Cow::Owned(decode(&raw.replace('+', " ")).into_owned())
    } else {
        decode(raw)
    }
}

impl<B> MakeLockKey<Request<B>> for QueryParam {
    fn make_lock_key(&self, req: &Request<B>) -> Option<String> {
        let query = req.uri().query()?;
        query
            .split('&')
            .filter_map(|pair| match pair.split_once('=') {
                Some((k, v)) => Some((k, v)),
                None if !pair.is_empty() => Some((pair, "")),
                None => None,
            })
            .find(|(k, _)| form_decode(k) == self.name.as_str())
            .map(|(_, v)| keyed(&self.prefix, &form_decode(v)))
    }
}

/// The key is the request method and path (`"POST /accounts/42/withdraw"`,
/// percent-decoded, query left out), after an optional prefix: every
/// request maps to a key, so each endpoint-and-resource runs one request at
/// a time.
///
/// ```
/// use lock_tower::{MakeLockKey, MethodPath};
///
/// let req = http::Request::post("/jobs/rebuild?force=1").body(()).unwrap();
/// assert_eq!(MethodPath::new().make_lock_key(&req).as_deref(), Some("POST /jobs/rebuild"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct MethodPath {
    prefix: String,
}

impl MethodPath {
    /// Keys `"<METHOD> <path>"`.
    ///
    /// ```
    /// let key = lock_tower::MethodPath::new();
    /// # let _ = key;
    /// ```
    pub fn new() -> Self {
        MethodPath::default()
    }

    /// Puts `prefix` before the method.
    ///
    /// ```
    /// let key = lock_tower::MethodPath::new().prefix("endpoint:");
    /// # let _ = key;
    /// ```
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

impl<B> MakeLockKey<Request<B>> for MethodPath {
    fn make_lock_key(&self, req: &Request<B>) -> Option<String> {
        let method = req.method().as_str();
        let path = decode(req.uri().path());
        let mut key = String::with_capacity(self.prefix.len() + method.len() + 1 + path.len());
        key.push_str(&self.prefix);
        key.push_str(method);
        key.push(' ');
        key.push_str(&path);
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(uri: &str) -> Request<()> {
        Request::get(uri)
            .body(())
            .unwrap_or_else(|e| panic!("{uri}: {e}"))
    }

    #[test]
    fn equivalent_paths_share_a_key() {
        let key = PathSegment::after("accounts");
        assert_eq!(
            key.make_lock_key(&get("/accounts/4%32")),
            key.make_lock_key(&get("//accounts/42/"))
        );
        assert_eq!(
            MethodPath::new().make_lock_key(&get("/a%62")),
            MethodPath::new().make_lock_key(&get("/ab"))
        );
    }

    #[test]
    fn path_segment_out_of_range_is_no_key() {
        assert_eq!(PathSegment::new(3).make_lock_key(&get("/a/b")), None);
        assert_eq!(PathSegment::after("b").make_lock_key(&get("/a/b")), None);
    }

    #[test]
    fn query_values_are_form_decoded_and_the_first_wins() {
        let key = QueryParam::new("q");
        assert_eq!(
            key.make_lock_key(&get("/?x=1&q=a+b&q=c")).as_deref(),
            Some("a b")
        );
        assert_eq!(key.make_lock_key(&get("/?q")).as_deref(), Some(""));
        assert_eq!(key.make_lock_key(&get("/?qq=1&&")), None);
        assert_eq!(
            QueryParam::new("a b")
                .make_lock_key(&get("/?a%20b=1"))
                .as_deref(),
            Some("1")
        );
    }

    #[test]
    fn non_utf8_header_values_still_give_a_key() {
        let mut req = Request::new(());
        let value = http::HeaderValue::from_bytes(b"a\xffb").unwrap_or_else(|e| panic!("{e}"));
        req.headers_mut().insert("x-k", value);
        assert_eq!(
            HeaderKey::from_static("x-k").make_lock_key(&req).as_deref(),
            Some("a\u{fffd}b")
        );
    }
}
