//! An independent observer of a read-write lock (see [`RwInside`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use super::{cmd, raw};

/// An independent observer of a read-write lock: counters of readers and
/// writers inside, in Redis, changed and read in one `MULTI` with its own
/// connection. A writer entering while anyone is inside, or a reader
/// entering while a writer is, is a violation (counted in Redis too).
#[derive(Clone)]
pub struct RwInside {
    conn: redis::aio::MultiplexedConnection,
    key: String,
    /// The most readers seen inside at once.
    pub most_readers: Arc<AtomicI64>,
}

impl RwInside {
    pub async fn new(server: &lock_tests::RedisServer, name: &str) -> RwInside {
        let mut conn = raw(server).await;
        let key = format!("observer:rw:{name}");
        let _: () = cmd(
            &mut conn,
            &[
                "DEL",
                &format!("{key}:r"),
                &format!("{key}:w"),
                &format!("{key}:bad"),
            ],
        )
        .await;
        RwInside {
            conn,
            key,
            most_readers: Arc::new(AtomicI64::new(0)),
        }
    }

    async fn step(&mut self, mine: &str, add: i64) -> (i64, i64) {
        let (r, w) = (format!("{}:r", self.key), format!("{}:w", self.key));
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("INCRBY")
            .arg(if mine == "r" { &r } else { &w })
            .arg(add)
            .ignore()
            .cmd("GET")
            .arg(&r)
            .cmd("GET")
            .arg(&w);
        let (readers, writers): (Option<i64>, Option<i64>) = pipe
            .query_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("observer: {e}"));
        (readers.unwrap_or(0), writers.unwrap_or(0))
    }

    async fn violation(&mut self) {
        let bad = format!("{}:bad", self.key);
        let _: i64 = cmd(&mut self.conn, &["INCR", &bad]).await;
    }

    /// A reader comes in; false (and a violation) when a writer is inside.
    pub async fn enter_read(&mut self) -> bool {
        let (readers, writers) = self.step("r", 1).await;
        self.most_readers.fetch_max(readers, Ordering::Relaxed);
        if writers != 0 {
            self.violation().await;
        }
        writers == 0
    }

    pub async fn leave_read(&mut self) {
        self.step("r", -1).await;
    }

    /// A writer comes in; false (and a violation) when anyone else is inside.
    pub async fn enter_write(&mut self) -> bool {
        let (readers, writers) = self.step("w", 1).await;
        let alone = readers == 0 && writers == 1;
        if !alone {
            self.violation().await;
        }
        alone
    }

    pub async fn leave_write(&mut self) {
        self.step("w", -1).await;
    }

    pub async fn violations(&mut self) -> i64 {
        let bad = format!("{}:bad", self.key);
        let n: Option<i64> = cmd(&mut self.conn, &["GET", &bad]).await;
        n.unwrap_or(0)
    }
}
