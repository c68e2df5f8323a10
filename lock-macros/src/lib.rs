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
//! Inside the body, `lock_core::HeldLock::current()` is the lock the call
//! holds (its fencing token, whether it is still held, a signal when it is
//! lost), with no further call to Redis; `cancel_on_lost` stops the body
//! when the lock is lost. With `permits = N` the call holds one permit of
//! a semaphore of N permits instead of a lock: at most N calls at once.
//! Every option, the return types it supports, what
//! a caller should do with `Err(Lost)` and what the generated code does are
//! described on [`distributed_lock`].
//!
//! Its sibling `#[leader_only(election = "...")]` runs the body only while
//! this process leads the election (lock-core's `Election`), and again after
//! a lost leadership; see [`leader_only`].
#![deny(missing_docs)]

mod args;
mod expand;
mod leader;
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
/// | `key = ["account:{from}", "account:{to}"]` | | a multi-lock of every key, without deadlock |
/// | `mode = "read"` / `"write"` | `"exclusive"` | a side of the read-write lock `key` instead of the exclusive lock |
/// | `mode = "fair"` | `"exclusive"` | the fair lock `key` (Redisson's `RFairLock`: calls run in arrival order) |
/// | `permits = 4` | off (a lock) | one permit of the expirable semaphore `key` of that many permits: up to 4 calls at once |
/// | `wait = "5s"` | wait until acquired | give up after this long (`Error::WaitTimeout`) |
/// | `lease = "30s"` | watchdog renewal | the lock expires after this long and is not renewed |
/// | `client = expr` | the default client | the `LockClient` to use |
/// | `skip_if_locked` | off | when the lock is held elsewhere, skip the body |
/// | `cancel_on_lost` | off | when the lock is lost, stop the body and return `Err(Lost)` |
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
/// // "{tenant}:eu:3": literal braces (`{{`, `}}`) and a tuple field; a `{` in
/// // the name is its own hash tag for the helper keys (Redisson's naming)
/// #[distributed_lock(key = "{{tenant}}:{region.0}:{region.1}")]
/// async fn rebalance(region: (&str, u8)) -> lock_core::Result<()> {
///     Ok(())
/// }
/// ```
///
/// ## `key = [..]`: several locks at once
///
/// A list of templates takes a multi-lock of every key
/// ([`LockClient::multi_lock`]): all of them or none, the keys sorted (and
/// deduplicated) so that two calls naming the same accounts in opposite
/// orders never deadlock, each key a normal lock of that name (a Java
/// `RLock` or a lock-core lock of one of the names excludes the call). The
/// other options keep their meaning for the whole set: `wait` bounds the
/// wait for all of them, `lease` is each lock's lease, `skip_if_locked`
/// skips the body when one of them is held elsewhere, `cancel_on_lost`
/// stops the body when one of them is lost (`Err(Lost)` naming it). A list
/// of one key is the same as `key = "..."`; an empty list, and several keys
/// with `mode` or `permits`, are compile errors. A multi-lock is never
/// re-entered: a nested call over one of the keys waits like any other
/// holder, and the body runs in no lock section.
///
/// ```no_run
/// # use lock_core::distributed_lock;
/// // "account:17" and "account:4", taken together, whatever the order
/// #[distributed_lock(key = ["account:{from}", "account:{to}"], wait = "5s")]
/// async fn transfer(from: u64, to: u64, cents: u64) -> lock_core::Result<()> {
///     Ok(())
/// }
/// ```
///
/// [`LockClient::multi_lock`]: https://docs.rs/lock-core/latest/lock_core/struct.LockClient.html#method.multi_lock
///
/// ## `mode`: read-write locks
///
/// Without `mode` (or with `mode = "exclusive"`) the fn takes the
/// exclusive lock `key` ([`LockClient::lock`]): one call at a time.
/// `mode = "read"` and `mode = "write"` take a side of the read-write lock
/// `key` instead ([`LockClient::rw_lock`], wire-compatible with Redisson's
/// `RReadWriteLock`): read calls run together, in any number and any
/// process, while no write call runs; a write call runs alone. Every other
/// option works the same (`wait`, `lease`, `client`, `skip_if_locked`,
/// `cancel_on_lost`), and `HeldLock::current().mode()` tells the body
/// which side it holds.
///
/// Nested calls follow lock-core's rules for the two sides: a read call
/// inside a write call with the same key is granted at once (a
/// downgrade), a nested call of the same side re-enters, and a write call
/// inside a read call with the same key fails at once with
/// `Error::UpgradeRefused` (converted with `From`, like every lock error)
/// instead of waiting for itself. Any other value of `mode` is a compile
/// error. Use one kind per name: an exclusive lock and a read-write lock
/// with the same key are different Redis layouts and do not exclude each
/// other.
///
/// ```no_run
/// # use lock_core::distributed_lock;
/// # #[derive(Debug)] pub struct CatalogError;
/// # impl From<lock_core::Error> for CatalogError { fn from(_: lock_core::Error) -> Self { CatalogError } }
/// # async fn load_price(_: &str) -> u64 { 0 }
/// # async fn store_price(_: &str, _: u64) {}
/// // Any number of readers of one sku at once, across every replica ...
/// #[distributed_lock(key = "price:{sku}", mode = "read")]
/// async fn price(sku: &str) -> Result<u64, CatalogError> {
///     Ok(load_price(sku).await)
/// }
///
/// // ... and a writer alone: it waits until the readers are out, and new
/// // readers wait until it is done.
/// #[distributed_lock(key = "price:{sku}", mode = "write", wait = "5s")]
/// async fn set_price(sku: &str, cents: u64) -> Result<(), CatalogError> {
///     store_price(sku, cents).await;
///     Ok(())
/// }
/// ```
///
/// ## `permits`: at most N calls at once
///
/// `permits = N` (a whole number from 1 to 10 000) runs the body holding
/// one permit of the expirable semaphore `key` of N permits
/// ([`LockClient::permit_semaphore`], wire-compatible with Redisson's
/// `RPermitExpirableSemaphore`) instead of a lock: up to N calls at once,
/// across every process sharing the Redis. Each call creates the
/// semaphore with N permits when it does not exist yet
/// (`try_set_permits(N)`, one more round trip); **an existing semaphore
/// keeps its count**, whatever N says, so changing N in the code does not
/// change a semaphore that is already there: adjust it with
/// `add_permits` (or `lockctl semaphore add NAME DELTA`), or delete it
/// while no one holds a permit.
///
/// The other options keep their meaning: `wait` bounds the wait for a
/// permit (`Error::WaitTimeout`, converted with `From` like every lock
/// error), `lease` gives the permit a fixed lease instead of the
/// watchdog's renewal, `skip_if_locked` skips the body when no permit is
/// free, `cancel_on_lost` stops the body when the permit is lost, and
/// `client` and `crate` are as for a lock. `permits` together with `mode`
/// is a compile error, as is `permits = 0`, a negative, fractional or
/// non-literal count, or more than 10 000.
///
/// Permits are not locks: they are not re-entrant (a nested call takes a
/// permit of its own, and waits for one when none is free), waiters take
/// them in the order they came, and the body runs in no lock section, so
/// `HeldLock::current()` there sees only an enclosing lock, if any.
///
/// ```no_run
/// # use lock_core::distributed_lock;
/// # #[derive(Debug)] pub struct ExportError;
/// # impl From<lock_core::Error> for ExportError { fn from(_: lock_core::Error) -> Self { ExportError } }
/// # async fn render(_: &str) -> Result<Vec<u8>, ExportError> { Ok(Vec::new()) }
/// // At most 4 exports of a tenant at once, across every replica; wait
/// // at most 30 s for a turn.
/// #[distributed_lock(key = "exports:{tenant}", permits = 4, wait = "30s")]
/// async fn export(tenant: &str) -> Result<Vec<u8>, ExportError> {
///     render(tenant).await
/// }
/// ```
///
/// [`LockClient::permit_semaphore`]: https://docs.rs/lock-core/latest/lock_core/struct.LockClient.html#method.permit_semaphore
/// [`LockClient::lock`]: https://docs.rs/lock-core/latest/lock_core/struct.LockClient.html#method.lock
/// [`LockClient::rw_lock`]: https://docs.rs/lock-core/latest/lock_core/struct.LockClient.html#method.rw_lock
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
/// In tests, pass a client of an in-memory server (lock-core's `memory`
/// feature: `LockClient::builder(MemoryServer::new().url())`), or install
/// one as the default, and no Redis is needed.
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
/// ## `cancel_on_lost`
///
/// Without it, a body whose lock is lost keeps running to its end (and the
/// call then returns `Err(Lost)`, see [below](#errlost-after-the-body)).
/// With it, the body is dropped as soon as the lock is known lost (at the
/// hold's deadline, or when a watchdog renewal finds the key gone: within a
/// third of the watchdog timeout) and the call returns
/// `Err(E::from(Error::Lost))`. For `Result<T, E>` returns only; it cannot
/// be combined with `skip_if_locked`. With a `lease`, the body is stopped
/// when the lease runs out.
///
/// ```no_run
/// # use lock_core::distributed_lock;
/// # #[derive(Debug)] pub struct JobError;
/// # impl From<lock_core::Error> for JobError { fn from(_: lock_core::Error) -> Self { JobError } }
/// # async fn export_chunk(_: u32) -> Result<(), JobError> { Ok(()) }
/// #[distributed_lock(key = "export:{day}", cancel_on_lost)]
/// async fn export(day: u32) -> Result<(), JobError> {
///     for chunk in 0..100 {
///         // Each await is a point where the body may be stopped.
///         export_chunk(chunk).await?;
///     }
///     Ok(())
/// }
/// ```
///
/// The body may be stopped at **any** await point, like a future dropped by
/// a timeout: what it did before that point stays done, and what it was
/// doing at that point may be half done (a request sent but its reply never
/// read). Give each step effects that are atomic (one write, one
/// transaction) or fenced (see [fencing](#fencing-tokens)), so that a
/// stopped body leaves nothing inconsistent, and expect any step to be
/// repeated by the next holder. Work the body spawned is not stopped with
/// it; hand such tasks `held.cancellation_token()` (see below).
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
/// | return type | default (and `cancel_on_lost`) | with `skip_if_locked` |
/// |---|---|---|
/// | `Result<T, E>` with `E: From<lock_core::Error>` | lock failures are `Err(E::from(err))` | only for `T = ()` or `Option<_>` |
/// | `()`, `Option<T>` | compile error: use `Result` or `skip_if_locked` | skipped: `()` / `None` |
/// | anything else | compile error | compile error |
///
/// A `Result` is recognised by the last path segment of the type: `Result`
/// or a name ending in `Result` (`io::Result<T>`, `anyhow::Result<T>`,
/// `ShopResult<T>`). The lock error converts with `From::from`.
///
/// # Inside the body: `HeldLock::current()`
///
/// The body runs inside the lock's section, so
/// [`lock_core::HeldLock::current()`](https://docs.rs/lock-core/latest/lock_core/struct.HeldLock.html)
/// returns the hold it runs under, without another call to Redis:
///
/// - `fencing_token()`: the number Redis drew for this hold, greater than
///   every token drawn before for this lock;
/// - `is_held()` / `ensure_held()`: whether the hold is still valid (a
///   local check of its deadline and of what the watchdog saw), `ensure_held`
///   as a `Result` to use with `?` between steps;
/// - `lost()`: a future that resolves when the lock is lost, to `select!`
///   against a long step; `ended()` also resolves on release;
/// - `cancellation_token()`: a token cancelled when the hold ends, for
///   tasks the body spawns (a spawned task runs outside the section, so
///   `HeldLock::current()` is `None` there: pass the `HeldLock` in).
///
/// Outside any locked section it is `None`. In nested sections (an
/// annotated fn calling another one with a different key) it is the
/// innermost lock; `HeldLock::current_for(&lock)` finds an outer one.
///
/// ```no_run
/// use lock_core::{distributed_lock, HeldLock};
/// # #[derive(Debug)] pub struct JobError;
/// # impl From<lock_core::Error> for JobError { fn from(_: lock_core::Error) -> Self { JobError } }
/// # async fn fetch_batch(_: u32) -> Result<Vec<u8>, JobError> { Ok(Vec::new()) }
/// # async fn write_batch(_: &[u8]) -> Result<(), JobError> { Ok(()) }
///
/// #[distributed_lock(key = "import:{feed}")]
/// async fn import(feed: u32) -> Result<(), JobError> {
///     let held = HeldLock::current().expect("the body runs in its locked section");
///     let batch = tokio::select! {
///         batch = fetch_batch(feed) => batch?,
///         // Don't wait for a slow fetch once the lock is gone.
///         () = held.lost() => {
///             return Err(lock_core::Error::Lost { name: held.name().to_owned() }.into());
///         }
///     };
///     held.ensure_held()?; // still ours before the write?
///     write_batch(&batch).await
/// }
/// ```
///
/// ## Fencing tokens
///
/// `is_held()` cannot make a write safe on its own: a process can pause
/// (GC, swap, a stalled VM) between the check and the write, long enough
/// for its lock to expire and another process to take it. The store being
/// written can close that gap: send the fencing token with each write, have
/// the store keep the highest token it has accepted per resource and reject
/// writes that carry a lower one. A late write from a holder whose lock
/// expired then fails instead of overwriting the new holder's work.
///
/// ```no_run
/// use lock_core::{distributed_lock, HeldLock};
///
/// #[derive(Debug)]
/// pub enum AccountError {
///     Lock(lock_core::Error),
///     /// The store saw a newer token: another holder took over.
///     Fenced,
/// }
///
/// impl From<lock_core::Error> for AccountError {
///     fn from(err: lock_core::Error) -> Self {
///         AccountError::Lock(err)
///     }
/// }
///
/// /// A store that accepts a write only with a token at least as high as
/// /// the last one it accepted for that account, e.g. in SQL:
/// /// `UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2`
/// pub struct Accounts;
///
/// impl Accounts {
///     pub async fn balance(&self, id: u64) -> u64 {
///         # let _ = id;
///         0
///     }
///     pub async fn set_balance(&self, id: u64, balance: u64, fence: u64) -> bool {
///         # let _ = (id, balance, fence);
///         true
///     }
/// }
///
/// #[distributed_lock(key = "account:{id}")]
/// async fn credit(accounts: &Accounts, id: u64, amount: u64) -> Result<u64, AccountError> {
///     let token = HeldLock::current()
///         .expect("the body runs in its locked section")
///         .fencing_token();
///     let balance = accounts.balance(id).await + amount;
///     if !accounts.set_balance(id, balance, token).await {
///         return Err(AccountError::Fenced);
///     }
///     Ok(balance)
/// }
/// ```
///
/// # Release and errors
///
/// After the body returns, the lock is released and the release awaited, so
/// the lock is free when the call returns. When the body itself failed, its
/// error is returned (and a release failure is logged). A panic in the
/// body, or a dropped future, drops the lock guard, which stops the renewal
/// and releases in the background at once.
///
/// ## `Err(Lost)` after the body
///
/// If the release finds that the lock was lost while the body ran (the
/// lease ran out, a renewal failed for longer than the watchdog timeout,
/// the key was deleted or taken over), a `Result` fn returns
/// `Err(E::from(Error::Lost))` **instead of the body's `Ok` value, although
/// the body ran to its end and its changes were made**. The error says "the
/// body was not exclusive throughout", not "nothing happened". So a caller
/// that retries on any error may apply the same change twice:
///
/// - make the body idempotent, so that running it again is harmless: an
///   idempotency key recorded with the change, a compare-and-set on a
///   version, or a [fencing token](#fencing-tokens) checked by the store;
/// - tell the errors apart before retrying: a `lock_core::Error` with
///   `e.is_lost()` means the body ran (to its end, or with `cancel_on_lost`
///   up to some await point); `e.is_wait_timeout()`,
///   `e.is_no_default_client()` and `e.is_invalid_input()` mean it did
///   not run. A Redis or connection error can come from the acquire (the
///   body did not run) or from the release (it did): retry it only when
///   the body is idempotent.
///
/// ```no_run
/// # use lock_core::distributed_lock;
/// # #[derive(Debug)]
/// # pub enum ShopError { Lock(lock_core::Error), OutOfStock }
/// # impl From<lock_core::Error> for ShopError { fn from(e: lock_core::Error) -> Self { ShopError::Lock(e) } }
/// # #[distributed_lock(key = "stock:{sku}")]
/// # async fn buy(sku: &str, qty: u32) -> Result<u32, ShopError> { Ok(qty) }
/// # async fn demo() {
/// match buy("sku-42", 1).await {
///     Ok(left) => println!("bought, {left} left"),
///     // The body ran but was not exclusive to the end: check the stock
///     // (or rely on the body being idempotent) before buying again.
///     Err(ShopError::Lock(e)) if e.is_lost() => eprintln!("bought, but unsure: {e}"),
///     // The body did not run: safe to retry.
///     Err(ShopError::Lock(e)) if e.is_wait_timeout() => eprintln!("busy, try later"),
///     // Before or after the body: retry only if `buy` is idempotent.
///     Err(ShopError::Lock(e)) => eprintln!("lock error: {e}"),
///     Err(ShopError::OutOfStock) => eprintln!("sold out"),
/// }
/// # }
/// ```
///
/// With `cancel_on_lost` a loss noticed while the body runs stops it; one
/// noticed only at the release (the body finished before the watchdog saw
/// the key gone) still returns `Err(Lost)` after a complete body. With
/// `skip_if_locked` and a `()` / `Option<T>` return there is no `Err`: the
/// release failure is logged at `warn`.
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
/// let __lock_handle = __private::default_lock(&format!("stock:{}", sku)); // or client_lock(&(client), ..),
///                                                                           // default_rw_lock(.., LockMode::Read),
///                                                                           // client_rw_lock(&(client), .., LockMode::Write),
///                                                                           // default_permits(.., 4u64), client_permits(..)
/// let __lock_options = __private::AcquireOptions::new();                   // .wait(..) .lease(..) .no_wait()
/// let __lock_body = pin!(async move {
///     if false {
///         // never runs: tells inference the body's type, for `?` and `return`
///         let __lock_output = || -> Result<u32, ShopError> { loop {} };
///         return __lock_output();
///     }
///     /* the original body's statements */
/// });
/// __private::locked(__lock_handle, __lock_options, __lock_body).await      // or locked_or_skip(..),
///                                                                           // locked_or_skip_result(..),
///                                                                           // locked_cancel_on_lost(..);
///                                                                           // with `permits`: permitted(..), ...
/// ```
///
/// where `locked` opens a context if needed, acquires for a section, awaits
/// the body inside the section and releases: one allocation for the key, no
/// boxing of the body (`permitted` creates the semaphore when absent, takes
/// one permit, awaits the body and gives the permit back). The body's statements are placed in the `async`
/// block as written (inner attributes such as `#![allow(..)]` stay at the
/// top of the fn's body), and the generated code carries no `#[allow]`: it
/// raises no warning on any body shape, even under `#![deny(warnings)]` or
/// `#![forbid(unreachable_code)]`, while the lints on the body's own code
/// still fire as they would without the attribute.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}

/// Runs an `async fn`'s body only while this process leads an election.
///
/// A call campaigns in the election (lock-core's `Election`, on the lock
/// named by `election`; it waits while another process leads), runs the
/// body as leader, and returns the body's output after resigning, so the
/// next campaigner takes over at once. When the leadership is lost while
/// the body runs (the lock expired or was deleted, renewals failed for the
/// watchdog timeout), the body is dropped at its current await point and
/// the call campaigns again; the body then runs again **from the start**,
/// with fresh clones of the arguments it uses. This is
/// `Election::run_as_leader` with the fn's body as the work: the service
/// loop of "only one replica runs this" in one attribute.
///
/// ```no_run
/// use lock_core::leader_only;
///
/// #[derive(Debug)]
/// pub enum RelayError {
///     Lock(lock_core::Error),
///     Broker(String),
/// }
///
/// impl From<lock_core::Error> for RelayError {
///     fn from(err: lock_core::Error) -> Self {
///         RelayError::Lock(err)
///     }
/// }
///
/// # async fn relay_batch(_: &str) -> Result<bool, RelayError> { Ok(false) }
/// // Exactly one replica relays the outbox of a region at a time; the
/// // others wait in the campaign and take over when it stops or fails.
/// #[leader_only(election = "outbox-relay:{region}")]
/// async fn relay_outbox(region: String) -> Result<(), RelayError> {
///     while relay_batch(&region).await? {}
///     Ok(())
/// }
///
/// #[tokio::main]
/// async fn main() -> lock_core::Result<()> {
///     let client = lock_core::LockClient::connect("redis://127.0.0.1:6379").await?;
///     lock_core::install_default(client)?;
///     if let Err(e) = relay_outbox("eu".to_owned()).await {
///         eprintln!("relay stopped: {e:?}");
///     }
///     Ok(())
/// }
/// ```
///
/// # Options
///
/// | option | default | meaning |
/// |---|---|---|
/// | `election = "relay:{region}"` | required | the election's name (the lock's name), a template of the arguments as `key` is for `#[distributed_lock]` |
/// | `value = "{host}"` | `"<hostname>:<pid>"` | what `Election::leader()` (and `lockctl leader NAME`) shows of this leader; a template too |
/// | `client = expr` | the default client | the `LockClient` to use, as for `#[distributed_lock]` |
/// | `crate = "path"` | `::lock_core` | where lock-core is, for crates that re-export it |
///
/// Templates take `{name}`, `{name.field}`, `{self.field}` and `{{`/`}}`
/// as `key` does, and are built from the arguments once per call, before
/// the first campaign. `client` is any expression whose value is
/// `Borrow<LockClient>` (a `LockClient`, `&LockClient`, `Arc<LockClient>`);
/// without it the process-wide default client is used
/// (`lock_core::install_default`), and a call without one returns
/// `Err(E::from(Error::NoDefaultClient))`. The options of
/// `#[distributed_lock]` that take a lock differently (`mode`, `permits`,
/// `wait`, `lease`, `skip_if_locked`, `cancel_on_lost`) are compile errors
/// here: the leadership is renewed by the client's watchdog while the body
/// runs, and the body is always cancelled on loss.
///
/// ```no_run
/// # use lock_core::{leader_only, LockClient};
/// # use std::sync::Arc;
/// pub struct Scheduler {
///     locks: Arc<LockClient>,
///     shard: u32,
/// }
///
/// impl Scheduler {
///     #[leader_only(election = "scheduler:{self.shard}", value = "shard-{self.shard}", client = self.locks.clone())]
///     pub async fn run(&self) -> lock_core::Result<()> {
///         // ... fire due jobs until shut down ...
///         Ok(())
///     }
/// }
/// ```
///
/// # Return type and arguments
///
/// The fn returns `Result<T, E>` with `E: From<lock_core::Error>` (a type
/// whose last path segment ends in `Result` is recognised, as for
/// `#[distributed_lock]`). A campaign that cannot succeed (no default
/// client, an invalid election name) comes back as `Err(E::from(err))`;
/// transient Redis failures while campaigning are retried with back-off.
/// The body's own `Err` ends the call like its `Ok` does (after resigning):
/// it is not retried.
///
/// Because a run can be dropped and the body started again, each run gets
/// its own clone of every argument the body names (`Clone` is required of
/// those only; an argument used in a template alone is not cloned). `&self`
/// and shared references are copied. An argument the body uses that cannot
/// be handed to a second run — `&mut self`, `self` by value, a `&mut T`
/// argument — is a compile error on its use in the body: take `&self`, a
/// shared reference, or an owned `Clone` value (an `Arc<Mutex<..>>`).
///
/// # Inside the body: `Leadership::current()`
///
/// `lock_core::Leadership::current()` returns the leadership the run is
/// under, with no call to Redis: `term()` (the hold's fencing token,
/// strictly increasing across leaders), `is_leader()` /
/// `ensure_leader()`, `lost()`, `cancellation_token()` for tasks the body
/// spawns (a spawned task sees `None`: pass the leadership in), and
/// `fence()` for writes Redis applies only while this leadership lasts.
/// `HeldLock::current()` is `None` in the body (it runs in no locked
/// section); `Leadership::current().map(|l| l.held_lock())` is the hold.
///
/// ```no_run
/// use lock_core::{leader_only, Leadership};
///
/// #[leader_only(election = "ledger-compactor")]
/// async fn compact() -> lock_core::Result<u64> {
///     let leader = Leadership::current().expect("the body runs as leader");
///     // Applied by Redis only while this leadership holds: a leader that
///     // paused past its lease cannot write after its successor.
///     leader.fence().set("ledger:{ledger-compactor}:compacted-by", &leader.term().to_string()).await?;
///     Ok(leader.term())
/// }
/// ```
///
/// As with `cancel_on_lost`, a run may be stopped at **any** await point:
/// give each step effects that are atomic or fenced, and expect the next
/// run (here or on another replica) to repeat a step.
///
/// # What it generates
///
/// ```text
/// let __leader_election = __private::default_election(&format!("outbox-relay:{}", region)); // or client_election(&(client), ..)
/// let __leader_value = __private::default_leader_value();                                  // or leader_value(&format!(..))
/// let __leader_body = move || {
///     let region = Clone::clone(&region);   // each argument the body names
///     async move { /* the original body's statements */ }
/// };
/// __private::leader_only(__leader_election, __leader_value, __leader_body).await
/// ```
///
/// where `leader_only` is `Election::run_as_leader(value, |leadership| body())`
/// with each run scoped so that `Leadership::current()` sees its
/// leadership, and a campaign error converted with `E::from`.
#[proc_macro_attribute]
pub fn leader_only(args: TokenStream, item: TokenStream) -> TokenStream {
    leader::leader_only(args.into(), item.into()).into()
}
