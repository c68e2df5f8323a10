//! A gRPC account service on tonic with lock-tower's `LockLayer`, keyed by
//! the `x-account-id` metadata entry: calls for one account run one at a
//! time across two server replicas, calls for different accounts run
//! together, and a call that cannot get its lock in time is answered
//! `UNAVAILABLE`.
//!
//! Run it with `cargo run -p lock-examples --bin tonic_accounts`. It uses
//! the Redis at `$REDIS_URL` when set, otherwise it starts a private
//! `redis-server` for the run (the binary must be installed). The gRPC code
//! is generated from `examples/proto/accounts.proto` at build time with
//! protox (no `protoc` needed).
//!
//! The two replicas run in this process, each with its own lock client (so
//! they exclude each other through Redis exactly as two processes would).

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::future::try_join_all;
use lock_core::LockClient;
use lock_examples::ledger::{run_id, Ledger, Outcome};
use lock_examples::proto::accounts_client::AccountsClient;
use lock_examples::proto::accounts_server::{Accounts, AccountsServer};
use lock_examples::proto::{WithdrawReply, WithdrawRequest};
use lock_examples::BoxError;
use lock_tower::{LockLayer, MetadataKey};
use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

const ACCOUNT_METADATA: &str = "x-account-id";
const START_BALANCE: i64 = 100;
const AMOUNT: i64 = 10;
const SAME_ACCOUNT_CALLS: usize = 30;
const OTHER_ACCOUNTS: usize = 8;

/// The service: the account is the call's `x-account-id` metadata entry.
struct AccountService {
    ledger: Ledger,
}

#[tonic::async_trait]
impl Accounts for AccountService {
    async fn withdraw(
        &self,
        request: Request<WithdrawRequest>,
    ) -> Result<Response<WithdrawReply>, Status> {
        let account = request
            .metadata()
            .get(ACCOUNT_METADATA)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| Status::invalid_argument("x-account-id metadata missing"))?
            .to_string();
        let mut ledger = self.ledger.clone();
        match ledger.withdraw(&account, request.get_ref().amount).await {
            Ok(Outcome::Overlap) => Err(Status::internal(
                "overlap: another withdrawal of this account is inside",
            )),
            Ok(Outcome::Done {
                accepted,
                balance,
                concurrent,
            }) => Ok(Response::new(WithdrawReply {
                accepted,
                balance,
                concurrent: u32::try_from(concurrent).unwrap_or(u32::MAX),
            })),
            Err(e) => Err(Status::internal(format!("redis: {e}"))),
        }
    }
}

/// One replica: its own lock client, the layer keyed by metadata, a
/// loopback port. Stops when the returned sender is dropped.
async fn start_replica(
    url: &str,
    run: &str,
    wait: Duration,
) -> Result<(SocketAddr, oneshot::Sender<()>), BoxError> {
    let client = LockClient::builder(url)
        .key_prefix(format!("example:{run}:"))
        .build()?;
    let service = AccountService {
        ledger: Ledger::connect(url, run).await?,
    };
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse()?)?;
    let addr = incoming.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = Server::builder()
        .layer(
            LockLayer::grpc(
                client,
                MetadataKey::from_static(ACCOUNT_METADATA).prefix("account:"),
            )
            .wait(wait),
        )
        .add_service(AccountsServer::new(service))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stopped.await;
        });
    tokio::spawn(async move {
        if let Err(e) = server.await {
            eprintln!("replica on {addr} failed: {e}");
        }
    });
    Ok((addr, stop))
}

async fn withdraw(
    mut client: AccountsClient<Channel>,
    account: &str,
) -> Result<Result<WithdrawReply, Status>, BoxError> {
    let mut request = Request::new(WithdrawRequest { amount: AMOUNT });
    request
        .metadata_mut()
        .insert(ACCOUNT_METADATA, account.parse()?);
    request.set_timeout(Duration::from_secs(30));
    Ok(client.withdraw(request).await.map(Response::into_inner))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let (url, _redis_server) = lock_examples::redis_url()?;
    let run = run_id();
    let mut ledger = Ledger::connect(&url, &run).await?;
    let mut accounts = vec!["alice".to_string(), "bob".to_string()];
    accounts.extend((0..OTHER_ACCOUNTS).map(|i| format!("acct-{i}")));
    for account in &accounts {
        ledger.set_balance(account, START_BALANCE).await?;
    }

    let wait = Duration::from_secs(10);
    let (addr_a, _stop_a) = start_replica(&url, &run, wait).await?;
    let (addr_b, _stop_b) = start_replica(&url, &run, wait).await?;
    let clients = [
        AccountsClient::connect(format!("http://{addr_a}")).await?,
        AccountsClient::connect(format!("http://{addr_b}")).await?,
    ];
    println!("replicas on {addr_a} and {addr_b}");

    // 1. Many calls for one account, spread over both replicas.
    let replies =
        try_join_all((0..SAME_ACCOUNT_CALLS).map(|i| withdraw(clients[i % 2].clone(), "alice")))
            .await?;
    let mut accepted = 0;
    for reply in &replies {
        match reply {
            Ok(r) if r.accepted => accepted += 1,
            Ok(_) => {}
            Err(status) => return Err(format!("unexpected status: {status}").into()),
        }
    }
    let balance = ledger.balance("alice").await?;
    println!(
        "one account, {SAME_ACCOUNT_CALLS} concurrent calls over 2 replicas: \
         {accepted} accepted, final balance {balance}"
    );
    if accepted != (START_BALANCE / AMOUNT) as usize || balance != 0 {
        return Err("lost update: the layer did not serialize the account".into());
    }

    // 2. One call for each of several accounts at once.
    let replies = try_join_all(
        accounts[2..]
            .iter()
            .enumerate()
            .map(|(i, account)| withdraw(clients[i % 2].clone(), account)),
    )
    .await?;
    let mut max_concurrent = 0;
    for reply in replies {
        let reply = reply.map_err(|s| format!("unexpected status: {s}"))?;
        max_concurrent = max_concurrent.max(reply.concurrent);
    }
    println!("{OTHER_ACCOUNTS} different accounts at once: up to {max_concurrent} calls ran concurrently");
    if max_concurrent < 2 {
        return Err("different accounts did not run concurrently".into());
    }

    // 3. A replica that waits only 200 ms answers UNAVAILABLE while
    //    another holder keeps the account's lock.
    let (addr_c, _stop_c) = start_replica(&url, &run, Duration::from_millis(200)).await?;
    let impatient = AccountsClient::connect(format!("http://{addr_c}")).await?;
    let holder = LockClient::builder(url.as_str())
        .key_prefix(format!("example:{run}:"))
        .build()?;
    let held = holder.lock("account:bob")?.acquire().await?;
    let status = withdraw(impatient, "bob").await?.err();
    held.release().await?;
    let code = status.as_ref().map(Status::code);
    println!("while another holder keeps account bob: {code:?}");
    if code != Some(tonic::Code::Unavailable) {
        return Err(format!("expected UNAVAILABLE, got {status:?}").into());
    }

    for account in &accounts {
        ledger.remove(account).await?;
    }
    println!("ok: calls serialized per x-account-id across replicas");
    Ok(())
}
