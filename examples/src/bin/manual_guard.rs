//! The manual guard API in one small program: two tasks (think: two
//! replicas) take turns on one lock, and a counter updated with a
//! read-then-write under the lock never loses an update.
//!
//! Run it with `cargo run -p lock-examples --bin manual_guard`. It uses the
//! Redis at `$REDIS_URL` when set, otherwise it starts a private
//! `redis-server` for the run (the binary must be installed).

use std::time::Duration;

use lock_core::LockClient;

const WORKERS: usize = 4;
const ROUNDS: usize = 25;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Keep the private server (if any) alive until the end of main.
    let (url, _server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = lock_tests::RedisServer::start()?;
            println!("started a private redis-server on {}", server.url());
            (server.url(), Some(server))
        }
    };
    let client = LockClient::builder(url.as_str())
        .watchdog_timeout(Duration::from_secs(5))
        .build()?;
    client.ping().await?;
    let counter_key = format!("example:counter:{}", client.client_id());

    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let client = client.clone();
        let counter_key = counter_key.clone();
        tasks.push(tokio::spawn(async move {
            let lock = client.lock("example:counter-lock")?;
            let mut conn = redis_conn(&client).await?;
            for _ in 0..ROUNDS {
                let guard = lock.acquire().await?;
                // A read-then-write that would lose updates without the lock.
                let value: i64 = conn.get(&counter_key).await?;
                tokio::task::yield_now().await;
                conn.set(&counter_key, value + 1).await?;
                guard.release().await?;
            }
            println!("worker {worker} done");
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for task in tasks {
        task.await?.map_err(|e| e.to_string())?;
    }
    let mut conn = redis_conn(&client).await?;
    let total: i64 = conn.get(&counter_key).await?;
    conn.del(&counter_key).await?;
    println!("counter = {total} (expected {})", WORKERS * ROUNDS);
    if total != (WORKERS * ROUNDS) as i64 {
        return Err("lost update: the lock did not exclude".into());
    }
    Ok(())
}

/// A tiny async wrapper around one TCP connection for the example's own
/// GET/SET (the lock client does not expose raw Redis commands).
async fn redis_conn(client: &LockClient) -> Result<Conn, Box<dyn std::error::Error + Send + Sync>> {
    let redis = redis::Client::open(client.config().url.as_str())?;
    Ok(Conn(redis.get_multiplexed_async_connection().await?))
}

struct Conn(redis::aio::MultiplexedConnection);

impl Conn {
    async fn get(&mut self, key: &str) -> redis::RedisResult<i64> {
        let v: Option<i64> = redis::cmd("GET").arg(key).query_async(&mut self.0).await?;
        Ok(v.unwrap_or(0))
    }
    async fn set(&mut self, key: &str, value: i64) -> redis::RedisResult<()> {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query_async(&mut self.0)
            .await
    }
    async fn del(&mut self, key: &str) -> redis::RedisResult<()> {
        redis::cmd("DEL").arg(key).query_async(&mut self.0).await
    }
}
