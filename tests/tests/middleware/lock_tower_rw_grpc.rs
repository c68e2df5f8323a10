//! The gRPC read-write layer (`LockLayer::grpc_read_write`) behind real
//! tonic servers on loopback, on a private redis-server, judged by an
//! independent observer (`support::RwInside`): by default every call
//! writes (never two inside), classified by method path the calls read
//! together, and the method sees its side in the request's extensions.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::layer::{client, start_grpc};
use crate::support::{server, within, RwInside};
use futures_util::future::join_all;
use lock_core::LockMode;
use lock_examples::proto::accounts_client::AccountsClient;
use lock_examples::proto::accounts_server::Accounts;
use lock_examples::proto::{WithdrawReply, WithdrawRequest};
use lock_tower::{HeldLockExt, LockLayer, MetadataKey, ReadPaths};
use tonic::{Request, Response, Status};

const METADATA: &str = "x-account-id";
const WITHDRAW: &str = "/accounts.Accounts/Withdraw";

/// Enters the observer on the side its lock has (or `enter_as`): a reader
/// stays until `together` readers have been inside at once (at most 3 s),
/// a writer for a few ms. `accepted` says whether the readers met,
/// `balance` is 1 when the lock was a read and 2 when it was a write.
struct Observed {
    observer: RwInside,
    together: i64,
    /// The side to enter the observer on, whatever the lock's: a call
    /// that should write enters as a writer even if it got a read.
    enter_as: Option<LockMode>,
}

#[tonic::async_trait]
impl Accounts for Observed {
    async fn withdraw(
        &self,
        request: Request<WithdrawRequest>,
    ) -> Result<Response<WithdrawReply>, Status> {
        let mode = request
            .held_lock()
            .map(|held| held.mode())
            .ok_or_else(|| Status::internal("no held lock"))?;
        let mut observer = self.observer.clone();
        let met = match self.enter_as.unwrap_or(mode) {
            LockMode::Read => {
                observer.enter_read().await;
                let met = observer
                    .await_max_readers(self.together, Duration::from_secs(3))
                    .await;
                observer.leave_read().await;
                met
            }
            _ => {
                observer.enter_write().await;
                tokio::time::sleep(Duration::from_millis(10)).await;
                observer.leave_write().await;
                true
            }
        };
        let balance = if mode == LockMode::Read { 1 } else { 2 };
        Ok(Response::new(WithdrawReply {
            accepted: met,
            balance,
            concurrent: 0,
        }))
    }
}

async fn call(addr: SocketAddr, account: &str) -> WithdrawReply {
    let mut client = AccountsClient::connect(format!("http://{addr}"))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let mut request = Request::new(WithdrawRequest { amount: 1 });
    request
        .metadata_mut()
        .insert(METADATA, account.parse().unwrap_or_else(|e| panic!("{e}")));
    match tokio::time::timeout(Duration::from_secs(30), client.withdraw(request)).await {
        Ok(r) => r
            .map(Response::into_inner)
            .unwrap_or_else(|e| panic!("call: {e}")),
        Err(_) => panic!("call not answered within 30 s"),
    }
}

fn key() -> MetadataKey {
    MetadataKey::from_static(METADATA).prefix("account:")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_writes_by_default() {
    let redis = server();
    let observer = RwInside::new(&redis, "grpc-default").await;
    let layer = LockLayer::grpc_read_write(client(&redis), key()).wait(Duration::from_secs(30));
    let service = Observed {
        observer: observer.clone(),
        together: 2,
        enter_as: Some(LockMode::Write),
    };
    let (addr, _stop) = start_grpc(layer, service).await;
    let calls = 6;
    let replies = within(
        Duration::from_secs(30),
        "calls",
        join_all((0..calls).map(|_| call(addr, "7"))),
    )
    .await;
    let mut observer = observer;
    assert_eq!(
        observer.violations().await,
        0,
        "two calls were inside at once"
    );
    for r in &replies {
        assert_eq!(r.balance, 2, "the call held the write side");
    }
    assert_eq!(observer.entries().await, (0, calls));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_classified_as_reads_run_together() {
    let redis = server();
    let observer = RwInside::new(&redis, "grpc-reads").await;
    let together = 3;
    let start = |observer: RwInside| {
        let layer = LockLayer::grpc_read_write(client(&redis), key())
            .classify(ReadPaths::new([WITHDRAW]))
            .wait(Duration::from_secs(30));
        start_grpc(
            layer,
            Observed {
                observer,
                together,
                enter_as: None,
            },
        )
    };
    let (a, _stop_a) = start(observer.clone()).await;
    let (b, _stop_b) = start(observer.clone()).await;
    let replies = within(
        Duration::from_secs(30),
        "reads",
        join_all((0..together).map(|i| call(if i % 2 == 0 { a } else { b }, "8"))),
    )
    .await;
    for r in &replies {
        assert_eq!(r.balance, 1, "the call held the read side");
        assert!(
            r.accepted,
            "a reader waited alone: reads excluded each other"
        );
    }
    let mut observer = observer;
    assert_eq!(observer.max_readers().await, together);
    assert_eq!(observer.violations().await, 0);
}
