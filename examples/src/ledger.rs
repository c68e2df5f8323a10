//! A ledger of account balances in Redis, updated with a read, a pause and
//! a write: without a lock around each withdrawal, concurrent withdrawals
//! from one account lose updates. It also keeps an "inside" marker per
//! account, so that two withdrawals of one account ever running at the
//! same time are detected, and counts the withdrawals in progress.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// How long a withdrawal sits between reading and writing a balance.
pub const WORK: Duration = Duration::from_millis(30);

/// The balances of one run of an example (its keys start with
/// `example:<run>:`).
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_examples::BoxError> {
/// use lock_examples::ledger::Ledger;
/// let mut ledger = Ledger::connect("redis://127.0.0.1:6379", "run-1").await?;
/// ledger.set_balance("alice", 100).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Ledger {
    redis: MultiplexedConnection,
    run: String,
}

/// What a withdrawal did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Another withdrawal of the same account was inside: the lock did not
    /// exclude. Nothing was changed.
    Overlap,
    /// The withdrawal ran.
    Done {
        /// Whether the balance was large enough (and was decreased).
        accepted: bool,
        /// The balance afterwards.
        balance: i64,
        /// Withdrawals in progress (any account, any process) when this one
        /// started, itself included.
        concurrent: i64,
    },
}

impl Ledger {
    /// Connects to Redis at `url`, for the keys of run `run`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_examples::BoxError> {
    /// let ledger = lock_examples::ledger::Ledger::connect("redis://127.0.0.1:6379", "run-1").await?;
    /// # drop(ledger); Ok(()) }
    /// ```
    pub async fn connect(url: &str, run: &str) -> redis::RedisResult<Self> {
        let redis = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(Ledger {
            redis,
            run: run.to_string(),
        })
    }

    fn key(&self, kind: &str, account: &str) -> String {
        format!("example:{}:{kind}:{account}", self.run)
    }

    /// Sets an account's balance.
    ///
    /// ```no_run
    /// # async fn demo(mut ledger: lock_examples::ledger::Ledger) -> redis::RedisResult<()> {
    /// ledger.set_balance("alice", 100).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_balance(&mut self, account: &str, balance: i64) -> redis::RedisResult<()> {
        let key = self.key("balance", account);
        redis::cmd("SET")
            .arg(key)
            .arg(balance)
            .query_async(&mut self.redis)
            .await
    }

    /// An account's balance (0 when unknown).
    ///
    /// ```no_run
    /// # async fn demo(mut ledger: lock_examples::ledger::Ledger) -> redis::RedisResult<()> {
    /// println!("{}", ledger.balance("alice").await?);
    /// # Ok(()) }
    /// ```
    pub async fn balance(&mut self, account: &str) -> redis::RedisResult<i64> {
        let key = self.key("balance", account);
        let v: Option<i64> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut self.redis)
            .await?;
        Ok(v.unwrap_or(0))
    }

    /// Deletes an account's keys.
    ///
    /// ```no_run
    /// # async fn demo(mut ledger: lock_examples::ledger::Ledger) -> redis::RedisResult<()> {
    /// ledger.remove("alice").await?;
    /// # Ok(()) }
    /// ```
    pub async fn remove(&mut self, account: &str) -> redis::RedisResult<()> {
        let keys = [self.key("balance", account), self.key("inside", account)];
        redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut self.redis)
            .await
    }

    /// The lock keys of this run that exist in Redis now (the account
    /// locks `example:<run>:account:<id>`, hashes in Redisson's layout).
    /// Empty once every server gave its locks back.
    ///
    /// ```no_run
    /// # async fn demo(mut ledger: lock_examples::ledger::Ledger) -> redis::RedisResult<()> {
    /// assert!(ledger.lock_keys().await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn lock_keys(&mut self) -> redis::RedisResult<Vec<String>> {
        let pattern = format!("example:{}:account:*", self.run);
        let mut found = Vec::new();
        let mut cursor: u64 = 0;
        // Bounded: a full SCAN of a test database takes a few rounds.
        for _ in 0..100_000 {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("TYPE")
                .arg("hash")
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut self.redis)
                .await?;
            found.extend(keys);
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        Ok(found)
    }

    /// Withdraws `amount` from `account` if the balance allows: read the
    /// balance, wait [`WORK`], write it back. Safe only when withdrawals
    /// from one account never run at the same time.
    ///
    /// ```no_run
    /// # async fn demo(mut ledger: lock_examples::ledger::Ledger) -> redis::RedisResult<()> {
    /// use lock_examples::ledger::Outcome;
    /// match ledger.withdraw("alice", 10).await? {
    ///     Outcome::Done { accepted, balance, .. } => println!("{accepted} {balance}"),
    ///     Outcome::Overlap => eprintln!("two withdrawals at once!"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn withdraw(&mut self, account: &str, amount: i64) -> redis::RedisResult<Outcome> {
        let inside = self.key("inside", account);
        let balance_key = self.key("balance", account);
        let inflight = format!("example:{}:inflight", self.run);
        let conn = &mut self.redis;

        let entered: Option<String> = redis::cmd("SET")
            .arg(&inside)
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(60_000)
            .query_async(conn)
            .await?;
        if entered.is_none() {
            return Ok(Outcome::Overlap);
        }
        let concurrent: i64 = redis::cmd("INCR").arg(&inflight).query_async(conn).await?;

        let balance: Option<i64> = redis::cmd("GET")
            .arg(&balance_key)
            .query_async(conn)
            .await?;
        let balance = balance.unwrap_or(0);
        tokio::time::sleep(WORK).await; // the window in which updates would be lost
        let accepted = balance >= amount;
        let balance = if accepted { balance - amount } else { balance };
        let () = redis::cmd("SET")
            .arg(&balance_key)
            .arg(balance)
            .query_async(conn)
            .await?;

        let _: i64 = redis::cmd("DECR").arg(&inflight).query_async(conn).await?;
        let _: i64 = redis::cmd("DEL").arg(&inside).query_async(conn).await?;
        Ok(Outcome::Done {
            accepted,
            balance,
            concurrent,
        })
    }
}

/// A run id unique enough to keep concurrent runs of an example apart in
/// one Redis.
///
/// ```
/// assert_ne!(lock_examples::ledger::run_id(), "");
/// ```
pub fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}
