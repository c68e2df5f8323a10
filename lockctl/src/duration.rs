//! Human durations on the command line: `250ms`, `5s`, `1.5s`, `2m`, `1h`.

use std::time::Duration;

/// The longest duration accepted (365 days, lock-core's lease cap).
const MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses a number (integer or decimal) followed by a unit: `ms`, `s`, `m`
/// or `h`. A bare number is rejected, since `5` could mean any unit.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err(format!(
            "`{text}` is not a duration: use a number and a unit, like 250ms, 5s, 2m, 1h"
        ));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{number}` is not a number"))?;
    let unit_secs = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "" => {
            return Err(format!(
                "`{text}` has no unit: write {text}ms, {text}s, {text}m or {text}h"
            ))
        }
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`: use ms, s, m or h"
            ))
        }
    };
    let secs = value * unit_secs;
    if !secs.is_finite() || secs > MAX.as_secs_f64() {
        return Err(format!("`{text}` is longer than 365 days"));
    }
    let d = Duration::from_secs_f64(secs);
    // Whole milliseconds: what Redis (PEXPIRE) works with.
    Ok(Duration::from_millis(d.as_millis() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_decimals() {
        for (text, ms) in [
            ("250ms", 250),
            ("5s", 5_000),
            ("1.5s", 1_500),
            ("2m", 120_000),
            ("1h", 3_600_000),
            ("0s", 0),
            (" 7s ", 7_000),
            ("0.5ms", 0),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_durations_say_why() {
        for (text, needle) in [
            ("", "not a duration"),
            ("s", "not a duration"),
            ("5", "no unit"),
            ("5x", "unknown unit"),
            ("5 s", "unknown unit"),
            ("1.2.3s", "not a number"),
            ("-1s", "not a duration"),
            ("9999999h", "365 days"),
        ] {
            let err = parse_duration(text).expect_err(text);
            assert!(err.contains(needle), "{text}: {err}");
            assert!(!err.contains('\n'));
        }
    }
}
