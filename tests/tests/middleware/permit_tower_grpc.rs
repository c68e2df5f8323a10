//! lock-tower's `PermitLayer` behind real tonic servers on loopback, keyed
//! by a metadata entry, called by real tonic clients; private
//! redis-servers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::support::layer::{client, LimitProbe};
use crate::support::{cmd, raw, server, within};
use futures_util::future::join_all;
use lock_core::LockClient;
use lock_examples::proto::accounts_client::AccountsClient;
use lock_examples::proto::accounts_server::{Accounts, AccountsServer};
use lock_examples::proto::{WithdrawReply, WithdrawRequest};
use lock_tower::{Grpc, MetadataKey, PermitLayer, RequestPermit};
use tokio::sync::oneshot;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

const METADATA: &str = "x-tenant";

/// Runs one probe section per call; fails the call when it has no permit.
struct LimitedService {
    probe: Arc<LimitProbe>,
    work: Duration,
}

#[tonic::async_trait]
impl Accounts for LimitedService {
    async fn withdraw(
        &self,
        request: Request<WithdrawRequest>,
    ) -> Result<Response<WithdrawReply>, Status> {
        let permit = request
            .extensions()
            .get::<RequestPermit>()
            .ok_or_else(|| Status::internal("no permit in the extensions"))?;
        if !permit.is_held() || !permit.name().starts_with("limit:") {
            return Err(Status::internal(format!("bad permit {permit:?}")));
        }
        self.probe.section(self.work).await;
        Ok(Response::new(WithdrawReply {
            accepted: true,
            balance: 0,
            concurrent: 0,
        }))
    }
}

fn layer(client: LockClient, permits: u64, wait: Duration) -> PermitLayer<MetadataKey, Grpc> {
    PermitLayer::grpc(
        client,
        MetadataKey::from_static(METADATA).prefix("limit:"),
        permits,
    )
    .wait(wait)
}

/// A tonic server of the service behind `layer`, on a loopback port; it
/// stops when the returned sender is dropped.
async fn start(
    layer: PermitLayer<MetadataKey, Grpc>,
    service: LimitedService,
) -> (SocketAddr, oneshot::Sender<()>) {
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

async fn call(mut client: AccountsClient<Channel>, tenant: &str) -> Result<WithdrawReply, Status> {
    let mut request = Request::new(WithdrawRequest { amount: 1 });
    request
        .metadata_mut()
        .insert(METADATA, tenant.parse().expect("ascii"));
    match tokio::time::timeout(Duration::from_secs(30), client.withdraw(request)).await {
        Ok(r) => r.map(Response::into_inner),
        Err(_) => panic!("call not answered within 30 s"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_through_two_servers_never_exceed_the_limit() {
    let redis_server = server();
    let probe = LimitProbe::new(&redis_server, "grpc", 2).await;
    let work = Duration::from_millis(20);
    let wait = Duration::from_secs(10);
    let service = || LimitedService {
        probe: probe.clone(),
        work,
    };
    let (a, _stop_a) = start(layer(client(&redis_server), 2, wait), service()).await;
    let (b, _stop_b) = start(layer(client(&redis_server), 2, wait), service()).await;
    let clients = [connect(a).await, connect(b).await];
    const N: usize = 30;
    let replies = within(
        Duration::from_secs(60),
        "30 calls",
        join_all((0..N).map(|i| call(clients[i % 2].clone(), "t1"))),
    )
    .await;
    for r in replies {
        r.expect("call");
    }
    assert_eq!(
        probe.violations().await,
        (0, 0),
        "more than 2 inside at once"
    );
    assert_eq!(probe.max_inside(), 2, "the limit was never reached");
    assert_eq!(probe.entered(), N as u64);
}

#[tokio::test]
async fn a_full_limit_is_resource_exhausted() {
    let redis_server = server();
    let lock_client = client(&redis_server);
    let probe = LimitProbe::new(&redis_server, "grpc-full", 2).await;
    let service = LimitedService {
        probe: probe.clone(),
        work: Duration::ZERO,
    };
    let (addr, _stop) = start(
        layer(lock_client.clone(), 2, Duration::from_millis(200)),
        service,
    )
    .await;
    let grpc = connect(addr).await;
    call(grpc.clone(), "t2").await.expect("a permit is free");
    // Someone else takes both permits of t2.
    let all = lock_client
        .permit_semaphore("limit:t2")
        .expect("name")
        .acquire(2)
        .await
        .expect("both");
    let status = call(grpc.clone(), "t2").await.expect_err("full");
    assert_eq!(
        (status.code(), status.message()),
        (
            Code::ResourceExhausted,
            "concurrency limit reached, retry later"
        )
    );
    call(grpc.clone(), "t3")
        .await
        .expect("another tenant has its own limit");
    all.release().await.expect("release");
    call(grpc, "t2").await.expect("free again");
    assert_eq!(probe.entered(), 3, "the refused call ran its handler");
    let mut obs = raw(&redis_server).await;
    let held: i64 = cmd(&mut obs, &["ZCARD", "{limit:t2}:timeout"]).await;
    let _ = within(Duration::from_secs(5), "permits back", async {
        let mut held = held;
        while held != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            held = cmd(&mut obs, &["ZCARD", "{limit:t2}:timeout"]).await;
        }
    })
    .await;
}
