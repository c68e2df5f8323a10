//! A minimal, blocking RESP2 client: just enough to send one command and read
//! one reply over a `TcpStream`.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::HarnessError;

/// Largest bulk string the parser accepts (Redis's own limit, 512 MiB).
const MAX_BULK_LEN: i64 = 512 * 1024 * 1024;
/// Largest array length the parser accepts.
const MAX_ARRAY_LEN: i64 = 16 * 1024 * 1024;
/// Deepest nesting of arrays the parser accepts.
const MAX_DEPTH: usize = 32;
/// Longest header line (`+...`, `-...`, `:...`, `$n`, `*n`) the parser accepts.
const MAX_LINE_LEN: u64 = 64 * 1024;

/// One RESP2 reply.
///
/// ```
/// use lock_tests::{RedisServer, RespValue};
///
/// let server = RedisServer::start()?;
/// assert_eq!(server.command(&["PING"])?, RespValue::Simple("PONG".into()));
/// assert_eq!(server.command(&["GET", "missing"])?, RespValue::Bulk(None));
/// # Ok::<(), lock_tests::HarnessError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespValue {
    /// A simple string (`+OK`).
    Simple(String),
    /// An error reply (`-ERR ...`), without the leading `-`.
    Error(String),
    /// An integer (`:42`).
    Integer(i64),
    /// A bulk string (`$3\r\nfoo`), `None` for the nil bulk string (`$-1`).
    Bulk(Option<Vec<u8>>),
    /// An array (`*2 ...`), `None` for the nil array (`*-1`).
    Array(Option<Vec<RespValue>>),
}

impl RespValue {
    /// The value as an integer: an [`Integer`](RespValue::Integer), or a
    /// simple/bulk string holding a decimal integer.
    ///
    /// ```
    /// use lock_tests::RespValue;
    ///
    /// assert_eq!(RespValue::Integer(7).as_i64(), Some(7));
    /// assert_eq!(RespValue::Bulk(Some(b"12".to_vec())).as_i64(), Some(12));
    /// assert_eq!(RespValue::Bulk(None).as_i64(), None);
    /// ```
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            RespValue::Integer(n) => Some(*n),
            RespValue::Simple(_) | RespValue::Bulk(Some(_)) => self.as_string()?.parse().ok(),
            _ => None,
        }
    }

    /// The value as UTF-8 text: a [`Simple`](RespValue::Simple) string or a
    /// non-nil [`Bulk`](RespValue::Bulk) string that is valid UTF-8.
    ///
    /// ```
    /// use lock_tests::RespValue;
    ///
    /// assert_eq!(RespValue::Simple("OK".into()).as_string().as_deref(), Some("OK"));
    /// assert_eq!(RespValue::Bulk(Some(b"v".to_vec())).as_string().as_deref(), Some("v"));
    /// assert_eq!(RespValue::Integer(1).as_string(), None);
    /// ```
    pub fn as_string(&self) -> Option<String> {
        match self {
            RespValue::Simple(s) => Some(s.clone()),
            RespValue::Bulk(Some(b)) => String::from_utf8(b.clone()).ok(),
            _ => None,
        }
    }

    /// The raw bytes of a non-nil [`Bulk`](RespValue::Bulk) string.
    ///
    /// ```
    /// use lock_tests::RespValue;
    ///
    /// assert_eq!(RespValue::Bulk(Some(vec![0, 1])).as_bytes(), Some(&[0u8, 1][..]));
    /// assert_eq!(RespValue::Bulk(None).as_bytes(), None);
    /// ```
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            RespValue::Bulk(Some(b)) => Some(b),
            _ => None,
        }
    }

    /// The elements of a non-nil [`Array`](RespValue::Array).
    ///
    /// ```
    /// use lock_tests::RespValue;
    ///
    /// let v = RespValue::Array(Some(vec![RespValue::Integer(1)]));
    /// assert_eq!(v.as_array().map(|a| a.len()), Some(1));
    /// ```
    pub fn as_array(&self) -> Option<&[RespValue]> {
        match self {
            RespValue::Array(Some(items)) => Some(items),
            _ => None,
        }
    }

    /// True for the nil bulk string and the nil array.
    ///
    /// ```
    /// use lock_tests::RespValue;
    ///
    /// assert!(RespValue::Bulk(None).is_nil());
    /// assert!(!RespValue::Integer(0).is_nil());
    /// ```
    pub fn is_nil(&self) -> bool {
        matches!(self, RespValue::Bulk(None) | RespValue::Array(None))
    }

    /// The message of an [`Error`](RespValue::Error) reply.
    ///
    /// ```
    /// use lock_tests::RespValue;
    ///
    /// assert_eq!(RespValue::Error("ERR nope".into()).as_error(), Some("ERR nope"));
    /// assert_eq!(RespValue::Integer(0).as_error(), None);
    /// ```
    pub fn as_error(&self) -> Option<&str> {
        match self {
            RespValue::Error(e) => Some(e),
            _ => None,
        }
    }
}

/// Encodes one command as a RESP2 array of bulk strings.
pub(crate) fn encode_command(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one RESP2 value from `reader`.
pub(crate) fn read_value<R: BufRead>(reader: &mut R) -> Result<RespValue, ReadError> {
    read_value_at(reader, 0)
}

/// What can go wrong while reading a reply; mapped to [`HarnessError`] by the caller.
#[derive(Debug)]
pub(crate) enum ReadError {
    Io(io::Error),
    Protocol(String),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

fn read_value_at<R: BufRead>(reader: &mut R, depth: usize) -> Result<RespValue, ReadError> {
    if depth > MAX_DEPTH {
        return Err(ReadError::Protocol(format!(
            "arrays nested deeper than {MAX_DEPTH}"
        )));
    }
    let line = read_line(reader)?;
    let (&kind, rest) = line
        .split_first()
        .ok_or_else(|| ReadError::Protocol("empty reply line".into()))?;
    let text = || {
        String::from_utf8(rest.to_vec())
            .map_err(|_| ReadError::Protocol("reply line is not UTF-8".into()))
    };
    match kind {
        b'+' => Ok(RespValue::Simple(text()?)),
        b'-' => Ok(RespValue::Error(text()?)),
        b':' => Ok(RespValue::Integer(parse_int(rest)?)),
        b'$' => {
            let len = parse_int(rest)?;
            if len == -1 {
                return Ok(RespValue::Bulk(None));
            }
            if !(0..=MAX_BULK_LEN).contains(&len) {
                return Err(ReadError::Protocol(format!("bad bulk length {len}")));
            }
            let len = usize::try_from(len)
                .map_err(|_| ReadError::Protocol(format!("bad bulk length {len}")))?;
            let mut buf = vec![0u8; len + 2];
            reader.read_exact(&mut buf)?;
            if !buf.ends_with(b"\r\n") {
                return Err(ReadError::Protocol(
                    "bulk string not terminated by CRLF".into(),
                ));
            }
            buf.truncate(len);
            Ok(RespValue::Bulk(Some(buf)))
        }
        b'*' => {
            let len = parse_int(rest)?;
            if len == -1 {
                return Ok(RespValue::Array(None));
            }
            if !(0..=MAX_ARRAY_LEN).contains(&len) {
                return Err(ReadError::Protocol(format!("bad array length {len}")));
            }
            let mut items = Vec::new();
            for _ in 0..len {
                items.push(read_value_at(reader, depth + 1)?);
            }
            Ok(RespValue::Array(Some(items)))
        }
        other => Err(ReadError::Protocol(format!(
            "unexpected reply type byte {:?}",
            char::from(other)
        ))),
    }
}

/// Reads one CRLF-terminated line and returns it without the CRLF.
fn read_line<R: BufRead>(reader: &mut R) -> Result<Vec<u8>, ReadError> {
    let mut line = Vec::new();
    let n = Read::take(&mut *reader, MAX_LINE_LEN).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(ReadError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before a full reply was read",
        )));
    }
    if !line.ends_with(b"\r\n") {
        if line.ends_with(b"\n") || n as u64 >= MAX_LINE_LEN {
            return Err(ReadError::Protocol("malformed reply line".into()));
        }
        return Err(ReadError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed in the middle of a reply line",
        )));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(bytes: &[u8]) -> Result<i64, ReadError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            ReadError::Protocol(format!(
                "not an integer: {:?}",
                String::from_utf8_lossy(bytes)
            ))
        })
}

/// One blocking connection to a server on loopback.
#[derive(Debug)]
pub(crate) struct Connection {
    reader: BufReader<TcpStream>,
    timeout: Duration,
}

impl Connection {
    /// Connects with `connect_timeout`, and sets `io_timeout` for every read and write.
    pub(crate) fn open(
        addr: SocketAddr,
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> Result<Connection, HarnessError> {
        let connect_timeout = connect_timeout.max(Duration::from_millis(1));
        let io_timeout = io_timeout.max(Duration::from_millis(1));
        let stream = TcpStream::connect_timeout(&addr, connect_timeout)
            .map_err(|e| map_io(e, connect_timeout))?;
        stream.set_read_timeout(Some(io_timeout))?;
        stream.set_write_timeout(Some(io_timeout))?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            reader: BufReader::new(stream),
            timeout: io_timeout,
        })
    }

    /// Sends one command and reads one reply.
    pub(crate) fn call(&mut self, args: &[&str]) -> Result<RespValue, HarnessError> {
        let timeout = self.timeout;
        self.reader
            .get_mut()
            .write_all(&encode_command(args))
            .map_err(|e| map_io(e, timeout))?;
        match read_value(&mut self.reader) {
            Ok(v) => Ok(v),
            Err(ReadError::Io(e)) => Err(map_io(e, timeout)),
            Err(ReadError::Protocol(msg)) => Err(HarnessError::Protocol(msg)),
        }
    }

    /// Sends `AUTH [user] password` and fails unless the reply is `+OK`.
    pub(crate) fn auth(&mut self, user: Option<&str>, password: &str) -> Result<(), HarnessError> {
        let reply = match user {
            Some(user) => self.call(&["AUTH", user, password])?,
            None => self.call(&["AUTH", password])?,
        };
        match reply {
            RespValue::Simple(ref s) if s == "OK" => Ok(()),
            RespValue::Error(e) => Err(HarnessError::ServerError(e)),
            other => Err(HarnessError::Protocol(format!(
                "unexpected reply to AUTH: {other:?}"
            ))),
        }
    }
}

/// Turns socket timeouts into [`HarnessError::Timeout`], everything else into `Io`.
fn map_io(e: io::Error, after: Duration) -> HarnessError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => HarnessError::Timeout { after },
        _ => HarnessError::Io(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<RespValue, ReadError> {
        read_value(&mut BufReader::new(bytes))
    }

    #[test]
    fn encodes_commands_as_arrays_of_bulk_strings() {
        assert_eq!(
            encode_command(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn parses_every_reply_type() {
        assert_eq!(parse(b"+OK\r\n").ok(), Some(RespValue::Simple("OK".into())));
        assert_eq!(
            parse(b"-ERR bad\r\n").ok(),
            Some(RespValue::Error("ERR bad".into()))
        );
        assert_eq!(parse(b":-42\r\n").ok(), Some(RespValue::Integer(-42)));
        assert_eq!(
            parse(b"$5\r\na\r\nbc\r\n").ok(),
            Some(RespValue::Bulk(Some(b"a\r\nbc".to_vec())))
        );
        assert_eq!(
            parse(b"$0\r\n\r\n").ok(),
            Some(RespValue::Bulk(Some(Vec::new())))
        );
        assert_eq!(parse(b"$-1\r\n").ok(), Some(RespValue::Bulk(None)));
        assert_eq!(parse(b"*-1\r\n").ok(), Some(RespValue::Array(None)));
        assert_eq!(
            parse(b"*2\r\n:1\r\n*1\r\n$1\r\nx\r\n").ok(),
            Some(RespValue::Array(Some(vec![
                RespValue::Integer(1),
                RespValue::Array(Some(vec![RespValue::Bulk(Some(b"x".to_vec()))])),
            ])))
        );
    }

    #[test]
    fn reads_a_reply_split_across_many_small_reads() {
        // A reader that hands out one byte per read() call.
        struct OneByte<'a>(&'a [u8]);
        impl Read for OneByte<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                match (self.0.split_first(), buf.first_mut()) {
                    (Some((b, rest)), Some(slot)) => {
                        *slot = *b;
                        self.0 = rest;
                        Ok(1)
                    }
                    _ => Ok(0),
                }
            }
        }
        let mut r = BufReader::with_capacity(1, OneByte(b"*2\r\n$3\r\nfoo\r\n:7\r\n"));
        let v = read_value(&mut r).ok();
        assert_eq!(
            v,
            Some(RespValue::Array(Some(vec![
                RespValue::Bulk(Some(b"foo".to_vec())),
                RespValue::Integer(7)
            ])))
        );
    }

    #[test]
    fn rejects_malformed_and_truncated_replies() {
        assert!(matches!(parse(b"?x\r\n"), Err(ReadError::Protocol(_))));
        assert!(matches!(parse(b":abc\r\n"), Err(ReadError::Protocol(_))));
        assert!(matches!(parse(b"$-2\r\n"), Err(ReadError::Protocol(_))));
        assert!(matches!(parse(b"$3\r\nfooXY"), Err(ReadError::Protocol(_))));
        assert!(matches!(parse(b"+OK\n"), Err(ReadError::Protocol(_))));
        assert!(matches!(parse(b""), Err(ReadError::Io(_))));
        assert!(matches!(parse(b"+OK"), Err(ReadError::Io(_))));
        assert!(matches!(parse(b"$5\r\nab"), Err(ReadError::Io(_))));
        assert!(matches!(parse(b"*2\r\n:1\r\n"), Err(ReadError::Io(_))));
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2);
        assert!(matches!(
            parse(deep.as_bytes()),
            Err(ReadError::Protocol(_))
        ));
    }

    #[test]
    fn helpers_convert_values() {
        assert_eq!(RespValue::Simple("5".into()).as_i64(), Some(5));
        assert_eq!(RespValue::Bulk(Some(b"x".to_vec())).as_i64(), None);
        assert_eq!(RespValue::Bulk(Some(vec![0xff])).as_string(), None);
        assert_eq!(RespValue::Error("E".into()).as_string(), None);
        assert!(RespValue::Array(None).is_nil());
        assert_eq!(RespValue::Array(None).as_array(), None);
    }
}
