//! A client speaking Redisson's `RReadWriteLock` protocol, for the
//! read-write lock's interop suites: the data layout and rules Redisson
//! uses (one hash at the lock's name with a `mode` field, one field per
//! reader `<client>:<thread>` holding its read count, the writer's field
//! `<client>:<thread>:write`, one timeout key per read acquisition, the
//! channel `redisson_rwlock:{<name>}`), implemented here in this project's
//! own scripts from that description.

use redis::aio::MultiplexedConnection;
use redis::Script;

/// Read acquire. KEYS[1] the hash, KEYS[2] the owner's timeout-key prefix
/// (`{<name>}:<owner>:rwlock_timeout`); ARGV[1] lease ms, ARGV[2] the
/// reader's field (`<client>:<thread>`), ARGV[3] the same owner's writer
/// field. Nil when granted, else the hash's PTTL.
const READ_LOCK: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode')
local may = (not mode) or mode == 'read'
  or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1)
if not may then
  return redis.call('pttl', KEYS[1])
end
if not mode then
  redis.call('hset', KEYS[1], 'mode', 'read')
end
local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
local timeout = KEYS[2] .. ':' .. n
redis.call('set', timeout, 1, 'px', ARGV[1])
local left = redis.call('pttl', KEYS[1])
if left < tonumber(ARGV[1]) then
  redis.call('pexpire', KEYS[1], ARGV[1])
end
return nil
"#;

/// Write acquire. KEYS[1] the hash; ARGV[1] lease ms, ARGV[2] the writer's
/// field. Nil when granted (a re-entry adds its lease to the TTL), else
/// the hash's PTTL.
const WRITE_LOCK: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + tonumber(ARGV[1]))
  return nil
end
return redis.call('pttl', KEYS[1])
"#;

/// Read release. KEYS[1] the hash, KEYS[2] the channel, KEYS[3] the name
/// inside the timeout keys (`{<name>}`); ARGV[1] the reader's field,
/// ARGV[2] the release message ('0'). 1 released, nil not held.
const READ_UNLOCK: &str = r#"
local n = redis.call('hget', KEYS[1], ARGV[1])
if not n then
  return nil
end
n = tonumber(n)
redis.call('del', KEYS[3] .. ':' .. ARGV[1] .. ':rwlock_timeout:' .. n)
if n > 1 then
  redis.call('hset', KEYS[1], ARGV[1], n - 1)
else
  redis.call('hdel', KEYS[1], ARGV[1])
end
-- the hash lives as long as the longest-lived read acquisition left
local longest = 0
local fields = redis.call('hgetall', KEYS[1])
local writer = false
for i = 1, #fields, 2 do
  local field, count = fields[i], fields[i + 1]
  if field ~= 'mode' then
    if string.sub(field, -6) == ':write' then
      writer = true
    else
      for k = tonumber(count), 1, -1 do
        local ttl = redis.call('pttl', KEYS[3] .. ':' .. field .. ':rwlock_timeout:' .. k)
        if ttl > longest then
          longest = ttl
        end
      end
    end
  end
end
if longest > 0 then
  redis.call('pexpire', KEYS[1], longest)
  return 1
end
if writer then
  return 1
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[2])
return 1
"#;

/// Write release. KEYS[1] the hash, KEYS[2] the channel; ARGV[1] the
/// writer's field, ARGV[2] lease ms, ARGV[3] the release message ('1').
/// 0 still held (re-entered), 1 released, nil not held.
const WRITE_UNLOCK: &str = r#"
if redis.call('hget', KEYS[1], 'mode') ~= 'write' then
  return nil
end
local n = redis.call('hget', KEYS[1], ARGV[1])
if not n then
  return nil
end
if tonumber(n) > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], ARGV[3])
else
  -- readers of a downgrade remain
  redis.call('hset', KEYS[1], 'mode', 'read')
end
return 1
"#;

/// Redisson's `{…}` rule: `{<name>}`, or the name itself when it already
/// holds a `{`.
fn braced(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

/// One Redisson client (`client` is its id) acting as one thread.
pub struct RedissonRw {
    pub conn: MultiplexedConnection,
    pub name: String,
    /// `<client-id>:<thread>`.
    pub owner: String,
    pub lease_ms: u64,
}

impl RedissonRw {
    pub fn new(conn: MultiplexedConnection, name: &str, owner: &str, lease_ms: u64) -> Self {
        RedissonRw {
            conn,
            name: name.to_string(),
            owner: owner.to_string(),
            lease_ms,
        }
    }

    /// The channel both modes publish on.
    pub fn channel(&self) -> String {
        format!("redisson_rwlock:{}", braced(&self.name))
    }

    /// The timeout key of this owner's `k`-th read acquisition.
    pub fn timeout_key(&self, k: u64) -> String {
        format!("{}:{}:rwlock_timeout:{k}", braced(&self.name), self.owner)
    }

    fn writer_field(&self) -> String {
        format!("{}:write", self.owner)
    }

    /// `None` granted, `Some(pttl)` held in the other mode.
    pub async fn read_lock(&mut self) -> Option<i64> {
        let prefix = format!("{}:{}:rwlock_timeout", braced(&self.name), self.owner);
        Script::new(READ_LOCK)
            .key(&self.name)
            .key(prefix)
            .arg(self.lease_ms)
            .arg(&self.owner)
            .arg(self.writer_field())
            .invoke_async(&mut self.conn)
            .await
            .expect("read lock script")
    }

    /// `None` granted, `Some(pttl)` held by someone else.
    pub async fn write_lock(&mut self) -> Option<i64> {
        Script::new(WRITE_LOCK)
            .key(&self.name)
            .arg(self.lease_ms)
            .arg(self.writer_field())
            .invoke_async(&mut self.conn)
            .await
            .expect("write lock script")
    }

    /// `Some(1)` released, `None` not held.
    pub async fn read_unlock(&mut self) -> Option<i64> {
        Script::new(READ_UNLOCK)
            .key(&self.name)
            .key(self.channel())
            .key(braced(&self.name))
            .arg(&self.owner)
            .arg("0")
            .invoke_async(&mut self.conn)
            .await
            .expect("read unlock script")
    }

    /// `Some(0)` still held, `Some(1)` released, `None` not held.
    pub async fn write_unlock(&mut self) -> Option<i64> {
        Script::new(WRITE_UNLOCK)
            .key(&self.name)
            .key(self.channel())
            .arg(self.writer_field())
            .arg(self.lease_ms)
            .arg("1")
            .invoke_async(&mut self.conn)
            .await
            .expect("write unlock script")
    }
}
