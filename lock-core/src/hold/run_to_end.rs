//! Redis calls that run to their end even when the caller stops waiting.
//!
//! An acquire, re-entry or release must not stop half-way when the caller's
//! future is dropped: a grant nobody receives would stay locked until its
//! lease runs out, a release would leave the lock held. Running every such
//! call in a spawned task gives that, at the price of a task spawn, a copy
//! of the future into the task and two scheduler hops per call.
//!
//! [`RunToEnd`] gives the same guarantee without them on the usual path: the
//! call runs in the caller's task, and only when the caller drops it before
//! it finished is the rest of it moved into a task (tracked with the
//! client's background work, so a shutdown waits for it) where it completes
//! and its result is dropped (a dropped guard releases its lock).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::Handle;
use tokio_util::task::TaskTracker;

/// A future that finishes in a background task when dropped before its end.
///
/// The inner future is boxed once (its address must not change when it
/// moves to the task), and polled in place until then.
pub(crate) struct RunToEnd<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// `None` once it has finished (or moved to a task).
    call: Option<Pin<Box<F>>>,
    tracker: TaskTracker,
    runtime: Handle,
}

impl<F> RunToEnd<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// Runs `call` in place; if dropped first, the rest runs on `runtime`,
    /// tracked by `tracker`.
    pub(crate) fn new(call: F, tracker: &TaskTracker, runtime: &Handle) -> Self {
        RunToEnd {
            call: Some(Box::pin(call)),
            tracker: tracker.clone(),
            runtime: runtime.clone(),
        }
    }
}

impl<F> Future for RunToEnd<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // Polled again after its end: it never completes twice.
        let Some(call) = this.call.as_mut() else {
            return Poll::Pending;
        };
        let out = call.as_mut().poll(cx);
        if out.is_ready() {
            this.call = None;
        }
        out
    }
}

impl<F> Drop for RunToEnd<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            // On a runtime that is shutting down the task is dropped
            // unpolled, as a spawned call's task would be.
            self.tracker.spawn_on(
                async move {
                    drop(call.await);
                },
                &self.runtime,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// Counts how far a call got: 1 started, 2 finished.
    async fn call(progress: Arc<AtomicUsize>) -> usize {
        progress.store(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        progress.store(2, Ordering::SeqCst);
        7
    }

    #[tokio::test]
    async fn completes_in_place() {
        let tracker = TaskTracker::new();
        let progress = Arc::new(AtomicUsize::new(0));
        let out = RunToEnd::new(call(progress.clone()), &tracker, &Handle::current()).await;
        assert_eq!(out, 7);
        assert_eq!(progress.load(Ordering::SeqCst), 2);
        assert!(tracker.is_empty(), "nothing was spawned");
    }

    #[tokio::test]
    async fn a_dropped_call_finishes_in_a_tracked_task() {
        let tracker = TaskTracker::new();
        let progress = Arc::new(AtomicUsize::new(0));
        let run = RunToEnd::new(call(progress.clone()), &tracker, &Handle::current());
        let cut = tokio::time::timeout(Duration::from_millis(1), run).await;
        assert!(cut.is_err(), "the call outlived the caller's wait");
        assert_eq!(progress.load(Ordering::SeqCst), 1);
        assert_eq!(tracker.len(), 1, "the rest runs as tracked background work");
        tracker.close();
        let drained = tokio::time::timeout(Duration::from_secs(5), tracker.wait()).await;
        assert!(drained.is_ok(), "the background call finished");
        assert_eq!(progress.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_call_dropped_before_its_first_poll_still_runs() {
        let tracker = TaskTracker::new();
        let progress = Arc::new(AtomicUsize::new(0));
        drop(RunToEnd::new(
            call(progress.clone()),
            &tracker,
            &Handle::current(),
        ));
        tracker.close();
        let drained = tokio::time::timeout(Duration::from_secs(5), tracker.wait()).await;
        assert!(drained.is_ok(), "the background call finished");
        assert_eq!(progress.load(Ordering::SeqCst), 2);
    }
}
