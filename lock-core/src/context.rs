//! Lock contexts: who owns a lock, in async code.
//!
//! Java ties a lock's ownership to a thread; tokio tasks move between
//! threads, so here re-entry is tied to a *lock context*, a task-local
//! value. Two kinds of re-entry exist:
//!
//! - **Sections** (what `#[distributed_lock]` and lock-tower's layer use):
//!   a hold taken for a section is re-entered only by acquisitions *nested*
//!   in that section, i.e. made while the section's future runs
//!   ([`LockContext::enter`]). Sibling futures of one task (`join!`,
//!   `select!`) are not nested in each other: they exclude each other.
//! - **The manual API in an open context** ([`in_context`],
//!   [`LockContext::scope`]): a hold taken by a manual acquisition inside a
//!   context is re-entered by every later acquisition of the same lock in
//!   that context, like a Java thread re-entering its own lock — siblings
//!   joined inside the context included.
//!
//! Outside any context, every acquisition is a new hold, so two guards
//! never share a lock by accident. A spawned task starts with no context,
//! like a new thread; to carry one into a task, take
//! [`LockContext::current`] and [`scope`](LockContext::scope) the task's
//! future with it.

use std::future::Future;

use std::sync::Arc;

use crate::guard::LockGuard;
use crate::held::HeldLock;
use crate::hold::acquire::Reentrancy;
use crate::hold::shared::fresh_owner_number;
use crate::hold::Hold;
use crate::lock::Lock;

tokio::task_local! {
    static CURRENT: LockContext;
}

/// A lock context: the task-local scope in which acquisitions re-enter
/// holds (see the [module docs](crate::LockContext) and [`in_context`]).
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
#[derive(Clone)]
pub struct LockContext {
    id: u64,
    /// The sections this context runs nested in, innermost first.
    sections: Option<Arc<Section>>,
}

/// A held section: acquisitions of `key` on the client `client_id` nested
/// in it re-enter `hold`.
struct Section {
    client_id: Arc<str>,
    held: HeldLock,
    parent: Option<Arc<Section>>,
}

impl PartialEq for LockContext {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && match (&self.sections, &other.sections) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl Eq for LockContext {}

impl std::hash::Hash for LockContext {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl std::fmt::Debug for LockContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut keys = Vec::new();
        let mut next = self.sections.as_deref();
        while let Some(section) = next {
            keys.push(section.held.key());
            next = section.parent.as_deref();
        }
        f.debug_struct("LockContext")
            .field("id", &self.id)
            .field("sections", &keys)
            .finish()
    }
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
            sections: None,
        }
    }

    /// The number of this context (unique in the process).
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

    /// This context with `guard`'s hold as a section: acquisitions of the
    /// guard's lock made while a future [`scope`](LockContext::scope)d with
    /// the returned context runs re-enter the guard's hold (nested calls),
    /// while sibling futures outside it do not. `#[distributed_lock]` and
    /// lock-tower's layer run the locked body this way; acquire for a
    /// section with [`AcquireOptions::for_section`](crate::AcquireOptions::for_section).
    ///
    /// ```no_run
    /// # async fn demo(lock: lock_core::Lock) -> lock_core::Result<()> {
    /// use lock_core::{AcquireOptions, LockContext};
    ///
    /// let ctx = LockContext::current().unwrap_or_else(LockContext::new);
    /// let guard = ctx.clone().scope(lock.acquire_with(AcquireOptions::new().for_section())).await?;
    /// let section = ctx.enter(&guard);
    /// section
    ///     .scope(async {
    ///         let nested = lock.acquire().await?; // nested: re-enters the section's hold
    ///         nested.release().await
    ///     })
    ///     .await?;
    /// guard.release().await
    /// # }
    /// ```
    pub fn enter(&self, guard: &LockGuard) -> LockContext {
        let (client_id, held) = guard.section_parts();
        LockContext {
            id: self.id,
            sections: Some(Arc::new(Section {
                client_id,
                held,
                parent: self.sections.clone(),
            })),
        }
    }

    /// The lock of the innermost section this context runs in (see
    /// [`HeldLock::current`]).
    pub(crate) fn innermost_section(&self) -> Option<HeldLock> {
        self.sections.as_ref().map(|s| s.held.clone())
    }

    /// The innermost section of the handle `key` (its `LockKeys::ident`:
    /// the lock key, or a side of a read-write lock) on client `client_id`.
    pub(crate) fn section(&self, client_id: &str, key: &str) -> Option<HeldLock> {
        let mut next = self.sections.as_deref();
        while let Some(section) = next {
            if section.held.ident() == key && &*section.client_id == client_id {
                return Some(section.held.clone());
            }
            next = section.parent.as_deref();
        }
        None
    }

    /// The hold of the innermost section of `key` on client `client_id`.
    pub(crate) fn section_hold(&self, client_id: &str, key: &str) -> Option<Arc<Hold>> {
        self.section(client_id, key).map(|held| held.hold().clone())
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

impl HeldLock {
    /// The lock of the innermost locked section the current task runs in:
    /// the body of a `#[distributed_lock]` function, a handler behind
    /// lock-tower's `LockLayer`, or a future scoped with
    /// [`LockContext::enter`]. `None` outside any section (and in a task
    /// spawned from one: pass the handle into the task instead). No call
    /// to Redis.
    ///
    /// ```no_run
    /// # #[cfg(feature = "macros")]
    /// # mod demo {
    /// use lock_core::{distributed_lock, HeldLock};
    ///
    /// #[distributed_lock(key = "account:{id}")]
    /// async fn withdraw(id: u64, amount: u64) -> lock_core::Result<u64> {
    ///     let held = HeldLock::current().expect("runs under its lock");
    ///     // send the token with the write; the store rejects older tokens
    ///     Ok(held.fencing_token())
    /// }
    /// # }
    /// ```
    pub fn current() -> Option<HeldLock> {
        LockContext::current()?.innermost_section()
    }

    /// The hold of `lock` among the locked sections the current task runs
    /// in (the innermost one of that lock), for code nested in several
    /// sections. `None` when the task runs in no section of `lock`.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> lock_core::Result<()> {
    /// use lock_core::HeldLock;
    ///
    /// let lock = client.lock("account:7")?;
    /// assert!(HeldLock::current_for(&lock).is_none()); // not in its section
    /// # Ok(()) }
    /// ```
    pub fn current_for(lock: &Lock) -> Option<HeldLock> {
        LockContext::current()?.section(&lock.client.inner.core.client_id, &lock.keys.ident)
    }
}

impl Lock {
    /// What the current lock context holds that an acquisition of this
    /// lock may re-enter.
    pub(crate) fn reentrancy(&self) -> Reentrancy {
        let Some(ctx) = LockContext::current() else {
            return Reentrancy::default();
        };
        Reentrancy {
            section: ctx.section_hold(&self.client.inner.core.client_id, &self.keys.ident),
            context: Some(ctx.id()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_same_context_is_seen_inside_its_scope() {
        let ctx = LockContext::new();
        let id = ctx.id();
        let (a, b) = ctx
            .scope(async {
                let a = LockContext::current().map(|c| c.id());
                let b = LockContext::current().map(|c| c.id());
                (a, b)
            })
            .await;
        assert_eq!((a, b), (Some(id), Some(id)));
    }

    #[tokio::test]
    async fn spawned_tasks_start_without_a_context() {
        let seen = LockContext::new()
            .scope(async { tokio::spawn(async { LockContext::current() }).await })
            .await;
        assert!(matches!(seen, Ok(None)));
    }
}
