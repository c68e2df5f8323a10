//! Lock contexts: who owns a lock, in async code.
//!
//! Java ties a lock's ownership to a thread; tokio tasks move between
//! threads, so here ownership is tied to a *lock context*, a task-local
//! owner number. Acquiring a lock that the current context already holds
//! re-enters it (hold count + 1, no waiting). Outside any context, every
//! acquisition gets a fresh owner, so two guards never share ownership by
//! accident. A spawned task starts with no context, like a new thread; to
//! carry one into a task, take [`LockContext::current`] and
//! [`scope`](LockContext::scope) the task's future with it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

tokio::task_local! {
    static CURRENT: LockContext;
}

/// Owner numbers, unique in this process: contexts and context-less
/// acquisitions draw from the same counter, so they never collide.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

pub(crate) fn fresh_owner_number() -> u64 {
    NEXT_OWNER.fetch_add(1, Ordering::Relaxed)
}

/// A lock owner for async code: the `n` in the owner id `"<client-uuid>:<n>"`.
///
/// ```
/// use lock_core::LockContext;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert!(LockContext::current().is_none());
/// let ctx = LockContext::new();
/// let id = ctx.id();
/// let seen = ctx.scope(async { LockContext::current().map(|c| c.id()) }).await;
/// assert_eq!(seen, Some(id));
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LockContext {
    id: u64,
}

impl LockContext {
    /// A new context with an owner number no other context in this process has.
    ///
    /// ```
    /// let (a, b) = (lock_core::LockContext::new(), lock_core::LockContext::new());
    /// assert_ne!(a, b);
    /// ```
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        LockContext {
            id: fresh_owner_number(),
        }
    }

    /// The owner number of this context.
    ///
    /// ```
    /// assert!(lock_core::LockContext::new().id() > 0);
    /// ```
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The context the current task runs in, if any.
    ///
    /// ```
    /// assert!(lock_core::LockContext::current().is_none());
    /// ```
    pub fn current() -> Option<LockContext> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// Runs `fut` inside this context: every lock acquired in it is owned by
    /// this context and re-entered by later acquisitions in it. Use it to
    /// carry a context into a spawned task.
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// use lock_core::LockContext;
    ///
    /// let ctx = LockContext::new();
    /// let outer = ctx.clone().scope(lock.acquire()).await?;
    /// // the spawned task carries the same context, so it re-enters
    /// let inner = tokio::spawn(ctx.scope(async move { lock.acquire().await }))
    ///     .await
    ///     .expect("task panicked")?;
    /// inner.release().await?;
    /// outer.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn scope<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(self, fut)
    }
}

/// Runs `fut` in the current lock context, opening a new one when none is
/// open. The attribute macro and the tower layer use it so that nested
/// locked calls in one task re-enter instead of deadlocking.
///
/// ```
/// use lock_core::{in_context, LockContext};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (outer, inner) = in_context(async {
///     let outer = LockContext::current();
///     let inner = in_context(async { LockContext::current() }).await;
///     (outer, inner)
/// })
/// .await;
/// assert!(outer.is_some());
/// assert_eq!(outer, inner); // nested: the same context
/// # }
/// ```
pub async fn in_context<F: Future>(fut: F) -> F::Output {
    match LockContext::current() {
        Some(_) => fut.await,
        None => LockContext::new().scope(fut).await,
    }
}

/// The owner number for an acquisition made now: the current context's, or
/// a fresh one.
pub(crate) fn owner_number_for_acquire() -> u64 {
    LockContext::current()
        .map(|c| c.id)
        .unwrap_or_else(fresh_owner_number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fresh_owners_differ_outside_a_context() {
        assert_ne!(owner_number_for_acquire(), owner_number_for_acquire());
    }

    #[tokio::test]
    async fn the_same_context_gives_the_same_owner() {
        let ctx = LockContext::new();
        let id = ctx.id();
        let (a, b) = ctx
            .scope(async { (owner_number_for_acquire(), owner_number_for_acquire()) })
            .await;
        assert_eq!((a, b), (id, id));
    }

    #[tokio::test]
    async fn spawned_tasks_start_without_a_context() {
        let seen = LockContext::new()
            .scope(async { tokio::spawn(async { LockContext::current() }).await })
            .await;
        assert!(matches!(seen, Ok(None)));
    }
}
