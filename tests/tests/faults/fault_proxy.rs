//! The harness's fault proxy under a real async client (redis-rs), the way
//! the lock library will meet it: cut, delayed and black-holed replies on a
//! multiplexed connection.

use std::time::Duration;

use lock_tests::{CommandMatch, CutKind, Fault, FaultProxy, RedisServer, RespValue};
use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;

fn setup() -> (RedisServer, FaultProxy) {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("redis-server: {e}"));
    let proxy = FaultProxy::start(server.addr()).unwrap_or_else(|e| panic!("proxy: {e}"));
    (server, proxy)
}

/// A redis-rs multiplexed connection through the proxy, with a response timeout.
async fn connect(proxy: &FaultProxy, response_timeout: Duration) -> MultiplexedConnection {
    let client = redis::Client::open(proxy.url()).unwrap_or_else(|e| panic!("{e}"));
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(response_timeout));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap_or_else(|e| panic!("connect through the proxy: {e}"))
}

async fn query<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    args: &[&str],
) -> redis::RedisResult<T> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(conn).await
}

fn server_get(server: &RedisServer, key: &str) -> RespValue {
    server
        .command(&["GET", key])
        .unwrap_or_else(|e| panic!("GET {key}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_reply_is_an_error_for_redis_rs_but_the_command_was_applied() {
    let (server, proxy) = setup();
    let mut conn = connect(&proxy, Duration::from_secs(2)).await;
    for how in [CutKind::Fin, CutKind::Rst] {
        let cut = proxy.fault_next(
            CommandMatch::name("INCR"),
            Fault::CutReply { after: 1, how },
        );
        let result: redis::RedisResult<i64> = query(&mut conn, &["INCR", "n"]).await;
        let err = result
            .err()
            .unwrap_or_else(|| panic!("{how:?}: the INCR should fail"));
        assert!(!err.is_timeout(), "{how:?}: {err}");
        assert!(cut.fired());
        assert_eq!(cut.reply_len(), Some(b":1\r\n".len()));
        // A fresh connection (what a pool would open next) works again.
        conn = connect(&proxy, Duration::from_secs(2)).await;
    }
    assert_eq!(server_get(&server, "n").as_i64(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_reply_times_out_in_redis_rs_and_later_replies_stay_in_order() {
    let (server, proxy) = setup();
    let mut conn = connect(&proxy, Duration::from_millis(100)).await;
    let slow = proxy.fault_next(
        CommandMatch::name("SET").with_arg("slow"),
        Fault::DelayReply(Duration::from_millis(300)),
    );
    let result: redis::RedisResult<()> = query(&mut conn, &["SET", "slow", "1"]).await;
    assert!(result.as_ref().is_err_and(|e| e.is_timeout()), "{result:?}");
    assert!(slow.fired());
    // The command was applied even though the client gave up on it.
    assert_eq!(server_get(&server, "slow").as_i64(), Some(1));
    // Once the late reply has arrived, the connection answers in order again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _: () = query(&mut conn, &["SET", "k", "v"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let v: String = query(&mut conn, &["GET", "k"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v, "v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_during_a_black_hole_completes_after_heal() {
    let (_server, proxy) = setup();
    let mut conn = connect(&proxy, Duration::from_secs(5)).await;
    proxy.black_hole();
    let pending = tokio::spawn(async move {
        let r: redis::RedisResult<i64> = query(&mut conn, &["INCR", "n"]).await;
        r
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!pending.is_finished());
    assert_eq!(proxy.connections(), 1);
    proxy.heal();
    let reply = tokio::time::timeout(Duration::from_secs(2), pending)
        .await
        .unwrap_or_else(|_| panic!("no reply after heal"))
        .unwrap_or_else(|e| panic!("task: {e}"));
    assert_eq!(reply.ok(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_all_breaks_redis_rs_connections_and_new_ones_work() {
    let (_server, proxy) = setup();
    let mut conn = connect(&proxy, Duration::from_secs(2)).await;
    let pong: String = query(&mut conn, &["PING"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pong, "PONG");
    proxy.cut_all(CutKind::Rst);
    assert_eq!(proxy.connections(), 0);
    let result: redis::RedisResult<String> = query(&mut conn, &["PING"]).await;
    assert!(result.is_err(), "{result:?}");
    let mut fresh = connect(&proxy, Duration::from_secs(2)).await;
    let pong: String = query(&mut fresh, &["PING"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pong, "PONG");
}
