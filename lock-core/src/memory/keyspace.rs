//! The in-process keyspace: strings, hashes, lists and sorted sets with
//! per-key expiry on tokio's clock, the clock `TIME` reads, and Redis'
//! glob matching (`SCAN … MATCH`).
//!
//! Expiry follows Redis: deadlines and "now" are whole milliseconds (on
//! tokio's clock, counted from the server's start), and a key whose
//! deadline has passed (`now > deadline`) no longer exists for any
//! command.
//! Every command and every script first removes the keys whose deadline
//! has passed at the instant it starts (one instant per command or script:
//! Redis 7 also freezes the clock a script sees for expiry), through an
//! index of deadlines, so a key nobody reads again does not stay in memory
//! either — observably the same as Redis' lazy deletion on access plus its
//! active expiry cycle.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// The value of one key.
#[derive(Clone, Debug)]
pub(crate) enum Data {
    /// A string (also what INCR/DECR count in).
    Str(Vec<u8>),
    /// A hash.
    Hash(Hash),
    /// A list, head first.
    List(VecDeque<Vec<u8>>),
    /// A sorted set.
    ZSet(ZSet),
}

impl Data {
    /// The name `TYPE` answers (and `SCAN … TYPE` matches).
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Data::Str(_) => "string",
            Data::Hash(_) => "hash",
            Data::List(_) => "list",
            Data::ZSet(_) => "zset",
        }
    }

    /// A hash, list or sorted set without elements: Redis deletes such a
    /// key.
    fn is_empty_container(&self) -> bool {
        match self {
            Data::Str(_) => false,
            Data::Hash(h) => h.len() == 0,
            Data::List(l) => l.is_empty(),
            Data::ZSet(z) => z.len() == 0,
        }
    }
}

/// A hash: fields in the order they were added, as a small Redis hash
/// (listpack) keeps them. A large one in Redis (over 128 fields) answers
/// `HGETALL` in hash-table order instead: compare such replies as sets.
#[derive(Clone, Debug, Default)]
pub(crate) struct Hash {
    fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Hash {
    /// The value of `field`.
    pub(crate) fn get(&self, field: &[u8]) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, v)| v.as_slice())
    }

    /// Sets `field`; whether it is a new field.
    pub(crate) fn set(&mut self, field: &[u8], value: Vec<u8>) -> bool {
        match self.fields.iter_mut().find(|(f, _)| f == field) {
            Some((_, v)) => {
                *v = value;
                false
            }
            None => {
                self.fields.push((field.to_vec(), value));
                true
            }
        }
    }

    /// Removes `field`; whether it existed.
    pub(crate) fn remove(&mut self, field: &[u8]) -> bool {
        match self.fields.iter().position(|(f, _)| f == field) {
            Some(at) => {
                self.fields.remove(at);
                true
            }
            None => false,
        }
    }

    /// The number of fields.
    pub(crate) fn len(&self) -> usize {
        self.fields.len()
    }

    /// Fields and values, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields
            .iter()
            .map(|(f, v)| (f.as_slice(), v.as_slice()))
    }
}

/// A score, ordered as Redis orders them (no NaN is ever stored).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Score(f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A sorted set, ordered by (score, member) like Redis' skiplist.
#[derive(Clone, Debug, Default)]
pub(crate) struct ZSet {
    scores: HashMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

impl ZSet {
    /// The score of `member`.
    pub(crate) fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// Sets the score of `member` (`-0` is stored as `0`, as Redis does);
    /// the score it had.
    pub(crate) fn insert(&mut self, member: &[u8], score: f64) -> Option<f64> {
        let score = if score == 0.0 { 0.0 } else { score };
        let before = self.scores.insert(member.to_vec(), score);
        if let Some(old) = before {
            self.order.remove(&(Score(old), member.to_vec()));
        }
        self.order.insert((Score(score), member.to_vec()));
        before
    }

    /// Removes `member`; whether it was there.
    pub(crate) fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(score) => {
                self.order.remove(&(Score(score), member.to_vec()));
                true
            }
            None => false,
        }
    }

    /// The number of members.
    pub(crate) fn len(&self) -> usize {
        self.scores.len()
    }

    /// Members and scores from rank `start` to rank `end` included (both
    /// already within `0..len`).
    pub(crate) fn range(&self, start: usize, end: usize) -> impl Iterator<Item = (&[u8], f64)> {
        self.order
            .iter()
            .skip(start)
            .take(end.saturating_sub(start) + 1)
            .map(|(score, member)| (member.as_slice(), score.0))
    }

    /// Members and scores in order, from the first whose score is not
    /// below `min` (not NaN) to the end: the caller stops at its maximum.
    pub(crate) fn scores_from(&self, min: f64) -> impl Iterator<Item = (&[u8], f64)> {
        self.order
            .range((Score(min), Vec::new())..)
            .map(|(score, member)| (member.as_slice(), score.0))
    }
}

/// Milliseconds on the server's clock ([`Clock::ms`]).
pub(crate) type Ms = u64;

#[derive(Debug)]
struct Entry {
    data: Data,
    deadline: Option<Ms>,
}

/// Every key, sorted by name (`SCAN` resumes after the last key it gave),
/// with an index of deadlines.
#[derive(Debug, Default)]
pub(crate) struct Keyspace {
    entries: BTreeMap<Vec<u8>, Entry>,
    deadlines: BTreeSet<(Ms, Vec<u8>)>,
}

impl Keyspace {
    /// Removes every key whose deadline passed before `now`.
    pub(crate) fn expire_due(&mut self, now: Ms) {
        while let Some((deadline, _)) = self.deadlines.first() {
            if *deadline >= now {
                break;
            }
            if let Some((_, key)) = self.deadlines.pop_first() {
                self.entries.remove(&key);
            }
        }
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&Data> {
        self.entries.get(key).map(|e| &e.data)
    }

    /// The value of `key`, to change in place (its deadline stays; a hash,
    /// list or sorted set left empty must go through
    /// [`Keyspace::drop_if_empty`]).
    pub(crate) fn get_mut(&mut self, key: &[u8]) -> Option<&mut Data> {
        self.entries.get_mut(key).map(|e| &mut e.data)
    }

    /// The value of `key`, made by `make` when there is none.
    pub(crate) fn get_or_insert(&mut self, key: &[u8], make: impl FnOnce() -> Data) -> &mut Data {
        &mut self
            .entries
            .entry(key.to_vec())
            .or_insert_with(|| Entry {
                data: make(),
                deadline: None,
            })
            .data
    }

    /// Stores `data` at `key` with `deadline`, replacing any value and
    /// deadline it had (SET).
    pub(crate) fn set(&mut self, key: &[u8], data: Data, deadline: Option<Ms>) {
        let old = self.entries.insert(key.to_vec(), Entry { data, deadline });
        if let Some(Entry {
            deadline: Some(old),
            ..
        }) = old
        {
            self.deadlines.remove(&(old, key.to_vec()));
        }
        if let Some(deadline) = deadline {
            self.deadlines.insert((deadline, key.to_vec()));
        }
    }

    /// Replaces the value of `key`, keeping its deadline (SET … KEEPTTL);
    /// a new key has none.
    pub(crate) fn replace(&mut self, key: &[u8], data: Data) {
        match self.entries.get_mut(key) {
            Some(entry) => entry.data = data,
            None => self.set(key, data, None),
        }
    }

    /// Deletes `key`; whether it existed.
    pub(crate) fn remove(&mut self, key: &[u8]) -> bool {
        match self.entries.remove(key) {
            Some(entry) => {
                if let Some(deadline) = entry.deadline {
                    self.deadlines.remove(&(deadline, key.to_vec()));
                }
                true
            }
            None => false,
        }
    }

    /// Deletes `key` when it is a hash, list or sorted set left without
    /// elements.
    pub(crate) fn drop_if_empty(&mut self, key: &[u8]) {
        if self.get(key).is_some_and(Data::is_empty_container) {
            self.remove(key);
        }
    }

    /// `None` when `key` does not exist, else its deadline (`None`: none).
    pub(crate) fn deadline(&self, key: &[u8]) -> Option<Option<Ms>> {
        self.entries.get(key).map(|e| e.deadline)
    }

    /// Sets or clears the deadline of an existing `key`; whether it exists.
    pub(crate) fn set_deadline(&mut self, key: &[u8], deadline: Option<Ms>) -> bool {
        let Some(entry) = self.entries.get_mut(key) else {
            return false;
        };
        if let Some(old) = entry.deadline {
            self.deadlines.remove(&(old, key.to_vec()));
        }
        entry.deadline = deadline;
        if let Some(deadline) = deadline {
            self.deadlines.insert((deadline, key.to_vec()));
        }
        true
    }

    /// The number of keys.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Deletes every key.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.deadlines.clear();
    }

    /// The keys after `after` (all keys when `None`), in order, with
    /// their values.
    pub(crate) fn keys_after<'a>(
        &'a self,
        after: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a [u8], &'a Data)> + 'a {
        use std::ops::Bound;
        let start = match after {
            Some(key) => Bound::Excluded(key),
            None => Bound::Unbounded,
        };
        self.entries
            .range::<[u8], _>((start, Bound::Unbounded))
            .map(|(k, e)| (k.as_slice(), &e.data))
    }
}

/// The server's clock: tokio's (so a paused runtime's virtual time moves
/// expiry and `TIME` alike), with the wall-clock time taken at the start
/// as `TIME`'s origin; a simulation may make it run fast and jump ahead
/// ([`Clock::set_drift`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    wall_origin: Duration,
    /// The server time elapsed at `since` (jumps included).
    base: Duration,
    since: Instant,
    /// How many millionths faster than tokio's clock it runs after `since`.
    fast_ppm: u32,
}

impl Clock {
    /// A clock whose `TIME` starts at the wall-clock time now.
    pub(crate) fn new() -> Self {
        Clock {
            wall_origin: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
            base: Duration::ZERO,
            since: Instant::now(),
            fast_ppm: 0,
        }
    }

    /// The server time elapsed since the clock started, at `now`.
    fn elapsed(&self, now: Instant) -> Duration {
        let run = now.saturating_duration_since(self.since);
        let extra = run.as_nanos() * u128::from(self.fast_ppm) / 1_000_000;
        self.base + run + Duration::from_nanos(u64::try_from(extra).unwrap_or(u64::MAX))
    }

    /// From `now` on, runs `fast_ppm` millionths faster than tokio's clock,
    /// after a jump of `jump` ahead.
    pub(crate) fn set_drift(&mut self, now: Instant, fast_ppm: u32, jump: Duration) {
        self.base = self.elapsed(now) + jump;
        self.since = now;
        self.fast_ppm = fast_ppm;
    }

    /// `now` in whole milliseconds since the clock started (Redis counts
    /// deadlines in milliseconds: `PTTL` right after `PEXPIRE k 30000` is
    /// 30000 whatever fraction of a millisecond passed).
    pub(crate) fn ms(&self, now: Instant) -> Ms {
        u64::try_from(self.elapsed(now).as_millis()).unwrap_or(u64::MAX)
    }

    /// `TIME` at `now`: seconds and microseconds since the Unix epoch.
    pub(crate) fn time(&self, now: Instant) -> (u64, u32) {
        let t = self.wall_origin + self.elapsed(now);
        (t.as_secs(), t.subsec_micros())
    }
}

/// Whether `string` matches the glob `pattern` (Redis' `stringmatchlen`:
/// `*`, `?`, `[abc]`, `[^a-z]`, `\` escapes; case-sensitive).
pub(crate) fn glob_match(pattern: &[u8], string: &[u8]) -> bool {
    let mut skip_longer = false;
    glob(pattern, string, &mut skip_longer)
}

fn glob(mut pattern: &[u8], mut string: &[u8], skip_longer: &mut bool) -> bool {
    // C reads a NUL past the end of the pattern: so does `at`.
    fn at(p: &[u8], i: usize) -> u8 {
        p.get(i).copied().unwrap_or(0)
    }
    while !pattern.is_empty() && !string.is_empty() {
        match pattern[0] {
            b'*' => {
                while pattern.len() > 1 && pattern[1] == b'*' {
                    pattern = &pattern[1..];
                }
                if pattern.len() == 1 {
                    return true;
                }
                while !string.is_empty() {
                    if glob(&pattern[1..], string, skip_longer) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    string = &string[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => string = &string[1..],
            b'[' => {
                pattern = &pattern[1..];
                let not = at(pattern, 0) == b'^';
                if not {
                    pattern = &pattern[1..];
                }
                let mut matched = false;
                loop {
                    if at(pattern, 0) == b'\\' && pattern.len() >= 2 {
                        pattern = &pattern[1..];
                        if pattern[0] == string[0] {
                            matched = true;
                        }
                    } else if at(pattern, 0) == b']' {
                        break;
                    } else if pattern.is_empty() {
                        // an unclosed `[`: the class ends with the pattern
                        break;
                    } else if pattern.len() >= 3 && pattern[1] == b'-' {
                        let (mut start, mut end) = (pattern[0], pattern[2]);
                        if start > end {
                            std::mem::swap(&mut start, &mut end);
                        }
                        pattern = &pattern[2..];
                        if (start..=end).contains(&string[0]) {
                            matched = true;
                        }
                    } else if pattern[0] == string[0] {
                        matched = true;
                    }
                    pattern = &pattern[1..];
                }
                if not {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                string = &string[1..];
                if pattern.is_empty() {
                    // an unclosed `[` ended the pattern (no `]` to step past)
                    return string.is_empty();
                }
            }
            b'\\' => {
                if pattern.len() >= 2 {
                    pattern = &pattern[1..];
                }
                if pattern[0] != string[0] {
                    return false;
                }
                string = &string[1..];
            }
            c => {
                if c != string[0] {
                    return false;
                }
                string = &string[1..];
            }
        }
        pattern = &pattern[1..];
        if string.is_empty() {
            while at(pattern, 0) == b'*' {
                pattern = &pattern[1..];
            }
            break;
        }
    }
    pattern.is_empty() && string.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_redis_matches() {
        for (pattern, string, expected) in [
            ("*", "anything", true),
            // as in Redis (SCAN and KEYS never match `*` alone: they skip it)
            ("*", "", false),
            ("app:*", "app:lock", true),
            ("app:*", "other", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("[ab]x", "bx", true),
            ("[^ab]x", "bx", false),
            ("[a-c]x", "cx", true),
            ("[c-a]x", "bx", true),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("\\[x\\]", "[x]", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            (
                "redisson_lock__channel:*",
                "redisson_lock__channel:{k}",
                true,
            ),
            ("", "", true),
            ("x", "", false),
        ] {
            assert_eq!(
                glob_match(pattern.as_bytes(), string.as_bytes()),
                expected,
                "{pattern} ~ {string}"
            );
        }
    }

    #[test]
    fn sorted_sets_order_by_score_then_member() {
        let mut z = ZSet::default();
        z.insert(b"b", 2.0);
        z.insert(b"a", 2.0);
        z.insert(b"c", 1.0);
        assert_eq!(z.insert(b"c", 3.0), Some(1.0));
        let order: Vec<(&[u8], f64)> = z.range(0, 2).collect();
        assert_eq!(
            order,
            [(&b"a"[..], 2.0), (&b"b"[..], 2.0), (&b"c"[..], 3.0)]
        );
        assert!(z.remove(b"a"));
        assert!(!z.remove(b"a"));
        assert_eq!(z.len(), 2);
        assert_eq!(z.range(1, 1).count(), 1);
        z.insert(b"zero", -0.0);
        let from = |min: f64| -> Vec<&[u8]> { z.scores_from(min).map(|(m, _)| m).collect() };
        assert_eq!(from(2.0), [&b"b"[..], b"c"]);
        assert_eq!(from(2.5), [&b"c"[..]]);
        assert_eq!(from(-0.0), [&b"zero"[..], b"b", b"c"], "-0 is stored as 0");
        assert_eq!(from(0.0), [&b"zero"[..], b"b", b"c"]);
        assert!(from(f64::INFINITY).is_empty());
    }

    #[test]
    fn keys_expire_after_their_deadline_only() {
        let mut keys = Keyspace::default();
        keys.set(b"a", Data::Str(b"1".to_vec()), Some(10));
        keys.set(b"b", Data::Str(b"2".to_vec()), None);
        keys.expire_due(10);
        assert!(keys.get(b"a").is_some(), "alive at its deadline");
        keys.expire_due(11);
        assert!(keys.get(b"a").is_none());
        assert!(keys.get(b"b").is_some());
        // SET replaces the deadline; the old one no longer removes the key.
        keys.set(b"c", Data::Str(vec![]), Some(15));
        keys.set(b"c", Data::Str(vec![]), None);
        keys.expire_due(1000);
        assert!(keys.get(b"c").is_some());
        assert_eq!(keys.len(), 2);
        let names: Vec<&[u8]> = keys.keys_after(Some(b"b")).map(|(k, _)| k).collect();
        assert_eq!(names, [&b"c"[..]]);
    }

    #[test]
    fn the_clock_counts_whole_milliseconds() {
        let clock = Clock::new();
        let start = clock.since;
        assert_eq!(clock.ms(start + Duration::from_micros(1999)), 1);
        assert_eq!(clock.ms(start - Duration::from_millis(1)), 0);
        let (s0, us0) = clock.time(start);
        let (s1, us1) = clock.time(start + Duration::from_micros(1_500_001));
        assert_eq!(
            (s1 * 1_000_000 + u64::from(us1)) - (s0 * 1_000_000 + u64::from(us0)),
            1_500_001
        );
    }

    #[test]
    fn a_drifting_clock_runs_fast_after_its_jump() {
        let mut clock = Clock::new();
        let start = clock.since;
        clock.set_drift(
            start + Duration::from_secs(1),
            10_000,
            Duration::from_millis(2),
        );
        assert_eq!(clock.ms(start + Duration::from_secs(1)), 1_002);
        // 1 % faster: 10 s of tokio time are 10.1 s of server time.
        assert_eq!(clock.ms(start + Duration::from_secs(11)), 11_102);
    }
}
