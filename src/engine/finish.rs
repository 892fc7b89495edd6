//! [`detached`]: a store write that runs to its end whatever happens to its caller.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::task::{Context, Poll};

use futures::FutureExt;

use super::guarded;
use crate::store::StoreError;

/// Runs a store write so that dropping the caller's future never cancels it half way: the
/// write and the cache invalidation after its commit (R3) always run to the end, as if only the
/// answer had been lost (the idempotency key lets a client ask again). A panic in the store
/// becomes a [`StoreError`].
///
/// The write runs on the caller's own task, with no hop to another: a caller that waits for
/// its answer pays nothing for the guarantee. Only when the caller's future is dropped before
/// the write finished is the rest of the write moved to a task of its own, in the caller's
/// span, which runs it to the end ([`Finish`]). Outside a tokio runtime the write runs inline,
/// and a dropped write stops where it was.
pub(crate) async fn detached<T: Send + 'static>(
    write: impl Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return guarded(write).await;
    };
    Finish {
        write: Some(Box::pin(write)),
        runtime,
        span: tracing::Span::current(),
    }
    .await
}

/// A store write, boxed so that it can move to a task of its own.
type BoxedWrite<T> = std::pin::Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send>>;

/// A write polled on its caller's task that, dropped unfinished, finishes on a task of its own.
struct Finish<T: Send + 'static> {
    /// `None` once it finished.
    write: Option<BoxedWrite<T>>,
    runtime: tokio::runtime::Handle,
    /// The caller's span (the operation's), kept by a write that outlives its caller, so a
    /// store's own spans and events nest under it either way.
    span: tracing::Span,
}

impl<T: Send + 'static> Future for Finish<T> {
    type Output = Result<T, StoreError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(write) = self.write.as_mut() else {
            return Poll::Ready(Err(StoreError::failed(
                "a store write was polled after it ended",
            )));
        };
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| write.as_mut().poll(cx)));
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(answer)) => {
                self.write = None;
                Poll::Ready(answer)
            }
            Err(_) => {
                self.write = None;
                Poll::Ready(Err(StoreError::failed("the store panicked")))
            }
        }
    }
}

impl<T: Send + 'static> Drop for Finish<T> {
    fn drop(&mut self) {
        if let Some(write) = self.write.take() {
            // The caller went away mid-write: the rest runs to the end, its answer unread. (A
            // runtime shutting down drops it unfinished, as it drops every task: whether it
            // committed is then unknown, and a retry with the same key finds out.)
            let finish = tracing::Instrument::instrument(
                async move {
                    let _ = AssertUnwindSafe(write).catch_unwind().await;
                },
                self.span.clone(),
            );
            drop(self.runtime.spawn(finish));
        }
    }
}
