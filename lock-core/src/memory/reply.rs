//! A reply as Redis writes it in RESP2, before redis-rs reads it, and the
//! number rules Redis applies to arguments and replies.

use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

/// One reply (or one element of an array reply).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Reply {
    /// `+text`: `OK`, `PONG`, a type name.
    Status(String),
    /// `-CODE detail`: the text after the `-`, code first.
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$n` bulk string.
    Bulk(Vec<u8>),
    /// `$-1`, the nil bulk string.
    Nil,
    /// `*n` array.
    Array(Vec<Reply>),
}

impl Reply {
    /// `+OK`.
    pub(crate) fn ok() -> Reply {
        Reply::Status("OK".into())
    }

    /// An error reply; `text` starts with its code (`ERR`, `WRONGTYPE`, ...).
    pub(crate) fn err(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    /// A bulk string of text.
    pub(crate) fn bulk(text: impl Into<Vec<u8>>) -> Reply {
        Reply::Bulk(text.into())
    }

    /// The reply as redis-rs returns it from `query_async::<Value>` on a
    /// RESP2 connection: `+OK` is `Value::Okay`, other statuses are
    /// `Value::SimpleString`, and an error reply (also one inside an array,
    /// which redis-rs' `extract_error` lifts) is `Err` with the kind
    /// redis-rs gives that error text (it is read by redis-rs' own parser).
    pub(crate) fn into_result(self) -> RedisResult<Value> {
        self.into_value()?.extract_error()
    }

    fn into_value(self) -> RedisResult<Value> {
        Ok(match self {
            Reply::Status(s) if s == "OK" => Value::Okay,
            Reply::Status(s) => Value::SimpleString(s),
            Reply::Error(text) => server_error(&text)?,
            Reply::Int(n) => Value::Int(n),
            Reply::Bulk(b) => Value::BulkString(b),
            Reply::Nil => Value::Nil,
            Reply::Array(items) => Value::Array(
                items
                    .into_iter()
                    .map(Reply::into_value)
                    .collect::<RedisResult<_>>()?,
            ),
        })
    }
}

/// An error reply with `text` as redis-rs reads it off the wire.
fn server_error(text: &str) -> RedisResult<Value> {
    // Redis writes no line break inside an error (it turns them into spaces).
    let line: String = text
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect();
    match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
        Ok(value @ Value::ServerError(_)) => Ok(value),
        // Not an error line redis-rs reads (an empty one): an error all the same.
        _ => Err(RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "error reply",
            line,
        ))),
    }
}

/// The standard error replies, worded as Redis 7 words them.
pub(crate) mod errors {
    use super::Reply;

    pub(crate) fn wrong_type() -> Reply {
        Reply::err("WRONGTYPE Operation against a key holding the wrong kind of value")
    }

    pub(crate) fn not_integer() -> Reply {
        Reply::err("ERR value is not an integer or out of range")
    }

    pub(crate) fn not_float() -> Reply {
        Reply::err("ERR value is not a valid float")
    }

    pub(crate) fn syntax() -> Reply {
        Reply::err("ERR syntax error")
    }

    pub(crate) fn overflow() -> Reply {
        Reply::err("ERR increment or decrement would overflow")
    }

    pub(crate) fn arity(command: &str) -> Reply {
        Reply::err(format!(
            "ERR wrong number of arguments for '{command}' command"
        ))
    }

    pub(crate) fn invalid_expire(command: &str) -> Reply {
        Reply::err(format!("ERR invalid expire time in '{command}' command"))
    }

    /// A command Redis has but the in-memory server does not run: a clear
    /// refusal instead of a silent divergence.
    pub(crate) fn unsupported(what: &str) -> Reply {
        Reply::err(format!(
            "ERR unsupported by the in-memory Redis: {what} (it runs only what lock-core sends)"
        ))
    }
}

/// Redis' `string2ll`: a decimal integer with no sign but `-`, no leading
/// zero, no space, within `i64`.
pub(crate) fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'0'] => return Some(0),
        [b'-', rest @ ..] => (true, rest),
        rest => (false, rest),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut value: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    if negative {
        if value > i64::MAX as u64 + 1 {
            None
        } else {
            Some((value as i128).wrapping_neg() as i64)
        }
    } else {
        i64::try_from(value).ok()
    }
}

/// Redis' score parsing (`getDoubleFromObject`: `strtod` on the whole
/// argument, NaN refused, and a number out of a double's range refused as
/// `strtod`'s `ERANGE` makes Redis refuse it: `1e400`, which would be
/// infinite, and `1e-400`, which would be 0; `inf` itself is a score).
pub(crate) fn parse_f64(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?;
    if text.is_empty() || text.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    let mantissa = text.split(['e', 'E']).next().unwrap_or(text);
    let overflow = value.is_infinite() && mantissa.bytes().any(|b| b.is_ascii_digit());
    let underflow = value == 0.0 && mantissa.bytes().any(|b| matches!(b, b'1'..=b'9'));
    (!value.is_nan() && !overflow && !underflow).then_some(value)
}

/// A number as C's `strtod` reads a whole argument, the way Redis reads the
/// bounds of a score range (`zslParseRange`): leading white space is
/// skipped, an empty argument is 0, trailing text or NaN is refused
/// (`None`). Hexadecimal numbers, which `strtod` reads too, are not read
/// here: callers refuse them first ([`is_hex_number`]).
pub(crate) fn parse_strtod(bytes: &[u8]) -> Option<f64> {
    if bytes.is_empty() {
        return Some(0.0);
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let value: f64 = text.trim_start_matches(is_c_space).parse().ok()?;
    (!value.is_nan()).then_some(value)
}

/// Whether `strtod` would read `bytes` as a hexadecimal number (`0x10`,
/// ` -0X1p3`): white space, a sign, then `0x`.
pub(crate) fn is_hex_number(bytes: &[u8]) -> bool {
    let start = bytes
        .iter()
        .position(|&b| !is_c_space(char::from(b)))
        .unwrap_or(bytes.len());
    let unsigned = match &bytes[start..] {
        [b'+' | b'-', rest @ ..] => rest,
        rest => rest,
    };
    matches!(unsigned, [b'0', b'x' | b'X', ..])
}

/// C's `isspace` in the C locale.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// C's `printf("%.17g", x)`: how Redis 7.0 writes a Lua number passed as a
/// command argument, and a score in a reply.
pub(crate) fn format_g17(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // 17 significant digits in scientific form: d.dddddddddddddddde±x
    let sci = format!("{x:.16e}");
    let (mantissa, exponent) = match sci.split_once('e') {
        Some(parts) => parts,
        None => return sci,
    };
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..17).contains(&exponent) {
        let mantissa = strip_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
    } else {
        let decimals = usize::try_from(16 - exponent).unwrap_or(0);
        strip_zeros(&format!("{x:.decimals$}")).to_string()
    }
}

/// `%g` drops trailing zeros of the fraction, and the point with them.
fn strip_zeros(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_as_string2ll_does() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"+1",
            b"01",
            b" 1",
            b"1 ",
            b"1.0",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"abc",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn scores_parse_and_nan_is_refused() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"1e3"), Some(1000.0));
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b" 1"), None);
        assert_eq!(parse_f64(b"x"), None);
        assert_eq!(parse_f64(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_f64(b"Infinity"), Some(f64::INFINITY));
        assert_eq!(parse_f64(b"0e500"), Some(0.0));
        assert_eq!(parse_f64(b"-0.0e-400"), Some(-0.0));
        assert_eq!(parse_f64(b"4e-320"), Some(4e-320), "a subnormal");
        assert_eq!(parse_f64(b"1.7976931348623157e308"), Some(f64::MAX));
        for out_of_range in ["1e400", "-1e400", "1e-400", "-0.5e-400", "1.8e308"] {
            assert_eq!(parse_f64(out_of_range.as_bytes()), None, "{out_of_range}");
        }
    }

    #[test]
    fn range_bounds_parse_as_strtod_reads_them() {
        for (text, value) in [
            ("1.5", 1.5),
            ("", 0.0),
            (" 1", 1.0),
            ("\t-2", -2.0),
            ("+3", 3.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("1e3", 1000.0),
            ("1e400", f64::INFINITY),
            ("1e-400", 0.0),
            ("-inf", f64::NEG_INFINITY),
            ("+inf", f64::INFINITY),
            ("Infinity", f64::INFINITY),
            ("-INF", f64::NEG_INFINITY),
            ("922337203685477", 922_337_203_685_477.0),
        ] {
            assert_eq!(parse_strtod(text.as_bytes()), Some(value), "{text:?}");
        }
        for bad in [
            " ", "1 ", "x", "nan", "-nan", "1e", "-", ".", "in", "infin", "1,5",
        ] {
            assert_eq!(parse_strtod(bad.as_bytes()), None, "{bad:?}");
        }
        for hex in ["0x10", "0X1p3", " -0x1", "+0x"] {
            assert!(is_hex_number(hex.as_bytes()), "{hex:?}");
        }
        for not_hex in ["0", "10", "x0", "- 0x1", "(0x1"] {
            assert!(!is_hex_number(not_hex.as_bytes()), "{not_hex:?}");
        }
    }

    #[test]
    fn numbers_print_as_percent_17g() {
        for (x, text) in [
            (0.0, "0"),
            (1.0, "1"),
            (-30000.0, "-30000"),
            (1_764_134_000_123_456.0, "1764134000123456"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (0.1, "0.10000000000000001"),
            (1.5, "1.5"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(format_g17(x), text, "{x}");
        }
    }

    #[test]
    fn replies_read_as_redis_rs_reads_them() {
        assert_eq!(Reply::ok().into_result().ok(), Some(Value::Okay));
        assert_eq!(
            Reply::Status("PONG".into()).into_result().ok(),
            Some(Value::SimpleString("PONG".into()))
        );
        let e = Reply::err("NOSCRIPT No matching script. Please use EVAL.")
            .into_result()
            .expect_err("an error reply");
        assert_eq!(e.kind(), ErrorKind::Server(ServerErrorKind::NoScript));
        let e = errors::wrong_type()
            .into_result()
            .expect_err("an error reply");
        assert_eq!(e.code(), Some("WRONGTYPE"));
        let e = Reply::Array(vec![Reply::Int(1), Reply::err("ERR inner")])
            .into_result()
            .expect_err("an error inside an array");
        assert_eq!(e.code(), Some("ERR"));
        // an empty error line: redis-rs reads it as an error without a known code
        assert!(Reply::err("").into_result().is_err());
        let e = Reply::err("ERR two\r\nlines")
            .into_result()
            .expect_err("an error");
        assert!(e.to_string().contains("two  lines"), "{e}");
    }
}
