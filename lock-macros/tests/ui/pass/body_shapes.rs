//! Every body shape expands without a warning: warnings are errors here,
//! with some allow-by-default lints on top, and `forbid` on the lints the
//! expansion must never trip (a `#[allow]` of them in the generated code
//! would be an error under `forbid`).
#![deny(
    warnings,
    rust_2018_idioms,
    unused_qualifications,
    unused_results,
    unit_bindings,
    trivial_casts
)]
#![forbid(unreachable_code, unused_braces, unused_parens)]

use lock_core::{distributed_lock, LockClient};

#[derive(Debug)]
pub struct ShopError;

impl From<lock_core::Error> for ShopError {
    fn from(_: lock_core::Error) -> Self {
        ShopError
    }
}

impl From<std::num::ParseIntError> for ShopError {
    fn from(_: std::num::ParseIntError) -> Self {
        ShopError
    }
}

/// A one-line body: a single tail expression.
#[distributed_lock(key = "k:{id}")]
#[rustfmt::skip]
async fn one_line(id: u64) -> Result<u64, ShopError> { Ok(id) }

/// The same, formatted by rustfmt.
#[distributed_lock(key = "k:{id}", client = client)]
async fn one_expression(client: &LockClient, id: u64) -> Result<u64, ShopError> {
    Ok(id)
}

/// An empty body.
#[distributed_lock(key = "empty", skip_if_locked)]
async fn empty() {}

/// An empty body, `()` spelled out.
#[distributed_lock(key = "empty", skip_if_locked)]
async fn empty_unit() -> () {}

/// A body that is one block expression (with statements: a block holding
/// only an expression is the user's own `unused_braces`).
#[distributed_lock(key = "block:{id}")]
async fn block(id: u64) -> Result<u64, ShopError> {
    {
        let next = id + 1;
        Ok(next)
    }
}

/// A body that is only a `return`.
#[distributed_lock(key = "ret:{id}")]
async fn only_return(id: u64) -> Result<u64, ShopError> {
    return Ok(id);
}

/// A bare `return` in a `()` body.
#[distributed_lock(key = "ret", skip_if_locked)]
async fn bare_return() {
    return;
}

/// `?` in the last statement, and `?` in the tail expression.
#[distributed_lock(key = "parse:{text}")]
async fn ends_in_question_mark(text: &str) -> Result<(), ShopError> {
    let _: u64 = text.parse()?;
    Ok(())
}

#[distributed_lock(key = "parse:{text}")]
async fn tail_question_mark(text: &str) -> Result<u64, ShopError> {
    Ok(text.parse::<u64>()?)
}

/// `?` on an `Option` in an `Option` body.
#[distributed_lock(key = "opt", skip_if_locked)]
async fn option_question_mark(value: Option<u8>) -> Option<u8> {
    let v = value?;
    Some(v + 1)
}

/// Only a `let`.
#[distributed_lock(key = "let", skip_if_locked)]
async fn let_only() {
    let _unused = String::from("x");
}

/// A body ending in a statement macro.
#[distributed_lock(key = "print", skip_if_locked)]
async fn macro_statement() {
    println!("in the lock")
}

/// A diverging body.
#[distributed_lock(key = "todo")]
async fn diverging() -> Result<u64, ShopError> {
    todo!()
}

/// Early returns and an `if` in tail position.
#[distributed_lock(key = "branch:{n}")]
async fn branches(n: i32) -> Result<i32, ShopError> {
    if n < 0 {
        return Err(ShopError);
    }
    if n == 0 {
        Ok(0)
    } else {
        Ok(n * 2)
    }
}

/// A `match` in tail position, awaits, an item and a closure in the body.
#[distributed_lock(key = "match:{n}")]
async fn matching(n: u8) -> Result<&'static str, ShopError> {
    fn name(n: u8) -> &'static str {
        if n % 2 == 0 { "even" } else { "odd" }
    }
    let twice = |x: u8| x.wrapping_mul(2);
    std::future::ready(()).await;
    match twice(n) {
        0 => Ok("zero"),
        m => Ok(name(m)),
    }
}

/// Inner attributes stay at the top of the body.
#[distributed_lock(key = "inner:{n}")]
async fn inner_attribute(n: u64) -> Result<u64, ShopError> {
    #![allow(clippy::needless_return)]
    return Ok(n);
}

/// `cancel_on_lost` with a one-line body.
#[distributed_lock(key = "cancel:{id}", cancel_on_lost)]
#[rustfmt::skip]
async fn cancelled(id: u64) -> Result<u64, ShopError> { Ok(id) }

/// `impl Trait` in the return type.
#[distributed_lock(key = "display")]
#[rustfmt::skip]
async fn display() -> Result<impl std::fmt::Display, ShopError> { Ok(7) }

async fn run_all(client: &LockClient) -> Result<(), ShopError> {
    let _: u64 = one_line(1).await?;
    let _: u64 = one_expression(client, 1).await?;
    empty().await;
    empty_unit().await;
    let _: u64 = block(1).await?;
    let _: u64 = only_return(1).await?;
    bare_return().await;
    ends_in_question_mark("1").await?;
    let _: u64 = tail_question_mark("1").await?;
    let _: Option<u8> = option_question_mark(Some(1)).await;
    let_only().await;
    macro_statement().await;
    let _: i32 = branches(1).await?;
    let _: &str = matching(1).await?;
    let _: u64 = inner_attribute(1).await?;
    let _: u64 = cancelled(1).await?;
    let _: String = display().await?.to_string();
    let _: Result<u64, ShopError> = diverging().await;
    Ok(())
}

fn main() {
    let _ = run_all;
}
