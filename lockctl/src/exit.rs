//! Exit codes (the BSD `sysexits.h` values where one fits) and the error
//! type that carries one with its one-line message.

use std::fmt;

/// Bad usage: unknown flag, bad duration, bad URL, empty or invalid name.
pub(crate) const USAGE: u8 = 64;
/// A key that is not a lock (e.g. `status` of a string key).
pub(crate) const DATA: u8 = 65;
/// Redis unreachable, timed out, or answered with an error.
pub(crate) const UNAVAILABLE: u8 = 69;
/// An internal error (signal handlers could not be installed, …).
pub(crate) const SOFTWARE: u8 = 70;
/// Writing to stdout failed.
pub(crate) const IO: u8 = 74;
/// The wait bound passed before the lock was acquired.
pub(crate) const WAIT_TIMEOUT: u8 = 75;
/// The lock was lost while held.
pub(crate) const LOST: u8 = 76;
/// The command exists but could not be executed.
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The command was not found.
pub(crate) const NOT_FOUND: u8 = 127;
/// Killed by (or interrupted with) signal N: 128 + N.
pub(crate) const SIGNAL_BASE: u8 = 128;

/// Shown at the end of `--help`.
pub(crate) const EXIT_CODES_HELP: &str = "\
Exit codes:
  0        success (run, elect: the command's own exit code is passed through)
  64       usage: bad flag, duration, URL or lock name (semaphore add: below zero)
  65       the key exists but is not a lock (semaphore: not a semaphore)
  69       Redis unreachable or failing
  70       internal error
  74       cannot write to stdout
  75       --wait passed before the lock (or a permit, or the leadership) was acquired
  76       the lock (or permit, or leadership) was lost while held (run, elect: the command got SIGTERM)
  126/127  run, elect: the command cannot be executed / was not found
  128+N    killed by signal N (run, elect: the command was; run/hold/elect: interrupted while waiting)";

/// A failure: what to print (one line, after `lockctl: `) and the exit code.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl CliError {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        CliError {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&one_line(&self.message))
    }
}

/// `err` and its sources, `: `-separated, on one line.
pub(crate) fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    one_line(&text)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl From<lock_core::Error> for CliError {
    fn from(err: lock_core::Error) -> Self {
        use lock_core::Error as E;
        let code = match &err {
            e if e.is_wait_timeout() => WAIT_TIMEOUT,
            e if e.is_lost() => LOST,
            e if e.is_invalid_input() => USAGE,
            E::Protocol(_) => DATA,
            e if e.is_redis() => UNAVAILABLE,
            _ => SOFTWARE,
        };
        CliError::new(code, chain(&err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_errors_map_to_distinct_codes() {
        let cases = [
            (
                lock_core::Error::WaitTimeout {
                    name: "a".into(),
                    waited: std::time::Duration::from_secs(1),
                },
                WAIT_TIMEOUT,
            ),
            (lock_core::Error::Lost { name: "a".into() }, LOST),
            (lock_core::Error::InvalidName { reason: "x".into() }, USAGE),
            (lock_core::Error::Protocol("x".into()), DATA),
            (lock_core::Error::CommandTimeout, UNAVAILABLE),
            (lock_core::Error::Cancelled("x".into()), SOFTWARE),
        ];
        for (err, code) in cases {
            assert_eq!(CliError::from(err).code, code);
        }
    }

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("redis error")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn messages_are_one_line_with_their_sources() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused\nreally");
        let text = chain(&Outer(io));
        assert_eq!(text, "redis error: refused really");
        let err = CliError::new(USAGE, "a\n  b");
        assert_eq!(err.to_string(), "a b");
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        // redis-rs's error for a refused connection has the I/O error as
        // its source, with the same text: said once
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let redis = redis::RedisError::from(io);
        assert_eq!(
            chain(&Outer(std::io::Error::other(redis))),
            "redis error: refused"
        );
        // a server error (its source is the same server error) in a lock error
        let denied = redis::parse_redis_value(b"-NOPERM no permissions to access a key\r\n")
            .and_then(redis::Value::extract_error)
            .expect_err("an error reply");
        let err = CliError::from(lock_core::Error::from(denied));
        assert_eq!(err.code, UNAVAILABLE);
        assert_eq!(
            err.message,
            "redis error: NoPerm: no permissions to access a key"
        );
    }
}
