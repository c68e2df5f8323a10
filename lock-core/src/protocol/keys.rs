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

/// Redisson's naming rule for the helper names of an object called `key`
/// (`RedissonObject.prefixName`): `<kind>:{<key>}`, or `<kind>:<key>` when
/// the key already holds a `{` (the user's own hash tag then decides the
/// Cluster slot, and no second pair of braces is added).
///
/// Both forms share the key's Cluster slot only for the keys that
/// [`validate_name`] lets through: a key with a hash tag (`<kind>:` adds
/// no brace, so the tag stays the first one), or a key without braces.
fn prefixed(kind: &str, key: &str) -> String {
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
    [CHANNEL_KIND, TOKEN_KIND, LATCH_KIND, QUEUE_KIND, TURN_KIND]
        .iter()
        .any(|kind| {
            key.strip_prefix(kind)
                .is_some_and(|rest| rest.starts_with(':'))
        })
}

/// The Redis names that belong to one lock.
#[derive(Debug)]
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
}

impl LockKeys {
    /// Checks `name` and derives every key from `prefix + name`.
    pub(crate) fn new(prefix: &str, name: &str, max_len: usize) -> Result<Self> {
        validate_name(prefix, name, max_len)?;
        let lock = format!("{prefix}{name}");
        Ok(LockKeys {
            name: name.to_string(),
            channel: prefixed(CHANNEL_KIND, &lock),
            token: prefixed(TOKEN_KIND, &lock),
            latch_prefix: format!("{}:", prefixed(LATCH_KIND, &lock)),
            queue: prefixed(QUEUE_KIND, &lock),
            turn: prefixed(TURN_KIND, &lock),
            lock,
        })
    }

    /// The latch key that remembers the result of one release request.
    pub(crate) fn latch(&self, request_id: &str) -> String {
        format!("{}{request_id}", self.latch_prefix)
    }
}

fn validate_name(prefix: &str, name: &str, max_len: usize) -> Result<()> {
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
                     redisson_lock_token:, redisson_unlock_latch:, lockcore_waiters: or \
                     lockcore_turn: belong to other locks"
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
