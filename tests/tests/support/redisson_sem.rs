//! Clients speaking Redisson's `RSemaphore`, `RPermitExpirableSemaphore`
//! and `RCountDownLatch` protocols, for the semaphores' and the latch's
//! interop suites: the data layout and rules Redisson uses (a string
//! counter at the name and no TTL on it; for the expirable kind a sorted
//! set `{<name>}:timeout` of permit ids scored by their absolute expiry in
//! ms, expired ids reclaimed first; the channels `redisson_sc:{<name>}` and
//! `redisson_countdownlatch__channel__{<name>}`), implemented here in this
//! project's own scripts from that description. Permit ids are 16 bytes in
//! the set (Redisson decodes the 32 hex digits it shows before it stores,
//! renews or releases one); the methods here take them in hex, as
//! Redisson's API does.

use redis::aio::MultiplexedConnection;
use redis::Script;

/// The score of a permit without a lease.
pub const NO_LEASE: i64 = 922_337_203_685_477;

/// Acquire n. KEYS[1] the counter; ARGV[1] n. 1 taken, 0 not.
const ACQUIRE: &str = r"
local have = tonumber(redis.call('get', KEYS[1]) or '0')
if have >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return 1
end
return 0
";

/// Release or add n (n may be negative for add). KEYS[1] the counter,
/// KEYS[2] the channel; ARGV[1] n. The new value, published.
const ADD: &str = r"
local now = redis.call('incrby', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], now)
return now
";

/// Set n permits only when the counter does not exist. KEYS[1] the
/// counter, KEYS[2] the channel; ARGV[1] n. 1 set (and published), 0 not.
const TRY_SET: &str = r"
if redis.call('set', KEYS[1], ARGV[1], 'nx') then
  redis.call('publish', KEYS[2], ARGV[1])
  return 1
end
return 0
";

/// The expired permits' reclaim every expirable script begins with, up to
/// `limit` ids (0: all). KEYS[1] the counter, KEYS[2] the channel, KEYS[3]
/// the timeout set; `now` in ms.
const RECLAIM: &str = r"
local function reclaim(now, limit)
  local expired
  if limit > 0 then
    expired = redis.call('zrangebyscore', KEYS[3], 0, now, 'limit', 0, limit)
  else
    expired = redis.call('zrangebyscore', KEYS[3], 0, now)
  end
  if #expired > 0 then
    for _, id in ipairs(expired) do
      redis.call('zrem', KEYS[3], id)
    end
    local value = redis.call('incrby', KEYS[1], #expired)
    if value > 0 then
      redis.call('publish', KEYS[2], value)
    end
  end
end
";

/// Expirable acquire. KEYS as `RECLAIM`; ARGV[1] now in ms, ARGV[2] the
/// absolute expiry score of the new ids, ARGV[3..] the ids. 'OK' taken;
/// ':<ms>' not now, the nearest expiry; nil not now, no expiry.
const EXPIRABLE_ACQUIRE: &str = r"
local now, n = tonumber(ARGV[1]), #ARGV - 2
reclaim(now, n)
local have = tonumber(redis.call('get', KEYS[1]) or '0')
if have >= n then
  redis.call('decrby', KEYS[1], n)
  for i = 3, #ARGV do
    redis.call('zadd', KEYS[3], ARGV[2], ARGV[i])
  end
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[3], ttl)
  end
  return 'OK'
end
local nearest = redis.call('zrange', KEYS[3], 0, 0, 'withscores')
if nearest[2] ~= nil then
  return ':' .. nearest[2]
end
return nil
";

/// Expirable release of one id. KEYS as `RECLAIM`; ARGV[1] now, ARGV[2]
/// the id. 1 released (published), 0 not held (or expired).
const EXPIRABLE_RELEASE: &str = r"
local now = tonumber(ARGV[1])
local score = redis.call('zscore', KEYS[3], ARGV[2])
if score and tonumber(score) <= now then
  reclaim(now, 0)
  return 0
end
if redis.call('zrem', KEYS[3], ARGV[2]) == 1 then
  local value = redis.call('incrby', KEYS[1], 1)
  redis.call('publish', KEYS[2], value)
  return 1
end
return 0
";

/// Re-score a live id. KEYS as `RECLAIM`; ARGV[1] now, ARGV[2] the id,
/// ARGV[3] its new expiry. 1 renewed, 0 expired or unknown.
const UPDATE_LEASE: &str = r"
local now = tonumber(ARGV[1])
local score = redis.call('zscore', KEYS[3], ARGV[2])
if score and tonumber(score) > now then
  redis.call('zadd', KEYS[3], 'xx', ARGV[3], ARGV[2])
  return 1
end
reclaim(now, 0)
return 0
";

/// Latch: count down. KEYS[1] the counter, KEYS[2] the channel. The count
/// after (0 when it reached zero: deleted, `0` published).
const COUNT_DOWN: &str = r"
local left = redis.call('decr', KEYS[1])
if left <= 0 then
  redis.call('del', KEYS[1])
end
if left == 0 then
  redis.call('publish', KEYS[2], 0)
end
return math.max(left, 0)
";

/// Latch: set the count only when none is set. KEYS[1] the counter,
/// KEYS[2] the channel; ARGV[1] n. 1 set (`1` published), 0 not.
const LATCH_TRY_SET: &str = r"
if redis.call('set', KEYS[1], ARGV[1], 'nx') then
  redis.call('publish', KEYS[2], 1)
  return 1
end
return 0
";

/// Redisson's `{…}` rule: `{<name>}`, or the name itself when it already
/// holds a `{`.
fn braced(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

/// The 16 bytes of a permit id shown as 32 hex digits.
pub fn raw_id(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex id"))
        .collect()
}

/// The 32 hex digits of a permit id as stored (16 bytes).
pub fn hex_id(raw: &[u8]) -> String {
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// One Redisson client of a semaphore (plain or expirable) called `name`.
pub struct RedissonSemaphore {
    pub conn: MultiplexedConnection,
    pub name: String,
}

impl RedissonSemaphore {
    pub fn new(conn: MultiplexedConnection, name: &str) -> Self {
        RedissonSemaphore {
            conn,
            name: name.to_string(),
        }
    }

    /// `redisson_sc:{<name>}`.
    pub fn channel(&self) -> String {
        format!("redisson_sc:{}", braced(&self.name))
    }

    /// `{<name>}:timeout`, the expirable kind's permit ids.
    pub fn timeout_set(&self) -> String {
        format!("{}:timeout", braced(&self.name))
    }

    async fn run(&mut self, script: &str, args: &[String]) -> redis::Value {
        let s = Script::new(script);
        let mut call = s.key(&self.name);
        for a in args {
            call.arg(a);
        }
        call.invoke_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("semaphore script: {e}"))
    }

    async fn run_with_channel<A: redis::ToRedisArgs>(
        &mut self,
        script: &str,
        extra_keys: bool,
        args: &[A],
    ) -> redis::Value {
        let source = if extra_keys {
            format!("{RECLAIM}\n{script}")
        } else {
            script.to_string()
        };
        let s = Script::new(&source);
        let mut call = s.key(&self.name);
        call.key(self.channel());
        if extra_keys {
            call.key(self.timeout_set());
        }
        for a in args {
            call.arg(a);
        }
        call.invoke_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("semaphore script: {e}"))
    }

    /// `tryAcquire(n)`: whether it took `n` permits.
    pub async fn try_acquire(&mut self, n: i64) -> bool {
        self.run(ACQUIRE, &[n.to_string()]).await == redis::Value::Int(1)
    }

    /// `release(n)` / `addPermits(n)`: the new count (published).
    pub async fn add(&mut self, n: i64) -> i64 {
        match self.run_with_channel(ADD, false, &[n.to_string()]).await {
            redis::Value::Int(v) => v,
            other => panic!("add answered {other:?}"),
        }
    }

    /// `trySetPermits(n)`.
    pub async fn try_set_permits(&mut self, n: i64) -> bool {
        self.run_with_channel(TRY_SET, false, &[n.to_string()])
            .await
            == redis::Value::Int(1)
    }

    /// Expirable `tryAcquire` of `ids` (each 32 hex chars) at `now_ms`,
    /// expiring at `expiry` (absolute ms, or [`NO_LEASE`]): `Ok(())` taken,
    /// `Err(Some(ms))` not now with the nearest expiry, `Err(None)` not now.
    pub async fn expirable_acquire(
        &mut self,
        now_ms: i64,
        expiry: i64,
        ids: &[String],
    ) -> Result<(), Option<i64>> {
        let mut args = vec![
            now_ms.to_string().into_bytes(),
            expiry.to_string().into_bytes(),
        ];
        args.extend(ids.iter().map(|id| raw_id(id)));
        match self.run_with_channel(EXPIRABLE_ACQUIRE, true, &args).await {
            redis::Value::Okay => Ok(()),
            redis::Value::SimpleString(s) if s == "OK" => Ok(()),
            redis::Value::BulkString(b) => {
                let text = String::from_utf8_lossy(&b).into_owned();
                match text.strip_prefix(':') {
                    Some(ms) => Err(ms.parse::<f64>().ok().map(|v| v as i64)),
                    None if text == "OK" => Ok(()),
                    None => panic!("acquire answered {text}"),
                }
            }
            redis::Value::Nil => Err(None),
            other => panic!("acquire answered {other:?}"),
        }
    }

    /// Expirable `release(id)`: whether it was held (not expired).
    pub async fn expirable_release(&mut self, now_ms: i64, id: &str) -> bool {
        self.run_with_channel(
            EXPIRABLE_RELEASE,
            true,
            &[now_ms.to_string().into_bytes(), raw_id(id)],
        )
        .await
            == redis::Value::Int(1)
    }

    /// `updateLeaseTime(id, ...)`: whether the live id was re-scored.
    pub async fn update_lease(&mut self, now_ms: i64, id: &str, expiry: i64) -> bool {
        self.run_with_channel(
            UPDATE_LEASE,
            true,
            &[
                now_ms.to_string().into_bytes(),
                raw_id(id),
                expiry.to_string().into_bytes(),
            ],
        )
        .await
            == redis::Value::Int(1)
    }
}

/// One Redisson client of a count-down latch called `name`.
pub struct RedissonLatch {
    pub conn: MultiplexedConnection,
    pub name: String,
}

impl RedissonLatch {
    pub fn new(conn: MultiplexedConnection, name: &str) -> Self {
        RedissonLatch {
            conn,
            name: name.to_string(),
        }
    }

    /// `redisson_countdownlatch__channel__{<name>}`: braces always (a name
    /// with its own tag gets a second pair).
    pub fn channel(&self) -> String {
        format!("redisson_countdownlatch__channel__{{{}}}", self.name)
    }

    async fn run(&mut self, script: &str, args: &[String]) -> i64 {
        let s = Script::new(script);
        let mut call = s.key(&self.name);
        call.key(self.channel());
        for a in args {
            call.arg(a);
        }
        call.invoke_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("latch script: {e}"))
    }

    /// `trySetCount(n)`.
    pub async fn try_set_count(&mut self, n: i64) -> bool {
        self.run(LATCH_TRY_SET, &[n.to_string()]).await == 1
    }

    /// `countDown()`: the count left.
    pub async fn count_down(&mut self) -> i64 {
        self.run(COUNT_DOWN, &[]).await
    }
}
