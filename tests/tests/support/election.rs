//! The election suites' independent observer: a log list in Redis that
//! leaders append to (through fenced writes, or, for the planted check,
//! without), read back with the test's own connection and judged here.
//!
//! Each entry is `term,server-time-µs`, the time taken by the script from
//! Redis's own clock (`TIME`) when the write was applied. Per term the
//! observer keeps the first and last write; two terms whose spans overlap,
//! or a later span with a term not above the earlier one, are violations.

use std::collections::BTreeMap;

/// The body of the leaders' log write (also run unfenced by the planted
/// check): appends `ARGV[1],<server time in µs>` to the list `KEYS[1]`
/// and returns the time.
pub const LOG_BODY: &str = "\
local t = redis.call('TIME') \
local us = t[1] .. string.format('%06d', tonumber(t[2])) \
redis.call('RPUSH', KEYS[1], ARGV[1] .. ',' .. us) \
return us";

/// Takes the whole list `KEYS[1]` and deletes it, atomically (the observer
/// drains the log while leaders write to it).
pub const DRAIN: &str = "\
local v = redis.call('LRANGE', KEYS[1], 0, -1) \
redis.call('DEL', KEYS[1]) \
return v";

/// One applied write: its term and the server time it was applied at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub term: u64,
    pub us: u64,
}

/// The entries of `lines` (`term,us`); other lines are skipped.
pub fn parse(lines: &[String]) -> Vec<Entry> {
    lines
        .iter()
        .filter_map(|l| {
            let (term, us) = l.split_once(',')?;
            Some(Entry {
                term: term.parse().ok()?,
                us: us.parse().ok()?,
            })
        })
        .collect()
}

/// The writes of one term: the first and last server time, and how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub term: u64,
    pub first: u64,
    pub last: u64,
    pub writes: usize,
}

/// Every term's span, in the order of their first writes.
pub fn spans(entries: &[Entry]) -> Vec<Span> {
    let mut by_term: BTreeMap<u64, Span> = BTreeMap::new();
    for e in entries {
        let s = by_term.entry(e.term).or_insert(Span {
            term: e.term,
            first: e.us,
            last: e.us,
            writes: 0,
        });
        s.first = s.first.min(e.us);
        s.last = s.last.max(e.us);
        s.writes += 1;
    }
    let mut out: Vec<Span> = by_term.into_values().collect();
    out.sort_by_key(|s| (s.first, s.term));
    out
}

/// What the observer finds wrong with `entries`: spans of two terms that
/// overlap (a write of one term between the first and last write of
/// another), and terms that do not increase in time order. Empty when the
/// log is consistent with "one leader at a time, terms increasing".
pub fn violations(entries: &[Entry]) -> Vec<String> {
    let spans = spans(entries);
    let mut found = Vec::new();
    // the span that reaches furthest so far, and the highest term so far
    let mut reach: Option<Span> = None;
    let mut top: Option<u64> = None;
    for s in &spans {
        if let Some(r) = reach {
            if s.first <= r.last {
                found.push(format!(
                    "term {} (writes {}..={} µs) overlaps term {} (writes {}..={} µs)",
                    s.term, s.first, s.last, r.term, r.first, r.last
                ));
            }
        }
        if let Some(t) = top {
            if s.term <= t {
                found.push(format!(
                    "term {} first wrote at {} µs, after term {t} (terms must increase)",
                    s.term, s.first
                ));
            }
        }
        top = Some(top.map_or(s.term, |t| t.max(s.term)));
        if reach.is_none_or(|r| s.last > r.last) {
            reach = Some(*s);
        }
    }
    found
}

/// The server's clock (`TIME`) in µs, read with `conn`.
pub async fn server_us<C: redis::aio::ConnectionLike>(conn: &mut C) -> u64 {
    let t: Vec<String> = super::cmd(conn, &["TIME"]).await;
    let secs: u64 = t.first().and_then(|s| s.parse().ok()).unwrap_or(0);
    let micros: u64 = t.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    secs * 1_000_000 + micros
}

/// The log `key` as `conn` reads it (without draining it).
pub async fn read_log<C: redis::aio::ConnectionLike>(conn: &mut C, key: &str) -> Vec<String> {
    super::cmd(conn, &["LRANGE", key, "0", "-1"]).await
}

/// min / median / max of `values` (ms), for the printed figures.
pub fn summary(values: &[f64]) -> String {
    if values.is_empty() {
        return "none".to_string();
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    format!(
        "min {:.1} ms / median {:.1} ms / max {:.1} ms (n = {})",
        v[0],
        v[v.len() / 2],
        v[v.len() - 1],
        v.len()
    )
}
