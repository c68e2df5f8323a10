//! Redis key and channel names of one lock (Redisson's layout) and name checks.

use crate::error::{Error, Result};

/// Payload published on a lock's channel when a mutex is released: wake one
/// waiter per client (Redisson's `UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// The Redis names that belong to one lock.
#[derive(Debug)]
pub(crate) struct LockKeys {
    /// The user's name, without prefix.
    pub(crate) name: String,
    /// The lock hash: prefix + name.
    pub(crate) lock: String,
    /// `redisson_lock__channel:{<lock>}`.
    pub(crate) channel: String,
    /// `redisson_lock_token:{<lock>}`: the fencing counter.
    pub(crate) token: String,
    /// `redisson_unlock_latch:{<lock>}:`: prefix of per-release latch keys.
    latch_prefix: String,
}

impl LockKeys {
    /// Checks `name` and derives every key from `prefix + name`.
    pub(crate) fn new(prefix: &str, name: &str, max_len: usize) -> Result<Self> {
        validate_name(prefix, name, max_len)?;
        let lock = format!("{prefix}{name}");
        Ok(LockKeys {
            name: name.to_string(),
            channel: format!("redisson_lock__channel:{{{lock}}}"),
            token: format!("redisson_lock_token:{{{lock}}}"),
            latch_prefix: format!("redisson_unlock_latch:{{{lock}}}:"),
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
        Ok(())
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
