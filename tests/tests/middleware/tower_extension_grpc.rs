//! The request's lock in tonic service methods behind real loopback
//! servers: the `HeldLockExt` accessor on `tonic::Request` carries the
//! lock Redis issued, and `cancel_on_lost` answers `ABORTED` and stops a
//! method whose lock is deleted behind it.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::layer::start_grpc;
use crate::support::{self, cmd, prefixed_client, raw, within};
use lock_core::{HeldLock, LockClient};
use lock_examples::proto::accounts_client::AccountsClient;
use lock_examples::proto::accounts_server::Accounts;
use lock_examples::proto::{WithdrawReply, WithdrawRequest};
use lock_tests::RedisServer;
use lock_tower::{Grpc, HeldLockExt, LockLayer, MetadataKey};
use redis::aio::MultiplexedConnection;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

const METADATA: &str = "x-account-id";

fn layer(client: LockClient) -> LockLayer<MetadataKey, Grpc> {
    LockLayer::grpc(
        client,
        MetadataKey::from_static(METADATA).prefix("account:"),
    )
    .wait(Duration::from_secs(5))
}

/// What a method saw of its lock, and what Redis said meanwhile.
#[derive(Debug)]
struct Seen {
    name: String,
    key: String,
    accessor_token: u64,
    current_token: Option<u64>,
    redis_token: Option<u64>,
    owner_in_redis: bool,
}

/// Reports what it sees of its lock, or (with `work`) marks its entry,
/// sleeps `work` and then increments the Redis counter `after`.
struct LockedAccounts {
    observer: MultiplexedConnection,
    seen: mpsc::UnboundedSender<Seen>,
    entered: mpsc::UnboundedSender<Instant>,
    work: Option<Duration>,
}

#[tonic::async_trait]
impl Accounts for LockedAccounts {
    async fn withdraw(
        &self,
        request: Request<WithdrawRequest>,
    ) -> Result<Response<WithdrawReply>, Status> {
        let held = request
            .held_lock()
            .cloned()
            .ok_or_else(|| Status::internal("no held lock in the request"))?;
        let mut observer = self.observer.clone();
        if let Some(work) = self.work {
            let _ = self.entered.send(Instant::now());
            tokio::time::sleep(work).await;
            let _: i64 = cmd(&mut observer, &["INCR", "after"]).await;
        } else {
            let token_key = format!("redisson_lock_token:{{{}}}", held.key());
            let redis_token: Option<u64> = cmd(&mut observer, &["GET", &token_key]).await;
            let owner: i64 = cmd(&mut observer, &["HEXISTS", held.key(), held.owner_id()]).await;
            let _ = self.seen.send(Seen {
                name: held.name().to_string(),
                key: held.key().to_string(),
                accessor_token: held.fencing_token(),
                current_token: HeldLock::current().map(|h| h.fencing_token()),
                redis_token,
                owner_in_redis: owner == 1,
            });
        }
        Ok(Response::new(WithdrawReply {
            accepted: held.is_held(),
            balance: 0,
            concurrent: 0,
        }))
    }
}

async fn call(addr: SocketAddr, account: &str) -> Result<WithdrawReply, Status> {
    let mut client: AccountsClient<Channel> = AccountsClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let mut request = Request::new(WithdrawRequest { amount: 1 });
    request
        .metadata_mut()
        .insert(METADATA, account.parse().expect("ascii"));
    match tokio::time::timeout(Duration::from_secs(30), client.withdraw(request)).await {
        Ok(r) => r.map(Response::into_inner),
        Err(_) => panic!("call not answered within 30 s"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tonic_accessor_carries_the_token_redis_issued() {
    let server = support::server();
    let client = prefixed_client(&server, Duration::from_secs(5), Duration::from_secs(2));
    let (seen, mut reports) = mpsc::unbounded_channel();
    let service = LockedAccounts {
        observer: raw(&server).await,
        seen,
        entered: mpsc::unbounded_channel().0,
        work: None,
    };
    let (addr, _stop) = start_grpc(layer(client), service).await;
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let reply = call(addr, "acct-7").await.expect("call");
        assert!(reply.accepted, "the lock was not held in the method");
        let seen = within(
            Duration::from_secs(5),
            "the method's report",
            reports.recv(),
        )
        .await
        .expect("a report");
        assert_eq!(seen.name, "account:acct-7");
        assert_eq!(seen.key, "app:account:acct-7");
        assert_eq!(seen.redis_token, Some(seen.accessor_token), "{seen:?}");
        assert_eq!(seen.current_token, Some(seen.accessor_token), "{seen:?}");
        assert!(seen.owner_in_redis, "{seen:?}");
        tokens.push(seen.accessor_token);
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must grow: {tokens:?}"
    );
}

/// Starts a call whose method sleeps `work`, deletes its lock once it has
/// entered, and returns the call's outcome, how long after the delete it
/// came, and when the method entered.
async fn delete_the_lock_behind_a_slow_call(
    server: &RedisServer,
    layer: LockLayer<MetadataKey, Grpc>,
    work: Duration,
    answer_within: Duration,
) -> (Result<WithdrawReply, Status>, Duration, Instant) {
    let (entered, mut entries) = mpsc::unbounded_channel();
    let service = LockedAccounts {
        observer: raw(server).await,
        seen: mpsc::unbounded_channel().0,
        entered,
        work: Some(work),
    };
    let (addr, stop) = start_grpc(layer, service).await;
    let call = tokio::spawn(async move { call(addr, "acct-1").await });
    let entered = within(Duration::from_secs(5), "the method starts", entries.recv())
        .await
        .expect("an entry");
    let mut observer = raw(server).await;
    let deleted_at = Instant::now();
    let removed: i64 = cmd(&mut observer, &["DEL", "app:account:acct-1"]).await;
    assert_eq!(removed, 1, "the lock was not in Redis");
    let outcome = within(answer_within, "the call's answer after the DEL", call)
        .await
        .expect("call task");
    let took = deleted_at.elapsed();
    drop(stop);
    (outcome, took, entered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_on_lost_answers_aborted_and_stops_the_method() {
    let server = support::server();
    let client = prefixed_client(&server, Duration::from_millis(900), Duration::from_secs(2));
    let work = Duration::from_secs(5);
    let (outcome, took, entered) = delete_the_lock_behind_a_slow_call(
        &server,
        layer(client).cancel_on_lost(),
        work,
        Duration::from_secs(3),
    )
    .await;
    let status = outcome.expect_err("the call was cancelled");
    assert_eq!(
        (status.code(), status.message()),
        (Code::Aborted, "lock lost, call cancelled")
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
    tokio::time::sleep_until(entered + work + Duration::from_millis(700)).await;
    let mut observer = raw(&server).await;
    let after: Option<i64> = cmd(&mut observer, &["GET", "after"]).await;
    assert_eq!(after, None, "the cancelled method ran on after its sleep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cancel_on_lost_the_method_runs_to_its_end() {
    let server = support::server();
    let client = prefixed_client(&server, Duration::from_millis(900), Duration::from_secs(2));
    let (outcome, _, _) = delete_the_lock_behind_a_slow_call(
        &server,
        layer(client),
        Duration::from_millis(1500),
        Duration::from_secs(10),
    )
    .await;
    let reply = outcome.expect("the call ran to its end");
    assert!(!reply.accepted, "the method did not see its lock go");
    let mut observer = raw(&server).await;
    let after: Option<i64> = cmd(&mut observer, &["GET", "after"]).await;
    assert_eq!(after, Some(1));
}
