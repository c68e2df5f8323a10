//! `#[distributed_lock(key = "...")]`: a Redis lock around an `async fn`.
//!
//! The attribute builds the lock key from the fn's arguments, takes a
//! [lock-core](https://docs.rs/lock-core) lock before the body runs and
//! releases it when the body returns, returns early, panics or is cancelled.
//! Use it through lock-core's `macros` feature, so one dependency suffices:
//!
//! ```toml
//! [dependencies]
//! lock-core = { version = "0.1", features = ["macros"] }
//! ```
//!
//! ```no_run
//! use lock_core::distributed_lock;
//! # #[derive(Debug)] pub struct ShopError;
//! # impl From<lock_core::Error> for ShopError { fn from(_: lock_core::Error) -> Self { ShopError } }
//!
//! #[distributed_lock(key = "stock:{sku}")]
//! async fn buy(sku: &str, qty: u32) -> Result<u32, ShopError> {
//!     // only one caller per `sku`, across every process sharing the Redis
//!     Ok(qty)
//! }
//! ```
//!
//! Every option, the return types it supports and what the generated code
//! does are described on [`distributed_lock`].
#![deny(missing_docs)]

mod args;
mod expand;
mod signature;
mod template;

use proc_macro::TokenStream;

/// Takes a distributed lock around an `async fn`.
///
/// The key is built from the arguments before anything else happens; the
/// lock is acquired before the body runs and released when the body
/// returns (also by `return` or `?`), panics, or when the returned future is
/// dropped (cancellation: a timeout, a `select!`, an aborted task). The
/// signature stays exactly as written: attributes, docs, visibility,
/// generics, where clauses, `self` receivers, `impl Trait` arguments.
///
/// ```no_run
/// use lock_core::distributed_lock;
///
/// #[derive(Debug)]
/// pub enum ShopError {
///     Lock(lock_core::Error),
///     OutOfStock,
/// }
///
/// impl From<lock_core::Error> for ShopError {
///     fn from(err: lock_core::Error) -> Self {
///         ShopError::Lock(err)
///     }
/// }
///
/// #[distributed_lock(key = "stock:{sku}")]
/// async fn buy(sku: &str, qty: u32) -> Result<u32, ShopError> {
///     if qty > 10 {
///         return Err(ShopError::OutOfStock); // the lock is released here too
///     }
///     Ok(qty)
/// }
///
/// #[tokio::main]
/// async fn main() -> lock_core::Result<()> {
///     let client = lock_core::LockClient::connect("redis://127.0.0.1:6379").await?;
///     lock_core::install_default(client)?; // the client for fns without `client = ...`
///     match buy("sku-42", 1).await {
///         Ok(left) => println!("bought, {left} left"),
///         Err(ShopError::Lock(e)) => eprintln!("could not lock: {e}"),
///         Err(ShopError::OutOfStock) => eprintln!("sold out"),
///     }
///     Ok(())
/// }
/// ```
///
/// # Options
///
/// | option | default | meaning |
/// |---|---|---|
/// | `key = "stock:{sku}"` | required | the lock's name, built from the arguments |
/// | `wait = "5s"` | wait until acquired | give up after this long (`Error::WaitTimeout`) |
/// | `lease = "30s"` | watchdog renewal | the lock expires after this long and is not renewed |
/// | `client = expr` | the default client | the `LockClient` to use |
/// | `skip_if_locked` | off | when the lock is held elsewhere, skip the body |
/// | `crate = "path"` | `::lock_core` | where lock-core is, for crates that re-export it |
///
/// Durations are a whole number and a unit, `ms`, `s`, `m` or `h`:
/// `"250ms"`, `"5s"`, `"2m"`, `"1h"`. They are checked at compile time;
/// zero is rejected, so is a lease over 365 days. Every misuse (an unknown
/// or repeated option, a bad template or duration, a return type that
/// cannot report a lock failure) is a compile error on the offending token.
///
/// ## `key`: the template
///
/// `{name}` inserts an argument, `{name.field.field}` (or `{pair.0}`) a
/// field of one, `{self.field}` a field of the receiver; each with its
/// `Display`. `{{` and `}}` are literal braces. A name that is not an
/// argument is a compile error pointing at the template. The key is built
/// before the lock is taken; the client's key prefix is put in front of it.
///
/// ```no_run
/// # use lock_core::distributed_lock;
/// pub struct Order { pub id: u64 }
/// pub struct User { pub id: u32 }
///
/// // "order:42:7"
/// #[distributed_lock(key = "order:{order.id}:{user.id}")]
/// async fn pay(order: &Order, user: &User) -> lock_core::Result<()> {
///     Ok(())
/// }
///
/// // "{tenant}:eu:3": literal braces (a Redis Cluster hash tag), a tuple field
/// #[distributed_lock(key = "{{tenant}}:{region.0}:{region.1}")]
/// async fn rebalance(region: (&str, u8)) -> lock_core::Result<()> {
///     Ok(())
/// }
/// ```
///
/// ## `wait` and `lease`
///
/// Without `wait` a call waits as long as it takes (woken by the holder's
/// unlock message, never by polling). Without `lease` the client's watchdog
/// renews the lock for as long as the body runs; with it, the lock expires
/// after the lease even if the body is still running.
///
/// ```no_run
/// # use lock_core::distributed_lock;
/// # #[derive(Debug)] pub struct ShopError;
/// # impl From<lock_core::Error> for ShopError { fn from(_: lock_core::Error) -> Self { ShopError } }
/// // Wait at most 5 s for the lock (then Err(ShopError::from(WaitTimeout)));
/// // hold it for at most 30 s.
/// #[distributed_lock(key = "invoice:{month}", wait = "5s", lease = "30s")]
/// async fn close_month(month: &str) -> Result<(), ShopError> {
///     Ok(())
/// }
/// ```
///
/// ## `client`
///
/// Any expression whose value is a `LockClient`, a `&LockClient` or an
/// `Arc<LockClient>` (anything that is `Borrow<LockClient>`); it may use the
/// arguments and `self`, and is evaluated before the body runs. Without it,
/// the process-wide default client is used: install it once at startup with
/// `lock_core::install_default`. Calling an annotated fn without a client
/// and without a default returns `Error::NoDefaultClient` (not a panic).
///
/// ```no_run
/// # use lock_core::{distributed_lock, LockClient};
/// # #[derive(Debug)] pub struct PayError;
/// # impl From<lock_core::Error> for PayError { fn from(_: lock_core::Error) -> Self { PayError } }
/// # pub struct Order { pub id: u64 }
/// # pub struct User { pub id: u32 }
/// pub struct Payments {
///     locks: LockClient,
/// }
///
/// impl Payments {
///     #[distributed_lock(
///         key = "order:{order.id}:{user.id}",
///         wait = "5s",
///         lease = "30s",
///         client = self.locks.clone()
///     )]
///     pub async fn pay(&self, order: &Order, user: &User) -> Result<u64, PayError> {
///         Ok(order.id)
///     }
///
///     // a reference works too, and `&mut self` / `self` receivers
///     #[distributed_lock(key = "refund:{order_id}", client = &self.locks)]
///     pub async fn refund(&mut self, order_id: u64) -> Result<(), PayError> {
///         Ok(())
///     }
/// }
/// ```
///
/// ## `skip_if_locked`
///
/// Try once (or for up to `wait`), and when another owner holds the lock,
/// return without running the body: ShedLock-style jobs that one replica
/// runs while the others skip. It needs a return type with a value for
/// "skipped": `()`, `Option<T>` (`None`), `Result<(), E>` (`Ok(())`) or
/// `Result<Option<T>, E>` (`Ok(None)`). With `()` and `Option<T>`, other
/// lock failures (Redis unreachable, no default client) skip the body too
/// and are logged at `warn` through `tracing`; with the `Result` forms they
/// come back as `Err`.
///
/// ```no_run
/// # use lock_core::distributed_lock;
/// # #[derive(Debug)] pub struct JobError;
/// # impl From<lock_core::Error> for JobError { fn from(_: lock_core::Error) -> Self { JobError } }
/// // One replica runs it; the others return at once.
/// #[distributed_lock(key = "nightly-report", skip_if_locked)]
/// async fn nightly_report() {
///     // ...
/// }
///
/// // Wait up to 2 s before giving up; `None` when skipped.
/// #[distributed_lock(key = "export:{day}", skip_if_locked, wait = "2s")]
/// async fn export(day: u32) -> Option<usize> {
///     Some(0)
/// }
///
/// // `Ok(None)` when skipped, `Err` when Redis is down.
/// #[distributed_lock(key = "sync", skip_if_locked)]
/// async fn sync() -> Result<Option<usize>, JobError> {
///     Ok(Some(0))
/// }
/// ```
///
/// ## `crate`
///
/// The generated code names lock-core by absolute path, `::lock_core`. A
/// crate that re-exports lock-core under another path says where it is:
///
/// ```no_run
/// mod platform {
///     pub use ::lock_core as locks;
/// }
///
/// #[platform::locks::distributed_lock(key = "audit", crate = "crate::platform::locks")]
/// async fn audit() -> platform::locks::Result<()> {
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// # Return types
///
/// | return type | without `skip_if_locked` | with `skip_if_locked` |
/// |---|---|---|
/// | `Result<T, E>` with `E: From<lock_core::Error>` | lock failures are `Err(E::from(err))` | only for `T = ()` or `Option<_>` |
/// | `()`, `Option<T>` | compile error: use `Result` or `skip_if_locked` | skipped: `()` / `None` |
/// | anything else | compile error | compile error |
///
/// A `Result` is recognised by the last path segment of the type: `Result`
/// or a name ending in `Result` (`io::Result<T>`, `anyhow::Result<T>`,
/// `ShopResult<T>`). The lock error converts with `From::from`.
///
/// # Release and errors
///
/// After the body returns, the lock is released and the release awaited, so
/// the lock is free when the call returns. If the release fails after a
/// successful body (typically `Error::Lost`: the lease ran out or the lock
/// was taken away while the body ran, so the body was not exclusive
/// throughout), a `Result` fn returns that error instead of its value; when
/// the body itself failed, its error is returned and the release failure is
/// logged. A panic in the body, or a dropped future, drops the lock guard,
/// which stops the renewal and releases in the background at once.
///
/// # Reentrancy and tasks
///
/// The generated code opens a lock context (`lock_core::in_context`) when
/// none is open, takes the lock for a *section*
/// (`AcquireOptions::for_section`) and runs the body inside it
/// (`LockContext::enter`). An annotated fn that calls itself, or another
/// annotated fn with the same key, from inside its body re-enters the lock
/// instead of deadlocking; so does a manual acquisition of that lock inside
/// the body. Sibling calls that are not nested — two annotated calls with
/// one key joined in one task (`join!`, `select!`, `join_all`) — exclude
/// each other, as calls from different tasks do. A spawned task is a new
/// owner, like a new thread in Java.
///
/// The returned future is `Send` whenever the body's is, so annotated fns
/// can be spawned with `tokio::spawn` and used as axum handlers. Async fns
/// in traits (native, Rust 1.75+) and impl blocks work; put the attribute on
/// the method with a body (an impl's method, or a trait's default method),
/// not on a declaration. `#[async_trait]` rewrites methods before this
/// attribute sees them and is not supported.
///
/// # What it generates
///
/// The body becomes (names shortened):
///
/// ```text
/// let __lock_handle = __private::default_lock(&format!("stock:{}", sku)); // or client_lock(&(client), ..)
/// let __lock_options = __private::AcquireOptions::new();                   // .wait(..) .lease(..) .no_wait()
/// let __lock_body = pin!(async move { /* the original body */ });
/// __private::locked(__lock_handle, __lock_options, __lock_body).await      // or locked_or_skip(..)
/// ```
///
/// where `locked` opens a context if needed, acquires for a section, awaits
/// the body inside the section and releases: one allocation for the key, no
/// boxing of the body.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}
