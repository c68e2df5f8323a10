//! Fenced writes: writes to Redis that Redis applies only while a hold is
//! still the lock's holder, checked in the same script as the write.

use std::sync::Arc;

use redis::FromRedisValue;

use crate::error::{Error, Result};
use crate::held::HeldLock;
use crate::hold::engine::Engine;
use crate::hold::slot_owners::key_slot;
use crate::hold::Hold;
use crate::protocol::fenced;
use crate::protocol::keys::LockKeys;
use crate::protocol::Script;

/// A Lua body for [`Fence::eval`], prepared once (its SHA-1 computed) and
/// reused: like `redis::Script`, but run behind the fence's check.
///
/// The body sees its own `KEYS` and `ARGV` (numbered from 1: the lock's
/// key is not among them) and answers whatever it returns. Redis runs the
/// check (is the hold still the lock's holder?) and the body as one
/// script, so no other client's command comes between them. A body may not
/// start with a `#!` line (Redis 7's script flags).
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
/// use lock_core::FencedScript;
/// // Takes one unit when there is one: the answer is what is left, or -1.
/// let take_one = FencedScript::new(
///     "local left = tonumber(redis.call('get', KEYS[1]) or '0')
///      if left <= 0 then return -1 end
///      return redis.call('decr', KEYS[1])",
/// );
/// let guard = client.lock("stock:{sku-42}")?.acquire().await?;
/// let left: i64 = guard.fence().eval(&take_one, &["stock:{sku-42}:count"], &[]).await?;
/// guard.release().await?;
/// # let _ = left;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FencedScript {
    script: Arc<Script>,
}

impl std::fmt::Debug for FencedScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedScript").finish_non_exhaustive()
    }
}

impl FencedScript {
    /// Prepares `body` (Lua) for [`Fence::eval`].
    ///
    /// ```
    /// let set_if_higher = lock_core::FencedScript::new(
    ///     "local now = tonumber(redis.call('get', KEYS[1]) or '0')
    ///      if tonumber(ARGV[1]) > now then redis.call('set', KEYS[1], ARGV[1]) end
    ///      return 1",
    /// );
    /// # let _ = set_if_higher;
    /// ```
    pub fn new(body: impl Into<String>) -> FencedScript {
        FencedScript {
            script: Arc::new(fenced::script(&body.into())),
        }
    }
}

/// Writes that Redis applies only while one hold is still the holder of
/// its lock: the check (the hold's field is in the lock hash) and the
/// write run in one script. A holder paused past its lease (a GC pause, a
/// stopped VM, SIGSTOP) whose lock was taken over meanwhile gets
/// [`Error::FenceRefused`] and writes nothing — the late write a lock
/// alone cannot stop.
///
/// Get one from [`LockGuard::fence`](crate::LockGuard::fence),
/// [`HeldLock::fence`] or [`Leadership::fence`](crate::Leadership::fence).
/// Cheap to clone; `Send + Sync + 'static`.
///
/// **Which keys.** On a single server or Sentinel, any key. On a Redis
/// Cluster, only keys in the lock key's slot: give the lock a hash tag and
/// use the same tag in the keys (lock `stock:{sku-42}`, key
/// `flash-sale:stock:{sku-42}`). Other keys are refused with
/// [`Error::InvalidArgument`] before anything is sent.
///
/// **What it does not cover.** Only data in the same Redis as the lock:
/// for a database, a file or another service, pass the
/// [`token`](Self::token) and have that resource refuse tokens lower than
/// the highest it has seen.
///
/// **A lost reply.** A fenced write is applied at most once: lock-core
/// never sends it again, and on a Redis Cluster (whose connections re-send
/// a command after a lost reply) a request latch in the lock's slot turns
/// a second copy into the error `LOCKCORE_FENCED_REPEAT` (an
/// [`Error::Redis`]: it ran once, its reply was lost). When the reply is
/// lost the error says so and whether the write was applied is unknown,
/// as for any Redis write.
///
/// **Keys as given.** The keys are used as they are: the client's
/// `key_prefix` is not added to them. A fence from a read side of a
/// read-write lock is current while that read hold is (beside other
/// readers): it fences against writers only.
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
/// let guard = client.lock("stock:{sku-42}")?.acquire().await?;
/// match guard.fence().incr_by("flash-sale:stock:{sku-42}", -1).await {
///     Ok(left) => println!("{left} left"),
///     Err(e) if e.is_fence_refused() => println!("not ours any more: nothing written"),
///     Err(e) => return Err(e),
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Fence {
    engine: Arc<Engine>,
    keys: Arc<LockKeys>,
    hold: Arc<Hold>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("lock", &self.keys.lock)
            .field("token", &self.hold.token)
            .finish()
    }
}

impl HeldLock {
    /// Fenced writes through this hold (see [`Fence`]).
    ///
    /// ```no_run
    /// # async fn demo(held: lock_core::HeldLock) -> lock_core::Result<()> {
    /// held.fence().set("report:{daily}:owner", "worker-3").await?;
    /// # Ok(()) }
    /// ```
    pub fn fence(&self) -> Fence {
        Fence {
            engine: self.engine().clone(),
            keys: self.keys().clone(),
            hold: self.hold().clone(),
        }
    }
}

impl crate::LockGuard {
    /// Fenced writes through this guard's hold (see [`Fence`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// let left = guard.fence().incr_by("stock:{sku-1}", -1).await?;
    /// guard.release().await?;
    /// # let _ = left;
    /// # Ok(()) }
    /// ```
    pub fn fence(&self) -> Fence {
        self.held_lock().fence()
    }
}

impl Fence {
    /// The hold's fencing token, for resources outside Redis.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire().await?;
    /// assert_eq!(guard.fence().token(), guard.fencing_token());
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> u64 {
        self.hold.token
    }

    /// Runs `script` with `keys` and `args` if, and only if, the hold is
    /// still the lock's holder; answers the script's reply.
    /// [`Error::FenceRefused`] when it is not (nothing ran).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// let append = lock_core::FencedScript::new("return redis.call('rpush', KEYS[1], ARGV[1])");
    /// let guard = lock.acquire().await?;
    /// let len: i64 = guard.fence().eval(&append, &["ledger:{acct-7}"], &["+40"]).await?;
    /// # let _ = len;
    /// # Ok(()) }
    /// ```
    pub async fn eval<T: FromRedisValue>(
        &self,
        script: &FencedScript,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        self.run(&script.script, keys, args).await
    }

    /// `SET key value`, fenced.
    ///
    /// ```no_run
    /// # async fn demo(fence: lock_core::Fence) -> lock_core::Result<()> {
    /// fence.set("config:{app}:mode", "maintenance").await?;
    /// # Ok(()) }
    /// ```
    pub async fn set(&self, key: &str, value: &str) -> Result<()> {
        let scripts = &self.engine.core.scripts;
        let _: redis::Value = self.run(&scripts.fenced_set, &[key], &[value]).await?;
        Ok(())
    }

    /// `INCRBY key delta`, fenced: the value after.
    ///
    /// ```no_run
    /// # async fn demo(fence: lock_core::Fence) -> lock_core::Result<()> {
    /// let left = fence.incr_by("stock:{sku-1}", -1).await?;
    /// # let _ = left;
    /// # Ok(()) }
    /// ```
    pub async fn incr_by(&self, key: &str, delta: i64) -> Result<i64> {
        let scripts = &self.engine.core.scripts;
        let delta = delta.to_string();
        self.run(&scripts.fenced_incr_by, &[key], &[&delta]).await
    }

    /// `HSET key field value`, fenced.
    ///
    /// ```no_run
    /// # async fn demo(fence: lock_core::Fence) -> lock_core::Result<()> {
    /// fence.hset("order:{42}", "state", "paid").await?;
    /// # Ok(()) }
    /// ```
    pub async fn hset(&self, key: &str, field: &str, value: &str) -> Result<()> {
        let scripts = &self.engine.core.scripts;
        let _: i64 = self
            .run(&scripts.fenced_hset, &[key], &[field, value])
            .await?;
        Ok(())
    }

    /// `DEL key`, fenced: true when the key was there.
    ///
    /// ```no_run
    /// # async fn demo(fence: lock_core::Fence) -> lock_core::Result<()> {
    /// let was_there = fence.del("cart:{user-9}").await?;
    /// # let _ = was_there;
    /// # Ok(()) }
    /// ```
    pub async fn del(&self, key: &str) -> Result<bool> {
        let scripts = &self.engine.core.scripts;
        let removed: i64 = self.run(&scripts.fenced_del, &[key], &[]).await?;
        Ok(removed > 0)
    }

    async fn run<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let core = &self.engine.core;
        if core.cluster {
            self.check_slots(keys)?;
        }
        // Known to have ended here (released, handed on, lost, or past its
        // deadline): refused without asking Redis.
        if !self.hold.is_valid() || self.hold.has_ended() {
            return Err(self.refused());
        }
        let field = self.keys.field(&self.hold.owner);
        // A cluster connection re-sends a command whose reply it lost
        // (redis-rs's retries): a request latch makes a second copy a no-op.
        // One server and Sentinel connections never re-send.
        let latch = self.keys.latch(&core.request_id());
        let call = fenced::FencedCall {
            lock: &self.keys.lock,
            field: &field,
            latch: &latch,
            latch_ms: if core.cluster { core.latch_ms() } else { 0 },
            keys,
            args,
        };
        let cmd = call.cmd(script);
        match core.run_script(script, &cmd).await {
            Ok(value) => T::from_redis_value(value).map_err(|e| Error::Redis(e.into())),
            Err(Error::Redis(e)) if fenced::is_refusal(&e) => {
                // Redis says the hold is gone: its guards learn it now
                // (unless it was released meanwhile: not a loss).
                if !self.hold.has_ended() {
                    self.hold.mark_gone("a fenced write found the hold gone");
                }
                Err(self.refused())
            }
            Err(e) => Err(e),
        }
    }

    fn refused(&self) -> Error {
        Error::FenceRefused {
            name: self.keys.name.clone(),
        }
    }

    /// On a cluster: every key in the lock key's slot.
    fn check_slots(&self, keys: &[&str]) -> Result<()> {
        let slot = key_slot(self.keys.lock.as_bytes());
        match keys.iter().find(|k| key_slot(k.as_bytes()) != slot) {
            None => Ok(()),
            Some(key) => Err(Error::InvalidArgument(format!(
                "fenced write: key `{key}` is in cluster slot {}, the lock `{}` in slot {slot}; \
                 a fenced write can only touch keys of the lock's slot (give the lock a hash tag \
                 like `stock:{{sku-42}}` and use the same `{{tag}}` in the keys)",
                key_slot(key.as_bytes()),
                self.keys.lock
            ))),
        }
    }
}
