//! A client speaking Redisson's `RFairLock` protocol, for the fair lock's
//! interop suites, implemented here in this project's own scripts from the
//! protocol's description: the lock is `RLock`'s hash; the LIST
//! `redisson_lock_queue:{<name>}` holds the waiting owners
//! (`<uuid>:<thread>`) in arrival order and the ZSET
//! `redisson_lock_timeout:{<name>}` their deadlines (ms of the client's
//! clock: the predecessor's deadline, or the holder's PTTL for the first,
//! plus the wait allowance). Every script first drops heads whose deadline
//! passed; a grant takes the allowance off every deadline left; an unlock
//! publishes `0` on the next waiter's own channel
//! `redisson_lock__channel:{<name>}:<owner>`; a waiter that gives up leaves
//! and takes the allowance off those behind it. No liveness marks: a dead
//! waiter of Redisson's leaves only when its deadline passes.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::Script;

/// Drops heads whose deadline passed (`now` is the caller's clock).
const PRUNE: &str = r"
local function prune(queue, timeouts, now)
  while true do
    local first = redis.call('lindex', queue, 0)
    if first == false then break end
    local deadline = tonumber(redis.call('zscore', timeouts, first))
    if deadline <= now then
      redis.call('zrem', timeouts, first)
      redis.call('lpop', queue)
    else
      break
    end
  end
end
";

/// Acquire (`lock()`'s attempt, which queues). KEYS[1] lock, KEYS[2] queue,
/// KEYS[3] deadlines; ARGV[1] lease ms, ARGV[2] owner, ARGV[3] allowance
/// ms, ARGV[4] now ms. Nil when granted (or re-entered), else the time to
/// wait in ms.
const LOCK: &str = r"
prune(KEYS[2], KEYS[3], tonumber(ARGV[4]))
local free = redis.call('exists', KEYS[1]) == 0
if free and (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], ARGV[2])
  local left = redis.call('zrange', KEYS[3], 0, -1)
  for i = 1, #left do
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), left[i])
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
local mine = redis.call('zscore', KEYS[3], ARGV[2])
if mine ~= false then
  return mine - tonumber(ARGV[3]) - tonumber(ARGV[4])
end
local last = redis.call('lindex', KEYS[2], -1)
local ttl
if last ~= false and last ~= ARGV[2] then
  ttl = tonumber(redis.call('zscore', KEYS[3], last)) - tonumber(ARGV[4])
else
  ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl
";

/// One attempt that never queues (`tryLock()`). Same keys; ARGV[1] lease
/// ms, ARGV[2] owner, ARGV[3] now ms, ARGV[4] allowance ms. Nil granted,
/// 1 not.
const TRY_ONCE: &str = r"
prune(KEYS[2], KEYS[3], tonumber(ARGV[3]))
if redis.call('exists', KEYS[1]) == 0 and (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], ARGV[2])
  local left = redis.call('zrange', KEYS[3], 0, -1)
  for i = 1, #left do
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[4]), left[i])
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return 1
";

/// Release. KEYS[1] lock, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] the
/// channel prefix; ARGV[1] message, ARGV[2] lease ms, ARGV[3] owner,
/// ARGV[4] now ms. 1 freed, 0 counts remain, nil not held.
const UNLOCK: &str = r"
prune(KEYS[2], KEYS[3], tonumber(ARGV[4]))
if redis.call('exists', KEYS[1]) == 0 then
  local next_owner = redis.call('lindex', KEYS[2], 0)
  if next_owner ~= false then
    redis.call('publish', KEYS[4] .. ':' .. next_owner, ARGV[1])
  end
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('del', KEYS[1])
local next_owner = redis.call('lindex', KEYS[2], 0)
if next_owner ~= false then
  redis.call('publish', KEYS[4] .. ':' .. next_owner, ARGV[1])
end
return 1
";

/// A waiter gives up. KEYS[1] queue, KEYS[2] deadlines; ARGV[1] owner,
/// ARGV[2] allowance ms.
const ACQUIRE_FAILED: &str = r"
local queue = redis.call('lrange', KEYS[1], 0, -1)
local i = 1
while i <= #queue and queue[i] ~= ARGV[1] do
  i = i + 1
end
i = i + 1
while i <= #queue do
  redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i])
  i = i + 1
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
return 1
";

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A Redisson client's view of one fair lock (`getFairLock(name)`).
pub struct RedissonFairLock {
    conn: MultiplexedConnection,
    url: String,
    pub name: String,
    /// The wait allowance (`fairLockWaitTimeout`) in ms.
    pub allowance_ms: i64,
}

impl RedissonFairLock {
    pub fn new(conn: MultiplexedConnection, url: &str, name: &str, allowance_ms: i64) -> Self {
        RedissonFairLock {
            conn,
            url: url.to_string(),
            name: name.to_string(),
            allowance_ms,
        }
    }

    pub fn queue_key(&self) -> String {
        format!("redisson_lock_queue:{{{}}}", self.name)
    }

    pub fn timeout_key(&self) -> String {
        format!("redisson_lock_timeout:{{{}}}", self.name)
    }

    pub fn channel(&self, owner: &str) -> String {
        format!("redisson_lock__channel:{{{}}}:{owner}", self.name)
    }

    fn script(body: &str) -> Script {
        Script::new(&format!("{PRUNE}\n{body}"))
    }

    /// One attempt that queues: None granted, Some(ms to wait).
    pub async fn attempt(&mut self, owner: &str, lease_ms: i64) -> Option<i64> {
        Self::script(LOCK)
            .key(&self.name)
            .key(self.queue_key())
            .key(self.timeout_key())
            .arg(lease_ms)
            .arg(owner)
            .arg(self.allowance_ms)
            .arg(now_ms())
            .invoke_async(&mut self.conn)
            .await
            .expect("fair lock script")
    }

    /// `tryLock()`: one attempt, never queued.
    pub async fn try_once(&mut self, owner: &str, lease_ms: i64) -> bool {
        let r: Option<i64> = Script::new(&format!("{PRUNE}\n{TRY_ONCE}"))
            .key(&self.name)
            .key(self.queue_key())
            .key(self.timeout_key())
            .arg(lease_ms)
            .arg(owner)
            .arg(now_ms())
            .arg(self.allowance_ms)
            .invoke_async(&mut self.conn)
            .await
            .expect("fair try script");
        r.is_none()
    }

    /// `unlock()`: Some(1) freed, Some(0) counts remain, None not held.
    pub async fn unlock(&mut self, owner: &str, lease_ms: i64) -> Option<i64> {
        Self::script(UNLOCK)
            .key(&self.name)
            .key(self.queue_key())
            .key(self.timeout_key())
            .key(format!("redisson_lock__channel:{{{}}}", self.name))
            .arg(0)
            .arg(lease_ms)
            .arg(owner)
            .arg(now_ms())
            .invoke_async(&mut self.conn)
            .await
            .expect("fair unlock script")
    }

    /// The clean-up of a waiter that gives up.
    pub async fn acquire_failed(&mut self, owner: &str) {
        let _: i64 = Script::new(ACQUIRE_FAILED)
            .key(self.queue_key())
            .key(self.timeout_key())
            .arg(owner)
            .arg(self.allowance_ms)
            .invoke_async(&mut self.conn)
            .await
            .expect("fair acquire-failed script");
    }

    /// `lock()` / `tryLock(wait)` as Redisson runs them: attempt; when
    /// told to wait, subscribe to the owner's channel and wait for its
    /// message or the time told, then attempt again. Gives up (with the
    /// clean-up) after `bound`. True when granted.
    pub async fn lock_within(&mut self, owner: &str, lease_ms: i64, bound: Duration) -> bool {
        let until = Instant::now() + bound;
        let client = redis::Client::open(self.url.as_str()).expect("url");
        let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
        pubsub
            .subscribe(self.channel(owner))
            .await
            .expect("subscribe");
        let mut messages = pubsub.on_message();
        loop {
            let Some(wait_ms) = self.attempt(owner, lease_ms).await else {
                return true;
            };
            let now = Instant::now();
            if now >= until {
                drop(messages);
                self.acquire_failed(owner).await;
                return false;
            }
            let wait = Duration::from_millis(wait_ms.max(1) as u64).min(until - now);
            let _ = tokio::time::timeout(wait, messages.next()).await;
        }
    }

    /// The queue, first first.
    pub async fn queue(&mut self) -> Vec<String> {
        redis::cmd("LRANGE")
            .arg(self.queue_key())
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn)
            .await
            .expect("lrange")
    }

    /// The deadline of `owner`, if queued.
    pub async fn deadline(&mut self, owner: &str) -> Option<i64> {
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(self.timeout_key())
            .arg(owner)
            .query_async(&mut self.conn)
            .await
            .expect("zscore");
        score.map(|s| s as i64)
    }
}
