//! Free fns: every option, every supported return type, key templates,
//! generics, `impl Trait` and destructured arguments, early returns, and
//! futures that stay `Send`.
#![deny(warnings)]
use std::fmt::Display;
use std::sync::Arc;

use lock_core::{distributed_lock, LockClient};

#[derive(Debug)]
pub enum ShopError {
    Lock(lock_core::Error),
    OutOfStock,
}

impl From<lock_core::Error> for ShopError {
    fn from(err: lock_core::Error) -> Self {
        ShopError::Lock(err)
    }
}

pub type ShopResult<T> = Result<T, ShopError>;

pub struct Order {
    pub id: u64,
    pub customer: Customer,
}

pub struct Customer {
    pub id: String,
}

/// Doc comments and other attributes stay on the fn.
#[distributed_lock(key = "stock:{sku}")]
#[inline(never)]
pub async fn buy(sku: &str, qty: u32) -> Result<u32, ShopError> {
    if qty == 0 {
        return Err(ShopError::OutOfStock);
    }
    let left = check_stock(qty)?;
    Ok(left)
}

fn check_stock(qty: u32) -> Result<u32, ShopError> {
    100u32.checked_sub(qty).ok_or(ShopError::OutOfStock)
}

/// Every option at once; field paths; an alias of `Result`.
#[distributed_lock(
    key = "order:{order.id}:{order.customer.id}",
    wait = "5s",
    lease = "30s",
    client = client,
    crate = "::lock_core",
)]
pub(crate) async fn pay(client: &LockClient, order: &Order) -> ShopResult<u64> {
    Ok(order.id)
}

/// Literal braces, tuple fields, durations in every unit.
#[distributed_lock(key = "{{tag}}:{pair.0}-{pair.1}", wait = "250ms", lease = "1h", client = client)]
async fn braces(client: LockClient, pair: (u8, char)) -> lock_core::Result<()> {
    let _ = pair;
    Ok(())
}

#[distributed_lock(key = "m:{minutes}", wait = "2m", client = client)]
async fn minutes(
    client: Arc<LockClient>,
    minutes: u8,
) -> Result<u8, Box<dyn std::error::Error + Send + Sync>> {
    Ok(minutes)
}

/// A body that returns `io::Error` through `?`, with an error type that is
/// `From<lock_core::Error>` too.
#[derive(Debug)]
pub struct AppError;

impl From<lock_core::Error> for AppError {
    fn from(_: lock_core::Error) -> Self {
        AppError
    }
}

impl From<std::io::Error> for AppError {
    fn from(_: std::io::Error) -> Self {
        AppError
    }
}

#[distributed_lock(key = "io:{path}")]
async fn read(path: &str) -> Result<usize, AppError> {
    let n = path.parse::<usize>().map_err(|_| std::io::Error::other("nan"))?;
    Ok(n)
}

/// Generics, a where clause, `impl Trait` arguments, a lifetime.
#[distributed_lock(key = "g:{id}:{label}")]
async fn generic<'a, T, E>(id: T, label: impl Display + Send, rest: &'a [u8]) -> Result<&'a [u8], E>
where
    T: Display + Send,
    E: From<lock_core::Error>,
{
    let _ = (id, label.to_string());
    Ok(rest)
}

/// Destructured arguments and `mut` bindings.
#[distributed_lock(key = "pt:{x}:{y}")]
async fn point((x, mut y): (i32, i32)) -> Result<i32, ShopError> {
    y += x;
    Ok(y)
}

/// `impl Trait` in the return type.
#[distributed_lock(key = "it")]
async fn displayable() -> Result<impl Display, ShopError> {
    Ok(7)
}

/// `skip_if_locked` with `()`, `Option<T>`, `Result<(), E>` and
/// `Result<Option<T>, E>`; with and without `wait`.
#[distributed_lock(key = "nightly-report", skip_if_locked)]
async fn nightly_report() {}

#[distributed_lock(key = "unit", skip_if_locked)]
async fn explicit_unit() -> () {
    return;
}

#[distributed_lock(key = "cron:{job}", skip_if_locked, wait = "1s")]
async fn run_job(job: &str) -> Option<usize> {
    if job.is_empty() {
        return None;
    }
    Some(job.len())
}

#[distributed_lock(key = "sync", skip_if_locked)]
async fn sync_once() -> Result<(), ShopError> {
    check_stock(1)?;
    Ok(())
}

#[distributed_lock(key = "pick:{n}", skip_if_locked, lease = "10s")]
async fn pick(n: u8) -> ShopResult<Option<u8>> {
    Ok(Some(n))
}

/// `cancel_on_lost`, alone and with the other options but `skip_if_locked`.
#[distributed_lock(key = "transfer:{id}", cancel_on_lost)]
async fn transfer(id: u64) -> Result<u64, ShopError> {
    let left = check_stock(1)?;
    Ok(id + u64::from(left))
}

#[distributed_lock(
    key = "settle:{day}",
    wait = "5s",
    lease = "30s",
    client = client,
    cancel_on_lost,
    crate = "::lock_core"
)]
async fn settle(client: &LockClient, day: u32) -> ShopResult<()> {
    if day == 0 {
        return Err(ShopError::OutOfStock);
    }
    Ok(())
}

fn assert_send<T: Send>(_: T) {}

/// Compiled, never run: the futures are `Send` (they would not spawn otherwise).
#[allow(dead_code)]
fn futures_are_send(client: LockClient, order: &'static Order) {
    assert_send(buy("sku", 1));
    assert_send(pay(&client, order));
    assert_send(braces(client.clone(), (1, 'a')));
    assert_send(minutes(Arc::new(client.clone()), 1));
    assert_send(read("1"));
    assert_send(generic::<u8, ShopError>(1, "x", &[]));
    assert_send(point((1, 2)));
    assert_send(displayable());
    assert_send(nightly_report());
    assert_send(explicit_unit());
    assert_send(run_job("x"));
    assert_send(sync_once());
    assert_send(pick(1));
    assert_send(transfer(1));
    assert_send(settle(&client, 1));
    tokio::spawn(buy("sku", 2));
    tokio::spawn(nightly_report());
    tokio::spawn(transfer(2));
    tokio::spawn(async move { pay(&client, order).await });
}

fn main() {
    let _ = futures_are_send;
}
