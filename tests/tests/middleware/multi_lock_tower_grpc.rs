//! lock-tower's `MultiLockLayer` behind real tonic servers on loopback,
//! keyed by a metadata entry that lists accounts (`x-accounts: a,b`),
//! called by real tonic clients; private redis-servers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::multi_lock_tower::KeysObserver;
use crate::support::layer::client;
use crate::support::{cmd, commands_but_info, raw, server, within};
use futures_util::future::join_all;
use lock_core::LockClient;
use lock_examples::proto::accounts_client::AccountsClient;
use lock_examples::proto::accounts_server::{Accounts, AccountsServer};
use lock_examples::proto::{WithdrawReply, WithdrawRequest};
use lock_tower::{Grpc, HeldLocks, MakeLockKeys, MultiLockLayer};
use tokio::sync::oneshot;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

const METADATA: &str = "x-accounts";

/// The accounts a call names: `x-accounts: a,b` locks `account:a` and
/// `account:b`; no entry, no lock.
fn accounts(req: &http::Request<tonic::body::Body>) -> Option<Vec<String>> {
    let value = req.headers().get(METADATA)?.to_str().ok()?;
    Some(value.split(',').map(|a| format!("account:{a}")).collect())
}

type Keys = fn(&http::Request<tonic::body::Body>) -> Option<Vec<String>>;

fn layer(client: LockClient, wait: Duration) -> MultiLockLayer<Keys, Grpc> {
    MultiLockLayer::grpc(client, accounts as Keys).wait(wait)
}

/// Runs one observer section per call under the locks of its
/// `HeldLocks`; answers `accepted` when every lock's token is the one in
/// Redis, `concurrent` = how many locks the call holds.
struct TransferService {
    observer: Option<Arc<KeysObserver>>,
    raw: redis::aio::MultiplexedConnection,
    work: Duration,
}

#[tonic::async_trait]
impl Accounts for TransferService {
    async fn withdraw(
        &self,
        request: Request<WithdrawRequest>,
    ) -> Result<Response<WithdrawReply>, Status> {
        let Some(locks) = request.extensions().get::<HeldLocks>().cloned() else {
            return Ok(Response::new(WithdrawReply {
                accepted: false,
                balance: 0,
                concurrent: 0,
            }));
        };
        let mut raw = self.raw.clone();
        let mut tokens_match = locks.is_held();
        for held in locks.locks() {
            let token_key = format!("redisson_lock_token:{{{}}}", held.key());
            let in_redis: Option<u64> = cmd(&mut raw, &["GET", &token_key]).await;
            tokens_match &= in_redis == Some(held.fencing_token());
        }
        if let Some(observer) = &self.observer {
            let names: Vec<String> = locks.names().into_iter().map(String::from).collect();
            observer.section(&names, self.work).await;
        }
        Ok(Response::new(WithdrawReply {
            accepted: tokens_match,
            balance: locks
                .locks()
                .first()
                .map_or(0, |h| h.fencing_token() as i64),
            concurrent: locks.locks().len() as u32,
        }))
    }
}

/// A tonic server of `service` behind `layer` on a loopback port; it
/// stops when the returned sender is dropped.
async fn start<K>(
    layer: MultiLockLayer<K, Grpc>,
    service: TransferService,
) -> (SocketAddr, oneshot::Sender<()>)
where
    K: MakeLockKeys<http::Request<tonic::body::Body>> + Send + Sync + 'static,
{
    let incoming =
        tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().expect("addr"))
            .expect("bind");
    let addr = incoming.local_addr().expect("local addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .layer(layer)
        .add_service(AccountsServer::new(service))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stopped.await;
        });
    tokio::spawn(server);
    (addr, stop)
}

async fn connect(addr: SocketAddr) -> AccountsClient<Channel> {
    AccountsClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

async fn call(
    mut client: AccountsClient<Channel>,
    accounts: Option<&str>,
) -> Result<WithdrawReply, Status> {
    let mut request = Request::new(WithdrawRequest { amount: 1 });
    if let Some(accounts) = accounts {
        request
            .metadata_mut()
            .insert(METADATA, accounts.parse().expect("ascii"));
    }
    match tokio::time::timeout(Duration::from_secs(30), client.withdraw(request)).await {
        Ok(r) => r.map(Response::into_inner),
        Err(_) => panic!("call not answered within 30 s"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_account_sets_through_two_servers_never_overlap() {
    let redis_server = server();
    let observer = KeysObserver::new(&redis_server).await;
    let wait = Duration::from_secs(30);
    let service = |raw| TransferService {
        observer: Some(observer.clone()),
        raw,
        work: Duration::from_millis(5),
    };
    let (a, _stop_a) = start(
        layer(client(&redis_server), wait),
        service(raw(&redis_server).await),
    )
    .await;
    let (b, _stop_b) = start(
        layer(client(&redis_server), wait),
        service(raw(&redis_server).await),
    )
    .await;
    let clients = [connect(a).await, connect(b).await];
    let sets = ["a,b", "b,a", "b,c"];
    const N: usize = 30;
    let replies = within(
        Duration::from_secs(60),
        "30 calls",
        join_all((0..N).map(|i| call(clients[i % 2].clone(), Some(sets[i % 3])))),
    )
    .await;
    for r in replies {
        let reply = r.expect("call");
        assert!(reply.accepted, "a token differs from Redis'");
        assert_eq!(reply.concurrent, 2);
    }
    assert_eq!(
        observer.violations().await,
        (0, 0, 0),
        "overlap or lock missing"
    );
    assert_eq!(observer.counter("account:a"), 20, "lost updates on a");
    assert_eq!(observer.counter("account:b"), N as u64, "lost updates on b");
    assert_eq!(observer.counter("account:c"), 10, "lost updates on c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_method_sees_its_locks_and_calls_without_accounts_pass_through() {
    let redis_server = server();
    let service = TransferService {
        observer: None,
        raw: raw(&redis_server).await,
        work: Duration::ZERO,
    };
    let (addr, _stop) = start(
        layer(client(&redis_server), Duration::from_secs(5)),
        service,
    )
    .await;
    let client = connect(addr).await;
    let mut last = 0;
    for _ in 0..3 {
        let reply = call(client.clone(), Some("9,4,9")).await.expect("call");
        assert!(reply.accepted, "a token differs from Redis'");
        assert_eq!(reply.concurrent, 2, "duplicates count once");
        assert!(reply.balance > last, "tokens must grow");
        last = reply.balance;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = commands_but_info(&redis_server);
    for _ in 0..5 {
        let reply = call(client.clone(), None).await.expect("keyless call");
        assert_eq!((reply.accepted, reply.concurrent), (false, 0), "no locks");
    }
    assert_eq!(
        before,
        commands_but_info(&redis_server),
        "keyless calls used Redis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_is_unavailable_and_an_invalid_key_invalid_argument() {
    let redis_server = server();
    let lock_client = LockClient::builder(redis_server.url())
        .max_name_len(16)
        .build()
        .expect("client");
    let observer = KeysObserver::new(&redis_server).await;
    let service = |raw| TransferService {
        observer: Some(observer.clone()),
        raw,
        work: Duration::ZERO,
    };
    let wait = Duration::from_millis(200);
    let (plain, _stop_plain) = start(
        layer(lock_client.clone(), wait),
        service(raw(&redis_server).await),
    )
    .await;
    let custom_layer = layer(lock_client.clone(), wait).on_rejection(|err| {
        if err.is_busy() {
            Status::resource_exhausted(format!("busy: {}", err.keys().join(" ")))
        } else {
            Grpc::default_status(err)
        }
    });
    let (custom, _stop_custom) = start(custom_layer, service(raw(&redis_server).await)).await;
    let (plain, custom) = (connect(plain).await, connect(custom).await);

    let other = client(&redis_server);
    let held = other
        .lock("account:y")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let status = call(plain.clone(), Some("x,y")).await.expect_err("busy");
    assert_eq!(
        (status.code(), status.message()),
        (Code::Unavailable, "lock busy, retry later")
    );
    let status = call(custom.clone(), Some("y,x")).await.expect_err("busy");
    assert_eq!(
        (status.code(), status.message()),
        (Code::ResourceExhausted, "busy: account:x account:y")
    );
    assert_eq!(observer.entered(), 0, "a rejected call ran its method");
    call(plain.clone(), Some("x,z"))
        .await
        .expect("y not involved");
    held.release().await.expect("release");
    call(plain.clone(), Some("x,y")).await.expect("free again");

    let long = "x".repeat(40);
    let status = call(plain, Some(&format!("x,{long}")))
        .await
        .expect_err("too long");
    assert_eq!(
        (status.code(), status.message()),
        (Code::InvalidArgument, "invalid lock key")
    );
    assert_eq!(observer.entered(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_waiting_takes_no_lock() {
    let redis_server = server();
    let lock_client = client(&redis_server);
    let observer = KeysObserver::new(&redis_server).await;
    let service = TransferService {
        observer: Some(observer.clone()),
        raw: raw(&redis_server).await,
        work: Duration::ZERO,
    };
    let (addr, _stop) = start(layer(lock_client.clone(), Duration::from_secs(10)), service).await;
    let grpc = connect(addr).await;
    let other = client(&redis_server);
    let held = other
        .lock("account:n")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    // The client gives up after 200 ms: the stream is reset, the server
    // drops the waiting request.
    let gone =
        tokio::time::timeout(Duration::from_millis(200), call(grpc.clone(), Some("m,n"))).await;
    assert!(gone.is_err(), "the call should still have been waiting");
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut conn = raw(&redis_server).await;
    let n: i64 = cmd(&mut conn, &["EXISTS", "account:m", "account:n"]).await;
    assert_eq!(n, 0, "a cancelled call took its locks");
    assert_eq!(observer.entered(), 0, "the cancelled call ran its method");
    within(
        Duration::from_secs(10),
        "the next call",
        call(grpc, Some("m,n")),
    )
    .await
    .expect("call");
    assert_eq!(observer.entered(), 1);
}
