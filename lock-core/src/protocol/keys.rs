//! Redis key and channel names of one lock (Redisson's layout) and name checks.

use crate::error::{Error, Result};

/// Payload published on a lock's channel when a mutex is released: wake one
/// waiter per client (Redisson's `UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &str = crate::transport::pubsub::WAKE_ONE;

/// The kinds of helper names of a lock (Redisson's prefixes).
const CHANNEL_KIND: &str = "redisson_lock__channel";
const TOKEN_KIND: &str = "redisson_lock_token";
const LATCH_KIND: &str = "redisson_unlock_latch";
/// lock-core's own helper names (Redisson has no counterpart; a Redisson
/// client neither reads nor writes them): the clients waiting for the lock,
/// and the client whose turn it is.
const QUEUE_KIND: &str = "lockcore_waiters";
const TURN_KIND: &str = "lockcore_turn";
/// Redisson's channel of a read-write lock (both modes).
const RW_CHANNEL_KIND: &str = "redisson_rwlock";
/// lock-core's own: a writer of this client waits (new readers of
/// lock-core wait behind it; Redisson ignores it).
const WRITER_KIND: &str = "lockcore_writer";
/// Redisson's fair lock: the LIST of waiting owners in arrival order, and
/// the ZSET of their deadlines.
const FAIR_QUEUE_KIND: &str = "redisson_lock_queue";
const FAIR_TIMEOUT_KIND: &str = "redisson_lock_timeout";
/// lock-core's own: the liveness marks of its fair waiters (Redisson's
/// clients neither read nor write it).
const FAIR_ALIVE_KIND: &str = "lockcore_fair_alive";

/// The grant rule of a handle: which script family it speaks and which
/// field of the hash is its hold. The lock's three are public as
/// [`LockMode`](crate::LockMode); `Permits` is the expirable semaphore's
/// permits, whose hold is a set of ids in a sorted set (only the watchdog's
/// renewal and the logs meet it: it never runs a lock script).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Redisson's `RLock`.
    Exclusive,
    /// The read side of `RReadWriteLock`.
    Read,
    /// The write side of `RReadWriteLock`.
    Write,
    /// Permits of `RPermitExpirableSemaphore`.
    Permits,
    /// Redisson's `RFairLock`: an `RLock` hash granted in the order of a
    /// queue of waiting owners.
    Fair,
}

impl From<crate::options::LockMode> for Rule {
    fn from(mode: crate::options::LockMode) -> Self {
        use crate::options::LockMode;
        match mode {
            LockMode::Exclusive => Rule::Exclusive,
            LockMode::Read => Rule::Read,
            LockMode::Write => Rule::Write,
        }
    }
}

impl Rule {
    /// The lock mode of a lock handle's rule (`Permits` is no lock's).
    pub(crate) fn mode(self) -> crate::options::LockMode {
        use crate::options::LockMode;
        match self {
            Rule::Exclusive | Rule::Permits | Rule::Fair => LockMode::Exclusive,
            Rule::Read => LockMode::Read,
            Rule::Write => LockMode::Write,
        }
    }

    /// Whether a released hold may go straight to a local waiter
    /// (`handoff.lua` moves the lock's single field; a read-write lock's
    /// hash has several).
    pub(crate) fn hands_off(self) -> bool {
        self == Rule::Exclusive
    }

    /// The script's name of the side (`rw_*.lua`'s mode argument).
    pub(crate) fn side(self) -> &'static str {
        match self {
            Rule::Read => "read",
            Rule::Exclusive | Rule::Write | Rule::Permits | Rule::Fair => "write",
        }
    }
}

/// Redisson's naming rule for the helper names of an object called `key`
/// (`RedissonObject.prefixName`): `<kind>:{<key>}`, or `<kind>:<key>` when
/// the key already holds a `{` (the user's own hash tag then decides the
/// Cluster slot, and no second pair of braces is added).
///
/// Both forms share the key's Cluster slot only for the keys that
/// [`validate_name`] lets through: a key with a hash tag (`<kind>:` adds
/// no brace, so the tag stays the first one), or a key without braces.
pub(crate) fn prefixed(kind: &str, key: &str) -> String {
    if key.contains('{') {
        format!("{kind}:{key}")
    } else {
        format!("{kind}:{{{key}}}")
    }
}

/// Redis Cluster's hash tag of `key`: what lies between its first `{` and
/// the first `}` after it, when that is not empty. A key with a tag is
/// hashed by its tag alone; any other key, braces and all, as a whole.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// Whether `key` could be a helper name of some lock: such a name can never
/// be a lock's own key, or a lock named like another lock's fencing counter
/// could reset it (tokens would go backwards).
fn is_helper_name(key: &str) -> bool {
    [
        CHANNEL_KIND,
        TOKEN_KIND,
        LATCH_KIND,
        QUEUE_KIND,
        TURN_KIND,
        RW_CHANNEL_KIND,
        WRITER_KIND,
        FAIR_QUEUE_KIND,
        FAIR_TIMEOUT_KIND,
        FAIR_ALIVE_KIND,
        super::sem_keys::SEM_CHANNEL_KIND,
        super::sem_keys::LINE_KIND,
        super::sem_keys::ALIVE_KIND,
        super::sem_keys::SEM_REQUEST_KIND,
        super::sem_keys::GRANTS_KIND,
        super::sem_keys::LATCH_REQUEST_KIND,
        super::election::LEADER_KIND,
        super::election::LEADER_CHANNEL_KIND,
    ]
    .iter()
    .any(|kind| {
        key.strip_prefix(kind)
            .is_some_and(|rest| rest.starts_with(':'))
    })
}

/// The Redis names that belong to one lock.
#[derive(Clone, Debug)]
pub(crate) struct LockKeys {
    /// The user's name, without prefix.
    pub(crate) name: String,
    /// The lock hash: prefix + name.
    pub(crate) lock: String,
    /// `redisson_lock__channel:{<lock>}` (no braces added when `lock` has a `{`).
    pub(crate) channel: String,
    /// `redisson_lock_token:{<lock>}`: the last fencing token (same rule).
    pub(crate) token: String,
    /// `redisson_unlock_latch:{<lock>}:`: prefix of per-request latch keys (same rule).
    latch_prefix: String,
    /// `lockcore_waiters:{<lock>}`: a sorted set of the clients waiting for
    /// the lock, by the time they began to wait (same rule).
    pub(crate) queue: String,
    /// `lockcore_turn:{<lock>}`: the client whose turn it is, for a moment
    /// after a release (same rule).
    pub(crate) turn: String,
    /// Which primitive this handle is (its scripts and its hold's field).
    pub(crate) rule: Rule,
    /// What this client's local bookkeeping calls the handle (sections
    /// and lock contexts find their holds by it): the lock key for the
    /// lock, `<lock>` + NUL + `read` / `write` for the sides of a
    /// read-write lock, so that neither re-enters the other.
    pub(crate) ident: String,
    /// The key of the local queue a fresh acquisition joins: `ident`, but
    /// for readers one of their own (per lock context, or per acquisition)
    /// so that readers of one client never queue behind each other.
    pub(crate) local: String,
    /// Read-write lock: `{<lock>}` (or `<lock>` when it holds a `{`), the
    /// prefix of the readers' timeout keys
    /// `<prefix>:<owner>:rwlock_timeout:<n>` (Redisson's `suffixName`).
    pub(crate) rw_prefix: String,
    /// Read-write lock: `lockcore_writer:{<lock>}`, the client whose
    /// writer waits (new readers of lock-core wait behind it).
    pub(crate) writer: String,
    /// A reader's acquisition in a scope that holds the write side: the
    /// write hold's owner id, so that the read is a downgrade.
    pub(crate) downgrade_from: Option<std::sync::Arc<str>>,
    /// Fair lock: `redisson_lock_queue:{<lock>}`, the waiting owners in
    /// arrival order (a LIST).
    pub(crate) fair_queue: String,
    /// Fair lock: `redisson_lock_timeout:{<lock>}`, their deadlines (a ZSET).
    pub(crate) fair_timeouts: String,
    /// Fair lock: `lockcore_fair_alive:{<lock>}`, lock-core's waiters'
    /// liveness marks (a ZSET).
    pub(crate) fair_alive: String,
    /// Fair lock: the wait allowance in ms (Redisson's
    /// `fairLockWaitTimeout`; part of the protocol, see `fair_acquire.lua`).
    pub(crate) fair_wait_ms: u64,
}

impl LockKeys {
    /// Checks `name` and derives every key from `prefix + name`.
    pub(crate) fn new(prefix: &str, name: &str, max_len: usize) -> Result<Self> {
        validate_name(prefix, name, max_len)?;
        Self::with_rule(prefix, name, max_len, Rule::Exclusive)
    }

    /// The keys a permit hold of an expirable semaphore carries for the
    /// watchdog and the logs: `lock` is the sorted set of permit ids.
    pub(crate) fn for_permits(name: &str, timeout: &str, channel: &str) -> Self {
        LockKeys {
            name: name.to_string(),
            lock: timeout.to_string(),
            channel: channel.to_string(),
            token: String::new(),
            latch_prefix: String::new(),
            queue: String::new(),
            turn: String::new(),
            rule: Rule::Permits,
            ident: ident_of(timeout, Rule::Permits),
            local: ident_of(timeout, Rule::Permits),
            rw_prefix: String::new(),
            writer: String::new(),
            downgrade_from: None,
            fair_queue: String::new(),
            fair_timeouts: String::new(),
            fair_alive: String::new(),
            fair_wait_ms: 0,
        }
    }

    /// Checks `name` and derives every key of the side `rule` of a lock.
    pub(crate) fn with_rule(prefix: &str, name: &str, max_len: usize, rule: Rule) -> Result<Self> {
        validate_name(prefix, name, max_len)?;
        let lock = format!("{prefix}{name}");
        let ident = ident_of(&lock, rule);
        let channel = match rule {
            Rule::Exclusive | Rule::Permits | Rule::Fair => prefixed(CHANNEL_KIND, &lock),
            Rule::Read | Rule::Write => prefixed(RW_CHANNEL_KIND, &lock),
        };
        let rw_prefix = if lock.contains('{') {
            lock.clone()
        } else {
            format!("{{{lock}}}")
        };
        Ok(LockKeys {
            name: name.to_string(),
            channel,
            token: prefixed(TOKEN_KIND, &lock),
            latch_prefix: format!("{}:", prefixed(LATCH_KIND, &lock)),
            queue: prefixed(QUEUE_KIND, &lock),
            turn: prefixed(TURN_KIND, &lock),
            writer: prefixed(WRITER_KIND, &lock),
            fair_queue: prefixed(FAIR_QUEUE_KIND, &lock),
            fair_timeouts: prefixed(FAIR_TIMEOUT_KIND, &lock),
            fair_alive: prefixed(FAIR_ALIVE_KIND, &lock),
            fair_wait_ms: 0,
            rw_prefix,
            local: ident.clone(),
            ident,
            rule,
            downgrade_from: None,
            lock,
        })
    }

    /// The keys of one read acquisition: its own local queue (`scope`: the
    /// lock context's number, else a number of its own) and the write hold
    /// it downgrades, if any.
    pub(crate) fn for_reader(
        &self,
        scope: ReaderScope,
        downgrade_from: Option<std::sync::Arc<str>>,
    ) -> Self {
        LockKeys {
            local: self.reader_local(scope),
            downgrade_from,
            ..self.clone()
        }
    }

    /// The local queue key of a read acquisition in `scope`.
    pub(crate) fn reader_local(&self, scope: ReaderScope) -> String {
        reader_local_of(&self.ident, scope)
    }

    /// The hash field of the hold `owner`: the owner id, or for a writer
    /// `<owner>:write` (Redisson's layout).
    pub(crate) fn field<'a>(&self, owner: &'a str) -> std::borrow::Cow<'a, str> {
        match self.rule {
            Rule::Write => std::borrow::Cow::Owned(format!("{owner}:write")),
            Rule::Exclusive | Rule::Read | Rule::Permits | Rule::Fair => {
                std::borrow::Cow::Borrowed(owner)
            }
        }
    }

    /// What the watchdog's renewal names for the hold `owner` (see
    /// `renew.lua`): its field, or for a reader `<owner>` NUL `<prefix>`, so
    /// that its own timeout keys are renewed too.
    pub(crate) fn renewal_arg<'a>(&self, owner: &'a str) -> std::borrow::Cow<'a, str> {
        match self.rule {
            Rule::Read => std::borrow::Cow::Owned(format!("{owner}\0{}", self.rw_prefix)),
            // the permit ids, comma-separated, after a NUL
            Rule::Permits => std::borrow::Cow::Owned(format!("\0{owner}")),
            Rule::Exclusive | Rule::Write | Rule::Fair => self.field(owner),
        }
    }

    /// Fair lock: the channel on which the waiter `owner` is told that its
    /// turn came (`<channel>:<owner>`, Redisson's per-waiter channel).
    pub(crate) fn fair_channel(&self, owner: &str) -> String {
        format!("{}:{owner}", self.channel)
    }

    /// The latch key that remembers the result of one release request.
    pub(crate) fn latch(&self, request_id: &str) -> String {
        format!("{}{request_id}", self.latch_prefix)
    }
}

/// What local bookkeeping calls the side `rule` of the lock key `lock`
/// (see [`LockKeys::ident`]).
pub(crate) fn ident_of(lock: &str, rule: Rule) -> String {
    match rule {
        // (a fair lock's holds are the lock's: a section of one re-enters
        // a hold of the other on the same name)
        Rule::Exclusive | Rule::Fair => lock.to_string(),
        Rule::Permits => format!("{lock}\0permits"),
        Rule::Read => format!("{lock}\0read"),
        Rule::Write => format!("{lock}\0write"),
    }
}

/// The local queue key of a read acquisition in `scope`, for the read
/// side called `ident`.
pub(crate) fn reader_local_of(ident: &str, scope: ReaderScope) -> String {
    match scope {
        ReaderScope::Context(id) => format!("{ident}\0c{id}"),
        ReaderScope::Alone(n) => format!("{ident}\0#{n}"),
    }
}

/// Where a read acquisition queues locally (see [`LockKeys::for_reader`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum ReaderScope {
    /// Manual acquisitions of one lock context (they re-enter each other).
    Context(u64),
    /// An acquisition on its own.
    Alone(u64),
}

pub(super) fn validate_name(prefix: &str, name: &str, max_len: usize) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidName {
            reason: "name is empty".into(),
        });
    }
    if name.trim().is_empty() {
        return Err(Error::InvalidName {
            reason: "name is only whitespace".into(),
        });
    }
    let len = prefix.len() + name.len();
    if len > max_len {
        return Err(Error::InvalidName {
            reason: format!("name is {len} bytes with its prefix, over the limit of {max_len}"),
        });
    }
    if name.chars().any(char::is_control) {
        return Err(Error::InvalidName {
            reason: "name contains a control character".into(),
        });
    }
    let key = format!("{prefix}{name}");
    if (key.contains('{') || key.contains('}')) && hash_tag(&key).is_none() {
        return Err(Error::InvalidName {
            reason: format!(
                "the key `{key}` has a brace but no hash tag (a non-empty `{{...}}` closed by the \
                 first `}}` after its first `{{`): its helper keys (redisson_lock__channel:..., \
                 redisson_lock_token:...) would hash to another Redis Cluster slot than the \
                 lock, so every acquire on a cluster would fail with CROSSSLOT; complete the \
                 tag (`order:{{7}}`) or leave braces out"
            ),
        });
    }
    if is_helper_name(&key) {
        return Err(Error::InvalidName {
            reason: "name is reserved: keys starting with redisson_lock__channel:, \
                     redisson_lock_token:, redisson_unlock_latch:, redisson_rwlock:, \
                     redisson_lock_queue:, redisson_lock_timeout:, lockcore_waiters:, \
                     lockcore_turn:, lockcore_writer: and the other helper kinds belong to \
                     other locks"
                .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_redisson_layout() -> Result<()> {
        let k = LockKeys::new("app:", "stock:42", 100)?;
        assert_eq!(k.lock, "app:stock:42");
        assert_eq!(k.channel, "redisson_lock__channel:{app:stock:42}");
        assert_eq!(k.token, "redisson_lock_token:{app:stock:42}");
        assert_eq!(k.latch("r1"), "redisson_unlock_latch:{app:stock:42}:r1");
        assert_eq!(k.queue, "lockcore_waiters:{app:stock:42}");
        assert_eq!(k.turn, "lockcore_turn:{app:stock:42}");
        Ok(())
    }

    #[test]
    fn names_with_a_brace_keep_their_own_hash_tag() -> Result<()> {
        let k = LockKeys::new("", "{tenant}:order", 100)?;
        assert_eq!(k.lock, "{tenant}:order");
        assert_eq!(k.channel, "redisson_lock__channel:{tenant}:order");
        assert_eq!(k.token, "redisson_lock_token:{tenant}:order");
        assert_eq!(k.latch("r1"), "redisson_unlock_latch:{tenant}:order:r1");
        // the prefix is part of the key Redisson sees
        let k = LockKeys::new("app{eu}:", "x", 100)?;
        assert_eq!(k.channel, "redisson_lock__channel:app{eu}:x");
        Ok(())
    }

    /// Every key of the lock `name`, as Redis sees them.
    fn all_keys(k: &LockKeys) -> [String; 6] {
        [
            k.lock.clone(),
            k.channel.clone(),
            k.token.clone(),
            k.latch("0f3a9c"),
            k.queue.clone(),
            k.turn.clone(),
        ]
    }

    #[test]
    fn every_key_of_a_lock_shares_its_cluster_slot() -> Result<()> {
        use redis::cluster_routing::Slot;
        for (prefix, name) in [
            ("", "stock:42"),
            ("", "{a}"),
            ("", "a{b}c"),
            ("", "x}{y}"),
            ("", "a{b}}c{"),
            ("", "{a{b}"),
            ("", "}{{a}"),
            ("app:", "order:{7}"),
            ("app{eu}:", "x"),
            ("app{eu}:", "x}y"),
            ("app{eu}:", "{}x"),
        ] {
            let k = LockKeys::new(prefix, name, 100)?;
            let slot = Slot::for_key(&k.lock);
            for key in all_keys(&k) {
                assert_eq!(Slot::for_key(&key), slot, "{key} of {prefix}{name}");
            }
        }
        Ok(())
    }

    #[test]
    fn a_brace_without_a_hash_tag_is_refused() {
        use redis::cluster_routing::Slot;
        for (prefix, name) in [
            ("", "a{b"),
            ("", "order:{7"),
            ("", "{}x"),
            ("", "order:{}x"),
            ("", "a{}b{c}"),
            ("", "x}{y"),
            ("", "x}y"),
            ("", "}"),
            ("app}:", "x"),
            ("app:{", "}x"),
        ] {
            // Redisson's names for it would leave the lock's slot
            let key = format!("{prefix}{name}");
            let helper = if key.contains('{') {
                format!("{TOKEN_KIND}:{key}")
            } else {
                format!("{TOKEN_KIND}:{{{key}}}")
            };
            assert_ne!(Slot::for_key(&helper), Slot::for_key(&key), "{key}");
            let err = LockKeys::new(prefix, name, 100).expect_err(&key);
            assert_eq!(
                err.to_string(),
                format!(
                    "invalid lock name: the key `{key}` has a brace but no hash tag (a non-empty \
                     `{{...}}` closed by the first `}}` after its first `{{`): its helper keys \
                     (redisson_lock__channel:..., redisson_lock_token:...) would hash to another \
                     Redis Cluster slot than the lock, so every acquire on a cluster would fail \
                     with CROSSSLOT; complete the tag (`order:{{7}}`) or leave braces out"
                )
            );
        }
    }

    #[test]
    fn hash_tags_follow_redis_cluster() {
        assert_eq!(hash_tag("a{b}c"), Some("b"));
        assert_eq!(hash_tag("{a{b}"), Some("a{b"));
        assert_eq!(hash_tag("x}{y}"), Some("y"));
        assert_eq!(hash_tag("a{}b{c}"), None);
        assert_eq!(hash_tag("a{b"), None);
        assert_eq!(hash_tag("ab"), None);
    }

    #[test]
    fn helper_names_cannot_be_lock_names() {
        for name in [
            "redisson_lock_token:{orders}",
            "redisson_lock__channel:{orders}",
            "redisson_unlock_latch:{orders}:r1",
            "redisson_lock_token:x",
            "lockcore_waiters:{orders}",
            "lockcore_turn:{orders}",
        ] {
            let err = LockKeys::new("", name, 100).expect_err(name);
            assert!(err.to_string().contains("reserved"), "{err}");
        }
        // with a prefix, the full key decides
        assert!(LockKeys::new("redisson_lock_token:", "{orders}", 100).is_err());
        // look-alikes that are not helper names are fine
        assert!(LockKeys::new("", "redisson_lock_tokens", 100).is_ok());
        assert!(LockKeys::new("app:", "redisson_lock_token:{orders}", 100).is_ok());
    }

    #[test]
    fn bad_names_are_rejected() {
        for (name, needle) in [
            ("", "empty"),
            ("   ", "whitespace"),
            ("a\nb", "control"),
            ("0123456789x", "over the limit of 10"),
        ] {
            let err = LockKeys::new("", name, 10).expect_err(name);
            assert!(matches!(err, Error::InvalidName { .. }));
            assert!(err.to_string().contains(needle), "{err}");
        }
        // the prefix counts toward the limit
        assert!(LockKeys::new("pre:", "1234567", 10).is_err());
        assert!(LockKeys::new("pre:", "123456", 10).is_ok());
    }
}
