//! lock-tower behind real tonic servers on loopback, keyed by a metadata
//! entry, called by real tonic clients; private redis-servers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::support::layer::{client, start_grpc, Probe};
use crate::support::{commands_but_info, server, within};
use futures_util::future::join_all;
use lock_core::LockClient;
use lock_examples::proto::accounts_client::AccountsClient;
use lock_examples::proto::accounts_server::Accounts;
use lock_examples::proto::{WithdrawReply, WithdrawRequest};
use lock_tower::{Grpc, LockLayer, MetadataKey};
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

const METADATA: &str = "x-account-id";

/// Runs one probe section per call, keyed by the call's metadata entry.
struct ProbeService {
    probe: Arc<Probe>,
    work: Duration,
}

#[tonic::async_trait]
impl Accounts for ProbeService {
    async fn withdraw(
        &self,
        request: Request<WithdrawRequest>,
    ) -> Result<Response<WithdrawReply>, Status> {
        let account = request
            .metadata()
            .get(METADATA)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_string();
        self.probe.section(&account, self.work).await;
        Ok(Response::new(WithdrawReply {
            accepted: true,
            balance: 0,
            concurrent: 0,
        }))
    }
}

fn layer(client: LockClient, wait: Duration) -> LockLayer<MetadataKey, Grpc> {
    LockLayer::grpc(
        client,
        MetadataKey::from_static(METADATA).prefix("account:"),
    )
    .wait(wait)
}

async fn connect(addr: SocketAddr) -> AccountsClient<Channel> {
    AccountsClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

async fn call(
    mut client: AccountsClient<Channel>,
    account: Option<&str>,
) -> Result<WithdrawReply, Status> {
    let mut request = Request::new(WithdrawRequest { amount: 1 });
    if let Some(account) = account {
        request
            .metadata_mut()
            .insert(METADATA, account.parse().expect("ascii"));
    }
    match tokio::time::timeout(Duration::from_secs(30), client.withdraw(request)).await {
        Ok(r) => r.map(Response::into_inner),
        Err(_) => panic!("call not answered within 30 s"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_metadata_key_calls_through_two_servers_never_overlap() {
    let redis_server = server();
    let probe = Probe::new();
    let work = Duration::from_millis(5);
    let wait = Duration::from_secs(30);
    let (a, _stop_a) = start_grpc(
        layer(client(&redis_server), wait),
        ProbeService {
            probe: probe.clone(),
            work,
        },
    )
    .await;
    let (b, _stop_b) = start_grpc(
        layer(client(&redis_server), wait),
        ProbeService {
            probe: probe.clone(),
            work,
        },
    )
    .await;
    let clients = [connect(a).await, connect(b).await];
    const N: usize = 30;
    let replies = within(
        Duration::from_secs(60),
        "30 calls",
        join_all((0..N).map(|i| call(clients[i % 2].clone(), Some("acct-1")))),
    )
    .await;
    for r in replies {
        r.expect("call");
    }
    assert_eq!(
        probe.overlaps(),
        0,
        "two calls for one key were inside at once"
    );
    assert_eq!(probe.counter("acct-1"), N as u64, "lost updates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_metadata_keys_run_concurrently() {
    let redis_server = server();
    let probe = Probe::new();
    let service = ProbeService {
        probe: probe.clone(),
        work: Duration::from_millis(200),
    };
    let (addr, _stop) = start_grpc(
        layer(client(&redis_server), Duration::from_secs(10)),
        service,
    )
    .await;
    let client = connect(addr).await;
    let accounts: Vec<String> = (0..8).map(|i| format!("acct-{i}")).collect();
    let replies = within(
        Duration::from_secs(30),
        "8 keys",
        join_all(accounts.iter().map(|a| call(client.clone(), Some(a)))),
    )
    .await;
    for r in replies {
        r.expect("call");
    }
    assert!(probe.max_running() > 1, "different keys never ran together");
}

#[tokio::test]
async fn calls_without_the_metadata_entry_pass_through_with_no_redis_command() {
    let redis_server = server();
    let probe = Probe::new();
    let service = ProbeService {
        probe: probe.clone(),
        work: Duration::ZERO,
    };
    let (addr, _stop) = start_grpc(
        layer(client(&redis_server), Duration::from_secs(5)),
        service,
    )
    .await;
    let client = connect(addr).await;
    call(client.clone(), Some("warm"))
        .await
        .expect("keyed call");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = commands_but_info(&redis_server);
    for _ in 0..10 {
        call(client.clone(), None).await.expect("keyless call");
    }
    assert_eq!(before, commands_but_info(&redis_server));
    assert_eq!(probe.entered(), 11);
}

#[tokio::test]
async fn busy_is_unavailable_and_redis_down_is_internal() {
    let mut redis_server = server();
    let lock_client = LockClient::builder(redis_server.url())
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let probe = Probe::new();
    let service = || ProbeService {
        probe: probe.clone(),
        work: Duration::ZERO,
    };
    let wait = Duration::from_millis(200);
    let (plain, _stop_plain) = start_grpc(layer(lock_client.clone(), wait), service()).await;
    let custom_layer = layer(lock_client.clone(), wait).on_rejection(|err| {
        if err.is_busy() {
            Status::resource_exhausted(format!("{} is busy", err.key()))
        } else {
            Grpc::default_status(err)
        }
    });
    let (custom, _stop_custom) = start_grpc(custom_layer, service()).await;
    let (plain, custom) = (connect(plain).await, connect(custom).await);

    let held = lock_client
        .lock("account:acct-2")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let status = call(plain.clone(), Some("acct-2")).await.expect_err("busy");
    assert_eq!(
        (status.code(), status.message()),
        (Code::Unavailable, "lock busy, retry later")
    );
    let status = call(custom.clone(), Some("acct-2"))
        .await
        .expect_err("busy");
    assert_eq!(
        (status.code(), status.message()),
        (Code::ResourceExhausted, "account:acct-2 is busy")
    );
    assert_eq!(probe.entered(), 0, "a rejected call ran its handler");
    held.release().await.expect("release");
    call(plain.clone(), Some("acct-2"))
        .await
        .expect("free again");

    redis_server.kill();
    let status = call(plain.clone(), Some("acct-2"))
        .await
        .expect_err("redis down");
    assert_eq!(
        (status.code(), status.message()),
        (Code::Internal, "lock unavailable")
    );
    // Calls without a key do not need Redis.
    call(plain, None)
        .await
        .expect("keyless call with redis down");
}

#[tokio::test]
async fn an_invalid_key_is_invalid_argument() {
    let redis_server = server();
    let lock_client = LockClient::builder(redis_server.url())
        .max_name_len(16)
        .build()
        .expect("client");
    let service = ProbeService {
        probe: Probe::new(),
        work: Duration::ZERO,
    };
    let (addr, _stop) = start_grpc(layer(lock_client, Duration::from_secs(1)), service).await;
    let status = call(connect(addr).await, Some(&"x".repeat(40)))
        .await
        .expect_err("too long");
    assert_eq!(status.code(), Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_waiting_gives_up_its_place() {
    let redis_server = server();
    let lock_client = client(&redis_server);
    let probe = Probe::new();
    let service = ProbeService {
        probe: probe.clone(),
        work: Duration::ZERO,
    };
    let (addr, _stop) =
        start_grpc(layer(lock_client.clone(), Duration::from_secs(10)), service).await;
    let client = connect(addr).await;
    let held = lock_client
        .lock("account:acct-3")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    // The client gives up after 200 ms: the stream is reset, the server
    // drops the waiting request.
    let gone = tokio::time::timeout(
        Duration::from_millis(200),
        call(client.clone(), Some("acct-3")),
    )
    .await;
    assert!(gone.is_err(), "the call should still have been waiting");
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.expect("release");
    within(
        Duration::from_secs(10),
        "the next call",
        call(client, Some("acct-3")),
    )
    .await
    .expect("call");
    assert_eq!(probe.entered(), 1, "the cancelled call ran its handler");
}
